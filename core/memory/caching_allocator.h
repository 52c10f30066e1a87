// CachingAllocator: a stream-aware caching allocator over a DeviceMemory.
//
// Note [Caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Asking the device for memory (cudaMalloc) is slow and synchronising, so the
// allocator reserves large *segments* from the device and hands out *blocks*
// carved from them, keeping freed blocks cached for reuse.
//
// Sizes. A request of n bytes becomes a block of round_request(n) bytes: n
// rounded up to a multiple of kMinBlockSize (512), at least 512. So every block
// size and every block offset inside its segment is a multiple of 512.
//
// Pools. Blocks of <= kSmallRequestLimit (1 MiB) come from the small pool,
// whose segments are kSmallSegmentSize (2 MiB). Larger blocks come from the
// large pool, whose segments are kMediumSegmentSize (20 MiB) for blocks below
// kLargeRequestThreshold (10 MiB) and the block size rounded up to a multiple
// of kLargeSegmentRounding (2 MiB) otherwise (see segment_size_for()). A
// segment never moves between pools or streams.
//
// Best fit, splitting, coalescing. Each pool keeps its free blocks ordered by
// (stream, size, address); a request takes the smallest free block of its
// stream and pool that is large enough. If the rest is big enough (small pool:
// >= 512 bytes; large pool: > kMinLargeSplitRemainder = 1 MiB) the block is
// split and the rest stays free; otherwise the whole block is handed out
// (allocated bytes count whole blocks). The blocks of one segment form a list
// in address order (prev/next); a freed block merges with free neighbours, so
// a segment whose blocks are all free is one block again, which empty_cache()
// and the out-of-memory retry can give back to the device.
//
// Stream-ordered reuse. Every allocation belongs to the stream it was made on
// and its segment's blocks are only ever reused on that stream: work queued on
// one stream runs in order, so a block freed (by the host) while kernels that
// use it are still queued can be handed to the next allocation on the same
// stream at once. If other streams used the block, record_stream(ptr, s) says
// so: free() then records an event on each such stream and the block is reused
// only once all those events have completed. Events are checked lazily, at the
// start of allocate() and empty_cache() (stats() only reads).
//
// Host mode (Options::stream_bound = false, used by PinnedHostAllocator):
// the host touches the memory directly, so blocks belong to no stream, and
// every stream named by record_stream() - the default stream too - gets an
// event on free that must complete before reuse.
//
// Out of memory: see Note [Out-of-memory retry] below.
//
// Caching off (Options::caching = Disabled, or KILN_CACHING_ALLOCATOR=0 in the
// environment when the allocator is built): every allocation is its own
// segment of round_request(n) bytes, straight from the device, and every free
// goes straight back (after its record_stream events, as above).
//
// Device errors on free: see Note [free() never throws on device errors].
//
// Thread safety: every public method takes one mutex. The DeviceMemory is
// called under it, except for release() and synchronize_event(), which may
// block for long and are called with it unlocked (Note [Out-of-memory retry]).
//
// Note [Out-of-memory retry]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// When the device has no memory for a new segment (reserve() answers
// nullptr), allocate() goes through these steps in order (counted in
// alloc_retries); each step but the last ends with another try at a cached
// block, then at a new segment:
//  1. Wait for every outstanding record_stream event (synchronize_event) and
//     process them all: freed blocks that were only waiting for other streams
//     return to their pools (caching off: to the device) and are reused
//     without giving any memory back to the device. Skipped when no event is
//     outstanding; counted in event_syncs.
//  2. Release every whole-free cached segment to the device (cache_flushes;
//     caching on only).
//  3. Throw kiln::OutOfMemoryError (requested, allocated, reserved and
//     device-free bytes in the message; oom_errors). The allocator stays
//     consistent and usable, for example with a smaller batch.
// The waiting of step 1 and the releasing of step 2 run with the mutex
// unlocked: cudaEventSynchronize waits for a stream and cudaFree for the whole
// device, and either can hang behind a kernel that does not end (an NCCL
// collective waiting for a dead peer) until a watchdog aborts it; under the
// mutex, every other thread's allocate() and free() - tensor destructors
// included - would hang too. So the allocator gathers under the mutex what to
// wait for or release, unlocks, waits or releases, and locks again. Other
// threads may allocate and free meanwhile (and may take the blocks step 1
// returned: the retry then goes on to step 2). A segment being released is
// already out of the bookkeeping (reserved_bytes no longer counts it); an
// event being waited for is not recycled until no wait is in progress. Every
// release to the device runs unlocked this way (empty_cache(), and free() and
// allocate() with caching off), not only the retry's; errors from those
// releases are thrown after all of them were tried, except in free().
//
// Note [free() never throws on device errors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// free() runs in tensor destructors (Storage deleters), where an exception is
// std::terminate. It throws only for a pointer that is not live here (a caller
// bug, kiln::Error), never for a failure of the device: when creating or
// recording the events of a block's record_stream() streams fails (a CUDA
// error, say), the block is quarantined - kept out of reuse until the
// allocator is destroyed (quarantined_bytes/blocks), because work on those
// streams may still use it and nothing tells when it is done - and the error
// is counted in device_errors and reported on stderr (the first one of each
// allocator; the later ones are only counted). A failure to release a
// caching-off block to the device in free() is counted and reported the same
// way. Querying an event can fail later, in allocate() or empty_cache(): the
// event's block is quarantined too and the call goes on (a failed wait of the
// out-of-memory retry is left to that query). The CUDA deleters
// (cuda/memory.cpp) are noexcept and report a not-live pointer on stderr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/memory/allocator_stats.h"
#include "core/memory/device_memory.h"

