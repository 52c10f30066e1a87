// Token-budgeted batches (`--max-tokens-per-batch`): batches of examples of
// similar length, each within a budget of padded tokens.
//
// Note [Token-budgeted batches]
// Dynamic padding pads a batch to its longest example, so a batch of mixed
// lengths pays for padding in every dense layer (and quadratically in
// attention). TokenBudgetBatchSampler forms batches the way fairseq's
// batch_by_size does: the examples in order of length (ties in a fresh
// random order each epoch), cut greedily into runs of at most max_batch_size
// examples whose padded size (examples x the longest one's tokens) stays
// within max_tokens; the batches are then visited in a random order, fresh
// each epoch. The cut depends only on the multiset of lengths, so every
// epoch has the same number of batches (size() is fixed, as the trainer's
// step count needs), while which equal-length examples share a batch, and
// the batch order, change with the epoch. Everything is a pure function of
// (lengths, options, epoch), so a resume continues exactly (data/dataloader.h).
//
// Data parallel: all ranks cut the same global batches and rank r takes
// positions r, r + W, ... of the epoch's batch order; the last nb % W
// batches of each epoch's order are left out so that every rank has
// nb / W (a different few each epoch). A resume on another number of ranks
// (Note [Elastic epochs]) is refused: positions in a length-sorted order do
// not map to the examples another world size has seen.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/data/sampler.h"

namespace kiln::data {

struct TokenBudgetOptions {
  int64_t max_tokens = 0;      // padded tokens per batch at most; >= the longest example
  int64_t max_batch_size = 0;  // examples per batch at most, >= 1
  uint64_t seed = 0;           // tie order and batch order
  int64_t rank = 0, world_size = 1;
};

class TokenBudgetBatchSampler : public BatchSampler {
 public:
  // lengths[i]: example i's tokens (>= 1). kiln::Error, naming the value, for
  // no examples, a length < 1, max_tokens below the longest example,
  // max_batch_size < 1, a bad rank, or fewer batches than ranks.
  TokenBudgetBatchSampler(std::vector<int64_t> lengths, const TokenBudgetOptions& options);
  std::vector<std::vector<size_t>> batches(int64_t epoch) const override;
  std::vector<std::vector<size_t>> batches_from(int64_t epoch, size_t start) const override;
  size_t size() const override { return per_rank_; }
  // Batches of all ranks together per epoch (before the cut to a multiple of W).
  size_t global_batches() const { return cut_.size(); }

 private:
  std::vector<int64_t> lengths_;
  TokenBudgetOptions options_;
  std::vector<size_t> cut_;  // examples per global batch, in length order
  size_t per_rank_ = 0;
};

}  // namespace kiln::data
