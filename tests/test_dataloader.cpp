// Samplers and the DataLoader: order, determinism across worker counts,
// sharding, errors, timeouts, early stop and mid-epoch resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "ops/ops.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using Clock = std::chrono::steady_clock;
using Indices = std::vector<size_t>;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Examples are their own indices; get() sleeps a little, unevenly, so that
// workers finish out of order.
std::shared_ptr<FunctionDataset<size_t>> index_dataset(size_t n, std::atomic<int64_t>* loads = nullptr) {
  return std::make_shared<FunctionDataset<size_t>>(n, [loads](size_t i, Generator&) {
    if (loads) loads->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(50 * ((i * 7) % 5)));
    return i;
  });
}

Indices collate_indices(std::vector<size_t>&& xs) { return std::move(xs); }

std::vector<Indices> drain(DataLoader<size_t, Indices>& loader) {
  std::vector<Indices> out;
  while (std::optional<Indices> b = loader.next()) out.push_back(std::move(*b));
  return out;
}

// ---- samplers ---------------------------------------------------------------

TEST(Sampler, SequentialIsIdentity) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(s.indices(0), (Indices{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.indices(3), (Indices{0, 1, 2, 3, 4}));
  EXPECT_KILN_ERROR(s.indices(-1), "epoch must be >= 0", "-1");
}

TEST(Sampler, RandomIsReproduciblePerSeedAndEpoch) {
  const size_t n = 1000;
  RandomSampler a(n, 42), b(n, 42), c(n, 43);
  const Indices e0 = a.indices(0);
  EXPECT_EQ(e0, b.indices(0));
  EXPECT_EQ(a.indices(1), b.indices(1));
  EXPECT_NE(e0, a.indices(1));
  EXPECT_NE(e0, c.indices(0));
  Indices sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, SequentialSampler(n).indices(0));
  // Shuffled, not nearly sorted: few fixed points.
  size_t fixed = 0;
  for (size_t i = 0; i < n; ++i) fixed += e0[i] == i;
  EXPECT_LT(fixed, 10u);
  EXPECT_TRUE(RandomSampler(0, 1).indices(0).empty());
  EXPECT_EQ(RandomSampler(1, 1).indices(0), Indices{0});
}

TEST(Sampler, DistributedShardsAreDisjointAndCover) {
  for (size_t n : {0u, 1u, 2u, 5u, 7u, 9u, 10u, 12u}) {
    for (int64_t world = 1; world <= 3; ++world) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " shuffle=" << shuffle
                                          << " drop_last=" << drop_last);
          const auto w = static_cast<size_t>(world);
          const size_t per_rank = drop_last ? n / w : (n + w - 1) / w;
          const int64_t epoch = 2;
          const Indices global = shuffle ? random_permutation(n, 7, epoch) : SequentialSampler(n).indices(0);
          std::vector<Indices> shards;
          for (int64_t r = 0; r < world; ++r) {
            DistributedSampler s(n, r, world, shuffle, 7, drop_last);
            EXPECT_EQ(s.size(), per_rank);
            EXPECT_EQ(s.drop_last(), drop_last);
            shards.push_back(s.indices(epoch));
            ASSERT_EQ(shards.back().size(), per_rank);
          }
          // Interleaving the shards gives the global order padded by repeating
          // it from its start (or cut to a multiple of world).
          for (size_t p = 0; p < per_rank * w; ++p) EXPECT_EQ(shards[p % w][p / w], global[p % n]);
          std::multiset<size_t> all;
          for (const Indices& sh : shards) all.insert(sh.begin(), sh.end());
          const std::set<size_t> distinct(all.begin(), all.end());
          if (drop_last) {
            EXPECT_EQ(all.size(), distinct.size());  // disjoint
            EXPECT_EQ(distinct.size(), n - n % w);
          } else {
            EXPECT_EQ(distinct.size(), n);  // covers the dataset
            EXPECT_EQ(all.size() - distinct.size(), per_rank * w - n);  // only the padding repeats
          }
        }
      }
    }
  }
  EXPECT_KILN_ERROR(DistributedSampler(10, 3, 3), "rank 3", "[0, 3)");
  EXPECT_KILN_ERROR(DistributedSampler(10, -1, 2), "rank -1");
  EXPECT_KILN_ERROR(DistributedSampler(10, 0, 0), "world_size", "0");
}

