// Tests of the caching allocator (core/memory/) on a simulated device: a
// capacity-limited heap whose events complete only when the test says so (or
// when the allocator waits for them, unless the test holds the streams).
// Also built alone, with only core/memory/*.cpp, as kiln_alloc_tsan_tests
// under ThreadSanitizer (tests/allocator_tsan.cmake).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "core/memory/host_memory.h"
#include "core/memory/pinned_host.h"
#include "tests/alloc_sim_device.h"

namespace kiln::memory {
namespace {

using namespace kiln::memory::testing;  // SimState, SimDevice, make_allocator, ...

TEST(CachingAllocator, RoundsRequestsAndSizesSegments) {
  EXPECT_EQ(round_request(1), 512u);
  EXPECT_EQ(round_request(512), 512u);
  EXPECT_EQ(round_request(513), 1024u);
  EXPECT_EQ(segment_size_for(512), 2 * MiB);
  EXPECT_EQ(segment_size_for(1 * MiB), 2 * MiB);
  EXPECT_EQ(segment_size_for(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB), 10 * MiB);
  EXPECT_EQ(segment_size_for(11 * MiB), 12 * MiB);
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(3 * MiB / 2), "1.50 MiB");
}

TEST(CachingAllocator, SmallRequestsShareOneTwoMiBSegment) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  EXPECT_EQ(alloc->allocate(0, s1), nullptr);
  void* a = alloc->allocate(1, s1);
  void* b = alloc->allocate(1000, s1);
  EXPECT_EQ(alloc->block_size(a), 512u);
  EXPECT_EQ(alloc->block_size(b), 1024u);
  EXPECT_EQ(as_bytes(b), as_bytes(a) + 512);  // split in address order
  const AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.allocated_bytes, 1536u);
  EXPECT_EQ(s.requested_bytes, 1001u);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.small_segments, 1u);
  EXPECT_EQ(s.cached_bytes, 2 * MiB - 1536);
  EXPECT_EQ(sim->reserves, 1);
  alloc->free(a);
  alloc->free(b);
  alloc->free(nullptr);  // no-op
}

// The per-pool counters (memory_summary's "from small/large pool") follow
// every allocate, free, reserve and release, and usage() is stats()'s pair.
TEST(CachingAllocator, CountsBytesPerPool) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* small = alloc->allocate(1000, s1);
  void* large = alloc->allocate(3 * MiB, s1);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.small_pool_allocated_bytes, 1024u);
  EXPECT_EQ(s.large_pool_allocated_bytes, 3 * MiB);
  EXPECT_EQ(s.small_pool_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.large_pool_reserved_bytes, 20 * MiB);
  EXPECT_EQ(alloc->usage(), std::make_pair(s.allocated_bytes, s.reserved_bytes));
  alloc->free(large);
  s = alloc->stats();
  EXPECT_EQ(s.large_pool_allocated_bytes, 0u);
  EXPECT_EQ(s.large_pool_reserved_bytes, 20 * MiB);  // cached
  alloc->empty_cache();
  s = alloc->stats();
  EXPECT_EQ(s.large_pool_reserved_bytes, 0u);
  EXPECT_EQ(s.small_pool_reserved_bytes, 2 * MiB);  // still holds a live block
  alloc->free(small);
  alloc->empty_cache();
  s = alloc->stats();
  EXPECT_EQ(s.small_pool_allocated_bytes + s.small_pool_reserved_bytes, 0u);
  EXPECT_EQ(alloc->usage(), std::make_pair(std::size_t{0}, std::size_t{0}));
}

TEST(CachingAllocator, ReusesFreedBlocksOnlyOnTheSameStream) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s2);
  alloc->free(a);
  void* b = alloc->allocate(4096, s2);
  EXPECT_EQ(b, a);
  alloc->free(b);
  auto outside_a = [&](void* p) {
    return as_bytes(p) < as_bytes(a) || as_bytes(p) >= as_bytes(a) + 2 * MiB;
  };
  void* c = alloc->allocate(4096, s1);  // s2's cached segment is not s1's...
  void* d = alloc->allocate(4096, s3);  // ...nor s3's
  EXPECT_TRUE(outside_a(c));
  EXPECT_TRUE(outside_a(d));
  EXPECT_EQ(sim->reserves, 3);
  alloc->free(c);
  alloc->free(d);
}

