// Reductions: sum, mean, amax/amin, max(dim) with indices, argmax, var.
// Integer and bool sums accumulate in int64 (PyTorch's rule).
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor reduce_forward(ReduceOp op, const Tensor& x, const Shape& dims, DType out_dtype) {
  Tensor out = empty_tensor(keepdim_shape(x, dims), out_dtype, x.device());
  backend(x.device()).reduce(op, out, x, dims);
  return out;
}

Tensor drop_dims(const Tensor& t, const Shape& dims, bool keepdim) {
  if (keepdim) return t;
  Shape s;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) s.push_back(t.size(i));
  return raw_view(t, s);
}

// g has the reduced shape (keepdim or not); returns it expanded to `in`.
Tensor expand_back(const Tensor& g, const Shape& in, const Shape& dims) {
  Shape kd = in;
  for (int64_t d : dims) kd[static_cast<size_t>(d)] = 1;
  return expand(reshape(g, kd), in);
}

}  // namespace

Tensor sum(const Tensor& x_in, const Shape& dims_in, bool keepdim) {
  OpScope scope("sum", x_in);
  scope.attr("dims", dims_in);
  scope.attr("keepdim", keepdim);
  Tensor x = x_in;
  autocast::cast_inputs("sum", x);  // Note [Autocast policy]
  check_defined(x, "sum", "x");
  const Shape dims = reduce_dims(x, dims_in, "sum");
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Tensor out = drop_dims(reduce_forward(ReduceOp::Sum, raw_cast(x, dt), dims, dt), dims, keepdim);
  if (should_record({x})) {
    const Shape in = x.sizes();
    record("sum", {x}, {out}, [in, dims](const TensorList& g) { return TensorList{expand_back(g[0], in, dims)}; });
  }
  return scope.out(out);
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x_in, const Shape& dims_in, bool keepdim) {
  OpScope scope("mean", x_in);
  scope.attr("dims", dims_in);
  scope.attr("keepdim", keepdim);
  Tensor x = x_in;
  autocast::cast_inputs("mean", x);  // Note [Autocast policy]
  check_defined(x, "mean", "x");
  KILN_CHECK(is_floating(x.dtype()), "mean: expected a floating-point tensor, got ", dtype_name(x.dtype()),
             "; cast it first");
  const Shape dims = reduce_dims(x, dims_in, "mean");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  // 16-bit floats: sum and divide in float32 (Note [Low-precision compute]),
  // so a mean of many values cannot overflow float16's 65504.
  if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16)
    return scope.out(to_dtype(div(sum(to_dtype(x, DType::Float32), dims, keepdim), static_cast<double>(count)), x.dtype()));
  return scope.out(div(sum(x, dims, keepdim), static_cast<double>(count)));
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

static Tensor extreme(ReduceOp op, const Tensor& x, const Shape& dims_in, bool keepdim, const char* name) {
  check_defined(x, name, "x");
  KILN_CHECK(x.dtype() != DType::Bool, name, ": not defined for bool tensors");
  const Shape dims = reduce_dims(x, dims_in, name);
  Tensor kept = reduce_forward(op, x, dims, x.dtype());
  Tensor out = drop_dims(kept, dims, keepdim);
  if (should_record({x})) {
    SavedTensor sx(x, name), sk(kept, name);
    const Shape in = x.sizes();
    record(name, {x}, {out}, [=](const TensorList& g) {
      // ties share the gradient equally (as torch.amax does)
      Tensor hit = to_dtype(eq(sx.get(), sk.get()), g[0].dtype());
      Tensor count = sum(hit, dims, true);
      return TensorList{mul(expand_back(g[0], in, dims), div(hit, count))};
    });
  }
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  OpScope scope("amax", x);
  scope.attr("dims", dims);
  scope.attr("keepdim", keepdim);
  return scope.out(extreme(ReduceOp::Max, x, dims, keepdim, "amax"));
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  OpScope scope("amin", x);
  scope.attr("dims", dims);
  scope.attr("keepdim", keepdim);
  return scope.out(extreme(ReduceOp::Min, x, dims, keepdim, "amin"));
}
Tensor max(const Tensor& x) { return amax(x); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  OpScope scope("argmax", x);
  scope.attr("dim", dim);
  scope.attr("keepdim", keepdim);
  check_defined(x, "argmax", "x");
  KILN_CHECK(x.dim() > 0, "argmax: expected a tensor with at least one dim");
  const Shape dims{wrap_dim(dim, x.dim(), "argmax")};
  KILN_CHECK(x.size(dims[0]) > 0, "argmax: dimension ", dims[0], " of shape ", shape_str(x.sizes()), " is empty");
  const DType dt = x.dtype() == DType::Bool ? DType::Int32 : x.dtype();
  return scope.out(drop_dims(reduce_forward(ReduceOp::Argmax, raw_cast(x, dt), dims, DType::Int64), dims, keepdim));
}

