// Tests of the caching allocator on the simulated device (tests/alloc_sim_device.h)
// when the device fails or runs out: device errors in free() and allocate()
// (Note [free() never throws on device errors]) and the out-of-memory retry
// (Note [Out-of-memory retry]), with the allocator's mutex free during waits
// and releases. Also part of kiln_alloc_tsan_tests (tests/allocator_tsan.cmake).
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

using namespace kiln::memory::testing;

TEST(CachingAllocator, DeviceFailuresPropagateAndLeaveStateIntact) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  sim->fail_next_reserve = true;
  try {
    alloc->allocate(4096, s1);
    FAIL() << "the device failure was swallowed";
  } catch (const OutOfMemoryError&) {
    FAIL() << "a device failure is not out-of-memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("simulated device failure"), std::string::npos);
  }
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  alloc->free(alloc->allocate(4096, s1));
}

// Runs `f` on a thread of its own, joined when the Probe goes. Used to show
// that the allocator's mutex is free at some point: f calls the allocator,
// and would block there while another thread holds the mutex.
class Probe {
 public:
  explicit Probe(std::function<void()> f)
      : thread_([this, f = std::move(f)] {
          f();
          std::lock_guard<std::mutex> lock(mu_);
          done_ = true;
          cv_.notify_all();
        }) {}
  ~Probe() { thread_.join(); }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  bool finished_within(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

constexpr std::chrono::milliseconds kProbeTimeout{2000};

// Note [free() never throws on device errors]: a failing event record in
// free() (a CUDA error in a tensor's destructor) is reported and survived; the
// block, which the other stream may still use, never comes back.
TEST(CachingAllocator, FreeSurvivesAFailedEventRecordAndQuarantinesTheBlock) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s1);
  alloc->record_stream(a, s2);
  alloc->record_stream(a, s3);
  sim->fail_records = 1;  // s2's record fails; s3's is not attempted or succeeds
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(alloc->free(a));
  const std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(report.find("simulated record failure"), std::string::npos) << report;
  EXPECT_NE(report.find("sim"), std::string::npos) << report;
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.device_errors, 1u);
  EXPECT_EQ(s.quarantined_blocks, 1u);
  EXPECT_EQ(s.quarantined_bytes, 4096u);
  EXPECT_EQ(s.pending_blocks, 0u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.frees, 1u);
  sim->complete_all();
  alloc->empty_cache();  // processes every event; the segment is not whole-free
  s = alloc->stats();
  EXPECT_EQ(s.quarantined_blocks, 1u);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.cached_bytes, 2 * MiB - 4096);
  void* b = alloc->allocate(4096, s1);
  EXPECT_NE(b, a) << "a block whose stream events failed was reused";
  // A second failure is counted, not printed again.
  alloc->record_stream(b, s2);
  sim->fail_records = 1;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(alloc->free(b));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  s = alloc->stats();
  EXPECT_EQ(s.device_errors, 2u);
  EXPECT_EQ(s.quarantined_blocks, 2u);
  EXPECT_EQ(s.quarantined_bytes, 8192u);
  const std::string summary = alloc->memory_summary();
  EXPECT_NE(summary.find("quarantined:   8.00 KiB in 2"), std::string::npos) << summary;
  EXPECT_NE(summary.find("2 device errors"), std::string::npos) << summary;
  alloc.reset();  // quarantined blocks and failed events go at the end
  EXPECT_EQ(sim->used_bytes(), 0u);
  EXPECT_EQ(sim->live_events, 0);
}

// An event query that fails (in allocate()) quarantines its block too, and
// the allocation goes on.
TEST(CachingAllocator, AFailedEventQueryQuarantinesTheBlockAndAllocationGoesOn) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim);
  void* a = alloc->allocate(4096, s1);
  alloc->record_stream(a, s2);
  alloc->free(a);
  sim->fail_queries = 1;
  void* b = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(b = alloc->allocate(4096, s1));
  const std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(report.find("simulated query failure"), std::string::npos) << report;
  EXPECT_NE(b, nullptr);
  EXPECT_NE(b, a);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.device_errors, 1u);
  EXPECT_EQ(s.quarantined_blocks, 1u);
  EXPECT_EQ(s.pending_blocks, 0u);
  sim->complete_all();
  void* c = alloc->allocate(4096, s1);
  EXPECT_NE(c, a) << "a block whose event query failed was reused";
  alloc->free(b);
  alloc->free(c);
  alloc->empty_cache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 2 * MiB);  // held by the quarantined block
}

