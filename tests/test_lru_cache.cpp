// cuda/lru_cache.h, the bounded map behind cuBLASLt's plan and workspace
// caches (Note [cuBLASLt plan cache], cuda/gemm_lt.cpp): host code, so it runs
// in every build. The caches themselves on a GPU: tests/test_cuda_gemm.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/lru_cache.h"

namespace kiln {
namespace {

using cuda::detail::LruCache;

TEST(LruCache, KeepsAtMostItsCapacityForgettingTheLeastRecentlyUsed) {
  LruCache<int, std::string> cache(3);
  EXPECT_EQ(cache.capacity(), 3u);
  EXPECT_FALSE(cache.find(1).has_value());
  cache.insert(1, "one");
  cache.insert(2, "two");
  cache.insert(3, "three");
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find(1).value_or(""), "one");  // 1 is now the most recent; 2 the least
  cache.insert(4, "four");
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_FALSE(cache.find(2).has_value());
  EXPECT_EQ(cache.find(1).value_or(""), "one");
  EXPECT_EQ(cache.find(3).value_or(""), "three");
  EXPECT_EQ(cache.find(4).value_or(""), "four");
  cache.insert(5, "five");  // 1 is the least recent now
  EXPECT_FALSE(cache.find(1).has_value());
  EXPECT_EQ(cache.hits(), 4u);
  EXPECT_EQ(cache.misses(), 3u);
}

TEST(LruCache, InsertKeepsTheFirstValueAndCapacityIsAtLeastOne) {
  LruCache<int, std::string> cache(0);
  EXPECT_EQ(cache.capacity(), 1u);
  EXPECT_EQ(cache.insert(7, "first"), "first");
  EXPECT_EQ(cache.insert(7, "second"), "first");  // another thread got there first
  EXPECT_EQ(cache.find(7).value_or(""), "first");
  EXPECT_EQ(cache.insert(8, "eight"), "eight");
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_FALSE(cache.find(7).has_value());
}

TEST(LruCache, EvictedValuesAreReleasedUnlessACallerStillHoldsThem) {
  LruCache<int, std::shared_ptr<int>> cache(2);
  auto a = std::make_shared<int>(1);
  std::weak_ptr<int> b;
  {
    auto bb = std::make_shared<int>(2);
    b = bb;
    cache.insert(1, a);
    cache.insert(2, bb);
  }
  cache.insert(3, std::make_shared<int>(3));  // evicts 1: `a` keeps it alive
  cache.insert(4, std::make_shared<int>(4));  // evicts 2: nothing holds it
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(*a, 1);
  EXPECT_TRUE(b.expired());
}

TEST(LruCache, ThreadsShareOneValuePerKeyAndTheBoundHolds) {
  LruCache<int, std::shared_ptr<int>> cache(16);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int key = (i * 7 + t) % 40;
        std::shared_ptr<int> v;
        if (auto hit = cache.find(key)) v = *hit;
        else v = cache.insert(key, std::make_shared<int>(key));
        if (!v || *v != key) ++mismatches;
        if (cache.size() > 16) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE(cache.size(), 16u);
  EXPECT_EQ(cache.hits() + cache.misses(), 8u * 2000u);
}

}  // namespace
}  // namespace kiln