Tensor argmax(const Tensor& x) {
  check_defined(x, "argmax", "x");
  return argmax(reshape(x.detach(), {-1}), 0, false);
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  OpScope scope("max", x);
  scope.attr("dim", dim);
  scope.attr("keepdim", keepdim);
  check_defined(x, "max", "x");
  KILN_CHECK(x.dim() > 0, "max: expected a tensor with at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "max");
  Tensor idx = argmax(x, d, true);
  Tensor values = reduce_forward(ReduceOp::Max, x, {d}, x.dtype());
  Tensor out_v = drop_dims(values, {d}, keepdim);
  if (should_record({x})) {
    const Shape in = x.sizes();
    const Tensor saved_idx = idx;
    record("max", {x}, {out_v}, [=](const TensorList& g) {
      // gradient to the selected index only
      Shape pos_shape(in.size(), 1);
      pos_shape[static_cast<size_t>(d)] = in[static_cast<size_t>(d)];
      Tensor pos = reshape(arange(0.0, static_cast<double>(in[static_cast<size_t>(d)]), 1.0,
                                  TensorOptions(DType::Int64, g[0].device())), pos_shape);
      Tensor hit = eq(pos, saved_idx);
      Shape kd = in;
      kd[static_cast<size_t>(d)] = 1;
      Tensor zero = zeros({}, TensorOptions(g[0].dtype(), g[0].device()));
      return TensorList{where(hit, expand(reshape(g[0], kd), in), zero)};
    });
  }
  return scope.out(ValuesIndices{out_v, drop_dims(idx, {d}, keepdim)});
}

Tensor var(const Tensor& x, const Shape& dims_in, int64_t correction, bool keepdim) {
  OpScope scope("var", x);
  scope.attr("dims", dims_in);
  scope.attr("correction", correction);
  scope.attr("keepdim", keepdim);
  check_defined(x, "var", "x");
  KILN_CHECK(is_floating(x.dtype()), "var: expected a floating-point tensor, got ", dtype_name(x.dtype()));
  const Shape dims = reduce_dims(x, dims_in, "var");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  KILN_CHECK(correction >= 0, "var: correction must be non-negative, got ", correction);
  Tensor centered = sub(x, mean(x, dims, true));
  const double denom = static_cast<double>(std::max<int64_t>(count - correction, 0));
  return scope.out(div(sum(mul(centered, centered), dims, keepdim), denom));
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const Shape& d, bool k) const { return kiln::sum(*this, d, k); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const Shape& d, bool k) const { return kiln::mean(*this, d, k); }

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("sum", true, [] {
  return S{{"all", {sample_tensor({3, 4}, 50)}, [](const L& x) { return sum(x[0]); }},
           {"dims 0,2 keepdim", {sample_tensor({2, 3, 4}, 51)}, [](const L& x) { return sum(x[0], {0, 2}, true); }},
           {"dim -1", {sample_tensor({2, 3, 4}, 52)}, [](const L& x) { return sum(x[0], {-1}); }}};
});
KILN_REGISTER_OP("mean", true, [] {
  return S{{"dim 1", {sample_tensor({3, 4, 2}, 53)}, [](const L& x) { return mean(x[0], {1}); }},
           {"all", {sample_tensor({3, 4}, 54)}, [](const L& x) { return mean(x[0]); }}};
});
KILN_REGISTER_OP("amax", true, [] {
  return S{{"dim 1", {sample_tensor({3, 5}, 55)}, [](const L& x) { return amax(x[0], {1}); }},
           {"all", {sample_tensor({3, 5}, 56)}, [](const L& x) { return amax(x[0]); }},
           {"amin dim 0", {sample_tensor({3, 5}, 57)}, [](const L& x) { return amin(x[0], {0}, true); }}};
});
KILN_REGISTER_OP("amin", true, [] {
  return S{{"dim 0", {sample_tensor({4, 3}, 58)}, [](const L& x) { return amin(x[0], {0}); }}};
});
KILN_REGISTER_OP("max", true, [] {
  return S{{"dim 1 values", {sample_tensor({3, 5}, 59)}, [](const L& x) { return max(x[0], 1).values; }},
           {"dim 0 keepdim", {sample_tensor({4, 3, 2}, 60)}, [](const L& x) { return max(x[0], 0, true).values; }}};
});
KILN_REGISTER_OP("argmax", false, [] {
  return S{{"dim 1", {sample_tensor({3, 5}, 61)}, [](const L& x) { return argmax(x[0], 1); }}};
});
KILN_REGISTER_OP("var", true, [] {
  return S{{"dim 1 unbiased", {sample_tensor({3, 6}, 62)}, [](const L& x) { return var(x[0], {1}); }},
           {"all biased", {sample_tensor({3, 4}, 63)}, [](const L& x) { return var(x[0], {}, 0); }}};
});

}  // namespace kiln