TEST(CachingAllocator, BestFitTakesTheSmallestBlockThatFits) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* x1 = alloc->allocate(512, s1);
  void* hole4k = alloc->allocate(4096, s1);
  void* x2 = alloc->allocate(512, s1);
  void* hole1k = alloc->allocate(1024, s1);
  void* x3 = alloc->allocate(512, s1);
  alloc->free(hole4k);
  alloc->free(hole1k);
  EXPECT_EQ(alloc->allocate(1000, s1), hole1k);
  EXPECT_EQ(alloc->allocate(3000, s1), hole4k);
  for (void* p : {x1, x2, x3, hole1k, hole4k}) alloc->free(p);
  EXPECT_EQ(alloc->stats().free_blocks, 1u);
}

TEST(CachingAllocator, SplitsAndCoalescesFreeNeighbours) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(512, s1);
  void* b = alloc->allocate(512, s1);
  void* c = alloc->allocate(512, s1);
  EXPECT_EQ(alloc->stats().free_blocks, 1u);  // the tail of the segment
  alloc->free(b);
  EXPECT_EQ(alloc->stats().free_blocks, 2u);
  alloc->free(a);  // merges with b
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.free_blocks, 2u);
  EXPECT_EQ(s.largest_free_block, 2 * MiB - 1536);
  void* ab = alloc->allocate(1024, s1);
  EXPECT_EQ(ab, a);
  alloc->free(ab);
  alloc->free(c);  // merges with both neighbours: the segment is one block again
  s = alloc->stats();
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.largest_free_block, 2 * MiB);
  EXPECT_EQ(s.cached_bytes, 2 * MiB);
  EXPECT_EQ(s.segments, 1u);
}

TEST(CachingAllocator, LargePoolSegmentsAndUnsplitRemainders) {
  auto sim = sim_with(256 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(3 * MiB, s1);
  void* b = alloc->allocate(5 * MiB, s1);
  EXPECT_EQ(alloc->stats().reserved_bytes, 20 * MiB);  // one medium segment holds both
  EXPECT_EQ(alloc->stats().large_segments, 1u);
  EXPECT_EQ(as_bytes(b), as_bytes(a) + 3 * MiB);
  alloc->free(a);
  alloc->free(b);
  // 19.5 MiB fits the cached 20 MiB block; the 0.5 MiB rest is too small to split.
  void* c = alloc->allocate(19 * MiB + 512 * KiB, s1);
  EXPECT_EQ(c, a);
  EXPECT_EQ(alloc->block_size(c), 20 * MiB);
  EXPECT_EQ(alloc->stats().allocated_bytes, 20 * MiB);
  void* d = alloc->allocate(12 * MiB + 1, s2);  // own segment, rounded to 2 MiB
  EXPECT_EQ(alloc->stats().reserved_bytes, 34 * MiB);
  void* small = alloc->allocate(4096, s1);  // small requests never use the large pool
  EXPECT_EQ(alloc->stats().small_segments, 1u);
  for (void* p : {c, d, small}) alloc->free(p);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilEveryEventCompletes) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s1);
  alloc->record_stream(a, s2);
  alloc->record_stream(a, s3);
  alloc->record_stream(a, s2);  // once per stream
  alloc->record_stream(a, s1);  // its own stream: nothing to wait for
  alloc->free(a);
  EXPECT_EQ(sim->incomplete_events(), 2);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.pending_blocks, 1u);
  EXPECT_EQ(s.pending_bytes, 4096u);
  void* b = alloc->allocate(4096, s1);
  EXPECT_NE(b, a);
  alloc->free(b);
  sim->complete(s2);
  void* c = alloc->allocate(4096, s1);
  EXPECT_NE(c, a);  // s3 still uses it
  alloc->free(c);
  sim->complete(s3);
  void* d = alloc->allocate(4096, s1);
  EXPECT_EQ(d, a);
  EXPECT_EQ(alloc->stats().pending_blocks, 0u);
  // Events are recycled, not created anew.
  alloc->record_stream(d, s2);
  alloc->free(d);
  EXPECT_EQ(sim->events_created, 2);
}