TEST(Sampler, DistributedShufflesAlikeOnAllRanksAndPerEpoch) {
  DistributedSampler r0(100, 0, 2, true, 5), r1(100, 1, 2, true, 5);
  EXPECT_NE(r0.indices(0), r0.indices(1));
  Indices both = r0.indices(4);
  const Indices other = r1.indices(4);
  both.insert(both.end(), other.begin(), other.end());
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, SequentialSampler(100).indices(0));
}

TEST(Sampler, BatchSamplerGroupsInOrder) {
  auto seq = std::make_shared<SequentialSampler>(7);
  BatchSampler keep(seq, 3), drop(seq, 3, true);
  EXPECT_EQ(keep.size(), 3u);
  EXPECT_EQ(keep.batches(0), (std::vector<Indices>{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(drop.size(), 2u);
  EXPECT_EQ(drop.batches(0), (std::vector<Indices>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_KILN_ERROR(BatchSampler(seq, 0), "batch_size must be >= 1", "0");
  EXPECT_KILN_ERROR(BatchSampler(seq, -2), "batch_size must be >= 1", "-2");
  EXPECT_KILN_ERROR(BatchSampler(nullptr, 2), "sampler is null");
}

// Note [Elastic epochs]: N ranks see k batches of B each, then M ranks continue
// the epoch from the k B N-th entry of its order: together every example once
// (the set an uninterrupted run sees), none twice, for any N, M, B and k.
TEST(Sampler, ElasticEpochContinuesWhereTheOldRanksStopped) {
  for (size_t n : {37u, 40u, 103u}) {
    for (int64_t old_world : {1, 2, 3}) {
      for (size_t batch : {1u, 4u}) {
        const size_t per_rank = (n + static_cast<size_t>(old_world) - 1) / static_cast<size_t>(old_world);
        const size_t batches = (per_rank + batch - 1) / batch;
        for (size_t k = 0; k <= batches; k += std::max<size_t>(1, batches / 4)) {
          for (int64_t new_world : {1, 2, 3, 4}) {
            SCOPED_TRACE(::testing::Message() << "n=" << n << " N=" << old_world << " B=" << batch << " k=" << k
                                              << " M=" << new_world);
            const int64_t epoch = 3;
            std::multiset<size_t> seen;
            for (int64_t r = 0; r < old_world; ++r) {
              const BatchSampler bs(std::make_shared<DistributedSampler>(n, r, old_world, true, 5), static_cast<int64_t>(batch));
              const std::vector<Indices> b = bs.batches(epoch);
              for (size_t i = 0; i < k && i < b.size(); ++i) seen.insert(b[i].begin(), b[i].end());
            }
            const size_t start = k * batch * static_cast<size_t>(old_world);
            std::set<size_t> rest;
            for (int64_t r = 0; r < new_world; ++r) {
              const Indices mine = DistributedSampler(n, r, new_world, true, 5).indices_from(epoch, start);
              rest.insert(mine.begin(), mine.end());
            }
            std::set<size_t> all(seen.begin(), seen.end());
            all.insert(rest.begin(), rest.end());
            EXPECT_EQ(all.size(), n) << "every example of the epoch, as an uninterrupted run";
            if (start <= n) {
              EXPECT_EQ(seen.size(), start) << "the old ranks saw the first k B N entries, each once";
              for (size_t i : seen) EXPECT_EQ(rest.count(i), 0u) << "example " << i << " seen twice";
            } else {
              EXPECT_TRUE(rest.empty());
            }
          }
        }
      }
    }
  }
  // One rank: the permutation's tail (RandomSampler walks the order DistributedSampler strides, so a run
  // on one process and one on many continue each other); a sampler without an order to continue refuses.
  EXPECT_EQ(RandomSampler(103, 5).indices(3), DistributedSampler(103, 0, 1, true, 5).indices(3));
  const Indices whole = RandomSampler(10, 3).indices(1);
  EXPECT_EQ(RandomSampler(10, 3).indices_from(1, 4), Indices(whole.begin() + 4, whole.end()));
  EXPECT_KILN_ERROR(SequentialSampler(10).indices_from(0, 4), "cannot continue an epoch from position 4");
}

TEST(DataLoader, AnElasticLoaderStateContinuesTheEpochFromItsStart) {
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<DistributedSampler>(50, 1, 2, true, 9), 4);
  DataLoader<size_t, Indices> loader(index_dataset(50), sampler, collate_indices, {.num_workers = 1});
  loader.load_state(LoaderState{2, 1, 18});
  const std::vector<Indices> want = sampler->batches_from(2, 18);
  ASSERT_EQ(want.size(), 4u);  // 32 entries left, 16 for this rank
  std::vector<Indices> got = drain(loader);
  EXPECT_EQ(got, std::vector<Indices>(want.begin() + 1, want.end()));
  EXPECT_EQ(loader.state(), (LoaderState{2, 4, 18}));
  EXPECT_EQ(LoaderState::from_map(loader.state().to_map()), (LoaderState{2, 4, 18}));
  EXPECT_EQ(LoaderState({2, 4}).to_map().count("epoch_start"), 0u);  // older checkpoints' form
  loader.set_epoch(3);
  EXPECT_EQ(loader.state(), (LoaderState{3, 0, 0}));
  EXPECT_EQ(drain(loader), sampler->batches(3));
}

// ---- loader -----------------------------------------------------------------

TEST(DataLoader, BatchesComeInSamplerOrderForAnyWorkerCount) {
  const size_t n = 103;
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(n, 11), 4);
  for (int64_t epoch : {0, 1}) {
    const std::vector<Indices> expected = sampler->batches(epoch);
    ASSERT_EQ(expected.size(), 26u);
    for (int64_t workers : {0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << "workers=" << workers << " epoch=" << epoch);
      DataLoader<size_t, Indices> loader(index_dataset(n), sampler, collate_indices, {.num_workers = workers});
      loader.set_epoch(epoch);
      EXPECT_EQ(drain(loader), expected);
      EXPECT_FALSE(loader.next().has_value());  // stays at the end
      EXPECT_EQ(loader.state(), (LoaderState{epoch, 26}));
    }
  }
}

// An example with per-example randomness: MLM-style random tokens from rng.
struct Augmented {
  size_t index;
  Tensor tokens;  // [6] int64
};

TEST(DataLoader, RandomAugmentationIsIdenticalForZeroAndFourWorkers) {
  const size_t n = 50;
  auto dataset = std::make_shared<FunctionDataset<Augmented>>(n, [](size_t i, Generator& rng) {
    Tensor noise = randint(0, 1000, {6}, DType::Int64, &rng);
    Tensor more = randint(0, 1000, {6}, DType::Int64, &rng);  // a second call: next offset
    return Augmented{i, add(noise, mul(more, 1000.0))};
  });
  auto collate = [](std::vector<Augmented>&& xs) {
    std::vector<Tensor> ts;
    for (const Augmented& x : xs) ts.push_back(x.tokens);
    return stack(ts);  // [B, 6]
  };
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(n, 3), 8);
  auto run = [&](int64_t workers, int64_t prefetch, uint64_t seed, int64_t epoch) {
    DataLoader<Augmented, Tensor> loader(dataset, sampler, collate,
                                         {.num_workers = workers, .prefetch_factor = prefetch, .seed = seed});
    loader.set_epoch(epoch);
    std::vector<std::vector<int64_t>> out;
    while (std::optional<Tensor> b = loader.next()) out.push_back(b->to_vector<int64_t>());
    return out;
  };
  const auto inline0 = run(0, 2, 99, 0);
  ASSERT_EQ(inline0.size(), 7u);
  EXPECT_EQ(run(4, 2, 99, 0), inline0);
  EXPECT_EQ(run(4, 1, 99, 0), inline0);
  EXPECT_EQ(run(2, 3, 99, 0), inline0);
  EXPECT_NE(run(0, 2, 99, 1), inline0);  // new epoch: new permutation and new noise
  EXPECT_NE(run(0, 2, 98, 0), inline0);  // new loader seed: same order, new noise
  EXPECT_EQ(run(4, 2, 99, 1), run(0, 2, 99, 1));
}

TEST(DataLoader, ExampleSeedDependsOnSeedEpochAndIndexOnly) {
  EXPECT_EQ(example_seed(1, 2, 3), example_seed(1, 2, 3));
  std::set<uint64_t> seeds;
  for (uint64_t s = 0; s < 4; ++s)
    for (int64_t e = 0; e < 4; ++e)
      for (size_t i = 0; i < 16; ++i) seeds.insert(example_seed(s, e, i));
  EXPECT_EQ(seeds.size(), 4u * 4u * 16u);
}

TEST(DataLoader, WorkerExceptionIsRaisedWithSampleIndex) {
  const size_t n = 40;
  auto dataset = std::make_shared<FunctionDataset<size_t>>(n, [](size_t i, Generator&) -> size_t {
    if (i == 13) throw std::runtime_error("corrupt record");
    return i;
  });
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(n), 5);
  for (int64_t workers : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << "workers=" << workers);
    DataLoader<size_t, Indices> loader(dataset, sampler, collate_indices, {.num_workers = workers});
    EXPECT_EQ(loader.next(), (Indices{0, 1, 2, 3, 4}));
    EXPECT_EQ(loader.next(), (Indices{5, 6, 7, 8, 9}));
    EXPECT_KILN_ERROR(loader.next(), "DataLoader: worker failed on sample 13: corrupt record");
    EXPECT_EQ(loader.state(), (LoaderState{0, 2}));  // the failed batch is not consumed
    EXPECT_KILN_ERROR(loader.next(), "worker failed on sample 13");  // a retry fails the same way
  }
  auto bad_collate = [](std::vector<size_t>&& xs) -> Indices {
    if (xs.front() == 10) throw std::runtime_error("ragged");
    return std::move(xs);
  };
  DataLoader<size_t, Indices> loader(index_dataset(n), sampler, bad_collate, {.num_workers = 2});
  loader.next();
  loader.next();
  EXPECT_KILN_ERROR(loader.next(), "collate failed on batch 2 of epoch 0: ragged");
}

