// CachingAllocator: see Note [Caching allocator] in caching_allocator.h.
#include "core/memory/caching_allocator.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <set>
#include <sstream>

namespace kiln::memory {
namespace detail {

// One block of a segment. Invariants: size and (ptr - segment base) are
// multiples of kMinBlockSize; prev/next are the address-order neighbours in
// the same segment (prev->ptr + prev->size == ptr); all blocks of a segment
// share its stream and pool; a block is in its pool's free set iff
// !allocated && pending_events == 0 && !quarantined; the first block of a
// segment is never deleted while the segment lives (merges keep the lower
// block).
struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;  // bytes asked for while allocated, else 0
  Stream stream;
  BlockPool* pool = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;            // events to complete before reuse
  bool quarantined = false;          // freed, never reused (a device error)
  std::vector<Stream> used_streams;  // record_stream() targets while allocated
};

// Free blocks ordered by (stream, size, address): lower_bound on
// (stream, size, nullptr) is the best fit on that stream.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>()(a->ptr, b->ptr);
  }
};

struct BlockPool {
  explicit BlockPool(bool is_small) : small(is_small) {}
  bool small;
  std::set<Block*, BlockLess> free_blocks;
};

}  // namespace detail

using detail::Block;
using detail::BlockPool;

namespace {

bool is_free(const Block* b) {
  return !b->allocated && b->pending_events == 0 && !b->quarantined;
}

bool caching_from_environment() {
  const char* raw = std::getenv("KILN_CACHING_ALLOCATOR");
  if (raw == nullptr || *raw == '\0') return true;
  std::string v(raw);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "0" || v == "false" || v == "off") return false;
  if (v == "1" || v == "true" || v == "on") return true;
  fail("KILN_CACHING_ALLOCATOR='", raw, "': expected 0/1, false/true or off/on");
}

}  // namespace

std::size_t round_request(std::size_t bytes) {
  if (bytes <= kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::size_t segment_size_for(std::size_t block_size) {
  if (block_size <= kSmallRequestLimit) return kSmallSegmentSize;
  if (block_size < kLargeRequestThreshold) return kMediumSegmentSize;
  return (block_size + kLargeSegmentRounding - 1) / kLargeSegmentRounding * kLargeSegmentRounding;
}

std::string format_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> device)
    : CachingAllocator(std::move(device), Options{}) {}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> device, Options options)
    : device_(std::move(device)),
      stream_bound_(options.stream_bound),
      small_pool_(std::make_unique<BlockPool>(true)),
      large_pool_(std::make_unique<BlockPool>(false)) {
  KILN_CHECK(device_ != nullptr, "CachingAllocator: the DeviceMemory is null");
  device_name_ = device_->name();
  switch (options.caching) {
    case Caching::Enabled: caching_ = true; break;
    case Caching::Disabled: caching_ = false; break;
    case Caching::FromEnvironment: caching_ = caching_from_environment(); break;
  }
}

CachingAllocator::~CachingAllocator() {
  // Nothing here may throw; device errors at teardown are ignored.
  for (const PendingEvent& p : pending_) spare_events_.push_back(p.event);
  for (const auto* events : {&spare_events_, &held_events_, &failed_events_}) {
    for (EventHandle e : *events) {
      try {
        device_->destroy_event(e);
      } catch (...) {
      }
    }
  }
  for (const Region& r : release_queue_) {  // empty unless a release was cut short
    try {
      device_->release(r.ptr, r.bytes);
    } catch (...) {
    }
  }
  for (auto& [base, head] : segments_) {
    std::size_t total = 0;
    for (Block* b = head; b != nullptr;) {
      total += b->size;
      Block* next = b->next;
      delete b;
      b = next;
    }
    try {
      device_->release(const_cast<void*>(base), total);
    } catch (...) {
    }
  }
}

