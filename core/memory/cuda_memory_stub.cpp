// Without the CUDA backend the CUDA memory factories (device_memory.h) are
// clear errors; with it, cuda/cuda_device_memory.cpp defines them.
#ifndef KILN_WITH_CUDA
#include "core/memory/device_memory.h"

namespace kiln::memory {

std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device_index) {
  fail("make_cuda_device_memory(", device_index, "): kiln was built without CUDA");
}

std::unique_ptr<DeviceMemory> make_cuda_pinned_host_memory() {
  fail("make_cuda_pinned_host_memory: kiln was built without CUDA");
}

}  // namespace kiln::memory
#endif
