// Samplers: the order in which a DataLoader visits a dataset, per epoch.
//
// A Sampler gives the example indices of one epoch; a BatchSampler groups them
// into batches. Every order is a pure function of (constructor arguments,
// epoch): the same on every run, every rank and every worker count, which is
// what makes resuming mid-epoch exact (data/dataloader.h).
//
// Invariants:
//  - indices(epoch).size() == size() for every epoch >= 0; a negative epoch is
//    a kiln::Error.
//  - every index is < the dataset size given at construction.
//  - shuffled orders come from random_permutation(n, seed, epoch): different
//    epochs give different permutations, the same (seed, epoch) the same one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::data {

// A permutation of [0, n): Fisher-Yates driven by Philox-4x32 with key `seed`
// and counter (position, epoch), so it depends only on (n, seed, epoch).
std::vector<size_t> random_permutation(size_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The example indices of epoch `epoch`, in visiting order.
  virtual std::vector<size_t> indices(int64_t epoch) const = 0;
  // Number of indices per epoch.
  virtual size_t size() const = 0;
  // Note [Elastic epochs]: epoch `epoch` continued from position `start` of
  // its global order, for a resume on another number of ranks (the ranks of
  // the run that stopped had seen exactly the first `start` entries). The
  // default takes only start == 0 (= indices(epoch)); RandomSampler and
  // DistributedSampler give their rule applied to global[start, n).
  virtual std::vector<size_t> indices_from(int64_t epoch, size_t start) const;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(size_t dataset_size) : n_(dataset_size) {}
  std::vector<size_t> indices(int64_t epoch) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
};

// random_permutation(n, seed, epoch): a fresh shuffle each epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(size_t dataset_size, uint64_t seed) : n_(dataset_size), seed_(seed) {}
  std::vector<size_t> indices(int64_t epoch) const override;
  std::vector<size_t> indices_from(int64_t epoch, size_t start) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
  uint64_t seed_;
};

// One rank's share of the dataset for data-parallel training (the rule of
// torch.utils.data.DistributedSampler). All ranks build the same global order
// (random_permutation(n, seed, epoch) when shuffling, else 0..n-1), then
//  - drop_last = false: the order is padded by repeating it from its start
//    until its length is a multiple of world_size (size() = ceil(n / world));
//  - drop_last = true: the order is cut to floor(n / world) * world entries;
// and rank r takes entries r, r + world, r + 2 world, ...
// The ranks' shares are disjoint when drop_last or n % world == 0; together
// they cover every index (drop_last = false) or all but the n % world cut ones.
class DistributedSampler : public Sampler {
 public:
  // rank in [0, world_size), world_size >= 1, else kiln::Error.
  DistributedSampler(size_t dataset_size, int64_t rank, int64_t world_size, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  std::vector<size_t> indices(int64_t epoch) const override;
  std::vector<size_t> indices_from(int64_t epoch, size_t start) const override;
  size_t size() const override { return per_rank_; }
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_; }
  bool drop_last() const { return drop_last_; }

 private:
  size_t n_;
  int64_t rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  size_t per_rank_;
};

// Groups a sampler's indices into consecutive batches of batch_size; the last,
// shorter batch is kept unless drop_last. Subclasses may override batches()
// (e.g. length bucketing) as long as it stays a pure function of the epoch and
// returns size() batches.
class BatchSampler {
 public:
  // batch_size >= 1 and a non-null sampler, else kiln::Error.
  BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last = false);
  virtual ~BatchSampler() = default;
  // The batches of epoch `epoch`: [b][j] = j-th example index of batch b.
  virtual std::vector<std::vector<size_t>> batches(int64_t epoch) const;
  // The batches of the sampler's indices_from(epoch, start) (Note [Elastic
  // epochs]); start == 0 is batches(epoch).
  virtual std::vector<std::vector<size_t>> batches_from(int64_t epoch, size_t start) const;
  // Number of batches per epoch.
  virtual size_t size() const;
  size_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  const Sampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<const Sampler> sampler_;
  size_t batch_size_;
  bool drop_last_;
};

}  // namespace kiln::data