TEST(DataLoader, OutOfRangeSamplerIndexIsAnError) {
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(12), 4);
  DataLoader<size_t, Indices> loader(index_dataset(10), sampler, collate_indices, {.num_workers = 2});
  loader.next();
  loader.next();
  EXPECT_KILN_ERROR(loader.next(), "worker failed on sample 10", "out of range", "size 10");
}

// Blocks get(index) until opened (or 5 s pass), to play a stuck worker.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lk(mutex);
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lk(mutex);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(DataLoader, StuckWorkerHitsTimeout) {
  const size_t n = 20;
  auto gate = std::make_shared<Gate>();
  // The dataset (owned by abandoned workers too) keeps the gate alive.
  auto dataset = std::make_shared<FunctionDataset<size_t>>(n, [gate](size_t i, Generator&) {
    if (i == 9) gate->wait();
    return i;
  });
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(n), 2);
  {
    DataLoader<size_t, Indices> loader(dataset, sampler, collate_indices,
                                       {.num_workers = 2, .timeout_seconds = 0.2});
    for (int b = 0; b < 4; ++b) ASSERT_EQ(loader.next(), (Indices{size_t(2 * b), size_t(2 * b + 1)}));
    const auto t0 = Clock::now();
    EXPECT_KILN_ERROR(loader.next(), "DataLoader: timed out after 0.2 s", "batch 4 of epoch 0",
                      "loading sample 9");
    const double waited = seconds_since(t0);
    EXPECT_GE(waited, 0.19);
    EXPECT_LT(waited, 2.0);
    EXPECT_EQ(loader.state(), (LoaderState{0, 4}));
    // Fresh workers retry batch 4 once the stuck example is released.
    gate->release();
    EXPECT_EQ(loader.next(), (Indices{8, 9}));
    EXPECT_EQ(loader.next(), (Indices{10, 11}));
  }
  // A loader destroyed right after a timeout does not wait for the stuck get().
  auto gate2 = std::make_shared<Gate>();
  auto dataset2 = std::make_shared<FunctionDataset<size_t>>(n, [gate2](size_t i, Generator&) {
    if (i == 0) gate2->wait();
    return i;
  });
  auto loader = std::make_unique<DataLoader<size_t, Indices>>(
      dataset2, sampler, collate_indices, DataLoaderOptions{.num_workers = 1, .timeout_seconds = 0.2});
  EXPECT_KILN_ERROR(loader->next(), "timed out", "batch 0", "sample 0");
  const auto t0 = Clock::now();
  loader.reset();
  EXPECT_LT(seconds_since(t0), 0.5);
  gate2->release();  // the abandoned worker finishes and exits
}

