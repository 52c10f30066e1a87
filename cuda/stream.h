// CUDA streams and events, and the current stream of each (thread, device).
//
// Note [Current stream]
// ~~~~~~~~~~~~~~~~~~~~~
// Every CUDA kernel, copy and allocation kiln issues goes to the *current
// stream* of the device it runs on. Each thread has its own current stream per
// device; it is the device's default (legacy, handle 0) stream until
// set_current_stream() or a StreamGuard changes it. The caching allocator
// (core/memory/, Note [Caching allocator]) ties every device block to the
// stream current when it was allocated: a tensor used on another stream must
// be declared with kiln::cuda::record_stream() (cuda/cuda.h) before it is
// freed, or the allocator may hand its memory out while that stream still
// reads it.
//
// This header names no CUDA type, so it compiles in builds without CUDA too;
// there every call is a kiln::Error "... built without CUDA". Handles are
// cudaStream_t / cudaEvent_t behind void*. libkiln defines these calls and
// forwards them to the CUDA backend's library (core/cuda_hooks.cpp, Note
// [Package layout] in core/components.h).
#pragma once

#include <cstdint>
#include <memory>

namespace kiln::cuda {

class Event;
class CudaRuntime;  // the CUDA backend's implementation (cuda/runtime.h, internal)
namespace detail {
class CudaHooks;  // its interface (core/cuda_hooks.h, internal)
}  // namespace detail

class Stream {
 public:
  // The default stream of device 0 (handle 0).
  Stream() = default;
  // The default (legacy) stream of `device`; -1: the calling thread's current CUDA device.
  static Stream default_stream(int device = -1);
  // A stream on `device` that does not synchronise with the default stream
  // (cudaStreamNonBlocking), from the device's pool (Note [Stream pool] in
  // cuda/stream.cpp): 32 streams per priority, handed out in turn and never
  // destroyed, as PyTorch's, so every use the allocator or an event recorded
  // on it stays valid.
  static Stream create(int device = -1, bool high_priority = false);
  // Wraps a stream made elsewhere (not owned).
  static Stream wrap(void* cuda_stream, int device);

  int device() const { return device_; }
  void* handle() const { return handle_; }  // cudaStream_t
  // The caching allocator's stream id (core/memory/device_memory.h).
  std::uintptr_t id() const { return reinterpret_cast<std::uintptr_t>(handle_); }

  bool query() const;        // true when all queued work has finished
  void synchronize() const;  // blocks the host until then
  // Work queued on this stream after the call waits until `event` completes.
  void wait(const Event& event) const;

  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  friend class CudaRuntime;
  int device_ = 0;
  void* handle_ = nullptr;
};

// A CUDA event: a point in a stream's work. Created on first record(), on
// the device of that stream; an event never recorded counts as completed.
class Event {
 public:
  // timing: the event can measure elapsed time (slightly more costly).
  explicit Event(bool timing = false);

  void record(const Stream& stream);
  void record();                // on the current stream of the current device
  bool query() const;           // true once the recorded point has passed
  void synchronize() const;     // blocks the host until then
  // Milliseconds from this event to `end`; both recorded, completed, timing.
  float elapsed_ms(const Event& end) const;
  bool recorded() const;
  void* handle() const;         // cudaEvent_t, or nullptr before the first record

 private:
  friend class CudaRuntime;
  friend class detail::CudaHooks;
  struct Impl;  // defined by the CUDA backend (cuda/stream.cpp)
  std::shared_ptr<Impl> impl_;
};

// The current stream of `device` (-1: the current CUDA device) for this thread.
Stream current_stream(int device = -1);
// Makes `stream` current for its device on this thread.
void set_current_stream(const Stream& stream);

// Makes a stream current for its device for a scope, and the stream's device
// the current CUDA device; restores both on exit.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_ = 0;
};

}  // namespace kiln::cuda
