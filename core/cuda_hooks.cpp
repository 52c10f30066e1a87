// libkiln's side of the CUDA backend (core/cuda_hooks.h, Note [Package
// layout] in core/components.h): the public CUDA API of cuda/cuda.h and
// cuda/stream.h, each call forwarded to the hooks libkiln_cuda registered.
// Without them device_count() is 0, is_available() and is_pinned() false,
// library_versions() empty, and every other call a kiln::Error naming the
// call and why there is no CUDA backend ("kiln was built without CUDA").
#include "core/cuda_hooks.h"

#include <atomic>

#include "core/backend.h"
#include "core/components.h"
#include "core/device.h"
#include "core/error.h"

namespace kiln::cuda::detail {
namespace {

std::atomic<CudaHooks*> g_hooks{nullptr};

// Why there are no hooks once libkiln_cuda was looked for (once); "" when there are.
const std::string& missing_reason() {
  using kiln::detail::Component;
  static const std::string why = []() -> std::string {
    if (g_hooks.load(std::memory_order_acquire)) return "";
    if (!kiln::detail::component_built(Component::Cuda)) return "kiln was built without CUDA";
    const std::string err = kiln::detail::load_component(Component::Cuda);
    if (!err.empty()) return "the CUDA backend kiln was built with (libkiln_cuda.so) did not load: " + err;
    if (!g_hooks.load(std::memory_order_acquire))
      return "libkiln_cuda.so loaded but registered no CUDA backend (is it from another kiln build?)";
    return "";
  }();
  return why;
}

CudaHooks& hooks(const char* what) {
  if (CudaHooks* h = cuda_hooks()) return *h;
  fail(what, ": ", missing_reason());
}

}  // namespace

void register_cuda_hooks(CudaHooks* hooks) { g_hooks.store(hooks, std::memory_order_release); }

CudaHooks* cuda_hooks() {
  if (CudaHooks* h = g_hooks.load(std::memory_order_acquire)) return h;
  (void)missing_reason();
  return g_hooks.load(std::memory_order_acquire);
}

}  // namespace kiln::cuda::detail

namespace kiln {

bool cuda_built() { return cuda::detail::cuda_hooks() != nullptr; }

std::string cuda_unavailable_reason() {
  if (cuda::detail::cuda_hooks()) return "";
  return cuda::detail::missing_reason();
}

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  cuda::detail::CudaHooks* h = cuda::detail::cuda_hooks();
  if (!h) fail("device ", device.str(), " requested, but ", cuda::detail::missing_reason());
  return h->backend(device.index);
}

}  // namespace kiln

namespace kiln::memory {

std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device_index) {
  if (cuda::detail::CudaHooks* h = cuda::detail::cuda_hooks()) return h->make_device_memory(device_index);
  fail("make_cuda_device_memory(", device_index, "): ", cuda::detail::missing_reason());
}

std::unique_ptr<DeviceMemory> make_cuda_pinned_host_memory() {
  return cuda::detail::hooks("make_cuda_pinned_host_memory").make_pinned_host_memory();
}

}  // namespace kiln::memory

namespace kiln::cuda {

using detail::cuda_hooks;
using detail::hooks;

// ---- devices, versions, TF32 ------------------------------------------------

int device_count() {
  detail::CudaHooks* h = cuda_hooks();
  return h ? h->device_count() : 0;
}
bool is_available() { return device_count() > 0; }
int current_device() { return hooks("cuda::current_device").current_device(); }
void set_device(int device) { hooks("cuda::set_device").set_device(device); }
std::string device_name(int device) { return hooks("cuda::device_name").device_name(device); }
void synchronize(int device) { hooks("cuda::synchronize").synchronize(device); }

std::vector<std::pair<std::string, std::string>> library_versions() {
  detail::CudaHooks* h = cuda_hooks();
  return h ? h->library_versions() : std::vector<std::pair<std::string, std::string>>{};
}

void set_allow_tf32(bool allow) { hooks("cuda::set_allow_tf32").set_allow_tf32(allow); }
bool allow_tf32() {
  detail::CudaHooks* h = cuda_hooks();
  return h ? h->allow_tf32() : false;
}

// ---- memory and copies --------------------------------------------------------

memory::AllocatorStats memory_stats(int device) { return hooks("cuda::memory_stats").memory_stats(device); }
std::string memory_summary(int device) { return hooks("cuda::memory_summary").memory_summary(device); }
void reset_peak_memory_stats(int device) { hooks("cuda::reset_peak_memory_stats").reset_peak_memory_stats(device); }
void empty_cache(int device) { hooks("cuda::empty_cache").empty_cache(device); }
void record_stream(const Tensor& t, const Stream& stream) { hooks("cuda::record_stream").record_stream(t, stream); }
Tensor empty_pinned(const Shape& sizes, DType dtype) { return hooks("cuda::empty_pinned").empty_pinned(sizes, dtype); }
Tensor pin_memory(const Tensor& cpu_tensor) { return hooks("cuda::pin_memory").pin_memory(cpu_tensor); }
bool is_pinned(const Tensor& t) {
  detail::CudaHooks* h = cuda_hooks();
  return h ? h->is_pinned(t) : false;
}
memory::AllocatorStats pinned_memory_stats() { return hooks("cuda::pinned_memory_stats").pinned_memory_stats(); }
void copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
  hooks("cuda::copy").copy(dst, src, non_blocking);
}

// ---- streams --------------------------------------------------------------------

Stream Stream::default_stream(int device) { return hooks("cuda::Stream::default_stream").default_stream(device); }
Stream Stream::create(int device, bool high_priority) {
  return hooks("cuda::Stream::create").stream_create(device, high_priority);
}
Stream Stream::wrap(void* cuda_stream, int device) { return hooks("cuda::Stream::wrap").stream_wrap(cuda_stream, device); }
bool Stream::query() const { return hooks("cuda::Stream::query").stream_query(*this); }
void Stream::synchronize() const { hooks("cuda::Stream::synchronize").stream_synchronize(*this); }
void Stream::wait(const Event& event) const { hooks("cuda::Stream::wait").stream_wait(*this, event); }
Stream current_stream(int device) { return hooks("cuda::current_stream").current_stream(device); }
void set_current_stream(const Stream& stream) { hooks("cuda::set_current_stream").set_current_stream(stream); }

StreamGuard::StreamGuard(const Stream& stream)
    : previous_(current_stream(stream.device())), previous_device_(current_device()) {
  set_device(stream.device());
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  // The constructor found the hooks. Best effort: destructors do not throw.
  detail::CudaHooks* h = cuda_hooks();
  try {
    h->set_current_stream(previous_);
  } catch (...) {
  }
  try {
    h->set_device(previous_device_);
  } catch (...) {
  }
}

// ---- events -----------------------------------------------------------------------

Event::Event(bool timing) : impl_(hooks("cuda::Event").event_create(timing)) {}
void Event::record(const Stream& stream) { hooks("cuda::Event::record").event_record(*this, stream); }
void Event::record() { record(current_stream()); }
bool Event::query() const { return hooks("cuda::Event::query").event_query(*this); }
void Event::synchronize() const { hooks("cuda::Event::synchronize").event_synchronize(*this); }
float Event::elapsed_ms(const Event& end) const { return hooks("cuda::Event::elapsed_ms").event_elapsed_ms(*this, end); }
// An Event exists only with the hooks (its constructor needed them).
bool Event::recorded() const { return cuda_hooks()->event_recorded(*this); }
void* Event::handle() const { return cuda_hooks()->event_handle(*this); }

}  // namespace kiln::cuda
