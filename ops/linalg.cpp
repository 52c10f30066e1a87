// matmul with torch.matmul semantics, and linear (x @ W^T + b).
//
// The kernel sees (Bt, M, K) @ (Bt, K, N). A 2-D right operand with a batched
// left one is folded into a single (Bt*M, K) @ (K, N) product, the shape every
// Linear layer has; other batch dims broadcast.
#include <algorithm>

#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// Views t (batch..., R, C) as (Bt, R, C) when its batch dims collapse to a
// single stride (broadcast batch dims of stride 0 included), else copies.
Tensor as_batched(const Tensor& t, int64_t bt) {
  const int64_t nb = t.dim() - 2;
  int64_t bstride = 0, prev = -1;
  bool collapsible = true;
  for (int64_t i = nb - 1; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (prev < 0) bstride = t.stride(i);
    else if (t.stride(i) != t.stride(prev) * t.size(prev)) collapsible = false;
    prev = i;
  }
  Tensor src = t;
  if (!collapsible) {
    src = raw_contiguous(t);
    bstride = t.size(-2) * t.size(-1);
  }
  return make_tensor(src.storage(), {bt, src.size(-2), src.size(-1)}, {bstride, src.stride(-2), src.stride(-1)},
                     src.offset(), src.dtype());
}

// The recorded core: a (..., M, K) @ b (..., K, N), both >= 2-D.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  KILN_CHECK(b.size(-2) == K, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", K, " vs ", b.size(-2), ")");
  const Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "matmul");
  int64_t bt = 1;
  for (int64_t s : batch) bt *= s;
  DType dt = promote_types(a.dtype(), b.dtype());
  KILN_CHECK(dt != DType::Bool, "matmul: not defined for bool tensors");
  Shape ash = batch, bsh = batch, osh = batch;
  ash.insert(ash.end(), {M, K});
  bsh.insert(bsh.end(), {K, N});
  osh.insert(osh.end(), {M, N});
  Tensor out = empty_tensor(osh, dt, a.device());
  if (out.numel() > 0) {
    if (K == 0) {
      backend(a.device()).fill(out, 0.0);
    } else {
      Tensor a3 = as_batched(raw_expand(raw_cast(a, dt), ash), bt);
      Tensor b3 = as_batched(raw_expand(raw_cast(b, dt), bsh), bt);
      backend(a.device()).matmul(raw_view(out, {bt, M, N}), a3, b3);
    }
  }
  if (should_record({a, b})) {
    const auto need = grad_mask({a, b});
    SavedTensor sa(need[1] ? a : Tensor(), "matmul"), sb(need[0] ? b : Tensor(), "matmul");
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    record("matmul", {a, b}, {out}, [=](const TensorList& g) {
      Tensor ga, gb;
      if (need[0]) ga = raw_cast(sum_to(matmul(g[0], transpose(sb.get(), -1, -2)), as), ad);
      if (need[1]) gb = raw_cast(sum_to(matmul(transpose(sa.get(), -1, -2), g[0]), bs), bd);
      return TensorList{ga, gb};
    });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  OpScope scope("matmul", a_in, b_in);
  Tensor a = a_in, b = b_in;
  autocast::cast_inputs("matmul", a, b);  // Note [Autocast policy]
  check_defined(a, "matmul", "a");
  check_defined(b, "matmul", "b");
  check_same_device(a, b, "matmul");
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ", shape_str(a.sizes()),
             " and ", shape_str(b.sizes()));
  // Checked on the caller's shapes, before vectors are unsqueezed or batch dims
  // folded into rows, so the message names what the caller passed.
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(ka == kb, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", ka, " vs ", kb, ")");
  for (int64_t i = 3; i <= std::min(a.dim(), b.dim()); ++i)
    KILN_CHECK(a.size(-i) == b.size(-i) || a.size(-i) == 1 || b.size(-i) == 1, "matmul: shapes ",
               shape_str(a.sizes()), " and ", shape_str(b.sizes()), " have batch dimensions that do not broadcast (",
               a.size(-i), " vs ", b.size(-i), " at dim ", -i, ")");
  if (a.dim() == 1 && b.dim() == 1) {
    return scope.out(reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {}));
  }
  if (a.dim() == 1) return scope.out(squeeze(matmul(unsqueeze(a, 0), b), -2));
  if (b.dim() == 1) return scope.out(squeeze(matmul(a, unsqueeze(b, 1)), -1));
  if (b.dim() == 2 && a.dim() > 2) {  // fold batch into rows: one large GEMM
    Shape out_shape(a.sizes().begin(), a.sizes().end() - 1);
    out_shape.push_back(b.size(1));
    return scope.out(reshape(matmul_nd(reshape(a, {-1, a.size(-1)}), b), out_shape));
  }
  return scope.out(matmul_nd(a, b));
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  OpScope scope("linear", x_in, weight_in, bias_in);
  Tensor x = x_in, weight = weight_in, bias = bias_in;
  autocast::cast_inputs("linear", x, weight, bias);  // Note [Autocast policy]
  check_defined(x, "linear", "x");
  check_defined(weight, "linear", "weight");
  KILN_CHECK(weight.dim() == 2, "linear: weight must be (out_features, in_features), got ", shape_str(weight.sizes()));
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input of shape ", shape_str(x.sizes()),
             " does not match weight ", shape_str(weight.sizes()), " (in_features ", weight.size(1), ")");
  Tensor y = matmul(x, transpose(weight, 0, 1));
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias of shape ", shape_str(bias.sizes()),
               " for ", weight.size(0), " output features");
    y = add(y, bias);
  }
  return scope.out(y);
}

Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("matmul", true, [] {
  return S{{"2-D", {sample_tensor({3, 4}, 70), sample_tensor({4, 5}, 71)}, [](const L& x) { return matmul(x[0], x[1]); }},
           {"batched broadcast", {sample_tensor({2, 1, 3, 4}, 72), sample_tensor({3, 4, 2}, 73)},
            [](const L& x) { return matmul(x[0], x[1]); }},
           {"3-D @ 2-D (folded)", {sample_tensor({2, 3, 4}, 74), sample_tensor({4, 5}, 75)},
            [](const L& x) { return matmul(x[0], x[1]); }},
           {"vector cases", {sample_tensor({4}, 76), sample_tensor({4, 3}, 77)},
            [](const L& x) { return matmul(x[0], x[1]) + matmul(x[1].t(), x[0]); }},
           {"linear", {sample_tensor({2, 3, 4}, 78), sample_tensor({5, 4}, 79), sample_tensor({5}, 80)},
            [](const L& x) { return linear(x[0], x[1], x[2]); }}};
});

}  // namespace kiln