TEST(DataLoader, EarlyStopShutsDownPromptly) {
  const size_t n = 100'000;
  std::atomic<int64_t> loads{0};
  auto dataset = std::make_shared<FunctionDataset<size_t>>(n, [&loads](size_t i, Generator&) {
    loads.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return i;
  });
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(n, 1), 64);
  const std::vector<Indices> expected = sampler->batches(0);
  {
    DataLoader<size_t, Indices> loader(dataset, sampler, collate_indices, {.num_workers = 4});
    EXPECT_EQ(loader.next(), expected[0]);
    EXPECT_EQ(loader.next(), expected[1]);
    // stop() then next() resumes in order.
    loader.stop();
    EXPECT_EQ(loader.next(), expected[2]);
    const auto t0 = Clock::now();
    loader.stop();
    EXPECT_LT(seconds_since(t0), 0.5);
    EXPECT_EQ(loader.next(), expected[3]);
    EXPECT_EQ(loader.next(), expected[4]);
  }
  loads.store(0);
  Clock::time_point t0;
  {
    DataLoader<size_t, Indices> loader(dataset, sampler, collate_indices, {.num_workers = 4});
    loader.next();
    loader.next();
    t0 = Clock::now();
  }  // destroyed mid-epoch, with prefetched and half-made batches
  EXPECT_LT(seconds_since(t0), 0.5);
  // At most the 2 taken + 4 x 2 prefetched batches were loaded.
  EXPECT_LE(loads.load(), 64 * 10);
}