void* CachingAllocator::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return nullptr;
  const Stream owner = stream_bound_ ? stream : kDefaultStream;
  std::unique_lock<std::mutex> lock(mutex_);
  if (bytes > kMaxRequest) throw_out_of_memory(bytes, stream);
  const std::size_t size = round_request(bytes);
  const std::size_t segment = caching_ ? segment_size_for(size) : size;
  BlockPool& pool = size <= kSmallRequestLimit ? *small_pool_ : *large_pool_;
  process_events();
  release_queued(lock);  // caching off: blocks whose events completed

  Block* block = find_or_reserve(pool, owner, size, segment);
  if (block == nullptr) block = retry_out_of_memory(lock, pool, owner, size, segment);
  if (block == nullptr) throw_out_of_memory(bytes, stream);
  try {
    split(block, size);
    live_.emplace(block->ptr, block);
  } catch (...) {
    return_block(block);
    throw;
  }
  block->allocated = true;
  block->requested = bytes;
  AllocatorStats& c = counters_;
  c.allocated_bytes += block->size;
  (pool.small ? c.small_pool_allocated_bytes : c.large_pool_allocated_bytes) += block->size;
  c.peak_allocated_bytes = std::max(c.peak_allocated_bytes, c.allocated_bytes);
  c.requested_bytes += bytes;
  ++c.active_blocks;
  ++c.allocations;
  return block->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::vector<Region> regions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = live_block(ptr, "free");  // the one error free() throws
    live_.erase(ptr);
    block->allocated = false;
    counters_.allocated_bytes -= block->size;
    (block->pool->small ? counters_.small_pool_allocated_bytes : counters_.large_pool_allocated_bytes) -= block->size;
    counters_.requested_bytes -= block->requested;
    block->requested = 0;
    --counters_.active_blocks;
    ++counters_.frees;
    if (block->used_streams.empty()) {
      return_block(block);
    } else {
      record_free_events(block);
    }
    regions.swap(release_queue_);  // caching off: the block itself
  }
  // Note [Out-of-memory retry]: released with the mutex unlocked; Note [free()
  // never throws on device errors]: failures are reported, not thrown.
  for (const Region& r : regions) {
    try {
      device_->release(r.ptr, r.bytes);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      report_device_error("releasing a freed block to the device", e.what());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      report_device_error("releasing a freed block to the device", "unknown exception");
    }
  }
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = live_block(ptr, "record_stream");
  if (stream_bound_ && stream == block->stream) return;
  auto& used = block->used_streams;
  if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::unique_lock<std::mutex> lock(mutex_);
  process_events();
  queue_cached_segments();
  release_queued(lock);
}

AllocatorStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_locked();
}

std::pair<std::size_t, std::size_t> CachingAllocator::usage() {
  std::lock_guard<std::mutex> lock(mutex_);
  return {counters_.allocated_bytes, counters_.reserved_bytes};
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.peak_allocated_bytes = counters_.allocated_bytes;
  counters_.peak_reserved_bytes = counters_.reserved_bytes;
}

std::size_t CachingAllocator::block_size(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_block(ptr, "block_size")->size;
}

std::string CachingAllocator::memory_summary() {
  AllocatorStats s = stats();
  std::ostringstream os;
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * s.fragmentation());
  os << "Caching allocator on " << device_name_ << " (caching " << (caching_ ? "on" : "off")
     << ", " << (stream_bound_ ? "blocks bound to streams" : "host mode: blocks bound to no stream")
     << ")\n"
     << "  allocated:     " << format_bytes(s.allocated_bytes) << " in " << s.active_blocks
     << " live blocks (peak " << format_bytes(s.peak_allocated_bytes) << "; "
     << format_bytes(s.requested_bytes) << " requested)\n"
     << "  reserved:      " << format_bytes(s.reserved_bytes) << " in " << s.segments
     << " segments: " << s.small_segments << " small, " << s.large_segments << " large (peak "
     << format_bytes(s.peak_reserved_bytes) << ")\n"
     << "  cached free:   " << format_bytes(s.cached_bytes) << " in " << s.free_blocks
     << " blocks (largest " << format_bytes(s.largest_free_block) << ")\n"
     << "  pending:       " << format_bytes(s.pending_bytes) << " in " << s.pending_blocks
     << " freed blocks waiting on stream events\n"
     << "  quarantined:   " << format_bytes(s.quarantined_bytes) << " in " << s.quarantined_blocks
     << " freed blocks kept out of reuse after device errors\n"
     << "  fragmentation: " << frag << " of reserved bytes back no live allocation\n"
     << "  counts:        " << s.allocations << " allocations, " << s.frees << " frees, "
     << s.device_reserves << " device reserves, " << s.device_releases << " device releases, "
     << s.oom_errors << " out-of-memory errors, " << s.device_errors << " device errors\n"
     << "  retries:       " << s.alloc_retries << " out-of-memory retries: " << s.event_syncs
     << " waits for stream events, " << s.cache_flushes << " cache flushes\n";
  return os.str();
}