namespace kiln::memory {

inline constexpr std::size_t kMinBlockSize = 512;
inline constexpr std::size_t kSmallRequestLimit = std::size_t{1} << 20;       // 1 MiB
inline constexpr std::size_t kSmallSegmentSize = std::size_t{2} << 20;        // 2 MiB
inline constexpr std::size_t kMediumSegmentSize = std::size_t{20} << 20;      // 20 MiB
inline constexpr std::size_t kLargeRequestThreshold = std::size_t{10} << 20;  // 10 MiB
inline constexpr std::size_t kLargeSegmentRounding = std::size_t{2} << 20;    // 2 MiB
inline constexpr std::size_t kMinLargeSplitRemainder = std::size_t{1} << 20;  // 1 MiB
// Requests above this are refused with OutOfMemoryError (no device has it).
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 48;  // 256 TiB

// Block size for a request of `bytes` (bytes <= kMaxRequest).
std::size_t round_request(std::size_t bytes);
// Size of the segment reserved for a block of `block_size` = round_request(n) bytes.
std::size_t segment_size_for(std::size_t block_size);

// "1.50 MiB" style rendering of a byte count (B, KiB, MiB, GiB, TiB).
std::string format_bytes(std::size_t bytes);

namespace detail {
struct Block;
struct BlockPool;
}  // namespace detail

class CachingAllocator {
 public:
  enum class Caching { FromEnvironment, Enabled, Disabled };
  struct Options {
    // FromEnvironment: KILN_CACHING_ALLOCATOR=0/false/off disables caching,
    // 1/true/on or unset enables it; any other value is a kiln::Error.
    Caching caching = Caching::FromEnvironment;
    // true: blocks belong to their allocation stream (device memory);
    // false: host mode, see Note [Caching allocator].
    bool stream_bound = true;
  };

