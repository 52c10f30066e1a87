// CUDA implementations of DeviceMemory (core/memory/device_memory.h):
//  - CudaDeviceMemory: device memory of one GPU (cudaMalloc/cudaFree);
//  - CudaPinnedHostMemory: page-locked host memory (cudaHostAlloc/cudaFreeHost).
// Both use timing-free CUDA events. Every CUDA call is checked; failures are
// kiln::Error naming the call, file and line, except running out of memory,
// which reserve() answers with nullptr (the caching allocator then waits for
// its events, frees its cache, retries, and throws kiln::OutOfMemoryError).
//
// Events belong to a device: cudaEventRecord fails unless the event and the
// stream are on the same device, and an event is created on the device
// current at the time. The stream of a record may be another device's (a
// device block read by a peer copy on the destination's stream; a pinned
// buffer copied to several GPUs), so a handle is a CudaEvent whose cudaEvent_t
// is made on first record, on the stream's device (Stream::device) with that
// device current, and made again there if a later record is on another device.
// release() and synchronize_event() are called with the allocator's mutex
// unlocked; the CUDA runtime is thread-safe, and the allocator never records
// an event another thread is waiting for.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "core/memory/device_memory.h"
#include "cuda/cuda_check.h"
#include "cuda/runtime.h"

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

cudaStream_t as_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s.id); }

// An EventHandle of these DeviceMemory classes.
struct CudaEvent {
  cudaEvent_t event = nullptr;  // made on first record
  int device = -1;              // where `event` was made
};

CudaEvent* as_event(EventHandle e) { return static_cast<CudaEvent*>(e); }

EventHandle create_cuda_event() { return new CudaEvent; }

void destroy_cuda_event(EventHandle e) {
  std::unique_ptr<CudaEvent> ev(as_event(e));
  if (ev->event == nullptr) return;
  DeviceScope scope(ev->device);
  KILN_CUDA_CHECK(cudaEventDestroy(ev->event));
}

// Records `e` on `s`, which belongs to `device`, with `device` current.
void record_cuda_event(EventHandle e, Stream s, int device) {
  CudaEvent* ev = as_event(e);
  if (ev->event != nullptr && ev->device != device) {
    DeviceScope old(ev->device);
    const cudaError_t err = cudaEventDestroy(ev->event);
    ev->event = nullptr;
    if (err != cudaSuccess) cuda_fail(err, "cudaEventDestroy(event)", __FILE__, __LINE__);
  }
  DeviceScope scope(device);
  if (ev->event == nullptr) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming));
    ev->device = device;
  }
  KILN_CUDA_CHECK(cudaEventRecord(ev->event, as_stream(s)));
}

bool cuda_event_completed(EventHandle e) {
  const CudaEvent* ev = as_event(e);
  if (ev->event == nullptr) return true;  // never recorded
  const cudaError_t err = cudaEventQuery(ev->event);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  cuda_fail(err, "cudaEventQuery(event)", __FILE__, __LINE__);
}

void synchronize_cuda_event(EventHandle e) {
  const CudaEvent* ev = as_event(e);
  if (ev->event == nullptr) return;
  KILN_CUDA_CHECK(cudaEventSynchronize(ev->event));
}

int current_cuda_device() {
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  return device;
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

  EventHandle create_event() override { return create_cuda_event(); }
  void destroy_event(EventHandle e) override { destroy_cuda_event(e); }
  void record_event(EventHandle e, Stream s) override {
    record_cuda_event(e, s, s.device < 0 ? device_ : s.device);
  }
  bool event_completed(EventHandle e) override { return cuda_event_completed(e); }
  void synchronize_event(EventHandle e) override { synchronize_cuda_event(e); }

  DeviceMemoryInfo memory_info() override {
    DeviceScope scope(device_);
    std::size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }

 private:
  int device_;
};

// A stream with device -1 is taken to be the current device's.
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
  void destroy_event(EventHandle e) override { destroy_cuda_event(e); }
  void record_event(EventHandle e, Stream s) override {
    record_cuda_event(e, s, s.device < 0 ? current_cuda_device() : s.device);
  }
  bool event_completed(EventHandle e) override { return cuda_event_completed(e); }
  void synchronize_event(EventHandle e) override { synchronize_cuda_event(e); }

  DeviceMemoryInfo memory_info() override {
    const long page = sysconf(_SC_PAGESIZE);
    const long avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || total < 0) return {};
    return {static_cast<std::size_t>(avail) * static_cast<std::size_t>(page),
            static_cast<std::size_t>(total) * static_cast<std::size_t>(page)};
  }
};

}  // namespace
}  // namespace kiln::memory

namespace kiln::cuda {

// memory::make_cuda_device_memory / make_cuda_pinned_host_memory (core/memory/device_memory.h) land here.
std::unique_ptr<memory::DeviceMemory> CudaRuntime::make_device_memory(int device_index) {
  return std::make_unique<memory::CudaDeviceMemory>(device_index);
}

std::unique_ptr<memory::DeviceMemory> CudaRuntime::make_pinned_host_memory() {
  return std::make_unique<memory::CudaPinnedHostMemory>();
}

}  // namespace kiln::cuda
