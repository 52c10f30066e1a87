// Helpers for the fused optimizer loops (internal to optim/).
//
// for_each_block(n, fn) splits [0, n) into parallel chunks of kChunk elements
// and each chunk into blocks of kBlock elements (small enough that a block of
// every operand stays in L1 between the statements of a fused update). Block
// boundaries are multiples of kBlock whatever the thread count, so a loop
// whose result per element depends only on that element's data is
// bit-identical for any thread count, and sum_blocks() adds block partials in
// a fixed order (Note [Deterministic chunking]).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace kiln::optim::detail {

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

// Sum of x[i]^2 over [0, n) in float64 with eight interleaved accumulators
// combined in a fixed order: deterministic, and vectorisable without fast-math.
template <typename T>
double sum_squares(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(x[i + k]);
      acc[k] += v * v;
    }
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// True when t is updated by the fused CPU loops: a CPU tensor, and the
// generic path not forced by set_force_generic_update() (optim/optimizer.h,
// Note [Fused and generic updates]).
bool use_fused_update(const Tensor& t);

// f(TypeTag<T>{}) for T = float or double; other dtypes are a kiln::Error.
template <typename F>
decltype(auto) dispatch_float(DType t, const std::string& op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    default: fail(op, ": parameters must be float32 or float64, got ", dtype_name(t));
  }
}

}  // namespace kiln::optim::detail
