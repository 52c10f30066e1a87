// Internal to the CUDA backend: KILN_LAUNCH, the one way kiln launches a kernel.
//
//   KILN_LAUNCH(grid, block, shared_bytes, stream, kernel<T>)(args...);
//
// Under nvcc it is `kernel<T><<<grid, block, shared_bytes, stream>>>(args...)`.
// In the emulated build (KILN_CUDA=EMU, Note [Emulated CUDA device] in
// cuda/emu/emu.h) the same line hands the kernel, its launch configuration
// and its arguments to the emulator, which checks the configuration against
// sm_90's limits and queues the kernel on the stream. The kernel comes last
// so that template arguments with commas need no extra parentheses. Every
// launch is followed by KILN_CUDA_CHECK_LAUNCH() (cuda/cuda_check.h).
#pragma once

#if defined(KILN_CUDA_EMU)
#include "cuda/emu/emu.h"
#define KILN_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::kiln::emu::launch(#__VA_ARGS__, &__VA_ARGS__, (grid), (block), (shared_bytes), (stream))
#else
#define KILN_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<(grid), (block), (shared_bytes), (stream)>>>
#endif
