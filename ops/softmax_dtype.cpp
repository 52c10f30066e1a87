// softmax and log_softmax with an output dtype (ops/ops.h): compositions of
// to_dtype and the softmax op (ops/nn_ops.cpp), on every device, with their
// autograd: compute in float32 (float64 when x or the output dtype is
// float64), round once to the output dtype. softmax(x_bf16, -1, Float32) thus
// equals softmax(x.to(Float32), -1), PyTorch's softmax(x, -1, dtype=float32).
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor softmax_to(const Tensor& x, int64_t dim, DType dtype, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(x, name, "x");
  KILN_CHECK(is_floating(dtype), name, ": output dtype must be floating-point, got ", dtype_name(dtype));
  KILN_CHECK(x.dtype() != DType::Bool, name, ": not defined for bool tensors");
  const DType compute = x.dtype() == DType::Float64 || dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor xc = to_dtype(x, compute);
  return to_dtype(log ? log_softmax(xc, dim) : softmax(xc, dim), dtype);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, DType dtype) {
  OpScope scope("softmax_dtype", x);
  scope.attr("dim", dim);
  scope.attr("dtype", dtype);
  return scope.out(softmax_to(x, dim, dtype, false));
}
Tensor log_softmax(const Tensor& x, int64_t dim, DType dtype) {
  OpScope scope("log_softmax_dtype", x);
  scope.attr("dim", dim);
  scope.attr("dtype", dtype);
  return scope.out(softmax_to(x, dim, dtype, true));
}

// ---- registry samples -----------------------------------------------------------------
// The float32-output samples round the result to float32 (relative error
// 6e-8), which central differences at eps 1e-6 would amplify past 1e-2; at
// eps 1e-3 the rounding is ~1e-4 of the slope and the truncation ~1e-6.
using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("softmax_dtype", true, [] {
  S s{{"float64 out, dim -1", {sample_tensor({3, 5}, 450, -2.0, 2.0)},
       [](const L& x) { return softmax(x[0], -1, DType::Float64); }},
      {"float32 out, dim 0", {sample_tensor({4, 3}, 451, -2.0, 2.0)},
       [](const L& x) { return softmax(x[0], 0, DType::Float32); }}};
  s[1].eps = 1e-3, s[1].atol = 1e-3, s[1].rtol = 1e-2;
  return s;
});
KILN_REGISTER_OP("log_softmax_dtype", true, [] {
  S s{{"float64 out, dim 1", {sample_tensor({3, 4, 2}, 452, -2.0, 2.0)},
       [](const L& x) { return log_softmax(x[0], 1, DType::Float64); }},
      {"float32 out, dim -1", {sample_tensor({3, 5}, 453, -2.0, 2.0)},
       [](const L& x) { return log_softmax(x[0], -1, DType::Float32); }}};
  s[1].eps = 1e-3, s[1].atol = 1e-3, s[1].rtol = 1e-2;
  return s;
});

}  // namespace kiln
