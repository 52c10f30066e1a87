// PhiloxStream: a sequence of random numbers from one Philox call position,
// for host-side data code (packing, masking, synthetic text) that needs a
// variable number of draws.
//
// Invariants: the k-th word drawn is word (k % 4) of philox_words(state, k / 4),
// so a stream is a pure function of its PhiloxState (seed, offset) and of the
// order of the draws: the same on every thread and thread count. Each kind of
// draw consumes a fixed number of words (u32: 1, u64 / uniform / below: 2).
#pragma once

#include <array>
#include <cstdint>

#include "core/error.h"
#include "core/random.h"

namespace kiln::data {

class PhiloxStream {
 public:
  explicit PhiloxStream(PhiloxState state) : state_(state) {}
  // A stream at the generator's next call position (advances the generator by one call).
  explicit PhiloxStream(Generator& rng) : state_(rng.next()) {}

  uint32_t next_u32() {
    if (used_ == 4) {
      block_ = philox_words(state_, counter_++);
      used_ = 0;
    }
    return block_[used_++];
  }
  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform() {
    const uint32_t a = next_u32();
    return philox_uniform(a, next_u32());
  }
  // Uniform integer in [0, n), n > 0: the high 64 bits of a 64x64 product
  // (bias below n / 2^64, negligible for data sizes).
  uint64_t below(uint64_t n) {
    KILN_CHECK(n > 0, "PhiloxStream::below: n must be positive");
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  PhiloxState state_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

}  // namespace kiln::data
