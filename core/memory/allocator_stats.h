// AllocatorStats: the counters of a caching allocator (Note [Caching
// allocator], core/memory/caching_allocator.h), as kiln::cuda::memory_stats()
// reports them for a device (cuda/cuda.h). Public, unlike the allocator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::memory {

// Snapshot of the allocator's counters. "Bytes" of blocks are block sizes
// (rounded), except requested_bytes.
struct AllocatorStats {
  std::size_t allocated_bytes = 0;       // live blocks
  std::size_t peak_allocated_bytes = 0;  // max of allocated_bytes since reset_peak_stats()
  std::size_t requested_bytes = 0;       // sum of the byte counts asked for by live blocks
  std::size_t reserved_bytes = 0;        // all segments held from the device
  std::size_t peak_reserved_bytes = 0;
  std::size_t cached_bytes = 0;          // free blocks ready for reuse
  std::size_t pending_bytes = 0;         // freed blocks waiting on stream events
  std::size_t largest_free_block = 0;    // largest block ready for reuse
  std::size_t active_blocks = 0;         // live allocations
  std::size_t free_blocks = 0;           // blocks ready for reuse
  std::size_t pending_blocks = 0;        // freed blocks waiting on stream events
  // By pool (Note [Caching allocator]: blocks <= 1 MiB are small).
  std::size_t small_pool_allocated_bytes = 0;
  std::size_t large_pool_allocated_bytes = 0;
  std::size_t small_pool_reserved_bytes = 0;
  std::size_t large_pool_reserved_bytes = 0;
  std::size_t segments = 0;              // segments held (small + large)
  std::size_t small_segments = 0;
  std::size_t large_segments = 0;
  std::uint64_t allocations = 0;         // successful allocate() calls with bytes > 0
  std::uint64_t frees = 0;               // free() calls with a live pointer
  std::uint64_t device_reserves = 0;     // DeviceMemory::reserve() successes
  std::size_t quarantined_bytes = 0;     // freed blocks kept out of reuse after device errors
  std::size_t quarantined_blocks = 0;
  std::uint64_t device_releases = 0;     // DeviceMemory::release() calls
  // Note [Out-of-memory retry]: failed reservations that entered the retry;
  // of those, waits for every outstanding event, and cache releases.
  std::uint64_t alloc_retries = 0;
  std::uint64_t event_syncs = 0;
  std::uint64_t cache_flushes = 0;
  std::uint64_t oom_errors = 0;          // OutOfMemoryError thrown
  // Device failures reported and survived instead of thrown (Note [free()
  // never throws on device errors]).
  std::uint64_t device_errors = 0;

  // (reserved - allocated) / reserved: the share of held device memory that
  // backs no live allocation (cached, waiting on events, quarantined, or lost
  // to rounding of unsplit large blocks). 0 when nothing is reserved.
  double fragmentation() const {
    return reserved_bytes == 0 ? 0.0
                               : static_cast<double>(reserved_bytes - allocated_bytes) /
                                     static_cast<double>(reserved_bytes);
  }
};

}  // namespace kiln::memory
