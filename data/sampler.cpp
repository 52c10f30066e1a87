#include "data/sampler.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/random.h"

namespace kiln::data {
namespace {

void check_epoch(int64_t epoch, const char* who) {
  KILN_CHECK(epoch >= 0, who, ": epoch must be >= 0, got ", epoch);
}

std::vector<size_t> iota_indices(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  return v;
}

}  // namespace

std::vector<size_t> random_permutation(size_t n, uint64_t seed, int64_t epoch) {
  check_epoch(epoch, "random_permutation");
  std::vector<size_t> perm = iota_indices(n);
  const PhiloxState st{seed, static_cast<uint64_t>(epoch)};
  // Position i - 1 swaps with j uniform in [0, i): j = floor(r * i / 2^64) for a
  // 64-bit random r (bias below n / 2^64).
  for (size_t i = n; i > 1; --i) {
    const std::array<uint32_t, 4> w = philox_words(st, i - 1);
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    const auto j = static_cast<size_t>((static_cast<unsigned __int128>(r) * i) >> 64);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

std::vector<size_t> SequentialSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "SequentialSampler");
  return iota_indices(n_);
}

std::vector<size_t> RandomSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "RandomSampler");
  return random_permutation(n_, seed_, epoch);
}

DistributedSampler::DistributedSampler(size_t dataset_size, int64_t rank, int64_t world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(dataset_size), rank_(rank), world_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  KILN_CHECK(world_size >= 1, "DistributedSampler: world_size must be >= 1, got ", world_size);
  KILN_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is outside [0, ", world_size,
             ")");
  const auto w = static_cast<size_t>(world_size);
  per_rank_ = drop_last ? n_ / w : (n_ + w - 1) / w;
}

std::vector<size_t> DistributedSampler::indices(int64_t epoch) const { return indices_from(epoch, 0); }

std::vector<size_t> DistributedSampler::indices_from(int64_t epoch, size_t start) const {
  check_epoch(epoch, "DistributedSampler");
  std::vector<size_t> global = shuffle_ ? random_permutation(n_, seed_, epoch) : iota_indices(n_);
  global.erase(global.begin(), global.begin() + static_cast<std::ptrdiff_t>(std::min(start, n_)));
  const size_t m = global.size();
  const auto w = static_cast<size_t>(world_);
  const size_t per_rank = drop_last_ ? m / w : (m + w - 1) / w;
  const size_t total = per_rank * w;
  std::vector<size_t> mine;
  mine.reserve(per_rank);
  // Entry p of the padded (or cut) global order is global[p % m].
  for (size_t p = static_cast<size_t>(rank_); p < total; p += w) mine.push_back(global[p % m]);
  return mine;
}

std::vector<size_t> Sampler::indices_from(int64_t epoch, size_t start) const {
  KILN_CHECK(start == 0, "this sampler cannot continue an epoch from position ", start,
             " of its order (Note [Elastic epochs]: RandomSampler and DistributedSampler can)");
  return indices(epoch);
}

std::vector<size_t> RandomSampler::indices_from(int64_t epoch, size_t start) const {
  std::vector<size_t> order = indices(epoch);
  order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(start, order.size())));
  return order;
}

BatchSampler::BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), drop_last_(drop_last) {
  KILN_CHECK(sampler_ != nullptr, "BatchSampler: sampler is null");
  KILN_CHECK(batch_size >= 1, "BatchSampler: batch_size must be >= 1, got ", batch_size);
  batch_size_ = static_cast<size_t>(batch_size);
}

size_t BatchSampler::size() const {
  const size_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<size_t>> BatchSampler::batches_from(int64_t epoch, size_t start) const {
  if (start == 0) return batches(epoch);
  const std::vector<size_t> order = sampler_->indices_from(epoch, start);
  std::vector<std::vector<size_t>> out;
  for (size_t begin = 0; begin < order.size(); begin += batch_size_) {
    const size_t end = std::min(order.size(), begin + batch_size_);
    if (drop_last_ && end - begin < batch_size_) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

std::vector<std::vector<size_t>> BatchSampler::batches(int64_t epoch) const {
  const std::vector<size_t> order = sampler_->indices(epoch);
  const size_t count = size();
  std::vector<std::vector<size_t>> out(count);
  for (size_t b = 0; b < count; ++b) {
    const size_t begin = b * batch_size_;
    const size_t end = std::min(order.size(), begin + batch_size_);
    out[b].assign(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

}  // namespace kiln::data
