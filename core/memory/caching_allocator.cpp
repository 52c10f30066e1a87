// CachingAllocator: see Note [Caching allocator] in caching_allocator.h.
#include "core/memory/caching_allocator.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>

namespace kiln::memory {
namespace detail {

// One block of a segment. Invariants: size and (ptr - segment base) are
// multiples of kMinBlockSize; prev/next are the address-order neighbours in
// the same segment (prev->ptr + prev->size == ptr); all blocks of a segment
// share its stream and pool; a block is in its pool's free set iff
// !allocated && pending_events == 0; the first block of a segment is never
// deleted while the segment lives (merges keep the lower block).
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

bool is_free(const Block* b) { return !b->allocated && b->pending_events == 0; }

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
  for (EventHandle e : spare_events_) {
    try {
      device_->destroy_event(e);
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
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > kMaxRequest) throw_out_of_memory(bytes, stream);
  const std::size_t size = round_request(bytes);
  process_events();
  BlockPool& pool = size <= kSmallRequestLimit ? *small_pool_ : *large_pool_;

  Block* block = caching_ ? take_free_block(pool, owner, size) : nullptr;
  if (block == nullptr) {
    const std::size_t segment = caching_ ? segment_size_for(size) : size;
    block = reserve_segment(pool, owner, segment);
    if (block == nullptr && caching_) {
      ++counters_.cache_flushes;
      release_cached_segments();
      block = reserve_segment(pool, owner, segment);
    }
    if (block == nullptr) throw_out_of_memory(bytes, stream);
  }
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
  c.peak_allocated_bytes = std::max(c.peak_allocated_bytes, c.allocated_bytes);
  c.requested_bytes += bytes;
  ++c.active_blocks;
  ++c.allocations;
  return block->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = live_block(ptr, "free");
  live_.erase(ptr);
  block->allocated = false;
  counters_.allocated_bytes -= block->size;
  counters_.requested_bytes -= block->requested;
  block->requested = 0;
  --counters_.active_blocks;
  ++counters_.frees;
  if (block->used_streams.empty()) {
    return_block(block);
    return;
  }
  std::vector<Stream> streams;
  streams.swap(block->used_streams);
  counters_.pending_bytes += block->size;
  ++counters_.pending_blocks;
  // One guard count held while recording: if a record fails the block keeps
  // it forever, staying out of reuse (its users' progress is unknown).
  block->pending_events = 1;
  for (Stream s : streams) {
    EventHandle event = acquire_event();
    try {
      device_->record_event(event, s);
    } catch (...) {
      spare_events_.push_back(event);
      throw;
    }
    pending_.push_back({event, block});
    ++block->pending_events;
  }
  --block->pending_events;
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
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  release_cached_segments();
}

AllocatorStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_locked();
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
     << "  fragmentation: " << frag << " of reserved bytes back no live allocation\n"
     << "  counts:        " << s.allocations << " allocations, " << s.frees << " frees, "
     << s.device_reserves << " device reserves, " << s.device_releases << " device releases, "
     << s.cache_flushes << " cache flushes, " << s.oom_errors << " out-of-memory errors\n";
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

// `block` is a whole segment, free and in no pool. Bookkeeping is dropped
// before the device call so a failing release leaves consistent state.
void CachingAllocator::release_segment(Block* block) {
  void* ptr = block->ptr;
  const std::size_t size = block->size;
  segments_.erase(ptr);
  AllocatorStats& c = counters_;
  c.reserved_bytes -= size;
  --c.segments;
  --(block->pool->small ? c.small_segments : c.large_segments);
  ++c.device_releases;
  delete block;
  device_->release(ptr, size);
}

void CachingAllocator::release_cached_segments() {
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
    if (!device_->event_completed(p.event)) {
      ++i;
      continue;
    }
    pending_[i] = pending_.back();
    pending_.pop_back();
    spare_events_.push_back(p.event);
    if (--p.block->pending_events == 0) {
      counters_.pending_bytes -= p.block->size;
      --counters_.pending_blocks;
      return_block(p.block);
    }
  }
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
     << ". Cached unused segments were released before giving up; free tensors or use a "
        "smaller batch.";
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
