// tril, triu and causal_mask: compositions of existing kernels on every device
// (arange and comparisons build the (M, N) keep mask, backend().where applies
// it), so no device needs kernels of its own. Forward and backward side by side.
#include <limits>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// (M, N) bool: true where j - i <= diagonal (lower) or >= diagonal (upper).
Tensor triangle_keep(int64_t M, int64_t N, int64_t diagonal, bool upper, Device dev) {
  NoGradGuard ng;
  const TensorOptions o(DType::Int64, dev);
  Tensor diff = sub(reshape(arange(0.0, static_cast<double>(N), 1.0, o), {1, N}),
                    reshape(arange(0.0, static_cast<double>(M), 1.0, o), {M, 1}));  // j - i
  return upper ? ge(diff, static_cast<double>(diagonal)) : le(diff, static_cast<double>(diagonal));
}

// x (..., M, N) with the elements outside the triangle set to 0; no history.
Tensor triangle_raw(const Tensor& x, int64_t diagonal, bool upper) {
  Tensor out = empty_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor keep = triangle_keep(x.size(-2), x.size(-1), diagonal, upper, x.device());
  Tensor zero = raw_zeros({}, x.dtype(), x.device());
  backend(x.device()).where(out, raw_expand(keep, x.sizes()), x, raw_expand(zero, x.sizes()));
  return out;
}

// forward:  out = x where j - i <= diagonal (tril) / >= diagonal (triu), else 0   x, out (..., M, N)
// backward: dx = tril(dout, diagonal) / triu(dout, diagonal)
Tensor triangle(const Tensor& x, int64_t diagonal, bool upper) {
  const char* name = upper ? "triu" : "tril";
  check_defined(x, name, "x");
  KILN_CHECK(x.dim() >= 2, name, ": input must have at least 2 dims, got ", shape_str(x.sizes()));
  Tensor out = triangle_raw(x, diagonal, upper);
  if (should_record({x}))
    record(name, {x}, {out}, [=](const TensorList& g) { return TensorList{triangle_raw(g[0], diagonal, upper)}; });
  return out;
}

// torch.finfo(dtype).min: the additive mask value HF and BertModel use.
double lowest_of(DType dt) {
  switch (dt) {
    case DType::Float64: return std::numeric_limits<double>::lowest();
    case DType::Float16: return -65504.0;
    case DType::BFloat16: return -3.3895313892515355e38;  // -(2 - 2^-7) * 2^127
    default: return std::numeric_limits<float>::lowest();
  }
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  OpScope scope("tril", x);
  scope.attr("diagonal", diagonal);
  return scope.out(triangle(x, diagonal, false));
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  OpScope scope("triu", x);
  scope.attr("diagonal", diagonal);
  return scope.out(triangle(x, diagonal, true));
}

// (1, 1, T, T): bool keep mask, or additive 0 / lowest of a floating dtype.
Tensor causal_mask(int64_t T, TensorOptions opts) {
  OpScope scope("causal_mask");
  scope.attr("T", T);
  scope.attr("dtype", opts.dtype);
  KILN_CHECK(T >= 0, "causal_mask: T must be >= 0, got ", T);
  const DType dt = opts.dtype.value_or(DType::Float32);
  KILN_CHECK(dt == DType::Bool || is_floating(dt), "causal_mask: dtype must be floating-point (an additive mask) "
             "or bool (true where attended), got ", dtype_name(dt));
  KILN_CHECK(!opts.requires_grad, "causal_mask: a mask takes no gradient (requires_grad must be false)");
  if (T == 0) return scope.out(empty_tensor({1, 1, 0, 0}, dt, opts.device));
  Tensor keep = triangle_keep(T, T, 0, false, opts.device);
  if (dt == DType::Bool) return scope.out(raw_view(raw_contiguous(keep), {1, 1, T, T}));
  Tensor out = empty_tensor({T, T}, dt, opts.device);
  Tensor zero = raw_zeros({}, dt, opts.device);
  Tensor low = raw_cast(scalar_tensor(lowest_of(dt), TensorOptions(DType::Float64, opts.device)), dt);
  backend(opts.device).where(out, keep, raw_expand(zero, {T, T}), raw_expand(low, {T, T}));
  return scope.out(raw_view(out, {1, 1, T, T}));
}

// ---- registry samples -----------------------------------------------------------------
using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("tril", true, [] {
  return S{{"square", {sample_tensor({4, 4}, 440)}, [](const L& x) { return tril(x[0]); }},
           {"batched wide, diagonal 1", {sample_tensor({2, 3, 5}, 441)}, [](const L& x) { return tril(x[0], 1); }},
           {"tall, diagonal -1", {sample_tensor({5, 3}, 442)}, [](const L& x) { return tril(x[0], -1); }}};
});
KILN_REGISTER_OP("triu", true, [] {
  return S{{"square", {sample_tensor({4, 4}, 443)}, [](const L& x) { return triu(x[0]); }},
           {"batched tall, diagonal -1", {sample_tensor({2, 5, 3}, 444)}, [](const L& x) { return triu(x[0], -1); }},
           {"wide, diagonal 2", {sample_tensor({3, 5}, 445)}, [](const L& x) { return triu(x[0], 2); }}};
});

}  // namespace kiln
