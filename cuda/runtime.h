// Internal to the CUDA backend (not installed): CudaRuntime, libkiln_cuda's
// implementation of the hooks libkiln forwards the public CUDA API to
// (core/cuda_hooks.h, Note [Package layout] in core/components.h). Each
// method is defined beside what it serves: devices, streams and events in
// cuda/stream.cpp, memory and copies in cuda/memory.cpp, the memory
// factories in cuda/cuda_device_memory.cpp, TF32 in cuda/gemm_lt.cpp,
// versions and the backend in cuda/runtime.cpp, which registers the one
// instance as the library loads.
#pragma once

#include "core/cuda_hooks.h"

namespace kiln::cuda {

class CudaRuntime final : public detail::CudaHooks {
 public:
  Backend& backend(int device) override;

  int device_count() override;
  int current_device() override;
  void set_device(int device) override;
  std::string device_name(int device) override;
  void synchronize(int device) override;
  std::vector<std::pair<std::string, std::string>> library_versions() override;
  void set_allow_tf32(bool allow) override;
  bool allow_tf32() override;

  memory::AllocatorStats memory_stats(int device) override;
  std::string memory_summary(int device) override;
  void reset_peak_memory_stats(int device) override;
  void empty_cache(int device) override;
  void record_stream(const Tensor& t, const Stream& stream) override;
  Tensor empty_pinned(const Shape& sizes, DType dtype) override;
  Tensor pin_memory(const Tensor& cpu_tensor) override;
  bool is_pinned(const Tensor& t) override;
  memory::AllocatorStats pinned_memory_stats() override;
  void copy(const Tensor& dst, const Tensor& src, bool non_blocking) override;
  std::unique_ptr<memory::DeviceMemory> make_device_memory(int device) override;
  std::unique_ptr<memory::DeviceMemory> make_pinned_host_memory() override;

  Stream default_stream(int device) override;
  Stream stream_create(int device, bool high_priority) override;
  Stream stream_wrap(void* cuda_stream, int device) override;
  bool stream_query(const Stream& s) override;
  void stream_synchronize(const Stream& s) override;
  void stream_wait(const Stream& s, const Event& event) override;
  Stream current_stream(int device) override;
  void set_current_stream(const Stream& stream) override;

  std::shared_ptr<Event::Impl> event_create(bool timing) override;
  void event_record(Event& e, const Stream& stream) override;
  bool event_query(const Event& e) override;
  void event_synchronize(const Event& e) override;
  float event_elapsed_ms(const Event& start, const Event& end) override;
  bool event_recorded(const Event& e) override;
  void* event_handle(const Event& e) override;
};

namespace detail {
// The Backend of cuda:<device>, made on first use (cuda/backend_cuda.cpp).
Backend& cuda_backend(int device);
}  // namespace detail

}  // namespace kiln::cuda
