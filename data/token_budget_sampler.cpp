// Note [Token-budgeted batches] (data/token_budget_sampler.h).
#include "data/token_budget_sampler.h"

#include <algorithm>
#include <memory>

#include "core/error.h"

namespace kiln::data {
namespace {

// The batch order's stream, apart from the tie order's (the sampler's own).
constexpr uint64_t kBatchOrderStream = 0x6b696c6e'62617463ULL;  // "kilnbatc"

// Examples per batch of the greedy cut over `sorted` (ascending lengths).
std::vector<size_t> greedy_cut(const std::vector<int64_t>& sorted, int64_t max_tokens, int64_t max_batch) {
  std::vector<size_t> cut;
  size_t count = 0;
  for (const int64_t len : sorted) {  // ascending: len is the batch's longest so far
    if (count > 0 && (static_cast<int64_t>(count) + 1 > max_batch ||
                      (static_cast<int64_t>(count) + 1) * len > max_tokens)) {
      cut.push_back(count);
      count = 0;
    }
    ++count;
  }
  if (count > 0) cut.push_back(count);
  return cut;
}

}  // namespace

TokenBudgetBatchSampler::TokenBudgetBatchSampler(std::vector<int64_t> lengths, const TokenBudgetOptions& options)
    : BatchSampler(std::make_shared<RandomSampler>(lengths.size(), options.seed), std::max<int64_t>(1, options.max_batch_size)),
      lengths_(std::move(lengths)),
      options_(options) {
  KILN_CHECK(!lengths_.empty(), "--max-tokens-per-batch: no examples to batch");
  KILN_CHECK(options_.max_batch_size >= 1, "--max-tokens-per-batch: the batch size must be >= 1, got ",
             options_.max_batch_size);
  KILN_CHECK(options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
             "--max-tokens-per-batch: rank ", options_.rank, " is not in a world of ", options_.world_size);
  const auto longest = std::max_element(lengths_.begin(), lengths_.end());
  const auto shortest = std::min_element(lengths_.begin(), lengths_.end());
  KILN_CHECK(*shortest >= 1, "--max-tokens-per-batch: example ", shortest - lengths_.begin(), " has ", *shortest,
             " tokens");
  KILN_CHECK(options_.max_tokens >= *longest, "--max-tokens-per-batch ", options_.max_tokens,
             " is below the longest example's ", *longest, " tokens (example ", longest - lengths_.begin(),
             "); give at least ", *longest);
  std::vector<int64_t> sorted = lengths_;
  std::sort(sorted.begin(), sorted.end());
  cut_ = greedy_cut(sorted, options_.max_tokens, options_.max_batch_size);
  per_rank_ = cut_.size() / static_cast<size_t>(options_.world_size);
  KILN_CHECK(per_rank_ >= 1, "--max-tokens-per-batch ", options_.max_tokens, " gives ", cut_.size(),
             " batches, fewer than the ", options_.world_size, " ranks");
}

std::vector<std::vector<size_t>> TokenBudgetBatchSampler::batches(int64_t epoch) const {
  // The sampler's shuffle, stably sorted by length: ties in this epoch's random order.
  std::vector<size_t> order = sampler().indices(epoch);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths_[a] < lengths_[b]; });
  std::vector<std::vector<size_t>> global(cut_.size());
  size_t at = 0;
  for (size_t b = 0; b < cut_.size(); ++b) {
    global[b].assign(order.begin() + static_cast<std::ptrdiff_t>(at),
                     order.begin() + static_cast<std::ptrdiff_t>(at + cut_[b]));
    at += cut_[b];
  }
  const std::vector<size_t> visit = random_permutation(global.size(), options_.seed ^ kBatchOrderStream, epoch);
  std::vector<std::vector<size_t>> mine;
  mine.reserve(per_rank_);
  const auto world = static_cast<size_t>(options_.world_size), rank = static_cast<size_t>(options_.rank);
  for (size_t k = 0; k < per_rank_; ++k) mine.push_back(std::move(global[visit[k * world + rank]]));
  return mine;
}

std::vector<std::vector<size_t>> TokenBudgetBatchSampler::batches_from(int64_t epoch, size_t start) const {
  KILN_CHECK(start == 0, "--max-tokens-per-batch: a resume on another number of ranks (or another batch size) "
                         "is not supported with token-budgeted batches; resume with the ranks, --batch-size and "
                         "--grad-accum the checkpoint was written with");
  return batches(epoch);
}

}  // namespace kiln::data
