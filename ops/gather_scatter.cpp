// gather, scatter and scatter_add along one dim, PyTorch's semantics: forward
// (argument checks, backend().gather / scatter) and backward side by side.
// Kernels: core/cpu/gather_scatter.cpp, cuda/gather_scatter.cu.
//
// Note [Deterministic scatter_add]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Several index entries may name one output element (gather's backward, when
// an index repeats). scatter_add adds their sources in row-major order of the
// index, rounding to the element type after each add, on every device and
// thread count; scatter lets the last of them in that order win. The CPU runs
// each (outer, inner) line of the index in order (lines never share a target,
// so threads split lines). CUDA uses no float atomics: it sorts (target,
// position) pairs by target with a stable radix sort, which groups the
// entries of each target in row-major order, and one thread per target then
// folds its group in that order, so the two devices agree bit for bit
// (cuda/gather_scatter.cu).
//
// Out-of-range index values are a kiln::Error naming the op, the value and
// the dim, checked here on the host for every device (the index is copied
// from the device, as index_select and embedding do); the CUDA kernels also
// skip any entry out of range rather than touch memory outside a tensor.
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// The index as the kernels take it: contiguous int64, every value checked
// against size(dim) of x; its shape checked against x (and src).
Tensor checked_index(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const char* op) {
  KILN_CHECK(is_integral(index.dtype()), op, ": index must be int64 or int32, got ", dtype_name(index.dtype()));
  check_same_device(x, index, op);
  KILN_CHECK(index.dim() == x.dim(), op, ": index ", shape_str(index.sizes()), " must have as many dims as the input ",
             shape_str(x.sizes()));
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == dim || index.size(d) <= x.size(d), op, ": index ", shape_str(index.sizes()),
               " is larger than the input ", shape_str(x.sizes()), " in dimension ", d, " (only dimension ", dim,
               " may differ)");
  if (src.defined()) {
    check_same_device(x, src, op);
    KILN_CHECK(src.dim() == x.dim(), op, ": src ", shape_str(src.sizes()), " must have as many dims as the input ",
               shape_str(x.sizes()));
    for (int64_t d = 0; d < x.dim(); ++d)
      KILN_CHECK(index.size(d) <= src.size(d), op, ": index ", shape_str(index.sizes()), " is larger than src ",
                 shape_str(src.sizes()), " in dimension ", d);
  }
  Tensor idx = raw_contiguous(raw_cast(index.detach(), DType::Int64));
  const int64_t n = x.size(dim);
  if (idx.numel() > 0) {
    const Tensor host = idx.device().is_cpu() ? idx : to_device(idx, kCPU);
    const int64_t* p = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < host.numel(); ++i)
      KILN_CHECK(p[i] >= 0 && p[i] < n, op, ": index ", p[i], " is out of bounds for dimension ", dim, " with size ",
                 n, " (at position ", i, " of index ", shape_str(index.sizes()), ")");
  }
  return idx;
}

// The leading block of t with `shape` (shape <= t's sizes), contiguous, of dtype dt.
Tensor leading_block(const Tensor& t, const Shape& shape, DType dt) {
  Tensor v = make_tensor(t.storage(), shape, t.strides(), t.offset(), t.dtype());
  return raw_contiguous(raw_cast(v, dt));
}

// g (index's shape) as the gradient of src: zero-padded to src's shape.
Tensor pad_to(const Tensor& g, const Shape& shape, DType dt) {
  if (g.sizes() == shape) return raw_cast(g, dt);
  Tensor out = raw_zeros(shape, dt, g.device());
  backend(g.device()).copy(make_tensor(out.storage(), g.sizes(), out.strides(), 0, dt), g);
  return out;
}

// A fresh contiguous copy of t in dtype dt (safe to write into).
Tensor fresh_copy(const Tensor& t, DType dt) {
  Tensor out = empty_tensor(t.sizes(), dt, t.device());
  if (out.numel() > 0) backend(t.device()).copy(out, t);
  return out;
}

Tensor gather_raw(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = empty_tensor(idx.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) backend(x.device()).gather(out, x, dim, idx);
  return out;
}

// x (any shape) -> a copy with src scattered in (assigned, or added when add).
Tensor scatter_raw(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src_block, bool add) {
  Tensor out = fresh_copy(x, x.dtype());
  if (idx.numel() > 0) backend(x.device()).scatter(out, dim, idx, src_block, add);
  return out;
}

// 0-dim inputs are treated as 1-element 1-D ones (PyTorch allows dim 0 / -1).
bool scalar_case(const Tensor& x, int64_t dim, const char* op) {
  if (x.dim() > 0) return false;
  KILN_CHECK(dim == 0 || dim == -1, op, ": dim ", dim, " is out of range for a 0-dim tensor");
  return true;
}

Tensor scatter_impl(const Tensor& x, int64_t dim_in, const Tensor& index, const Tensor& src, bool add,
                    const char* op) {
  check_defined(x, op, "x");
  check_defined(index, op, "index");
  check_defined(src, op, "src");
  if (scalar_case(x, dim_in, op)) {
    KILN_CHECK(index.dim() == 0 && src.dim() == 0, op, ": a 0-dim input takes a 0-dim index and src, got ",
               shape_str(index.sizes()), " and ", shape_str(src.sizes()));
    return reshape(scatter_impl(reshape(x, {1}), 0, reshape(index, {1}), reshape(src, {1}), add, op), {});
  }
  KILN_CHECK(!add || x.dtype() != DType::Bool, op, ": not defined for bool tensors");
  const int64_t dim = wrap_dim(dim_in, x.dim(), op);
  const Tensor idx = checked_index(x, dim, index, src, op);
  Tensor out = scatter_raw(x, dim, idx, leading_block(src, idx.sizes(), x.dtype()), add);
  if (should_record({x, src})) {
    const auto need = grad_mask({x, src});
    const Shape src_shape = src.sizes();
    const DType xd = x.dtype(), sd = src.dtype();
    record(op, {x, src}, {out}, [=](const TensorList& g) {
      Tensor gx, gs;
      if (need[0]) {  // scatter: the written positions pass no gradient to x; scatter_add: all do
        gx = add ? g[0] : scatter_raw(g[0], dim, idx, raw_zeros(idx.sizes(), g[0].dtype(), g[0].device()), false);
        gx = raw_cast(gx, xd);
      }
      if (need[1]) gs = pad_to(gather_raw(g[0], dim, idx), src_shape, sd);
      return TensorList{gx, gs};
    });
  }
  return out;
}

}  // namespace

