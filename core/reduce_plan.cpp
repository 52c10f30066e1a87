// plan_reduce (core/reduce_plan.h): the layout decision the CPU and CUDA
// reductions share.
#include "core/reduce_plan.h"

#include <vector>

#include "core/error.h"

namespace kiln {

ReducePlan plan_reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) {
  const int64_t nd = in.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  ReducePlan plan;
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[static_cast<size_t>(d)]) plan.R *= in.size(d);
  plan.K = out.numel();
  KILN_CHECK(out.is_contiguous(), "internal: reduce output must be contiguous");
  if (plan.R == 0 || in.numel() == 0) {
    KILN_CHECK(op == ReduceOp::Sum, "reduce: cannot take max/min/argmax over an empty dimension of ",
               shape_str(in.sizes()));
    plan.layout = ReducePlan::Layout::Empty;
    return plan;
  }
  // Columns: a contiguous input whose reduced dims are exactly the leading ones.
  if (op == ReduceOp::Sum && in.is_contiguous()) {
    int64_t lead = 0;
    while (lead < nd && reduced[static_cast<size_t>(lead)]) ++lead;
    bool rest_kept = true;
    for (int64_t d = lead; d < nd; ++d) rest_kept = rest_kept && !reduced[static_cast<size_t>(d)];
    if (lead > 0 && rest_kept && plan.K > 1) {
      plan.layout = ReducePlan::Layout::Columns;
      return plan;
    }
  }
  // Rows: kept dims first, reduced dims last.
  Shape perm;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced[static_cast<size_t>(d)]) perm.push_back(d);
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[static_cast<size_t>(d)]) perm.push_back(d);
  Shape sizes, strides;
  for (int64_t d : perm) {
    sizes.push_back(in.size(d));
    strides.push_back(in.stride(d));
  }
  plan.layout = ReducePlan::Layout::Rows;
  plan.rows = make_tensor(in.storage(), sizes, strides, in.offset(), in.dtype());
  return plan;
}

}  // namespace kiln
