// Blocked CPU loops for the fused optimizer updates (internal, not installed):
// the multi-tensor CPU bodies (core/cpu/multi_tensor.cpp) and the per-parameter
// loops left in optim/ (SGD, the clipping scale) share these, so every fused
// loop cuts its data the same way.
//
// for_each_block(n, fn) splits [0, n) into parallel chunks of kChunk elements
// and each chunk into blocks of kBlock elements (small enough that a block of
// every operand stays in L1 between the statements of a fused update). Block
// boundaries are multiples of kBlock whatever the thread count, so a loop
// whose result per element depends only on that element's data is
// bit-identical for any thread count, and sum_blocks() adds block partials in
// a fixed order (Note [Deterministic chunking], core/parallel.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

namespace kiln::detail {

inline constexpr int64_t kBlock = 2048;
inline constexpr int64_t kChunk = 32 * kBlock;

// fn(begin, end) for every block of [0, n).
template <typename Fn>
void for_each_block(int64_t n, const Fn& fn) {
  parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += kBlock) fn(i, std::min(e, i + kBlock));
  });
}

// Sum over the blocks of [0, n) of fn(begin, end) -> R, in block order
// (R: double, or any type with R{} as zero and operator+).
template <typename R = double, typename Fn>
R sum_blocks(int64_t n, const Fn& fn) {
  return parallel_reduce(
      n, kChunk, R{},
      [&](int64_t b, int64_t e) {
        R acc{};
        for (int64_t i = b; i < e; i += kBlock) acc = acc + fn(i, std::min(e, i + kBlock));
        return acc;
      },
      [](const R& a, const R& c) { return a + c; });
}

}  // namespace kiln::detail
