// HostHeapMemory: a DeviceMemory over ordinary (pageable) host memory.
//
// For CPU-only builds (host staging buffers when there is no GPU) and for
// benchmarking the allocator's cached path without a GPU. Regions come from
// std::aligned_alloc with 512-byte alignment. No asynchronous work exists on
// the host, so an event is complete as soon as it is recorded.
//
// Invariant: used bytes (sum of live reserved regions) <= capacity; reserve()
// beyond it answers nullptr (out of memory). Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "core/memory/device_memory.h"

namespace kiln::memory {

class HostHeapMemory final : public DeviceMemory {
 public:
  // capacity_bytes == 0: limited only by the C heap.
  explicit HostHeapMemory(std::size_t capacity_bytes = 0);

  std::string name() const override;
  void* reserve(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) override;
  EventHandle create_event() override;
  void destroy_event(EventHandle event) override;
  void record_event(EventHandle event, Stream stream) override;
  bool event_completed(EventHandle event) override;
  DeviceMemoryInfo memory_info() override;

  std::size_t used_bytes() const { return used_.load(); }

 private:
  std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace kiln::memory
