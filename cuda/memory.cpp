// CUDA memory for tensors: one caching allocator per device (core/memory/,
// Note [Caching allocator]) over cuda_device_memory.cpp, allocating on the
// current stream (Note [Current stream]); the pinned-host caching allocator;
// record_stream; and kiln::cuda::copy (synchronous and asynchronous copies in
// every direction): CudaRuntime's (cuda/runtime.h), which the calls of
// cuda/cuda.h forward to. See cuda/cuda.h for the contracts.
#include <array>
#include <cstdio>
#include <exception>
#include <mutex>

#include "core/memory/pinned_host.h"
#include "cuda/kernels.cuh"
#include "cuda/runtime.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;

// Frees `ptr` from a deleter or destructor, where an exception would be
// std::terminate. CachingAllocator::free() reports device errors itself
// (Note [free() never throws on device errors]); the one error it throws, a
// pointer that is not live there (a double free), is reported here.
// `Core`: memory::CachingAllocator or memory::PinnedHostAllocator.
template <typename Core>
void free_in_deleter(Core& core, void* ptr) noexcept {
  try {
    core.free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: freeing a tensor's memory failed: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kiln: freeing a tensor's memory failed (unknown exception)\n");
  }
}

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device), core_(memory::make_cuda_device_memory(device)) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    return core_.allocate(nbytes, memory::Stream{reinterpret_cast<std::uintptr_t>(detail::current_cuda_stream(device_)), device_});
  }
  void deallocate(void* ptr) noexcept override { free_in_deleter(core_, ptr); }
  memory::CachingAllocator& core() { return core_; }

 private:
  int device_;
  memory::CachingAllocator core_;
};

CudaAllocator& allocator_of(int device) {
  static std::mutex mutex;
  static std::array<CudaAllocator*, kMaxDevices> allocators{};  // never destroyed: tensors may outlive main()
  KILN_CHECK(device >= 0 && device < kMaxDevices && device < device_count(), "cuda:", device,
             " does not exist (", device_count(), " CUDA devices)");
  std::lock_guard<std::mutex> lock(mutex);
  CudaAllocator*& a = allocators[static_cast<size_t>(device)];
  if (!a) a = new CudaAllocator(device);
  return *a;
}

memory::PinnedHostAllocator& pinned() {
  static memory::PinnedHostAllocator* a = new memory::PinnedHostAllocator(memory::make_cuda_pinned_host_memory());
  return *a;
}

int resolve(int device) { return device < 0 ? current_device() : device; }

// The allocator's stream: the handle and its device (every device's legacy
// default stream has handle 0).
memory::Stream stream_id(const Stream& s) { return memory::Stream{s.id(), s.device()}; }

void check_copy_operands(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.defined() && src.defined(), "cuda::copy: undefined tensor");
  KILN_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "cuda::copy: expected the same shape and dtype, got ",
             dst.str(), " and ", src.str());
  KILN_CHECK(dst.is_contiguous() && src.is_contiguous(), "cuda::copy: both tensors must be contiguous, got ",
             dst.str(), " and ", src.str());
}

}  // namespace

namespace detail {
Allocator& device_allocator(int device) { return allocator_of(device); }
}  // namespace detail

// ---- statistics and cache ----------------------------------------------------------

memory::AllocatorStats CudaRuntime::memory_stats(int device) { return allocator_of(resolve(device)).core().stats(); }
std::string CudaRuntime::memory_summary(int device) { return allocator_of(resolve(device)).core().memory_summary(); }
void CudaRuntime::reset_peak_memory_stats(int device) { allocator_of(resolve(device)).core().reset_peak_stats(); }
void CudaRuntime::empty_cache(int device) { allocator_of(resolve(device)).core().empty_cache(); }