  explicit CachingAllocator(std::unique_ptr<DeviceMemory> device);
  CachingAllocator(std::unique_ptr<DeviceMemory> device, Options options);
  // Releases every segment, live blocks included: pointers from this
  // allocator are invalid afterwards.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` bytes usable on `stream` (ignored in host
  // mode); nullptr for 0 bytes. Throws OutOfMemoryError when the device is
  // full even after waiting for outstanding events and releasing the cache
  // (Note [Out-of-memory retry]), kiln::Error on other device failures.
  void* allocate(std::size_t bytes, Stream stream = kDefaultStream);
  // Returns a block to the cache (or the device, caching off). nullptr is a
  // no-op; a pointer not live in this allocator is a kiln::Error, the only
  // error free() throws (Note [free() never throws on device errors]).
  void free(void* ptr);
  // Declares that work on `stream` uses the live block `ptr`: reuse after
  // free() waits for that work (see Note). Same stream as the block's: no-op.
  void record_stream(void* ptr, Stream stream);
  // Releases every whole-free cached segment to the device (with the mutex
  // unlocked; the first release error is thrown after all were tried).
  void empty_cache();

  AllocatorStats stats();
  // (allocated_bytes, reserved_bytes) of stats(), in O(1) (the profiler's samples).
  std::pair<std::size_t, std::size_t> usage();
  void reset_peak_stats();
  // Several lines for a person: usage, peaks, pools, counters.
  std::string memory_summary();

  // Block size behind the live pointer `ptr` (a kiln::Error if not live).
  std::size_t block_size(const void* ptr);
  bool caching_enabled() const { return caching_; }
  bool stream_bound() const { return stream_bound_; }
  const std::string& device_name() const { return device_name_; }

 private:
  struct PendingEvent {
    EventHandle event;
    detail::Block* block;
  };
  struct Region {  // memory to give back to the device
    void* ptr;
    std::size_t bytes;
  };

  detail::Block* take_free_block(detail::BlockPool& pool, Stream stream, std::size_t size);
  detail::Block* reserve_segment(detail::BlockPool& pool, Stream stream, std::size_t size);
  detail::Block* find_or_reserve(detail::BlockPool& pool, Stream stream, std::size_t size,
                                 std::size_t segment);
  detail::Block* retry_out_of_memory(std::unique_lock<std::mutex>& lock, detail::BlockPool& pool,
                                     Stream stream, std::size_t size, std::size_t segment);
  void wait_for_events(std::unique_lock<std::mutex>& lock);
  void split(detail::Block* block, std::size_t size);
  void return_block(detail::Block* block);
  void record_free_events(detail::Block* block);
  void quarantine(detail::Block* block);
  void report_device_error(const char* what, const char* error) noexcept;
  void release_segment(detail::Block* block);
  void queue_cached_segments();
  void release_queued(std::unique_lock<std::mutex>& lock);
  void process_events();
  EventHandle acquire_event();
  void recycle_event(EventHandle event);
  [[noreturn]] void throw_out_of_memory(std::size_t requested, Stream stream);
  detail::Block* live_block(const void* ptr, const char* op);
  AllocatorStats stats_locked() const;

  std::unique_ptr<DeviceMemory> device_;
  std::string device_name_;
  bool caching_ = true;
  bool stream_bound_ = true;

  std::mutex mutex_;
  std::unique_ptr<detail::BlockPool> small_pool_;
  std::unique_ptr<detail::BlockPool> large_pool_;
  std::unordered_map<const void*, detail::Block*> live_;  // ptr -> allocated block
  std::map<const void*, detail::Block*> segments_;        // base ptr -> first block (stable)
  std::vector<PendingEvent> pending_;                     // one per outstanding event
  std::vector<EventHandle> spare_events_;                 // completed, ready to record again
  // Completed while event_waiters_ > 0: not recorded again until the waits
  // (wait_for_events, mutex unlocked) are over, as a wait may name them.
  std::vector<EventHandle> held_events_;
  int event_waiters_ = 0;
  std::vector<EventHandle> failed_events_;  // a device call on them failed: destroyed at the end
  std::vector<Region> release_queue_;       // out of the bookkeeping; released unlocked
  bool device_error_reported_ = false;
  AllocatorStats counters_;  // bytes and counts kept up to date incrementally
};

}  // namespace kiln::memory