// Caching off, free() gives the block back to the device: a failure there is
// reported, not thrown.
TEST(CachingAllocator, FreeSurvivesAFailedRelease) {
  auto sim = sim_with(64 * MiB);
  auto alloc = make_allocator(sim, CachingAllocator::Caching::Disabled);
  void* a = alloc->allocate(4096, s1);
  sim->fail_releases = 1;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(alloc->free(a));
  const std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(report.find("simulated release failure"), std::string::npos) << report;
  const AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.device_errors, 1u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
}

// Note [Out-of-memory retry], step 1: blocks waiting only for other streams'
// events are waited for and reused before anything is given back to the device.
TEST(CachingAllocator, OutOfMemoryWaitsForPendingEventsAndReusesTheirBlocks) {
  auto sim = sim_with(14 * MiB);
  auto alloc = make_allocator(sim);
  alloc->free(alloc->allocate(4096, s1));  // a cached small segment, whole-free
  void* a = alloc->allocate(12 * MiB, s1);  // the rest of the device
  alloc->record_stream(a, s2);
  alloc->free(a);
  EXPECT_EQ(alloc->stats().pending_blocks, 1u);
  void* b = nullptr;
  EXPECT_NO_THROW(b = alloc->allocate(12 * MiB, s1));
  EXPECT_EQ(b, a);
  const AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.oom_errors, 0u);
  EXPECT_EQ(s.alloc_retries, 1u);
  EXPECT_EQ(s.event_syncs, 1u);
  EXPECT_EQ(s.cache_flushes, 0u);  // step 2 was not needed...
  EXPECT_EQ(s.device_releases, 0u);
  EXPECT_EQ(sim->releases, 0);  // ...so the cached segment was kept
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.pending_blocks, 0u);
  EXPECT_EQ(sim->syncs_done, 1);
  const std::string summary = alloc->memory_summary();
  EXPECT_NE(summary.find("1 out-of-memory retries: 1 waits for stream events, 0 cache flushes"),
            std::string::npos)
      << summary;
  alloc->free(b);
}

TEST(CachingAllocator, OutOfMemoryWaitsForPendingEventsWithCachingOff) {
  auto sim = sim_with(12 * MiB);
  auto alloc = make_allocator(sim, CachingAllocator::Caching::Disabled);
  void* a = alloc->allocate(12 * MiB, s1);
  alloc->record_stream(a, s2);
  alloc->free(a);
  EXPECT_EQ(sim->used_bytes(), 12 * MiB);  // still waiting for s2
  void* b = nullptr;
  EXPECT_NO_THROW(b = alloc->allocate(12 * MiB, s1));
  EXPECT_NE(b, nullptr);
  const AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.oom_errors, 0u);
  EXPECT_EQ(s.event_syncs, 1u);
  EXPECT_EQ(sim->releases, 1);  // the waited-for block went back, then b came
  alloc->free(b);
}

