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
//  - reserve() answers "no memory" with nullptr (the allocator then frees
//    its cache and retries, then throws OutOfMemoryError); any other device
//    failure is a kiln::Error thrown from the call.
//  - A DeviceMemory is called by one allocator under that allocator's mutex,
//    so an implementation needs no locking of its own for that use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

// Opaque stream handle; Stream{} (id 0) is the default stream.
struct Stream {
  std::uintptr_t id = 0;
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

  virtual DeviceMemoryInfo memory_info() = 0;
};

// CUDA implementations (cuda/cuda_device_memory.cpp): device memory through
// cudaMalloc/cudaFree, pinned host memory through cudaHostAlloc/cudaFreeHost,
// events through cudaEventCreateWithFlags(disableTiming)/Record/Query. In a
// build without CUDA both throw kiln::Error("... built without CUDA").
// Pinned-host events are created on the current device: streams recorded on
// the pinned allocator must belong to that device.
std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device_index);
std::unique_ptr<DeviceMemory> make_cuda_pinned_host_memory();

}  // namespace memory
}  // namespace kiln
