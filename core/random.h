// Counter-based random numbers (Philox-4x32-10) and the global generator.
//
// Note [Random numbers]: a random kernel call draws from (seed, offset), where
// offset counts the calls made on a generator; element i of the call uses the
// Philox block at counter (i, offset) with key seed. Every element's numbers
// thus depend only on (seed, offset, i): the same on any thread count and, by
// running the same arithmetic, on CUDA. The generator's state is (seed,
// offset), saved in checkpoints for exact resume.
//
// bernoulli (every dropout mask) needs one word per element, not a block:
// element i is word i % 4 of the block at counter (i / 4, offset), and it is
// 1 when that word is below bernoulli_threshold(p). One block serves four
// elements, a quarter of the Philox work of a block per element.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace kiln {

// Philox stream position for one random kernel call (Note [Random numbers]).
struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // call counter: each kernel call uses its own
};

// One Philox-4x32 block: 4 random 32-bit words for (counter, key), 10 rounds.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// The 4 words for element i of the call at st.
inline std::array<uint32_t, 4> philox_words(PhiloxState st, uint64_t i) {
  return philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(st.offset),
                     static_cast<uint32_t>(st.offset >> 32)},
                    {static_cast<uint32_t>(st.seed), static_cast<uint32_t>(st.seed >> 32)});
}

// Uniform double in [0, 1) from two words (53 random bits).
inline double philox_uniform(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ (static_cast<uint64_t>(b) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Element i of bernoulli(p) is 1 iff word < bernoulli_threshold(p), i.e. iff
// word / 2^32 < p exactly: ceil(p * 2^32), in [0, 2^32] (p * 2^32 is exact).
inline uint64_t bernoulli_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return uint64_t{1} << 32;
  const double scaled = p * 4294967296.0;
  const auto t = static_cast<uint64_t>(scaled);
  return static_cast<double>(t) == scaled ? t : t + 1;
}

// The bernoulli word of element i (Note [Random numbers]).
inline uint32_t bernoulli_word(PhiloxState st, uint64_t i) { return philox_words(st, i / 4)[i % 4]; }

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  // Reserves the next call's stream position.
  PhiloxState next();
  PhiloxState state() const;
  void set_state(PhiloxState st);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace kiln
