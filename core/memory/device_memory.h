// The small device interface the caching allocator is written against, plus
// the out-of-memory error it throws.
//
// Invariants:
//  - The allocator core never calls CUDA; it only calls a DeviceMemory. The
//    CUDA device and pinned-host implementations live in cuda/ (made by the
//    factories below); tests use a simulated device; CPU-only builds can use
//    HostHeapMemory (core/memory/host_memory.h).
//  - A Stream is an opaque handle (for CUDA: a cudaStream_t's bits; 0 is the
//    default stream). An EventHandle is opaque and only ever passed back to the
//    DeviceMemory that created it.
//  - reserve() answers "no memory" with nullptr (the allocator then waits for
//    its outstanding events, frees its cache and retries, then throws
//    OutOfMemoryError: Note [Out-of-memory retry] in caching_allocator.h); any
//    other device failure is a kiln::Error thrown from the call.
//  - A DeviceMemory is called by one allocator. reserve(), the event calls
//    other than synchronize_event(), and memory_info() are called under that
//    allocator's mutex, one at a time. release() and synchronize_event() may
//    block for long (cudaFree waits for the whole device) and are called with
//    the mutex unlocked, so they may run at the same time as each other and as
//    the other calls, from other threads: an implementation must be
//    thread-safe for that (CUDA's calls, HostHeapMemory and the tests'
//    simulated device are).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"

namespace kiln {

// Thrown when the allocator cannot get `requested` bytes even after releasing
// every cached unused segment. All byte counts are as seen when it gave up;
// the allocator stays usable afterwards.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& what, std::size_t requested, std::size_t allocated,
                   std::size_t reserved, std::size_t device_free, std::size_t device_total)
      : Error(what),
        requested_(requested),
        allocated_(allocated),
        reserved_(reserved),
        device_free_(device_free),
        device_total_(device_total) {}

  std::size_t requested() const { return requested_; }        // bytes asked for
  std::size_t allocated() const { return allocated_; }        // live bytes in this allocator
  std::size_t reserved() const { return reserved_; }          // bytes this allocator holds
  std::size_t device_free() const { return device_free_; }    // device-wide free bytes
  std::size_t device_total() const { return device_total_; }  // device-wide total bytes

 private:
  std::size_t requested_, allocated_, reserved_, device_free_, device_total_;
};

namespace memory {

// Opaque stream handle; Stream{} (id 0) is the default stream. `device` is
// the device the stream belongs to, for a DeviceMemory whose events may be
// recorded on streams of several devices (CUDA: a peer copy's stream, or a
// pinned buffer's copy streams); -1: the DeviceMemory's own device (device
// memory) or the current one (pinned host). For CUDA the id alone is not
// enough: every device's legacy default stream has id 0.
struct Stream {
  std::uintptr_t id = 0;
  int device = -1;
  constexpr bool operator==(const Stream&) const = default;
  constexpr auto operator<=>(const Stream&) const = default;
};
inline constexpr Stream kDefaultStream{0};

using EventHandle = void*;

struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;   // what the device could still hand out
  std::size_t total_bytes = 0;  // its capacity
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // For messages: "cuda:0", "pinned host", ...
  virtual std::string name() const = 0;

  // A fresh region of `bytes` bytes (bytes > 0, a multiple of 512), aligned to
  // at least 256 bytes; nullptr when the device is out of memory.
  virtual void* reserve(std::size_t bytes) = 0;
  // Gives back a region from reserve(); `bytes` is the size it was reserved with.
  virtual void release(void* ptr, std::size_t bytes) = 0;

  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // Marks the point in `stream` that all work queued on it so far must pass.
  virtual void record_event(EventHandle event, Stream stream) = 0;
  // True once the recorded point has been passed (never blocks).
  virtual bool event_completed(EventHandle event) = 0;
  // Blocks until the recorded point has been passed (at once for an event
  // never recorded). Called without the allocator's mutex (see above). The
  // default polls event_completed(); CUDA waits with cudaEventSynchronize.
  virtual void synchronize_event(EventHandle event) {
    while (!event_completed(event)) std::this_thread::yield();
  }

  virtual DeviceMemoryInfo memory_info() = 0;
};

// CUDA implementations (cuda/cuda_device_memory.cpp): device memory through
// cudaMalloc/cudaFree, pinned host memory through cudaHostAlloc/cudaFreeHost,
// events through cudaEventCreateWithFlags(disableTiming)/Record/Query. In a
// build without CUDA both throw kiln::Error("... built without CUDA").
// Events are created and recorded with the recorded stream's device current
// (Stream::device; -1: the device memory's own device, or for pinned host the
// current device), so a device block may be recorded on a peer device's
// stream and a pinned block on the streams of several devices.
std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device_index);
std::unique_ptr<DeviceMemory> make_cuda_pinned_host_memory();

}  // namespace memory
}  // namespace kiln