// ---- internals (mutex_ held) ---------------------------------------------

Block* CachingAllocator::take_free_block(BlockPool& pool, Stream stream, std::size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.free_blocks.erase(it);
  return block;
}

Block* CachingAllocator::find_or_reserve(BlockPool& pool, Stream stream, std::size_t size,
                                         std::size_t segment) {
  Block* block = caching_ ? take_free_block(pool, stream, size) : nullptr;
  return block != nullptr ? block : reserve_segment(pool, stream, segment);
}

// Note [Out-of-memory retry]: steps 1 and 2; nullptr when both failed.
Block* CachingAllocator::retry_out_of_memory(std::unique_lock<std::mutex>& lock,
                                             BlockPool& pool, Stream stream, std::size_t size,
                                             std::size_t segment) {
  ++counters_.alloc_retries;
  if (!pending_.empty()) {
    ++counters_.event_syncs;
    wait_for_events(lock);
    if (Block* block = find_or_reserve(pool, stream, size, segment)) return block;
  }
  if (!caching_) return nullptr;
  ++counters_.cache_flushes;
  queue_cached_segments();
  release_queued(lock);
  return find_or_reserve(pool, stream, size, segment);
}

// Waits, with the mutex unlocked, for every event outstanding now, then
// processes all events (and releases what that returns, caching off).
// Completed events are held back from recycling while any wait runs: a
// recycled event recorded again would make a wait naming it wait for the new
// point instead.
void CachingAllocator::wait_for_events(std::unique_lock<std::mutex>& lock) {
  std::vector<EventHandle> events;
  events.reserve(pending_.size());
  for (const PendingEvent& p : pending_) events.push_back(p.event);
  ++event_waiters_;
  lock.unlock();
  for (EventHandle e : events) {
    try {
      device_->synchronize_event(e);
    } catch (...) {
      // Not an answer about the event: process_events() queries it below and
      // quarantines its block (and reports) if that fails too.
    }
  }
  lock.lock();
  if (--event_waiters_ == 0) {
    spare_events_.insert(spare_events_.end(), held_events_.begin(), held_events_.end());
    held_events_.clear();
  }
  process_events();
  release_queued(lock);
}

Block* CachingAllocator::reserve_segment(BlockPool& pool, Stream stream, std::size_t size) {
  auto block = std::make_unique<Block>();
  void* raw = device_->reserve(size);
  if (raw == nullptr) return nullptr;
  block->ptr = static_cast<char*>(raw);
  block->size = size;
  block->stream = stream;
  block->pool = &pool;
  try {
    segments_.emplace(raw, block.get());
  } catch (...) {
    device_->release(raw, size);
    throw;
  }
  AllocatorStats& c = counters_;
  c.reserved_bytes += size;
  (pool.small ? c.small_pool_reserved_bytes : c.large_pool_reserved_bytes) += size;
  c.peak_reserved_bytes = std::max(c.peak_reserved_bytes, c.reserved_bytes);
  ++c.segments;
  ++(pool.small ? c.small_segments : c.large_segments);
  ++c.device_reserves;
  return block.release();
}

