#include "data/dataset.h"

#include <array>

namespace kiln::data {

uint64_t example_seed(uint64_t loader_seed, int64_t epoch, size_t index) {
  KILN_CHECK(epoch >= 0, "example_seed: epoch must be >= 0, got ", epoch);
  // The key is salted so that a loader seed equal to a sampler seed does not
  // reproduce the sampler's shuffle words (random_permutation uses the
  // unsalted key with the same counters).
  constexpr uint32_t kSalt = 0x6C6F6164u;  // "load"
  const auto e = static_cast<uint64_t>(epoch);
  const auto i = static_cast<uint64_t>(index);
  const std::array<uint32_t, 4> w = philox4x32(
      {static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(e),
       static_cast<uint32_t>(e >> 32)},
      {static_cast<uint32_t>(loader_seed), static_cast<uint32_t>(loader_seed >> 32) ^ kSalt});
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

}  // namespace kiln::data
