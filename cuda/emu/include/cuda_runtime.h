// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): the
// runtime API and the device-side language (qualifiers, built-in indices,
// barriers, shuffles, atomics, intrinsics).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/emu/emu.h"

// The runtime's C++ overloads (typed pointers), as cuda_runtime.h has them.
template <typename T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
inline cudaError_t cudaHostAlloc(T** ptr, size_t bytes, unsigned int flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}