TEST(CachingAllocator, UnknownOrFreedPointersAreErrors) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s1);
  int not_ours = 0;
  EXPECT_THROW(alloc->free(&not_ours), Error);
  alloc->free(a);
  try {
    alloc->free(a);
    FAIL() << "double free was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a live allocation"), std::string::npos) << e.what();
  }
  EXPECT_THROW(alloc->record_stream(a, s2), Error);
  EXPECT_THROW(alloc->block_size(a), Error);
}

TEST(CachingAllocator, OutOfMemoryReleasesCachedSegmentsAndRetries) {
  auto sim = sim_with(22 * MiB);
  auto alloc = make_allocator(sim);
  alloc->free(alloc->allocate(4096, s1));
  alloc->free(alloc->allocate(4096, s2));
  EXPECT_EQ(alloc->stats().reserved_bytes, 4 * MiB);
  void* big = alloc->allocate(3 * MiB, s1);  // needs 20 MiB: only after releasing the cache
  const AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.cache_flushes, 1u);
  EXPECT_EQ(s.device_releases, 2u);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.reserved_bytes, 20 * MiB);
  EXPECT_EQ(s.oom_errors, 0u);
  alloc->free(big);
}

TEST(CachingAllocator, OutOfMemoryErrorReportsBytesAndAllocatorStaysUsable) {
  auto sim = sim_with(22 * MiB);
  auto alloc = make_allocator(sim);
  void* live = alloc->allocate(1 * MiB, s1);
  try {
    alloc->allocate(30 * MiB, s1);
    FAIL() << "30 MiB fit in a 22 MiB device";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested(), 30 * MiB);
    EXPECT_EQ(e.allocated(), 1 * MiB);
    EXPECT_EQ(e.reserved(), 2 * MiB);
    EXPECT_EQ(e.device_free(), 20 * MiB);
    EXPECT_EQ(e.device_total(), 22 * MiB);
    for (const char* part : {"sim: out of memory", "tried to allocate 30.00 MiB (31457280 bytes)",
                             "1.00 MiB allocated", "2.00 MiB reserved",
                             "20.00 MiB free of 22.00 MiB"})
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  }
  EXPECT_THROW(alloc->allocate(kMaxRequest + 1, s1), OutOfMemoryError);
  EXPECT_THROW(alloc->allocate(64 * MiB, s1), Error);  // also a kiln::Error
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.oom_errors, 3u);
  EXPECT_EQ(s.allocated_bytes, 1 * MiB);
  void* after = alloc->allocate(18 * MiB, s1);  // the rest still works
  EXPECT_NE(after, nullptr);
  alloc->free(after);
  alloc->free(live);
}

TEST(CachingAllocator, StatisticsTrackPeaksCountsAndFragmentation) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(1 * MiB, s1);
  void* b = alloc->allocate(512 * KiB, s1);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.allocated_bytes, 1536 * KiB);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.25);
  alloc->free(a);
  s = alloc->stats();
  EXPECT_EQ(s.allocated_bytes, 512 * KiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1536 * KiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.75);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.active_blocks, 1u);
  alloc->reset_peak_stats();
  EXPECT_EQ(alloc->stats().peak_allocated_bytes, 512 * KiB);
  alloc->free(b);
  EXPECT_DOUBLE_EQ(alloc->stats().fragmentation(), 1.0);
  alloc->empty_cache();
  EXPECT_DOUBLE_EQ(alloc->stats().fragmentation(), 0.0);
  EXPECT_EQ(alloc->stats().peak_reserved_bytes, 2 * MiB);
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyWholeFreeSegments) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s1);  // segment A stays in use
  void* b = alloc->allocate(4096, s2);  // segment B becomes free
  void* c = alloc->allocate(4096, s3);  // segment C waits on an event
  alloc->record_stream(c, s1);
  alloc->free(c);
  alloc->free(b);
  alloc->empty_cache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 4 * MiB);
  sim->complete_all();
  alloc->empty_cache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 2 * MiB);
  alloc->free(a);
  alloc->empty_cache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  EXPECT_EQ(sim->used_bytes(), 0u);
}