TEST(DataLoader, PrefetchIsBounded) {
  const size_t n = 400;
  std::atomic<int64_t> loads{0};
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(n), 4);
  DataLoader<size_t, Indices> loader(index_dataset(n, &loads), sampler, collate_indices,
                                     {.num_workers = 2, .prefetch_factor = 2});
  EXPECT_EQ(loader.next(), (Indices{0, 1, 2, 3}));
  // After batch 0 is taken, batches 1..4 (capacity 2 x 2) may be in flight.
  const auto t0 = Clock::now();
  while (loads.load() < 20 && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(loads.load(), 20);
}

TEST(DataLoader, ResumeMidEpochGivesTheRemainingBatches) {
  const size_t n = 61;
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(n, 5), 4);  // 16 batches
  DataLoader<size_t, Indices> reference(index_dataset(n), sampler, collate_indices);
  reference.set_epoch(3);
  const std::vector<Indices> all = drain(reference);
  ASSERT_EQ(all.size(), 16u);
  for (int64_t saved_workers : {0, 3}) {
    for (int64_t resumed_workers : {0, 2}) {
      for (size_t k : {0u, 1u, 7u, 15u, 16u}) {
        SCOPED_TRACE(::testing::Message() << "k=" << k << " workers " << saved_workers << "->" << resumed_workers);
        std::map<std::string, int64_t> checkpoint;
        {
          DataLoader<size_t, Indices> loader(index_dataset(n), sampler, collate_indices,
                                             {.num_workers = saved_workers});
          loader.set_epoch(3);
          for (size_t b = 0; b < k; ++b) ASSERT_EQ(loader.next(), all[b]);
          checkpoint = loader.state().to_map();
        }
        std::atomic<int64_t> loads{0};
        DataLoader<size_t, Indices> resumed(index_dataset(n, &loads), sampler, collate_indices,
                                            {.num_workers = resumed_workers});
        resumed.load_state(LoaderState::from_map(checkpoint));
        EXPECT_EQ(resumed.state(), (LoaderState{3, static_cast<int64_t>(k)}));
        EXPECT_EQ(drain(resumed), std::vector<Indices>(all.begin() + static_cast<std::ptrdiff_t>(k), all.end()));
        // Consumed batches are skipped, not loaded.
        int64_t remaining = 0;
        for (size_t b = k; b < all.size(); ++b) remaining += static_cast<int64_t>(all[b].size());
        EXPECT_EQ(loads.load(), remaining);
        // The next epoch follows as usual.
        resumed.set_epoch(4);
        EXPECT_EQ(resumed.next(), sampler->batches(4)[0]);
      }
    }
  }
}