// ---- gather ------------------------------------------------------------------------
// forward:  out[p] = x[p with dim := index[p]]        x (..., n, ...), index/out (..., k, ...)
// backward: dx = zeros(x).scatter_add(dim, index, dout)
Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  OpScope scope("gather", x, index);
  scope.attr("dim", dim_in);
  check_defined(x, "gather", "x");
  check_defined(index, "gather", "index");
  if (scalar_case(x, dim_in, "gather")) {
    KILN_CHECK(index.dim() == 0, "gather: a 0-dim input takes a 0-dim index, got ", shape_str(index.sizes()));
    return scope.out(reshape(gather(reshape(x, {1}), 0, reshape(index, {1})), {}));
  }
  const int64_t dim = wrap_dim(dim_in, x.dim(), "gather");
  const Tensor idx = checked_index(x, dim, index, Tensor(), "gather");
  Tensor out = gather_raw(x, dim, idx);
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    record("gather", {x}, {out}, [=](const TensorList& g) {
      Tensor gx = raw_zeros(in, dt, g[0].device());
      if (idx.numel() > 0) backend(gx.device()).scatter(gx, dim, idx, raw_contiguous(raw_cast(g[0], dt)), true);
      return TensorList{gx};
    });
  }
  return scope.out(out);
}

// ---- scatter / scatter_add -----------------------------------------------------------
// forward:  out = x; out[p with dim := index[p]] = src[p]  (scatter_add: +=)
// backward: dx = dout with the written positions zeroed (scatter_add: dout);
//           dsrc = dout.gather(dim, index), zero-padded to src's shape
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  OpScope scope("scatter", x, index, src);
  scope.attr("dim", dim);
  return scope.out(scatter_impl(x, dim, index, src, false, "scatter"));
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  OpScope scope("scatter", x, index);
  scope.attr("dim", dim);
  scope.attr("value", value);
  check_defined(x, "scatter", "x");
  check_defined(index, "scatter", "index");
  Tensor v = raw_expand(scalar_tensor(value, TensorOptions(x.dtype(), x.device())), index.sizes());
  return scope.out(scatter_impl(x, dim, index, v, false, "scatter"));
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  OpScope scope("scatter_add", x, index, src);
  scope.attr("dim", dim);
  return scope.out(scatter_impl(x, dim, index, src, true, "scatter_add"));
}

// ---- registry samples -----------------------------------------------------------------
using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("gather", true, [] {
  return S{{"dim 1, repeated indices", {sample_tensor({3, 4}, 400), tensor_from({3, 0, 1, 1, 2, 3}, {3, 2})},
            [](const L& x) { return gather(x[0], 1, x[1]); }},
           {"dim 0, index smaller in dim 1", {sample_tensor({3, 4}, 401), tensor_from({2, 0, 1, 1, 0, 2}, {2, 3})},
            [](const L& x) { return gather(x[0], 0, x[1]); }},
           {"dim -1 of 3-D", {sample_tensor({2, 3, 4}, 402), tensor_from({0, 3, 2, 2, 1, 0, 3, 3, 1, 2, 0, 1}, {2, 3, 2})},
            [](const L& x) { return gather(x[0], -1, x[1]); }}};
});
KILN_REGISTER_OP("scatter", true, [] {
  return S{{"dim 1, src larger than index",
            {sample_tensor({3, 5}, 403), tensor_from({4, 0, 2, 3, 1, 0}, {3, 2}), sample_tensor({3, 3}, 404)},
            [](const L& x) { return scatter(x[0], 1, x[1], x[2]); }},
           {"dim 0", {sample_tensor({4, 3}, 405), tensor_from({3, 0, 1, 1, 2, 0}, {2, 3}), sample_tensor({2, 3}, 406)},
            [](const L& x) { return scatter(x[0], 0, x[1], x[2]); }},
           {"scalar value", {sample_tensor({3, 4}, 407), tensor_from({1, 3, 0, 0, 2, 1}, {3, 2})},
            [](const L& x) { return scatter(x[0], -1, x[1], 0.5); }}};
});
KILN_REGISTER_OP("scatter_add", true, [] {
  return S{{"dim 1, repeated indices",
            {sample_tensor({3, 4}, 408), tensor_from({1, 1, 3, 0, 0, 0, 2, 3, 2}, {3, 3}), sample_tensor({3, 3}, 409)},
            [](const L& x) { return scatter_add(x[0], 1, x[1], x[2]); }},
           {"dim 0 of 3-D", {sample_tensor({3, 2, 2}, 410), tensor_from({2, 0, 1, 2, 2, 2, 0, 1}, {2, 2, 2}),
                             sample_tensor({2, 2, 3}, 411)},
            [](const L& x) { return scatter_add(x[0], 0, x[1], x[2]); }}};
});

}  // namespace kiln
