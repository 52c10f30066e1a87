// View ops: results share storage with their input (no copy). Each backward
// maps the gradient back to the input's shape.
#include <numeric>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  Tensor v = make_tensor(x.storage(), std::move(sizes), std::move(strides), offset, x.dtype());
  v.impl().is_view = true;
  return v;
}

// x.offset() + index * x.stride(d), checked: a tensor with no elements may
// have sizes and strides whose products overflow int64.
int64_t view_offset(const Tensor& x, int64_t d, int64_t index, const char* op) {
  int64_t step = 0, offset = 0;
  KILN_CHECK(!__builtin_mul_overflow(index, x.stride(d), &step) && !__builtin_add_overflow(x.offset(), step, &offset),
             op, ": index ", index, " times stride ", x.stride(d), " of dimension ", d, " overflows int64");
  return offset;
}

// Resolves one -1 in `shape` against numel.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      KILN_CHECK(!__builtin_mul_overflow(known, out[i], &known), op, ": shape ", shape_str(shape),
                 " has more elements than int64 counts");
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
               shape_str(from));
    out[static_cast<size_t>(infer)] = numel / known;
  }
  KILN_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
             shape_str(from), " (", numel, " elements)");
  return out;
}

// Strides that view (sizes, strides) as new_sizes without a copy, if any exist
// (merging only dims that are contiguous with each other).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape out(new_sizes.size());
  if (shape_numel(sizes) == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  OpScope scope("view", x);
  scope.attr("shape", shape);
  check_defined(x, "view", "x");
  const Shape sizes = infer_shape(shape, x.numel(), "view", x.sizes());
  auto st = view_strides(x.sizes(), x.strides(), sizes);
  KILN_CHECK(st.has_value(), "view: shape ", shape_str(sizes), " is not compatible with the strides of input ",
             shape_str(x.sizes()), "; use reshape() (which copies) or contiguous() first");
  Tensor out = make_view(x, sizes, *st, x.offset());
  if (should_record({x})) {
    const Shape in = x.sizes();
    record("view", {x}, {out}, [in](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
  }
  return scope.out(out);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  OpScope scope("reshape", x);
  scope.attr("shape", shape);
  check_defined(x, "reshape", "x");
  const Shape sizes = infer_shape(shape, x.numel(), "reshape", x.sizes());
  if (view_strides(x.sizes(), x.strides(), sizes)) return scope.out(view(x, sizes));
  return scope.out(view(clone(x), sizes));
}

Tensor permute(const Tensor& x, const Shape& dims) {
  OpScope scope("permute", x);
  scope.attr("dims", dims);
  check_defined(x, "permute", "x");
  KILN_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: got ", dims.size(), " dims ", shape_str(dims),
             " for a tensor of ", x.dim(), " dims");
  Shape sizes(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    KILN_CHECK(!used[static_cast<size_t>(d)], "permute: dimension ", d, " repeated in ", shape_str(dims));
    used[static_cast<size_t>(d)] = true;
    sizes[i] = x.size(d);
    strides[i] = x.stride(d);
    inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(x, sizes, strides, x.offset());
  if (should_record({x}))
    record("permute", {x}, {out}, [inverse](const TensorList& g) { return TensorList{permute(g[0], inverse)}; });
  return scope.out(out);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  OpScope scope("transpose", x);
  scope.attr("d0", d0);
  scope.attr("d1", d1);
  check_defined(x, "transpose", "x");
  Shape perm(static_cast<size_t>(x.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  if (x.dim() == 0) return scope.out(x);
  std::swap(perm[static_cast<size_t>(wrap_dim(d0, x.dim(), "transpose"))],
            perm[static_cast<size_t>(wrap_dim(d1, x.dim(), "transpose"))]);
  return scope.out(permute(x, perm));
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  OpScope scope("slice", x);
  scope.attr("dim", dim);
  scope.attr("start", start);
  scope.attr("end", end);
  scope.attr("step", step);
  check_defined(x, "slice", "x");
  KILN_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = x.sizes(), strides = x.strides();
  // ceil((end - start) / step) without forming end - start + step - 1, which overflows for a huge step.
  const int64_t size = end == start ? 0 : (end - start - 1) / step + 1;
  sizes[static_cast<size_t>(d)] = size;
  // Along a dim of at most one element any stride addresses the same; keep it (no product to overflow).
  if (size > 1)
    KILN_CHECK(!__builtin_mul_overflow(x.stride(d), step, &strides[static_cast<size_t>(d)]), "slice: step ", step,
               " times stride ", x.stride(d), " of dimension ", d, " overflows int64");
  Tensor out = make_view(x, sizes, strides, view_offset(x, d, start, "slice"));
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    const Device dev = x.device();
    record("slice", {x}, {out}, [=](const TensorList& g) {
      Tensor gx = raw_zeros(in, dt, dev);
      gx.slice(d, start, end, step).copy_(g[0]);
      return TensorList{gx};
    });
  }
  return scope.out(out);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  OpScope scope("narrow", x);
  scope.attr("dim", dim);
  scope.attr("start", start);
  scope.attr("length", length);
  check_defined(x, "narrow", "x");
  KILN_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.size(d);
  if (start < 0 && start >= -n) start += n;
  // start + length is formed only once known not to overflow (signed overflow is undefined).
  int64_t end = 0;
  KILN_CHECK(start >= 0 && start <= n, "narrow: start ", start, " out of bounds for dimension ", d, " of size ", n);
  KILN_CHECK(length >= 0, "narrow: length ", length, " must be non-negative");
  KILN_CHECK(!__builtin_add_overflow(start, length, &end), "narrow: start ", start, " + length ", length,
             " overflows int64 (dimension ", d, " has size ", n, ")");
  KILN_CHECK(end <= n, "narrow: range [", start, ", ", end, ") out of bounds for dimension ", d, " of size ", n);
  return scope.out(slice(x, d, start, end));
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  OpScope scope("select", x);
  scope.attr("dim", dim);
  scope.attr("index", index);
  check_defined(x, "select", "x");
  KILN_CHECK(x.dim() > 0, "select: cannot select from a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.size(d);
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dimension ", d, " of size ", n);
  if (index < 0) index += n;
  Shape sizes = x.sizes(), strides = x.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = make_view(x, sizes, strides, view_offset(x, d, index, "select"));
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    const Device dev = x.device();
    record("select", {x}, {out}, [=](const TensorList& g) {
      Tensor gx = raw_zeros(in, dt, dev);
      gx.select(d, index).copy_(g[0]);
      return TensorList{gx};
    });
  }
  return scope.out(out);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  OpScope scope("expand", x);
  scope.attr("shape", shape);
  check_defined(x, "expand", "x");
  Shape target = shape;
  const int64_t off = static_cast<int64_t>(shape.size()) - x.dim();
  KILN_CHECK(off >= 0, "expand: target ", shape_str(shape), " has fewer dims than input ", shape_str(x.sizes()));
  for (size_t i = 0; i < target.size(); ++i)
    if (target[i] == -1) {
      KILN_CHECK(static_cast<int64_t>(i) >= off, "expand: -1 not allowed in a new leading dim of ", shape_str(shape));
      target[i] = x.size(static_cast<int64_t>(i) - off);
    }
  Tensor out = raw_expand(x, target);
  if (out.impl_ptr() == x.impl_ptr()) out = make_view(x, x.sizes(), x.strides(), x.offset());
  if (should_record({x})) {
    const Shape in = x.sizes();
    record("expand", {x}, {out}, [in](const TensorList& g) { return TensorList{sum_to(g[0], in)}; });
  }
  return scope.out(out);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  OpScope scope("squeeze", x);
  scope.attr("dim", dim);
  check_defined(x, "squeeze", "x");
  Shape sizes;
  if (dim) {
    const int64_t d = x.dim() == 0 ? 0 : wrap_dim(*dim, x.dim(), "squeeze");
    for (int64_t i = 0; i < x.dim(); ++i)
      if (i != d || x.size(i) != 1) sizes.push_back(x.size(i));
  } else {
    for (int64_t s : x.sizes())
      if (s != 1) sizes.push_back(s);
  }
  return scope.out(view(x, sizes));
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  OpScope scope("unsqueeze", x);
  scope.attr("dim", dim);
  check_defined(x, "unsqueeze", "x");
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes = x.sizes();
  sizes.insert(sizes.begin() + d, 1);
  return scope.out(view(x, sizes));
}

// ---- Tensor methods ---------------------------------------------------------
Tensor Tensor::view(const Shape& s) const { return kiln::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return kiln::reshape(*this, {1});
  const int64_t s = wrap_dim(start, dim(), "flatten"), e = wrap_dim(end, dim(), "flatten");
  KILN_CHECK(s <= e, "flatten: start dim ", start, " after end dim ", end);
  Shape sizes;
  for (int64_t i = 0; i < s; ++i) sizes.push_back(size(i));
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= size(i);
  sizes.push_back(m);
  for (int64_t i = e + 1; i < dim(); ++i) sizes.push_back(size(i));
  return kiln::reshape(*this, sizes);
}
Tensor Tensor::permute(const Shape& d) const { return kiln::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return kiln::narrow(*this, d, s, l); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return kiln::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return kiln::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }

// ---- registry samples ---------------------------------------------------------
using S = std::vector<OpSample>;
KILN_REGISTER_OP("view", true, [] {
  // splitting a dim is a view under every layout the harness makes
  return S{{"3x4 -> 3x2x2", {sample_tensor({3, 4}, 10)}, [](const TensorList& x) { return view(x[0], {3, 2, -1}); }}};
});
KILN_REGISTER_OP("reshape", true, [] {
  return S{{"transposed -> flat", {sample_tensor({3, 4}, 11)},
            [](const TensorList& x) { return reshape(x[0].t(), {12}); }}};
});
KILN_REGISTER_OP("permute", true, [] {
  return S{{"2x3x4", {sample_tensor({2, 3, 4}, 12)}, [](const TensorList& x) { return permute(x[0], {2, 0, 1}); }}};
});
KILN_REGISTER_OP("transpose", true, [] {
  return S{{"2x3x4 (0,2)", {sample_tensor({2, 3, 4}, 13)}, [](const TensorList& x) { return transpose(x[0], 0, 2); }}};
});
KILN_REGISTER_OP("slice", true, [] {
  return S{{"step 2", {sample_tensor({5, 4}, 14)}, [](const TensorList& x) { return slice(x[0], 0, 1, 5, 2); }},
           {"narrow", {sample_tensor({5, 4}, 15)}, [](const TensorList& x) { return narrow(x[0], 1, 1, 2); }}};
});
KILN_REGISTER_OP("select", true, [] {
  return S{{"dim 1", {sample_tensor({3, 4}, 16)}, [](const TensorList& x) { return select(x[0], 1, -1); }}};
});
KILN_REGISTER_OP("expand", true, [] {
  return S{{"3x1 -> 2x3x4", {sample_tensor({3, 1}, 17)}, [](const TensorList& x) { return expand(x[0], {2, 3, 4}); }}};
});
KILN_REGISTER_OP("squeeze", true, [] {
  return S{{"3x1x4", {sample_tensor({3, 1, 4}, 18)}, [](const TensorList& x) { return squeeze(x[0], 1); }},
           {"unsqueeze", {sample_tensor({3, 4}, 19)}, [](const TensorList& x) { return unsqueeze(x[0], -1); }}};
});

}  // namespace kiln
