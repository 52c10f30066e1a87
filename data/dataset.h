// Dataset: random access to examples by index, for data/dataloader.h.
//
// Note [Loader randomness]
// Per-example randomness (MLM masking, augmentation) must not depend on which
// thread loads an example, on how many workers there are, or on what was
// loaded before. So the loader never hands a dataset a long-lived or
// per-worker generator: for every example it builds a fresh
//   Generator(example_seed(loader_seed, epoch, index))
// and passes it to get(). The seed is a Philox hash of (loader seed, epoch,
// example index), so the example's random numbers are a pure function of
// those three: identical for 0 and N workers, for any batch or worker
// assignment, on resume mid-epoch, and on any rank of a data-parallel run
// (the index is the dataset index, not the position in a rank's shard). A new
// epoch gives new numbers; an index that appears twice in one epoch (padding
// in DistributedSampler) gets the same ones both times.
//
// Invariants:
//  - get() is const and may run concurrently on several threads: an
//    implementation keeps no mutable state, or guards it.
//  - get(index, rng) for index < size() only; the loader checks the bound.
//  - all randomness in get() comes from `rng` (seeded as above).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/random.h"

namespace kiln::data {

// Seed of the generator for example `index` of epoch `epoch` (Note [Loader
// randomness]): two words of the Philox block at counter (index, epoch) under
// a key derived from `loader_seed`.
uint64_t example_seed(uint64_t loader_seed, int64_t epoch, size_t index);

template <typename Example>
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // Example `index`; draws any randomness from rng (Note [Loader randomness]).
  virtual Example get(size_t index, Generator& rng) const = 0;
};

// A Dataset from a size and a function; fn must be safe to call concurrently.
template <typename Example>
class FunctionDataset : public Dataset<Example> {
 public:
  using Fn = std::function<Example(size_t index, Generator& rng)>;
  FunctionDataset(size_t size, Fn fn) : size_(size), fn_(std::move(fn)) {
    KILN_CHECK(fn_ != nullptr, "FunctionDataset: function is empty");
  }
  size_t size() const override { return size_; }
  Example get(size_t index, Generator& rng) const override { return fn_(index, rng); }

 private:
  size_t size_;
  Fn fn_;
};

}  // namespace kiln::data
