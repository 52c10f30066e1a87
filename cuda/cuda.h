// The CUDA backend's public API beyond the device interface: devices, the
// device and pinned-host caching allocators, copies (synchronous and
// asynchronous) and the TF32 switch. Tensors reach CUDA through the ordinary
// API (`x.to(Device::parse("cuda"))`, `zeros(shape, TensorOptions(dtype,
// cuda))`); this header adds what only CUDA has.
//
// It names no CUDA type and compiles in every build. Without CUDA,
// device_count() is 0, is_available() false, and every other call is a
// kiln::Error "... built without CUDA". libkiln defines these calls and
// forwards them to the CUDA backend's library, loading it on first use
// (core/cuda_hooks.cpp, Note [Package layout] in core/components.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/memory/allocator_stats.h"
#include "kiln/core/tensor.h"
#include "kiln/cuda/stream.h"

namespace kiln::cuda {

// ---- devices ----------------------------------------------------------------
// Devices this process can use: 0 without CUDA, without a driver or without a GPU.
int device_count();
// Built with CUDA and at least one device present.
bool is_available();
int current_device();
void set_device(int device);
std::string device_name(int device = -1);  // "NVIDIA H200"
// Waits for all work on `device` (-1: current) to finish.
void synchronize(int device = -1);

// ---- versions ------------------------------------------------------------------
// What this process runs on, as (name, value) pairs: the driver's CUDA version,
// the runtime's, cuBLASLt's and cuDNN's (the loaded library's and the one kiln
// was compiled against). Empty without CUDA. `kiln info` prints them.
std::vector<std::pair<std::string, std::string>> library_versions();

// ---- matmul precision -----------------------------------------------------
// TF32 tensor-core math for float32 matmul (about 10 mantissa bits in the
// products). Off by default so CUDA float32 results match the CPU's within
// float32 rounding; KILN_ALLOW_TF32=1 in the environment turns it on at start.
void set_allow_tf32(bool allow);
bool allow_tf32();

// ---- memory -------------------------------------------------------------------
// Device memory comes from one caching allocator per device (Note [Caching
// allocator]); KILN_CACHING_ALLOCATOR=0 turns caching off for debugging.
memory::AllocatorStats memory_stats(int device = -1);
std::string memory_summary(int device = -1);
void reset_peak_memory_stats(int device = -1);
// Gives every whole-free cached segment of `device` back to the driver.
void empty_cache(int device = -1);
// Declares that work queued on `stream` uses `t`'s memory (a CUDA tensor, or
// a CPU tensor in pinned memory): when t's storage is freed, its memory is
// reused only after that work has finished (Note [Current stream]).
void record_stream(const Tensor& t, const Stream& stream);

// Page-locked host memory from the pinned caching allocator: the source or
// destination of asynchronous copies.
Tensor empty_pinned(const Shape& sizes, DType dtype);
Tensor pin_memory(const Tensor& cpu_tensor);  // a pinned copy (contiguous)
bool is_pinned(const Tensor& t);
memory::AllocatorStats pinned_memory_stats();

// ---- copies -------------------------------------------------------------------
// dst <- src for same-shape, same-dtype contiguous tensors in any direction:
// host->device, device->host, device->device (also between two GPUs). Queued
// on the current stream of the CUDA side (dst's device for device->device).
// non_blocking = false: returns once dst holds the data. non_blocking = true:
// returns at once; the host side must be pinned (kiln::Error otherwise) and
// is kept from reuse until the copy is done; the caller synchronises (stream
// or event) before reading a host dst.
void copy(const Tensor& dst, const Tensor& src, bool non_blocking = false);

}  // namespace kiln::cuda
