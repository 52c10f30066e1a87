// sort, argsort, topk and cumsum along a dim: forward and backward side by
// side. Kernels: core/cpu/sort_scan.cpp, cuda/sort_scan.cu (backend().sort
// sorts contiguous rows, so the dim is moved last first; cumsum takes any dim).
//
// Note [Sort keys]
// ~~~~~~~~~~~~~~~~
// Both devices sort the same unsigned 64-bit key per element, whose order is
// the value order: floats widen to double, every NaN maps to the largest key
// (NaN sorts above +inf, as in PyTorch) and -0.0 to +0.0's key (they tie);
// otherwise a sign-magnitude flip (negative: all bits inverted; positive: the
// sign bit set). Integers flip their sign bit; bool is 0/1. Descending sorts
// the inverted key ascending. Ties are then broken by index, ascending, in
// both directions (a stable sort: std::sort of (key, index) pairs on the CPU,
// cub's stable segmented sort on CUDA), so values and indices agree bit for
// bit between the devices and topk(k) is sort's first k.
//
// topk is that sort and a narrow: O(C log C) per row rather than a selection,
// ample for a language model's vocabulary at sampling time.
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// x with `dim` moved last, contiguous: the (R, C) rows backend().sort takes.
Tensor dim_last(const Tensor& x, int64_t dim) {
  if (dim == x.dim() - 1) return raw_contiguous(x);
  Shape s, st;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) { s.push_back(x.size(d)); st.push_back(x.stride(d)); }
  s.push_back(x.size(dim));
  st.push_back(x.stride(dim));
  return raw_contiguous(make_tensor(x.storage(), s, st, x.offset(), x.dtype()));
}

// y laid out as dim_last(x, dim) made, viewed back in x's dim order.
Tensor dim_back(const Tensor& y, int64_t dim) {
  const int64_t nd = y.dim();
  if (dim == nd - 1) return y;
  Shape s, st;
  for (int64_t d = 0, k = 0; d < nd; ++d) {
    const int64_t src = d == dim ? nd - 1 : k++;
    s.push_back(y.size(src));
    st.push_back(y.stride(src));
  }
  return make_tensor(y.storage(), s, st, y.offset(), y.dtype());
}

// dx (in) = zeros with dx[p with dim := indices[p]] = g[p]: the backward of a
// selection that names each element at most once (sort, topk).
Tensor scatter_back(const Tensor& g, const Tensor& indices, const Shape& in, int64_t dim, DType dt) {
  Tensor gx = raw_zeros(in, dt, g.device());
  if (indices.numel() > 0)
    backend(g.device()).scatter(gx, dim, raw_contiguous(indices), raw_contiguous(raw_cast(g, dt)), false);
  return gx;
}

int64_t wrap_dim0(const Tensor& x, int64_t dim, const char* op) {
  if (x.dim() > 0) return wrap_dim(dim, x.dim(), op);
  KILN_CHECK(dim == 0 || dim == -1, op, ": dim ", dim, " is out of range for a 0-dim tensor");
  return 0;
}

// Sorted rows of x along dim, as x's layout: values and int64 indices; k < 0: all.
ValuesIndices sorted_along(const Tensor& x, int64_t dim, bool descending, int64_t k) {
  Tensor rows = dim_last(x, dim);
  Tensor v = empty_tensor(rows.sizes(), x.dtype(), x.device());
  Tensor i = empty_tensor(rows.sizes(), DType::Int64, x.device());
  if (rows.numel() > 0) backend(x.device()).sort(v, i, rows, descending);
  if (k >= 0 && k < rows.size(-1)) {  // the first k of each row, compacted
    Shape s = rows.sizes();
    s.back() = k;
    v = raw_contiguous(make_tensor(v.storage(), s, v.strides(), 0, v.dtype()));
    i = raw_contiguous(make_tensor(i.storage(), s, i.strides(), 0, DType::Int64));
  }
  return {dim_back(v, dim), dim_back(i, dim)};
}

}  // namespace

// ---- sort / argsort ---------------------------------------------------------------
// forward:  values, indices = x sorted along dim (stable)      x, values, indices (..., C, ...)
// backward: dx = zeros(x).scatter(dim, indices, dvalues)
ValuesIndices sort(const Tensor& x, int64_t dim_in, bool descending, bool /*stable: always*/) {
  OpScope scope("sort", x);
  scope.attr("dim", dim_in);
  scope.attr("descending", descending);
  check_defined(x, "sort", "x");
  if (x.dim() == 0) {
    wrap_dim0(x, dim_in, "sort");
    ValuesIndices r = sort(reshape(x, {1}), 0, descending);
    return scope.out(ValuesIndices{reshape(r.values, {}), reshape(r.indices, {})});
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), "sort");
  ValuesIndices r = sorted_along(x, dim, descending, -1);
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    const Tensor idx = r.indices;
    record("sort", {x}, {r.values}, [=](const TensorList& g) { return TensorList{scatter_back(g[0], idx, in, dim, dt)}; });
  }
  return scope.out(r);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  OpScope scope("argsort", x);
  scope.attr("dim", dim);
  scope.attr("descending", descending);
  scope.attr("stable", stable);
  check_defined(x, "argsort", "x");
  NoGradGuard ng;  // indices only: no history
  return scope.out(sort(x.detach(), dim, descending, stable).indices);
}

