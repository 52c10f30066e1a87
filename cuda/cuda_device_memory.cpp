// CUDA implementations of DeviceMemory (core/memory/device_memory.h):
//  - CudaDeviceMemory: device memory of one GPU (cudaMalloc/cudaFree);
//  - CudaPinnedHostMemory: page-locked host memory (cudaHostAlloc/cudaFreeHost).
// Both use timing-free CUDA events. Every CUDA call is checked; failures are
// kiln::Error naming the call, file and line, except running out of memory,
// which reserve() answers with nullptr (the caching allocator then frees its
// cache, retries, and throws kiln::OutOfMemoryError).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <string>

#include "core/memory/device_memory.h"
#include "cuda/cuda_check.h"

namespace kiln::memory {
namespace {

// Makes `device` current for a scope, restoring the previous one after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    KILN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) KILN_CUDA_CHECK(cudaSetDevice(device));
    switched_ = previous_ != device;
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);  // best effort: destructors do not throw
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

cudaEvent_t as_event(EventHandle e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t as_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s.id); }

EventHandle create_cuda_event() {
  cudaEvent_t event = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

bool cuda_event_completed(EventHandle e) {
  const cudaError_t err = cudaEventQuery(as_event(e));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  cuda_fail(err, "cudaEventQuery(event)", __FILE__, __LINE__);
}

// nullptr for "out of memory" (clearing that non-sticky error); other
// failures throw.
void* answer_allocation(cudaError_t err, void* ptr, const char* call, int line) {
  if (err == cudaSuccess) return ptr;
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  cuda_fail(err, call, __FILE__, line);
}

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {
    int count = 0;
    KILN_CUDA_CHECK(cudaGetDeviceCount(&count));
    KILN_CHECK(device >= 0 && device < count, "make_cuda_device_memory: device ", device,
               " does not exist (", count, " CUDA devices)");
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  void* reserve(std::size_t bytes) override {
    DeviceScope scope(device_);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    return answer_allocation(err, ptr, "cudaMalloc(&ptr, bytes)", __LINE__);
  }
  void release(void* ptr, std::size_t) override {
    DeviceScope scope(device_);
    KILN_CUDA_CHECK(cudaFree(ptr));
  }

  EventHandle create_event() override {
    DeviceScope scope(device_);
    return create_cuda_event();
  }
  void destroy_event(EventHandle e) override {
    DeviceScope scope(device_);
    KILN_CUDA_CHECK(cudaEventDestroy(as_event(e)));
  }
  void record_event(EventHandle e, Stream s) override {
    DeviceScope scope(device_);
    KILN_CUDA_CHECK(cudaEventRecord(as_event(e), as_stream(s)));
  }
  bool event_completed(EventHandle e) override { return cuda_event_completed(e); }

  DeviceMemoryInfo memory_info() override {
    DeviceScope scope(device_);
    std::size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }

 private:
  int device_;
};

// Events are created on the device current at the time; streams passed to
// record_event must belong to it.
class CudaPinnedHostMemory final : public DeviceMemory {
 public:
  std::string name() const override { return "pinned host"; }

  void* reserve(std::size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
    return answer_allocation(err, ptr, "cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault)",
                             __LINE__);
  }
  void release(void* ptr, std::size_t) override { KILN_CUDA_CHECK(cudaFreeHost(ptr)); }

  EventHandle create_event() override { return create_cuda_event(); }
  void destroy_event(EventHandle e) override { KILN_CUDA_CHECK(cudaEventDestroy(as_event(e))); }
  void record_event(EventHandle e, Stream s) override {
    KILN_CUDA_CHECK(cudaEventRecord(as_event(e), as_stream(s)));
  }
  bool event_completed(EventHandle e) override { return cuda_event_completed(e); }

  DeviceMemoryInfo memory_info() override {
    const long page = sysconf(_SC_PAGESIZE);
    const long avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || total < 0) return {};
    return {static_cast<std::size_t>(avail) * static_cast<std::size_t>(page),
            static_cast<std::size_t>(total) * static_cast<std::size_t>(page)};
  }
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device_index) {
  return std::make_unique<CudaDeviceMemory>(device_index);
}

std::unique_ptr<DeviceMemory> make_cuda_pinned_host_memory() {
  return std::make_unique<CudaPinnedHostMemory>();
}

}  // namespace kiln::memory
