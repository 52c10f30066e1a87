// Built when the CUDA backend is not: keeps the library whole and makes every
// CUDA request a clear error ("... built without CUDA"). device_count() is 0
// and is_available() false, so callers (and tests) can ask before they try.
#include "core/device.h"
#include "core/error.h"
#include "cuda/cuda.h"

namespace kiln {
bool cuda_built() { return false; }
}  // namespace kiln

namespace kiln::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) { fail(what, ": kiln was built without CUDA"); }
}  // namespace

int device_count() { return 0; }
std::vector<std::pair<std::string, std::string>> library_versions() { return {}; }
bool is_available() { return false; }
int current_device() { no_cuda("cuda::current_device"); }
void set_device(int) { no_cuda("cuda::set_device"); }
std::string device_name(int) { no_cuda("cuda::device_name"); }
void synchronize(int) { no_cuda("cuda::synchronize"); }

void set_allow_tf32(bool) { no_cuda("cuda::set_allow_tf32"); }
bool allow_tf32() { return false; }

memory::AllocatorStats memory_stats(int) { no_cuda("cuda::memory_stats"); }
std::string memory_summary(int) { no_cuda("cuda::memory_summary"); }
void reset_peak_memory_stats(int) { no_cuda("cuda::reset_peak_memory_stats"); }
void empty_cache(int) { no_cuda("cuda::empty_cache"); }
void record_stream(const Tensor&, const Stream&) { no_cuda("cuda::record_stream"); }
Tensor empty_pinned(const Shape&, DType) { no_cuda("cuda::empty_pinned"); }
Tensor pin_memory(const Tensor&) { no_cuda("cuda::pin_memory"); }
bool is_pinned(const Tensor&) { return false; }
memory::AllocatorStats pinned_memory_stats() { no_cuda("cuda::pinned_memory_stats"); }
void copy(const Tensor&, const Tensor&, bool) { no_cuda("cuda::copy"); }
void multi_tensor_adamw(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                        const std::vector<Tensor>&, const std::vector<int64_t>&, double, double, double, double,
                        double) {
  no_cuda("cuda::multi_tensor_adamw");
}
void multi_tensor_lamb(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                       const std::vector<Tensor>&, const std::vector<int64_t>&, double, double, double, double,
                       double, bool) {
  no_cuda("cuda::multi_tensor_lamb");
}
double multi_tensor_norm(const std::vector<Tensor>&, double) { no_cuda("cuda::multi_tensor_norm"); }
bool multi_tensor_all_finite(const std::vector<Tensor>&) { no_cuda("cuda::multi_tensor_all_finite"); }

Stream Stream::default_stream(int) { no_cuda("cuda::Stream::default_stream"); }
Stream Stream::create(int, bool) { no_cuda("cuda::Stream::create"); }
Stream Stream::wrap(void*, int) { no_cuda("cuda::Stream::wrap"); }
bool Stream::query() const { no_cuda("cuda::Stream::query"); }
void Stream::synchronize() const { no_cuda("cuda::Stream::synchronize"); }
void Stream::wait(const Event&) const { no_cuda("cuda::Stream::wait"); }
Stream current_stream(int) { no_cuda("cuda::current_stream"); }
void set_current_stream(const Stream&) { no_cuda("cuda::set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) { no_cuda("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;

struct Event::Impl {};
Event::Event(bool) { no_cuda("cuda::Event"); }
void Event::record(const Stream&) { no_cuda("cuda::Event::record"); }
void Event::record() { no_cuda("cuda::Event::record"); }
bool Event::query() const { no_cuda("cuda::Event::query"); }
void Event::synchronize() const { no_cuda("cuda::Event::synchronize"); }
float Event::elapsed_ms(const Event&) const { no_cuda("cuda::Event::elapsed_ms"); }
bool Event::recorded() const { return false; }
void* Event::handle() const { return nullptr; }

}  // namespace kiln::cuda
