// CPU reductions: sum, max, min, argmax over any set of dims.
//
// The layout comes from plan_reduce (core/reduce_plan.h, shared with CUDA):
// "rows" (the reduced elements of each output contiguous, after a copy when
// the permuted view is not) or "columns" (the reduced dims lead a contiguous
// tensor: out[k] = sum_r in[r, k], e.g. a bias gradient). Sums accumulate in compute type
// (float for 16-bit floats) with 8 independent lanes; parallel work is split
// over outputs only, so results never depend on the thread count.
#include <cmath>
#include <limits>
#include <numeric>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"
#include "core/reduce_plan.h"

namespace kiln::cpu {
namespace {

template <typename T> using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, compute_t<T>>;

template <typename T>
Acc<T> sum_row(const T* x, int64_t n) {
  using A = Acc<T>;
  A lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<A>(static_cast<compute_t<T>>(x[i + l]));
  A tail = 0;
  for (; i < n; ++i) tail += static_cast<A>(static_cast<compute_t<T>>(x[i]));
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

template <typename T>
void reduce_inner(ReduceOp op, const Tensor& out, const T* in, int64_t K, int64_t R) {
  using A = compute_t<T>;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1));
  if (op == ReduceOp::Argmax) {
    int64_t* o = out.data_ptr<int64_t>();
    parallel_for(K, grain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const T* x = in + k * R;
        int64_t best = 0;
        A bv = static_cast<A>(x[0]);
        for (int64_t r = 1; r < R; ++r) {
          const A v = static_cast<A>(x[r]);
          if constexpr (!std::is_integral_v<A>) {
            if (bv != bv) break;  // NaN wins, first one
            if (v != v) { best = r; bv = v; break; }
          }
          if (v > bv) { bv = v; best = r; }
        }
        o[k] = best;
      }
    });
    return;
  }
  T* o = out.data_ptr<T>();
  parallel_for(K, grain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const T* x = in + k * R;
      if (op == ReduceOp::Sum) {
        o[k] = static_cast<T>(static_cast<compute_t<T>>(sum_row(x, R)));
      } else {
        A bv = static_cast<A>(x[0]);
        for (int64_t r = 1; r < R; ++r) {
          const A v = static_cast<A>(x[r]);
          if constexpr (!std::is_integral_v<A> && !std::is_same_v<A, bool>) {
            if (v != v) { bv = v; break; }
          }
          if (op == ReduceOp::Max ? v > bv : v < bv) bv = v;
        }
        o[k] = static_cast<T>(bv);
      }
    }
  });
}

// out[k] = sum_r in[r * K + k]; parallel over column blocks.
template <typename T>
void sum_outer(const Tensor& out, const T* in, int64_t R, int64_t K) {
  using A = Acc<T>;
  T* o = out.data_ptr<T>();
  parallel_for(K, 256, [&](int64_t b, int64_t e) {
    std::vector<A> acc(static_cast<size_t>(e - b), A(0));
    for (int64_t r = 0; r < R; ++r) {
      const T* row = in + r * K;
      for (int64_t k = b; k < e; ++k) acc[k - b] += static_cast<A>(static_cast<compute_t<T>>(row[k]));
    }
    for (int64_t k = b; k < e; ++k) o[k] = static_cast<T>(static_cast<compute_t<T>>(acc[k - b]));
  });
}

}  // namespace

void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) {
  const ReducePlan plan = plan_reduce(op, out, in, dims);
  switch (plan.layout) {
    case ReducePlan::Layout::Empty:
      fill(out, 0.0);
      return;
    case ReducePlan::Layout::Columns:
      dispatch_all(in.dtype(), "sum", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bool>) fail("sum: bool tensors must be cast first");
        else sum_outer<T>(out, in.data_ptr<T>(), plan.R, plan.K);
      });
      return;
    case ReducePlan::Layout::Rows: {
      const Tensor src = contiguous_rows(plan, [](const Tensor& d, const Tensor& s) { copy(d, s); });
      dispatch_all(in.dtype(), "reduce", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bool>) fail("reduce: bool tensors must be cast first");
        else reduce_inner<T>(op, out, src.data_ptr<T>(), plan.K, plan.R);
      });
      return;
    }
  }
}

}  // namespace kiln::cpu
