// The simulated device of the caching-allocator tests (test_caching_allocator.cpp,
// test_caching_allocator_failures.cpp): a capacity-limited heap whose events
// complete only when the test says so (or when the allocator waits for them,
// unless the test holds the streams), with failures to inject.
#pragma once

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

namespace kiln::memory::testing {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;
constexpr Stream s1{1}, s2{2}, s3{3};

// State of the simulated device, shared by the test and the SimDevice the
// allocator owns (so it outlives the allocator and can be checked after).
struct SimState {
  std::mutex mu;
  std::size_t capacity = 0;
  std::size_t used = 0;  // bytes of live reserved regions, <= capacity
  int reserves = 0, releases = 0, events_created = 0, live_events = 0;
  bool fail_next_reserve = false;  // next reserve() throws a kiln::Error
  // The next so many calls of record_event / event_completed / release throw
  // a kiln::Error (a failing device); release then keeps the region.
  int fail_records = 0, fail_queries = 0, fail_releases = 0;
  // synchronize_event(): false - the stream runs up to the event at once (the
  // device finishing while the host waits); true - it blocks until the test
  // completes the event's stream (from another thread).
  bool hold_streams = false;
  int syncs_started = 0, syncs_done = 0;
  // Called at the start of every release(), without `mu`.
  std::function<void()> on_release;
  std::condition_variable cv;  // notified when events complete
  struct Event {
    Stream stream;
    bool done = true;  // an event never recorded counts as complete (as in CUDA)
  };
  std::map<std::uintptr_t, Event> events;
  std::uintptr_t next_event = 1;
  // Regions a failed release() kept (the device "still holds" them): freed
  // with the state, after the allocator, so LeakSanitizer sees no leak.
  std::vector<void*> kept;
  SimState() = default;
  SimState(const SimState&) = delete;
  SimState& operator=(const SimState&) = delete;
  ~SimState() {
    for (void* p : kept) std::free(p);
  }

  // Completes every event recorded on `s` so far.
  void complete(Stream s) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, e] : events)
      if (e.stream == s) e.done = true;
    cv.notify_all();
  }
  void complete_all() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, e] : events) e.done = true;
    cv.notify_all();
  }
  int syncs_started_count() {
    std::lock_guard<std::mutex> lock(mu);
    return syncs_started;
  }
  int events_created_count() {
    std::lock_guard<std::mutex> lock(mu);
    return events_created;
  }
  int incomplete_events() {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (auto& [id, e] : events) n += e.done ? 0 : 1;
    return n;
  }
  std::size_t used_bytes() {
    std::lock_guard<std::mutex> lock(mu);
    return used;
  }
};

class SimDevice final : public DeviceMemory {
 public:
  explicit SimDevice(std::shared_ptr<SimState> state) : s_(std::move(state)) {}
  std::string name() const override { return "sim"; }
  void* reserve(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->fail_next_reserve) {
      s_->fail_next_reserve = false;
      fail("simulated device failure");
    }
    if (bytes > s_->capacity - s_->used) return nullptr;
    void* p = std::aligned_alloc(512, bytes);
    if (p == nullptr) return nullptr;
    s_->used += bytes;
    ++s_->reserves;
    return p;
  }
  void release(void* ptr, std::size_t bytes) override {
    if (s_->on_release) s_->on_release();
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->fail_releases > 0) {
      --s_->fail_releases;
      s_->kept.push_back(ptr);
      fail("simulated release failure");
    }
    std::erase(s_->kept, ptr);  // released after all: not the state's to free
    std::free(ptr);
    s_->used -= bytes;
    ++s_->releases;
  }
  EventHandle create_event() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    const std::uintptr_t id = s_->next_event++;
    s_->events[id] = {};
    ++s_->events_created;
    ++s_->live_events;
    return reinterpret_cast<EventHandle>(id);
  }
  void destroy_event(EventHandle e) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->events.erase(reinterpret_cast<std::uintptr_t>(e));
    --s_->live_events;
  }
  void record_event(EventHandle e, Stream stream) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->fail_records > 0) {
      --s_->fail_records;
      fail("simulated record failure");
    }
    s_->events.at(reinterpret_cast<std::uintptr_t>(e)) = {stream, false};
  }
  bool event_completed(EventHandle e) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->fail_queries > 0) {
      --s_->fail_queries;
      fail("simulated query failure");
    }
    return s_->events.at(reinterpret_cast<std::uintptr_t>(e)).done;
  }
  void synchronize_event(EventHandle e) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    ++s_->syncs_started;
    const std::uintptr_t id = reinterpret_cast<std::uintptr_t>(e);
    if (s_->hold_streams)
      s_->cv.wait(lock, [&] { return s_->events.at(id).done; });
    else
      s_->events.at(id).done = true;
    ++s_->syncs_done;
  }
  DeviceMemoryInfo memory_info() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return {s_->capacity - s_->used, s_->capacity};
  }

 private:
  std::shared_ptr<SimState> s_;
};

inline std::shared_ptr<SimState> sim_with(std::size_t capacity) {
  auto s = std::make_shared<SimState>();
  s->capacity = capacity;
  return s;
}

inline std::unique_ptr<CachingAllocator> make_allocator(
    const std::shared_ptr<SimState>& sim,
    CachingAllocator::Caching caching = CachingAllocator::Caching::Enabled) {
  CachingAllocator::Options options;
  options.caching = caching;
  return std::make_unique<CachingAllocator>(std::make_unique<SimDevice>(sim), options);
}

inline char* as_bytes(void* p) { return static_cast<char*>(p); }

}  // namespace kiln::memory::testing