bool CudaRuntime::is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.storage()->data()) return false;
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, t.storage()->data());
  if (err != cudaSuccess) {  // e.g. no driver: nothing is pinned
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void CudaRuntime::record_stream(const Tensor& t, const Stream& stream) {
  KILN_CHECK(t.defined(), "record_stream: undefined tensor");
  void* base = t.storage()->data();
  if (!base) return;
  if (t.device().is_cuda()) {
    KILN_CHECK(t.device().index == stream.device(), "record_stream: tensor on ", t.device().str(),
               ", stream on cuda:", stream.device());
    allocator_of(t.device().index).core().record_stream(base, stream_id(stream));
    return;
  }
  KILN_CHECK(is_pinned(t), "record_stream: a CPU tensor must be in pinned memory (kiln::cuda::pin_memory)");
  pinned().record_stream(base, stream_id(stream));
}

Tensor CudaRuntime::empty_pinned(const Shape& sizes, DType dtype) {
  const size_t nbytes = static_cast<size_t>(shape_numel(sizes)) * element_size(dtype);
  void* ptr = pinned().allocate(nbytes);
  std::shared_ptr<void> owner(ptr, [](void* p) { free_in_deleter(pinned(), p); });
  auto storage = std::make_shared<StorageImpl>(ptr, nbytes, kCPU, std::move(owner));
  return make_tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor CudaRuntime::pin_memory(const Tensor& t) {
  KILN_CHECK(t.defined() && t.device().is_cpu(), "pin_memory: expected a CPU tensor, got ",
             t.defined() ? t.str() : std::string("an undefined tensor"));
  Tensor out = empty_pinned(t.sizes(), t.dtype());
  cpu_backend().copy(out, t);
  return out;
}

memory::AllocatorStats CudaRuntime::pinned_memory_stats() { return pinned().stats(); }

// ---- copies ----------------------------------------------------------------------

void CudaRuntime::copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
  check_copy_operands(dst, src);
  const size_t nbytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  if (nbytes == 0) return;
  const Device dd = dst.device(), sd = src.device();
  KILN_CHECK(dd.is_cuda() || sd.is_cuda(), "cuda::copy: neither tensor is on a CUDA device");
  if (dd.is_cuda() && sd.is_cuda()) {
    detail::DeviceGuard guard(dd.index);
    const Stream stream = current_stream(dd.index);
    const auto s = static_cast<cudaStream_t>(stream.handle());
    if (dd.index == sd.index) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes, cudaMemcpyDeviceToDevice, s));
    } else {
      // The copy runs on dst's stream after the work queued so far on src's
      // current stream; src's memory is kept until the copy is done: src's
      // allocator records its free() event on dst's stream, on dst's device
      // (the stream's device in memory::Stream: cuda_device_memory.cpp).
      Event ready;
      ready.record(current_stream(sd.index));
      stream.wait(ready);
      KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), dd.index, src.raw_data(), sd.index, nbytes, s));
      allocator_of(sd.index).core().record_stream(src.storage()->data(), stream_id(stream));
    }
    if (!non_blocking) stream.synchronize();
    return;
  }
  const bool to_device = dd.is_cuda();
  const Tensor& host = to_device ? src : dst;
  const int device = to_device ? dd.index : sd.index;
  detail::DeviceGuard guard(device);
  const Stream stream = current_stream(device);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const bool host_pinned = is_pinned(host);
  KILN_CHECK(!non_blocking || host_pinned, "cuda::copy: a non-blocking copy ", to_device ? "from" : "to",
             " the host needs pinned host memory (kiln::cuda::pin_memory / empty_pinned), got pageable ", host.str());
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes,
                                  to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
  if (non_blocking) {
    pinned().record_stream(host.storage()->data(), stream_id(stream));
  } else if (!to_device || host_pinned) {
    // device->host: the host reads dst next. Pinned host->device: the copy
    // reads the host buffer asynchronously, which the caller may reuse.
    stream.synchronize();
  }
  // Pageable host->device: cudaMemcpyAsync has staged the data before returning.
}

}  // namespace kiln::cuda
