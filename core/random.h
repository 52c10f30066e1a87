// Counter-based random numbers (Philox-4x32-10) and the global generator.
//
// Note [Random numbers]: a random kernel call draws from (seed, offset), where
// offset counts the calls made on a generator; element i of the call uses the
// Philox block at counter (i, offset) with key seed. Every element's numbers
// thus depend only on (seed, offset, i): the same on any thread count and, by
// running the same arithmetic, on CUDA. The generator's state is (seed,
// offset), saved in checkpoints for exact resume.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "core/backend.h"

namespace kiln {

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