TEST(CachingAllocator, CachingOffGoesStraightToTheDevice) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim, CachingAllocator::Caching::Disabled);
  EXPECT_FALSE(alloc->caching_enabled());
  void* a = alloc->allocate(1000, s1);
  void* b = alloc->allocate(1000, s1);
  EXPECT_EQ(sim->reserves, 2);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.reserved_bytes, 2048u);
  EXPECT_EQ(s.allocated_bytes, 2048u);
  alloc->free(a);
  EXPECT_EQ(sim->releases, 1);
  EXPECT_EQ(sim->used_bytes(), 1024u);
  alloc->record_stream(b, s2);
  alloc->free(b);
  EXPECT_EQ(sim->used_bytes(), 1024u);  // waits for s2 even without caching
  sim->complete(s2);
  alloc->empty_cache();
  EXPECT_EQ(sim->used_bytes(), 0u);
  EXPECT_NE(alloc->memory_summary().find("caching off"), std::string::npos);
}

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CachingAllocator, EnvironmentVariableSwitchesCaching) {
  auto sim = sim_with(64 * MiB);
  auto from_env = [&] {
    return CachingAllocator(std::make_unique<SimDevice>(sim)).caching_enabled();
  };
  {
    ScopedEnv env("KILN_CACHING_ALLOCATOR", "0");
    EXPECT_FALSE(from_env());
    // An explicit option wins over the environment.
    EXPECT_TRUE(make_allocator(sim, CachingAllocator::Caching::Enabled)->caching_enabled());
  }
  {
    ScopedEnv env("KILN_CACHING_ALLOCATOR", "OFF");
    EXPECT_FALSE(from_env());
  }
  {
    ScopedEnv env("KILN_CACHING_ALLOCATOR", "1");
    EXPECT_TRUE(from_env());
  }
  {
    ScopedEnv env("KILN_CACHING_ALLOCATOR", "maybe");
    try {
      from_env();
      FAIL() << "KILN_CACHING_ALLOCATOR=maybe was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("KILN_CACHING_ALLOCATOR='maybe'"), std::string::npos);
    }
  }
}

TEST(CachingAllocator, MemorySummaryIsReadable) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(1 * MiB, s1);
  const std::string m = alloc->memory_summary();
  for (const char* part : {"Caching allocator on sim (caching on", "allocated:     1.00 MiB in 1",
                           "reserved:      2.00 MiB in 1 segments: 1 small, 0 large",
                           "cached free:   1.00 MiB", "fragmentation: 50.0%",
                           "1 allocations, 0 frees"})
    EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in:\n" << m;
  alloc->free(a);
}

TEST(CachingAllocator, DestructorReleasesSegmentsAndEvents) {
  auto sim = sim_with(64 * MiB);
  {
    auto alloc = make_allocator(sim);
    void* live = alloc->allocate(4096, s1);
    void* waiting = alloc->allocate(3 * MiB, s1);
    alloc->record_stream(waiting, s2);
    alloc->free(waiting);
    EXPECT_NE(live, nullptr);
  }
  EXPECT_EQ(sim->used_bytes(), 0u);
  EXPECT_EQ(sim->live_events, 0);
}