void CachingAllocator::split(Block* block, std::size_t size) {
  const std::size_t rest = block->size - size;
  const bool worth = block->pool->small ? rest >= kMinBlockSize : rest > kMinLargeSplitRemainder;
  if (!caching_ || !worth) return;
  auto remainder = std::make_unique<Block>();
  remainder->ptr = block->ptr + size;
  remainder->size = rest;
  remainder->stream = block->stream;
  remainder->pool = block->pool;
  block->pool->free_blocks.insert(remainder.get());  // may throw: nothing linked yet
  remainder->prev = block;
  remainder->next = block->next;
  if (block->next != nullptr) block->next->prev = remainder.get();
  block->next = remainder.get();
  block->size = size;
  remainder.release();
}

// `block` is free (not allocated, no pending events) and in no pool.
void CachingAllocator::return_block(Block* block) {
  if (!caching_) {
    release_segment(block);
    return;
  }
  auto& free_blocks = block->pool->free_blocks;
  if (Block* next = block->next; next != nullptr && is_free(next)) {
    free_blocks.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    delete next;
  }
  if (Block* prev = block->prev; prev != nullptr && is_free(prev)) {
    free_blocks.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    delete block;
    block = prev;
  }
  free_blocks.insert(block);
}

// `block` was just freed and other streams used it: an event on each of them
// must complete before reuse. Note [free() never throws on device errors]: if
// getting or recording an event fails, the block is quarantined.
void CachingAllocator::record_free_events(Block* block) {
  std::vector<Stream> streams;
  streams.swap(block->used_streams);
  counters_.pending_bytes += block->size;
  ++counters_.pending_blocks;
  // One guard count held while recording, so the block cannot be returned
  // half-way.
  block->pending_events = 1;
  try {
    pending_.reserve(pending_.size() + streams.size());  // no throwing after a record
    for (Stream s : streams) {
      EventHandle event = acquire_event();
      try {
        device_->record_event(event, s);
      } catch (...) {
        failed_events_.push_back(event);  // not recycled: it may be broken
        throw;
      }
      pending_.push_back({event, block});
      ++block->pending_events;
    }
  } catch (const std::exception& e) {
    quarantine(block);
    report_device_error("recording a record_stream event in free()", e.what());
  } catch (...) {
    quarantine(block);
    report_device_error("recording a record_stream event in free()", "unknown exception");
  }
  if (--block->pending_events == 0 && !block->quarantined) {
    counters_.pending_bytes -= block->size;
    --counters_.pending_blocks;
    return_block(block);
  }
}

// `block` is freed and counted as pending: from now on it is never reused
// (its segment stays until the allocator goes).
void CachingAllocator::quarantine(Block* block) {
  if (block->quarantined) return;
  block->quarantined = true;
  AllocatorStats& c = counters_;
  c.pending_bytes -= block->size;
  --c.pending_blocks;
  c.quarantined_bytes += block->size;
  ++c.quarantined_blocks;
}

void CachingAllocator::report_device_error(const char* what, const char* error) noexcept {
  ++counters_.device_errors;
  if (device_error_reported_) return;
  device_error_reported_ = true;
  std::fprintf(stderr,
               "kiln: caching allocator on %s: %s failed: %s. The memory involved is kept out "
               "of reuse; later device errors of this allocator are only counted "
               "(AllocatorStats::device_errors).\n",
               device_name_.c_str(), what, error);
  std::fflush(stderr);
}

// `block` is a whole segment, free and in no pool. Its bookkeeping is dropped
// here and the memory queued for release_queued() (or free()), which gives it
// back to the device with the mutex unlocked.
void CachingAllocator::release_segment(Block* block) {
  void* ptr = block->ptr;
  const std::size_t size = block->size;
  release_queue_.push_back({ptr, size});  // first: if it throws, nothing changed
  segments_.erase(ptr);
  AllocatorStats& c = counters_;
  c.reserved_bytes -= size;
  (block->pool->small ? c.small_pool_reserved_bytes : c.large_pool_reserved_bytes) -= size;
  --c.segments;
  --(block->pool->small ? c.small_segments : c.large_segments);
  ++c.device_releases;
  delete block;
}