// ---- topk --------------------------------------------------------------------------
// forward:  values, indices = the first k of sort(x, dim, descending = largest)
//           x (..., C, ...) -> (..., k, ...)
// backward: dx = zeros(x).scatter(dim, indices, dvalues)
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim_in, bool largest, bool /*sorted: always*/) {
  OpScope scope("topk", x);
  scope.attr("k", k);
  scope.attr("dim", dim_in);
  scope.attr("largest", largest);
  check_defined(x, "topk", "x");
  const int64_t dim = wrap_dim0(x, dim_in, "topk");
  const int64_t C = x.dim() == 0 ? 1 : x.size(dim);
  KILN_CHECK(k >= 0 && k <= C, "topk: k = ", k, " is out of range for dimension ", dim, " of size ", C,
             " (input ", shape_str(x.sizes()), ")");
  if (x.dim() == 0) {
    ValuesIndices r = topk(reshape(x, {1}), k, 0, largest);
    return scope.out(k == 1 ? ValuesIndices{reshape(r.values, {}), reshape(r.indices, {})} : r);
  }
  ValuesIndices r = sorted_along(x, dim, largest, k);
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    const Tensor idx = r.indices;
    record("topk", {x}, {r.values}, [=](const TensorList& g) { return TensorList{scatter_back(g[0], idx, in, dim, dt)}; });
  }
  return scope.out(r);
}

// ---- cumsum ------------------------------------------------------------------------
// forward:  out[..j..] = sum_{i <= j} x[..i..] along dim          x, out (..., n, ...)
// backward: dx[..j..] = sum_{i >= j} dout[..i..] (the reverse running sum)
Tensor cumsum(const Tensor& x, int64_t dim_in) {
  OpScope scope("cumsum", x);
  scope.attr("dim", dim_in);
  check_defined(x, "cumsum", "x");
  if (x.dim() == 0) {
    wrap_dim0(x, dim_in, "cumsum");
    return scope.out(reshape(cumsum(reshape(x, {1}), 0), {}));
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), "cumsum");
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Tensor out = empty_tensor(x.sizes(), dt, x.device());
  if (out.numel() > 0) backend(x.device()).cumsum(out, raw_contiguous(raw_cast(x, dt)), dim, false);
  if (should_record({x})) {
    record("cumsum", {x}, {out}, [=](const TensorList& g) {
      Tensor gi = raw_contiguous(raw_cast(g[0], dt));
      Tensor gx = empty_tensor(gi.sizes(), dt, gi.device());
      if (gx.numel() > 0) backend(gx.device()).cumsum(gx, gi, dim, true);
      return TensorList{gx};
    });
  }
  return scope.out(out);
}

// ---- registry samples -----------------------------------------------------------------
using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("sort", true, [] {
  return S{{"dim -1 ascending", {sample_tensor({3, 5}, 420)}, [](const L& x) { return sort(x[0]).values; }},
           {"dim 0 descending", {sample_tensor({4, 3}, 421)}, [](const L& x) { return sort(x[0], 0, true).values; }},
           {"dim 1 of 3-D", {sample_tensor({2, 4, 3}, 422)}, [](const L& x) { return sort(x[0], 1).values; }}};
});
KILN_REGISTER_OP("argsort", false, [] {
  return S{{"dim -1 descending", {sample_tensor({3, 5}, 423)}, [](const L& x) { return argsort(x[0], -1, true); }},
           {"ties", {tensor({1, 0, 1, 0, 2, 1}, {2, 3}, DType::Float64)}, [](const L& x) { return argsort(x[0]); }}};
});
KILN_REGISTER_OP("topk", true, [] {
  return S{{"k 2 largest", {sample_tensor({3, 5}, 424)}, [](const L& x) { return topk(x[0], 2).values; }},
           {"k 3 smallest dim 0", {sample_tensor({4, 3}, 425)}, [](const L& x) { return topk(x[0], 3, 0, false).values; }},
           {"k = size", {sample_tensor({2, 4}, 426)}, [](const L& x) { return topk(x[0], 4).values; }}};
});
KILN_REGISTER_OP("cumsum", true, [] {
  return S{{"dim 1", {sample_tensor({3, 5}, 427)}, [](const L& x) { return cumsum(x[0], 1); }},
           {"dim 0", {sample_tensor({4, 3}, 428)}, [](const L& x) { return cumsum(x[0], 0); }},
           {"dim -2 of 3-D", {sample_tensor({2, 3, 4}, 429)}, [](const L& x) { return cumsum(x[0], -2); }}};
});

}  // namespace kiln