// Several threads allocate, touch, record streams on and free blocks at once;
// a shared interval map proves no two live blocks ever overlap. With a small
// device (tight = true) allocations run out of memory now and then, so the
// retry's unlocked waits and releases race with the other threads; an
// allocation that still fails is skipped.
void run_threads(CachingAllocator::Caching caching, bool tight = false) {
  auto sim = sim_with(tight ? 48 * MiB : 1024 * MiB);
  auto alloc = make_allocator(sim, caching);
  constexpr int kThreads = 8, kIterations = 2000;
  std::mutex live_mu;
  std::map<std::uintptr_t, std::size_t> live;  // address -> requested bytes
  std::atomic<int> overlaps{0}, corruptions{0}, unexpected_ooms{0};

  auto worker = [&](int t) {
    std::mt19937 rng(1234 + t);
    const Stream mine{static_cast<std::uintptr_t>(t + 1)};
    std::vector<std::pair<char*, std::size_t>> held;
    auto release_one = [&] {
      auto [p, n] = held.back();
      held.pop_back();
      const std::size_t touched = std::min<std::size_t>(n, 256);
      for (std::size_t i = 0; i < touched; ++i)
        if (p[i] != static_cast<char>(t)) ++corruptions;
      {
        std::lock_guard<std::mutex> lock(live_mu);
        live.erase(reinterpret_cast<std::uintptr_t>(p));
      }
      if (rng() % 4 == 0) alloc->record_stream(p, Stream{rng() % kThreads + 1});
      alloc->free(p);
    };
    for (int it = 0; it < kIterations; ++it) {
      if (held.size() >= 16 || (!held.empty() && rng() % 2 == 0)) {
        std::swap(held[rng() % held.size()], held.back());
        release_one();
        continue;
      }
      const std::size_t n = rng() % 16 == 0 ? 1 * MiB + rng() % (12 * MiB) : 1 + rng() % (64 * KiB);
      char* p = nullptr;
      try {
        p = static_cast<char*>(alloc->allocate(n, mine));
      } catch (const OutOfMemoryError&) {
        if (!tight) ++unexpected_ooms;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(live_mu);
        const auto addr = reinterpret_cast<std::uintptr_t>(p);
        auto next = live.lower_bound(addr);
        if (next != live.end() && next->first < addr + n) ++overlaps;
        if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > addr)
          ++overlaps;
        live.emplace(addr, n);
      }
      std::memset(p, t, std::min<std::size_t>(n, 256));
      held.emplace_back(p, n);
      if (it % 97 == 0) sim->complete_all();
    }
    while (!held.empty()) release_one();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(corruptions.load(), 0);
  EXPECT_EQ(unexpected_ooms.load(), 0);
  sim->complete_all();
  alloc->empty_cache();
  const AllocatorStats s = alloc->stats();
  if (tight) {
    EXPECT_GT(s.alloc_retries, 0u) << "the device never ran out: the retry went untested";
    EXPECT_GT(s.event_syncs, 0u);
  }
  EXPECT_EQ(s.device_errors, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.pending_blocks, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  EXPECT_EQ(sim->used_bytes(), 0u);
}

TEST(CachingAllocator, ManyThreadsNeverShareLiveBlocks) {
  run_threads(CachingAllocator::Caching::Enabled);
}

TEST(CachingAllocator, ManyThreadsWithCachingOff) { run_threads(CachingAllocator::Caching::Disabled); }

TEST(CachingAllocator, ManyThreadsOnAFullDevice) {
  run_threads(CachingAllocator::Caching::Enabled, /*tight=*/true);
}

TEST(CachingAllocator, ManyThreadsOnAFullDeviceWithCachingOff) {
  run_threads(CachingAllocator::Caching::Disabled, /*tight=*/true);
}

TEST(PinnedHostAllocator, ReuseWaitsForTheCopyStreamsEvent) {
  auto sim = sim_with(64 * MiB);
  PinnedHostAllocator pinned(std::make_unique<SimDevice>(sim),
                             CachingAllocator::Caching::Enabled);
  void* a = pinned.allocate(4096);
  pinned.free(a);
  void* b = pinned.allocate(4096);
  EXPECT_EQ(b, a);  // no copy used it: reusable at once
  pinned.record_stream(b, kDefaultStream);  // host mode: the default stream counts too
  pinned.free(b);
  void* c = pinned.allocate(4096);
  EXPECT_NE(c, a);
  EXPECT_EQ(sim->incomplete_events(), 1);
  sim->complete(kDefaultStream);
  void* d = pinned.allocate(4096);
  EXPECT_EQ(d, a);
  EXPECT_EQ(pinned.stats().segments, 1u);
  EXPECT_NE(pinned.memory_summary().find("host mode"), std::string::npos);
  pinned.free(c);
  pinned.free(d);
  pinned.empty_cache();
  EXPECT_EQ(sim->used_bytes(), 0u);
}

TEST(HostHeapMemory, BacksACachingAllocator) {
  auto heap = std::make_unique<HostHeapMemory>(8 * MiB);
  HostHeapMemory* raw = heap.get();
  PinnedHostAllocator host(std::move(heap), CachingAllocator::Caching::Enabled);
  void* a = host.allocate(100 * KiB);
  std::memset(a, 7, 100 * KiB);
  host.record_stream(a, s1);
  host.free(a);
  EXPECT_EQ(host.allocate(100 * KiB), a);  // host events complete at once
  EXPECT_EQ(raw->used_bytes(), 2 * MiB);
  EXPECT_THROW(host.allocate(7 * MiB), OutOfMemoryError);
  host.free(a);
  host.empty_cache();
  EXPECT_EQ(raw->used_bytes(), 0u);
}

}  // namespace
}  // namespace kiln::memory
