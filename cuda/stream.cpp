// Streams, events, the current stream per (thread, device), device queries
// (CudaRuntime's, cuda/runtime.h: the public calls of cuda/stream.h and
// cuda/cuda.h forward here) and DeviceGuard (cuda/kernels.cuh). Every CUDA
// call is checked: failures are kiln::Error naming the call, file and line.
#include <array>
#include <atomic>
#include <mutex>

#include "cuda/kernels.cuh"
#include "cuda/runtime.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;

int resolve(int device) {
  if (device < 0) return current_device();
  KILN_CHECK(device < kMaxDevices, "CUDA device index ", device, " out of range");
  return device;
}

// Note [Current stream]: per thread, per device; unset means the default stream.
struct CurrentStreams {
  std::array<Stream, kMaxDevices> stream;
  std::array<bool, kMaxDevices> set{};
};
thread_local CurrentStreams t_current;

}  // namespace

// ---- devices ------------------------------------------------------------------

int CudaRuntime::device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {  // no driver or no device: CUDA is simply unavailable
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

int CudaRuntime::current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void CudaRuntime::set_device(int device) { KILN_CUDA_CHECK(cudaSetDevice(device)); }

std::string CudaRuntime::device_name(int device) {
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, resolve(device)));
  return prop.name;
}

void CudaRuntime::synchronize(int device) {
  const int d = resolve(device);
  detail::DeviceGuard guard(d);
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
  kernels::raise_index_errors(d);  // the device's deferred index checks (Note [Lazy index checks])
}

namespace detail {

DeviceGuard::DeviceGuard(int device) {
  KILN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    KILN_CUDA_CHECK(cudaSetDevice(device));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) (void)cudaSetDevice(previous_);  // best effort: destructors do not throw
}

cudaStream_t current_cuda_stream(int device) {
  const size_t d = static_cast<size_t>(device);
  return d < kMaxDevices && t_current.set[d] ? static_cast<cudaStream_t>(t_current.stream[d].handle()) : nullptr;
}

int sm_count(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<int, kMaxDevices> count{};
  const size_t d = static_cast<size_t>(resolve(device));
  std::call_once(once[d], [&] {
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&count[d], cudaDevAttrMultiProcessorCount, static_cast<int>(d)));
  });
  return count[d];
}

}  // namespace detail

// ---- streams -------------------------------------------------------------------

Stream CudaRuntime::default_stream(int device) {
  Stream s;
  s.device_ = resolve(device);
  return s;
}

// Note [Stream pool]
// ~~~~~~~~~~~~~~~~~~
// Stream::create() hands out the device's pooled streams in turn (kPoolSize
// per priority, made on first use) and never destroys one. A stream that
// was destroyed while the caching allocator still held a record_stream use
// of it made the allocator record its free() event on a dead handle
// (cudaErrorInvalidResourceHandle; found on the emulated device, docs/gpu.md
// "Findings"): the allocator keeps stream ids, not owners. PyTorch's streams
// come from such a pool for the same reason; creating one costs nothing.
namespace {
constexpr int kPoolSize = 32;
constexpr int kPoolDevices = 64;
struct StreamPool {
  std::mutex mu;
  cudaStream_t streams[2][kPoolSize] = {};
  std::atomic<unsigned> next[2] = {0, 0};
};
StreamPool& stream_pool(int device) {
  static StreamPool pools[kPoolDevices];
  KILN_CHECK(device >= 0 && device < kPoolDevices, "cuda: device ", device, " is past the ", kPoolDevices,
             " devices kiln's stream pool serves");
  return pools[device];
}
}  // namespace

Stream CudaRuntime::stream_create(int device, bool high_priority) {
  Stream s;
  s.device_ = resolve(device);
  StreamPool& pool = stream_pool(s.device_);
  const int p = high_priority ? 1 : 0;
  const unsigned slot = pool.next[p].fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  std::lock_guard<std::mutex> lock(pool.mu);
  if (pool.streams[p][slot] == nullptr) {
    detail::DeviceGuard guard(s.device_);
    int least = 0, greatest = 0;
    KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&pool.streams[p][slot], cudaStreamNonBlocking,
                                                 high_priority ? greatest : least));
  }
  s.handle_ = pool.streams[p][slot];
  return s;
}

Stream CudaRuntime::stream_wrap(void* cuda_stream, int device) {
  Stream s;
  s.device_ = resolve(device);
  s.handle_ = cuda_stream;
  return s;
}

bool CudaRuntime::stream_query(const Stream& s) {
  detail::DeviceGuard guard(s.device_);
  const cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(s.handle_));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  cuda_fail(err, "cudaStreamQuery(stream)", __FILE__, __LINE__);
}

void CudaRuntime::stream_synchronize(const Stream& s) {
  detail::DeviceGuard guard(s.device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s.handle_)));
}

void CudaRuntime::stream_wait(const Stream& s, const Event& event) {
  if (!event_recorded(event)) return;
  detail::DeviceGuard guard(s.device_);
  KILN_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle_), static_cast<cudaEvent_t>(event_handle(event)), 0));
}

Stream CudaRuntime::current_stream(int device) {
  const int d = resolve(device);
  return t_current.set[static_cast<size_t>(d)] ? t_current.stream[static_cast<size_t>(d)] : default_stream(d);
}

void CudaRuntime::set_current_stream(const Stream& stream) {
  const size_t d = static_cast<size_t>(resolve(stream.device()));
  t_current.stream[d] = stream;
  t_current.set[d] = true;
}

// ---- events ---------------------------------------------------------------------

struct Event::Impl {
  cudaEvent_t event = nullptr;
  int device = -1;
  bool timing = false;
  ~Impl() {
    if (event) (void)cudaEventDestroy(event);
  }
};

std::shared_ptr<Event::Impl> CudaRuntime::event_create(bool timing) {
  auto impl = std::make_shared<Event::Impl>();
  impl->timing = timing;
  return impl;
}

void CudaRuntime::event_record(Event& e, const Stream& stream) {
  Event::Impl* impl = e.impl_.get();
  if (!impl->event) {
    detail::DeviceGuard guard(stream.device());
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&impl->event, impl->timing ? cudaEventDefault : cudaEventDisableTiming));
    impl->device = stream.device();
  }
  KILN_CHECK(impl->device == stream.device(), "Event::record: the event belongs to cuda:", impl->device,
             ", the stream to cuda:", stream.device());
  detail::DeviceGuard guard(stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(impl->event, static_cast<cudaStream_t>(stream.handle())));
}

bool CudaRuntime::event_query(const Event& e) {
  const Event::Impl* impl = e.impl_.get();
  if (!impl->event) return true;
  const cudaError_t err = cudaEventQuery(impl->event);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  cuda_fail(err, "cudaEventQuery(event)", __FILE__, __LINE__);
}

void CudaRuntime::event_synchronize(const Event& e) {
  if (e.impl_->event) KILN_CUDA_CHECK(cudaEventSynchronize(e.impl_->event));
}

float CudaRuntime::event_elapsed_ms(const Event& start, const Event& end) {
  const Event::Impl* impl = start.impl_.get();
  KILN_CHECK(impl->event && end.impl_->event, "Event::elapsed_ms: both events must have been recorded");
  KILN_CHECK(impl->timing && end.impl_->timing, "Event::elapsed_ms: both events must be created with timing = true");
  float ms = 0.f;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, impl->event, end.impl_->event));
  return ms;
}

bool CudaRuntime::event_recorded(const Event& e) { return e.impl_->event != nullptr; }
void* CudaRuntime::event_handle(const Event& e) { return e.impl_->event; }

}  // namespace kiln::cuda
