// Internal (not installed): the CUDA backend as libkiln sees it (Note
// [Package layout] in core/components.h). libkiln_cuda implements CudaHooks
// (cuda::CudaRuntime, cuda/runtime.h) and registers it when it is loaded;
// libkiln's definitions of the public CUDA API (cuda/cuda.h, cuda/stream.h,
// in core/cuda_hooks.cpp), backend(cuda) and the CUDA memory factories
// (core/memory/device_memory.h) forward to it, or throw why there is no CUDA
// backend. Each method has the contract of the public call it serves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/device_memory.h"
#include "cuda/cuda.h"

namespace kiln {
class Backend;
}  // namespace kiln

namespace kiln::cuda::detail {

class CudaHooks {
 public:
  virtual ~CudaHooks() = default;

  // The Backend of cuda:<device> (core/backend.h); kiln::Error when there is no such device.
  virtual Backend& backend(int device) = 0;

  // ---- devices, versions, TF32 (cuda/cuda.h) ----
  virtual int device_count() = 0;
  virtual int current_device() = 0;
  virtual void set_device(int device) = 0;
  virtual std::string device_name(int device) = 0;
  virtual void synchronize(int device) = 0;
  virtual std::vector<std::pair<std::string, std::string>> library_versions() = 0;
  virtual void set_allow_tf32(bool allow) = 0;
  virtual bool allow_tf32() = 0;

  // ---- memory and copies (cuda/cuda.h) ----
  virtual memory::AllocatorStats memory_stats(int device) = 0;
  virtual std::string memory_summary(int device) = 0;
  virtual void reset_peak_memory_stats(int device) = 0;
  virtual void empty_cache(int device) = 0;
  virtual void record_stream(const Tensor& t, const Stream& stream) = 0;
  virtual Tensor empty_pinned(const Shape& sizes, DType dtype) = 0;
  virtual Tensor pin_memory(const Tensor& cpu_tensor) = 0;
  virtual bool is_pinned(const Tensor& t) = 0;
  virtual memory::AllocatorStats pinned_memory_stats() = 0;
  virtual void copy(const Tensor& dst, const Tensor& src, bool non_blocking) = 0;
  // memory::make_cuda_device_memory / make_cuda_pinned_host_memory
  virtual std::unique_ptr<memory::DeviceMemory> make_device_memory(int device) = 0;
  virtual std::unique_ptr<memory::DeviceMemory> make_pinned_host_memory() = 0;

  // ---- streams (cuda/stream.h) ----
  virtual Stream default_stream(int device) = 0;
  virtual Stream stream_create(int device, bool high_priority) = 0;
  virtual Stream stream_wrap(void* cuda_stream, int device) = 0;
  virtual bool stream_query(const Stream& s) = 0;
  virtual void stream_synchronize(const Stream& s) = 0;
  virtual void stream_wait(const Stream& s, const Event& event) = 0;
  virtual Stream current_stream(int device) = 0;
  virtual void set_current_stream(const Stream& stream) = 0;

  // ---- events (cuda/stream.h) ----
  virtual std::shared_ptr<Event::Impl> event_create(bool timing) = 0;
  virtual void event_record(Event& e, const Stream& stream) = 0;
  virtual bool event_query(const Event& e) = 0;
  virtual void event_synchronize(const Event& e) = 0;
  virtual float event_elapsed_ms(const Event& start, const Event& end) = 0;
  virtual bool event_recorded(const Event& e) = 0;
  virtual void* event_handle(const Event& e) = 0;
};

// Called once by libkiln_cuda as it loads; the hooks live until the process ends.
void register_cuda_hooks(CudaHooks* hooks);
// The registered hooks; on the first call without them, loads libkiln_cuda
// (Note [Package layout]). nullptr when there is no CUDA backend: then
// cuda_unavailable_reason() says why.
CudaHooks* cuda_hooks();

}  // namespace kiln::cuda::detail