TEST(DataLoader, BadOptionsAndStateAreErrors) {
  auto ds = index_dataset(10);
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(10), 3);
  using Loader = DataLoader<size_t, Indices>;
  EXPECT_KILN_ERROR(Loader(ds, sampler, collate_indices, {.num_workers = -1}), "num_workers must be >= 0", "-1");
  EXPECT_KILN_ERROR(Loader(ds, sampler, collate_indices, {.prefetch_factor = 0}), "prefetch_factor", "0");
  EXPECT_KILN_ERROR(Loader(ds, sampler, collate_indices, {.timeout_seconds = -1}), "timeout_seconds", "-1");
  EXPECT_KILN_ERROR(
      Loader(ds, sampler, collate_indices, {.timeout_seconds = std::numeric_limits<double>::quiet_NaN()}),
      "timeout_seconds");
  EXPECT_KILN_ERROR(Loader(nullptr, sampler, collate_indices), "dataset is null");
  EXPECT_KILN_ERROR(Loader(ds, nullptr, collate_indices), "batch sampler is null");
  EXPECT_KILN_ERROR(Loader(ds, sampler, Loader::Collate{}), "collate function is empty");
  Loader loader(ds, sampler, collate_indices);
  EXPECT_EQ(loader.num_batches(), 4u);
  EXPECT_KILN_ERROR(loader.load_state({0, 5}), "batches_consumed 5", "[0, 4]");
  EXPECT_KILN_ERROR(loader.load_state({-1, 0}), "epoch must be >= 0");
  EXPECT_KILN_ERROR(loader.set_epoch(-2), "epoch must be >= 0", "-2");
  EXPECT_KILN_ERROR(LoaderState::from_map({{"epoch", 1}}), "\"batches_consumed\" is missing");
  EXPECT_KILN_ERROR(LoaderState::from_map({{"epoch", 1}, {"batches_consumed", -3}}), "must be >= 0", "-3");
}

TEST(DataLoader, TransferRunsInTheConsumerAndWaitIsMeasured) {
  const size_t n = 16;
  auto dataset = std::make_shared<FunctionDataset<size_t>>(n, [](size_t i, Generator&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return i;
  });
  auto sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(n), 4);
  const std::thread::id consumer = std::this_thread::get_id();
  int transfers = 0;
  auto transfer = [&](Indices&& b) {
    EXPECT_EQ(std::this_thread::get_id(), consumer);
    ++transfers;
    b.push_back(1000);
    return std::move(b);
  };
  DataLoader<size_t, Indices> loader(dataset, sampler, collate_indices, {.num_workers = 2}, transfer);
  EXPECT_EQ(loader.wait_seconds(), 0.0);
  EXPECT_EQ(loader.next(), (Indices{0, 1, 2, 3, 1000}));
  const double first = loader.wait_seconds();
  EXPECT_GE(first, 0.007);  // the first batch: 4 x 2 ms of loading
  drain(loader);
  EXPECT_EQ(transfers, 4);
  EXPECT_GE(loader.wait_seconds(), first);
}

}  // namespace
}  // namespace kiln::data
