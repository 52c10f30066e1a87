// Token-budgeted batches (Note [Token-budgeted batches],
// data/token_budget_sampler.h): the budget and the cap hold, every example is
// visited once per epoch, the batch count is the same every epoch while the
// batches change, the order is a pure function of the epoch, ranks split the
// batches disjointly and evenly, and bad options are one error each. The
// finetune path: tests/finetune_cli.sh (--max-tokens-per-batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "data/token_budget_sampler.h"
#include "tests/test_util.h"

namespace kiln::data {
namespace {

std::vector<int64_t> ragged_lengths(size_t n, uint32_t seed) {  // SST-2-like: mostly short, a long tail
  std::mt19937 gen(seed);
  std::geometric_distribution<int> dist(0.06);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = std::min(3 + dist(gen), 128);
  return v;
}

int64_t longest_in(const std::vector<size_t>& batch, const std::vector<int64_t>& lengths) {
  int64_t m = 0;
  for (size_t i : batch) m = std::max(m, lengths[i]);
  return m;
}

TEST(TokenBudgetBatchSampler, BatchesKeepTheBudgetAndCapAndVisitEveryExampleOnce) {
  const std::vector<int64_t> lengths = ragged_lengths(1000, 1);
  const TokenBudgetBatchSampler s(lengths, {.max_tokens = 512, .max_batch_size = 32, .seed = 7});
  int64_t padded = 0, real = 0;
  for (int64_t epoch : {0, 1, 2}) {
    const auto batches = s.batches(epoch);
    ASSERT_EQ(batches.size(), s.size()) << "epoch " << epoch;
    std::vector<int> seen(lengths.size(), 0);
    for (const auto& b : batches) {
      ASSERT_FALSE(b.empty());
      EXPECT_LE(b.size(), 32u);
      EXPECT_LE(static_cast<int64_t>(b.size()) * longest_in(b, lengths), 512);
      for (size_t i : b) {
        ++seen[i];
        real += lengths[i];
      }
      padded += static_cast<int64_t>(b.size()) * longest_in(b, lengths);
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(lengths.size()))
        << "epoch " << epoch << ": every example exactly once";
  }
  // Length-sorted batches waste little on padding (random batches of 32 would
  // pad to their longest, ~3x the real tokens on these lengths).
  EXPECT_LT(static_cast<double>(padded), 1.1 * static_cast<double>(real));
}

TEST(TokenBudgetBatchSampler, EachEpochIsAPureFunctionAndEpochsDiffer) {
  const std::vector<int64_t> lengths = ragged_lengths(500, 2);
  const TokenBudgetBatchSampler a(lengths, {.max_tokens = 256, .max_batch_size = 16, .seed = 3});
  const TokenBudgetBatchSampler b(lengths, {.max_tokens = 256, .max_batch_size = 16, .seed = 3});
  EXPECT_EQ(a.batches(4), b.batches(4));
  EXPECT_EQ(a.batches(4), a.batches(4));
  EXPECT_NE(a.batches(0), a.batches(1)) << "batch order and tie order change per epoch";
  const TokenBudgetBatchSampler other_seed(lengths, {.max_tokens = 256, .max_batch_size = 16, .seed = 4});
  EXPECT_NE(a.batches(0), other_seed.batches(0));
  EXPECT_EQ(a.batches_from(2, 0), a.batches(2));
}

TEST(TokenBudgetBatchSampler, RanksTakeDisjointEqualShares) {
  const std::vector<int64_t> lengths = ragged_lengths(777, 3);
  const TokenBudgetOptions base{.max_tokens = 300, .max_batch_size = 24, .seed = 5};
  const TokenBudgetBatchSampler one(lengths, base);
  for (int64_t world : {2, 3}) {
    std::set<size_t> all;
    size_t examples = 0;
    for (int64_t r = 0; r < world; ++r) {
      TokenBudgetOptions o = base;
      o.rank = r;
      o.world_size = world;
      const TokenBudgetBatchSampler s(lengths, o);
      EXPECT_EQ(s.size(), one.global_batches() / static_cast<size_t>(world));
      const auto batches = s.batches(1);
      ASSERT_EQ(batches.size(), s.size());
      for (const auto& b : batches)
        for (size_t i : b) {
          all.insert(i);
          ++examples;
        }
    }
    EXPECT_EQ(all.size(), examples) << world << " ranks: no example on two ranks";
    // At most world - 1 global batches are left out per epoch.
    EXPECT_GE(examples + static_cast<size_t>(world - 1) * 24, lengths.size());
  }
}

TEST(TokenBudgetBatchSampler, BadOptionsAreOneErrorEach) {
  const std::vector<int64_t> lengths{5, 9, 40, 7};
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler(lengths, {.max_tokens = 39, .max_batch_size = 8}),
                    "--max-tokens-per-batch 39 is below the longest example's 40 tokens (example 2)");
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler({}, {.max_tokens = 64, .max_batch_size = 8}), "no examples");
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler({3, 0}, {.max_tokens = 64, .max_batch_size = 8}), "example 1 has 0 tokens");
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler(lengths, {.max_tokens = 64, .max_batch_size = 0}), "batch size must be >= 1");
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler(lengths, {.max_tokens = 64, .max_batch_size = 8, .rank = 2, .world_size = 2}),
                    "rank 2 is not in a world of 2");
  EXPECT_KILN_ERROR(TokenBudgetBatchSampler(lengths, {.max_tokens = 80, .max_batch_size = 8, .world_size = 3}),
                    "gives 2 batches, fewer than the 3 ranks");
  const TokenBudgetBatchSampler s(lengths, {.max_tokens = 80, .max_batch_size = 8});
  EXPECT_KILN_ERROR(s.batches_from(0, 2), "a resume on another number of ranks");
}

}  // namespace
}  // namespace kiln::data