// Gives release_queue_ back to the device with the mutex unlocked, and locks
// it again. Every region is tried; the first failure is thrown after.
void CachingAllocator::release_queued(std::unique_lock<std::mutex>& lock) {
  if (release_queue_.empty()) return;
  std::vector<Region> regions;
  regions.swap(release_queue_);
  lock.unlock();
  std::exception_ptr error;
  for (const Region& r : regions) {
    try {
      device_->release(r.ptr, r.bytes);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  lock.lock();
  if (error) std::rethrow_exception(error);
}

void CachingAllocator::queue_cached_segments() {
  for (BlockPool* pool : {small_pool_.get(), large_pool_.get()}) {
    auto& free_blocks = pool->free_blocks;
    for (auto it = free_blocks.begin(); it != free_blocks.end();) {
      Block* block = *it;
      if (block->prev == nullptr && block->next == nullptr) {
        it = free_blocks.erase(it);
        release_segment(block);
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::process_events() {
  for (std::size_t i = 0; i < pending_.size();) {
    const PendingEvent p = pending_[i];
    bool done = false;
    bool failed = false;
    try {
      done = device_->event_completed(p.event);
    } catch (const std::exception& e) {
      failed = true;
      report_device_error("querying a record_stream event", e.what());
    } catch (...) {
      failed = true;
      report_device_error("querying a record_stream event", "unknown exception");
    }
    if (!done && !failed) {
      ++i;
      continue;
    }
    pending_[i] = pending_.back();
    pending_.pop_back();
    if (failed) {
      // Whether the block's users are done is unknown: it is never reused.
      quarantine(p.block);
      failed_events_.push_back(p.event);
    } else {
      recycle_event(p.event);
    }
    if (--p.block->pending_events == 0 && !p.block->quarantined) {
      counters_.pending_bytes -= p.block->size;
      --counters_.pending_blocks;
      return_block(p.block);
    }
  }
}

void CachingAllocator::recycle_event(EventHandle event) {
  (event_waiters_ > 0 ? held_events_ : spare_events_).push_back(event);
}

EventHandle CachingAllocator::acquire_event() {
  if (spare_events_.empty()) return device_->create_event();
  EventHandle e = spare_events_.back();
  spare_events_.pop_back();
  return e;
}

void CachingAllocator::throw_out_of_memory(std::size_t requested, Stream stream) {
  ++counters_.oom_errors;
  DeviceMemoryInfo info;
  std::string device_line;
  try {
    info = device_->memory_info();
    device_line = format_bytes(info.free_bytes) + " free of " + format_bytes(info.total_bytes);
  } catch (const Error& e) {
    device_line = std::string("free bytes unknown (") + e.what() + ")";
  }
  const AllocatorStats s = stats_locked();
  std::ostringstream os;
  os << device_name_ << ": out of memory: tried to allocate " << format_bytes(requested) << " ("
     << requested << " bytes) on stream 0x" << std::hex << stream.id << std::dec
     << "; this allocator has " << format_bytes(s.allocated_bytes) << " allocated and "
     << format_bytes(s.reserved_bytes) << " reserved (" << format_bytes(s.pending_bytes)
     << " awaiting stream events); the device has " << device_line
     << ". Outstanding stream events were waited for and cached unused segments released "
        "before giving up; free tensors or use a smaller batch.";
  throw OutOfMemoryError(os.str(), requested, s.allocated_bytes, s.reserved_bytes,
                         info.free_bytes, info.total_bytes);
}

Block* CachingAllocator::live_block(const void* ptr, const char* op) {
  auto it = live_.find(ptr);
  KILN_CHECK(it != live_.end(), "CachingAllocator::", op, " (", device_name_, "): pointer ",
             ptr, " is not a live allocation of this allocator (never allocated here, or "
             "already freed)");
  return it->second;
}

AllocatorStats CachingAllocator::stats_locked() const {
  AllocatorStats s = counters_;
  for (const BlockPool* pool : {small_pool_.get(), large_pool_.get()}) {
    for (const Block* b : pool->free_blocks) {
      s.cached_bytes += b->size;
      ++s.free_blocks;
      s.largest_free_block = std::max(s.largest_free_block, b->size);
    }
  }
  return s;
}

}  // namespace kiln::memory
