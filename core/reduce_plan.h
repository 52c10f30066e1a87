// How a reduction is laid out, decided once for every device (internal, not
// installed): the CPU (core/cpu/reduce.cpp) and CUDA (cuda/reduce.cu) bodies
// of Backend::reduce both start from plan_reduce().
//
// A reduction of `in` over `dims` into `out` (in's shape with those dims set
// to 1, contiguous) has K outputs of R reduced elements each, and runs in one
// of three ways:
//  - Empty: R == 0 or `in` is empty: a sum is 0 everywhere, max/min/argmax an
//    error ("cannot take max/min/argmax over an empty dimension");
//  - Columns: a sum over the leading dims of a contiguous input whose other
//    dims are all kept (K > 1; e.g. a bias gradient): `in` is (R, K)
//    row-major and out[k] = sum_r in[r, k];
//  - Rows: anything else. `rows` is `in` with the kept dims permuted first and
//    the reduced dims last, a (K, R) matrix in row-major order once
//    contiguous (contiguous_rows() copies it when it is not); output k
//    reduces row k.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace kiln {

struct ReducePlan {
  enum class Layout { Empty, Columns, Rows };
  Layout layout = Layout::Rows;
  int64_t R = 1;  // reduced elements per output
  int64_t K = 0;  // outputs (out.numel())
  Tensor rows;    // Rows: the permuted view of `in` (may be non-contiguous)
};

// Throws for an empty max/min/argmax, and (internal error) for a
// non-contiguous out. dims: distinct, in [0, in.dim()).
ReducePlan plan_reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims);

// plan.rows, contiguous: itself, or a copy made with the device's copy kernel
// copy(dst, src).
template <typename Copy>
Tensor contiguous_rows(const ReducePlan& plan, Copy&& copy) {
  if (plan.rows.is_contiguous()) return plan.rows;
  Tensor c = empty_tensor(plan.rows.sizes(), plan.rows.dtype(), plan.rows.device());
  copy(c, plan.rows);
  return c;
}

}  // namespace kiln