// The waits of step 1 run with the mutex unlocked: while one thread waits for
// a stream (which could be an NCCL stream stuck on a dead peer), others can
// use the allocator. Events completed meanwhile are not recorded again before
// the wait is over, as the waiting thread may still name them.
TEST(CachingAllocator, OutOfMemoryWaitsForEventsWithTheMutexUnlocked) {
  auto sim = sim_with(14 * MiB);
  auto alloc = make_allocator(sim);
  void* x = alloc->allocate(4096, s1);  // a small segment, waiting for s3
  alloc->record_stream(x, s3);
  alloc->free(x);
  void* a = alloc->allocate(12 * MiB, s1);  // the rest of the device, waiting for s2
  alloc->record_stream(a, s2);
  alloc->free(a);
  EXPECT_EQ(sim->events_created_count(), 2);
  sim->hold_streams = true;

  std::atomic<bool> finished{false};
  void* got = nullptr;
  std::string error;
  std::thread waiter([&] {
    try {
      got = alloc->allocate(12 * MiB, s1);
    } catch (const std::exception& e) {
      error = e.what();
    }
    finished = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sim->syncs_started_count() == 0 && !finished && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool waiting = sim->syncs_started_count() > 0 && !finished;
  EXPECT_TRUE(waiting) << "the allocation did not wait for the pending events: " << error;
  bool unlocked = false;
  if (!waiting) sim->complete_all();  // whatever it waits for, let it go
  if (waiting) {
    Probe probe([&] { (void)alloc->stats(); });
    unlocked = probe.finished_within(kProbeTimeout);
    EXPECT_TRUE(unlocked) << "the mutex is held while waiting for an event";
    if (!unlocked) sim->complete_all();  // let the waiter (and the probe) go
  }
  if (unlocked) {
    // s3 finishes: x's event completes and is processed by this thread's
    // allocation while the waiter still waits for s2.
    sim->complete(s3);
    void* y = alloc->allocate(4096, s1);
    EXPECT_EQ(y, x);
    alloc->record_stream(y, s3);
    alloc->free(y);
    EXPECT_EQ(sim->events_created_count(), 3) << "an event was recorded again during a wait";
    EXPECT_FALSE(finished);
    sim->complete(s2);
  }
  waiter.join();
  if (!unlocked) return;
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, a);
  AllocatorStats s = alloc->stats();
  EXPECT_EQ(s.oom_errors, 0u);
  EXPECT_EQ(s.event_syncs, 1u);
  EXPECT_EQ(s.device_releases, 0u);
  // After the wait the held events are recycled again.
  sim->complete_all();
  void* z = alloc->allocate(4096, s1);
  alloc->record_stream(z, s2);
  alloc->free(z);
  EXPECT_EQ(sim->events_created_count(), 3);
  alloc->free(got);
}

// Every release to the device (the out-of-memory retry's, empty_cache()'s,
// and a caching-off free()'s) runs with the mutex unlocked: cudaFree waits
// for the whole device and can hang behind a stuck kernel.
TEST(CachingAllocator, DeviceReleasesRunWithTheMutexUnlocked) {
  auto sim = sim_with(22 * MiB);
  auto alloc = make_allocator(sim);
  auto plain = make_allocator(sim, CachingAllocator::Caching::Disabled);
  std::vector<std::unique_ptr<Probe>> probes;  // destroyed (joined) before the allocators
  std::vector<bool> unlocked;
  CachingAllocator* current = nullptr;
  struct ClearHook {  // first to go, however the test ends
    SimState& sim;
    ~ClearHook() { sim.on_release = nullptr; }
  } clear_hook{*sim};
  sim->on_release = [&] {
    CachingAllocator* target = current;
    probes.push_back(std::make_unique<Probe>([target] { (void)target->stats(); }));
    unlocked.push_back(probes.back()->finished_within(kProbeTimeout));
  };
  current = alloc.get();
  alloc->free(alloc->allocate(4096, s1));
  alloc->free(alloc->allocate(4096, s2));
  void* big = alloc->allocate(3 * MiB, s1);  // out of memory: releases both cached segments
  EXPECT_EQ(alloc->stats().cache_flushes, 1u);
  ASSERT_EQ(unlocked.size(), 2u);
  EXPECT_TRUE(unlocked[0] && unlocked[1]) << "out-of-memory retry: release under the mutex";
  alloc->free(big);
  alloc->empty_cache();
  ASSERT_EQ(unlocked.size(), 3u);
  EXPECT_TRUE(unlocked[2]) << "empty_cache: release under the mutex";
  current = plain.get();
  plain->free(plain->allocate(4096, s1));
  ASSERT_EQ(unlocked.size(), 4u);
  EXPECT_TRUE(unlocked[3]) << "free with caching off: release under the mutex";
}

}  // namespace
}  // namespace kiln::memory
