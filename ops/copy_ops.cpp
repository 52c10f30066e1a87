// Copies and casts (contiguous, clone, to dtype/device), the in-place ops, and
// the autograd-free helpers of ops/internal.h.
//
// Note [In-place ops and autograd]: an in-place op bumps the storage version
// (Note [Version counter]). While grad mode is on, an in-place op on a tensor
// that requires grad, or with an operand that does, is refused with a
// kiln::Error: autograd here does not rewrite history through views. Under
// NoGradGuard (optimizer steps, initialisation) in-place ops are free to run.
#include <algorithm>

#include "ops/internal.h"

namespace kiln {
namespace detail {

void check_defined(const Tensor& t, const char* op, const char* arg) {
  KILN_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.device() == b.device(), op, ": expected tensors on the same device, got ", a.device().str(), " and ",
             b.device().str());
}

void check_inplace(const Tensor& self, const TensorList& others, const char* op) {
  check_defined(self, op, "self");
  if (!grad_enabled()) return;
  bool any = self.requires_grad();
  for (const Tensor& o : others) any = any || (o.defined() && o.requires_grad());
  KILN_CHECK(!any, op, ": in-place operation on a tensor that requires grad (or with an operand that does) "
                       "while grad mode is on; use the out-of-place op, or run it under NoGradGuard");
}

Tensor raw_cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty_tensor(t.sizes(), dtype, t.device());
  backend(t.device()).copy(out, t);
  return out;
}

Tensor raw_expand(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const int64_t nd = static_cast<int64_t>(shape.size()), td = t.dim();
  KILN_CHECK(nd >= td, "expand: cannot expand shape ", shape_str(t.sizes()), " to ", shape_str(shape));
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t j = i - (nd - td);
    if (j < 0) continue;
    if (t.size(j) == shape[i]) strides[i] = t.stride(j);
    else KILN_CHECK(t.size(j) == 1, "expand: cannot expand shape ", shape_str(t.sizes()), " to ", shape_str(shape));
  }
  Tensor v = make_tensor(t.storage(), shape, strides, t.offset(), t.dtype());
  v.impl().is_view = true;
  return v;
}

Tensor raw_contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty_tensor(t.sizes(), t.dtype(), t.device());
  backend(t.device()).copy(out, t);
  return out;
}

Tensor raw_view(const Tensor& t, const Shape& shape) {
  Tensor c = raw_contiguous(t);
  Tensor v = make_tensor(c.storage(), shape, contiguous_strides(shape), c.offset(), c.dtype());
  v.impl().is_view = true;
  return v;
}

Tensor raw_zeros(const Shape& shape, DType dtype, Device device) {
  Tensor z = empty_tensor(shape, dtype, device);
  backend(device).fill(z, 0.0);
  return z;
}

Shape reduce_dims(const Tensor& x, const Shape& dims, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, x.dim(), op));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dimension repeated in ",
             shape_str(dims));
  if (x.dim() == 0) out.clear();
  return out;
}

Shape keepdim_shape(const Tensor& x, const Shape& dims) {
  Shape s = x.sizes();
  for (int64_t d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

Tensor sample_tensor(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = empty_tensor(shape, DType::Float64, kCPU);
  cpu_backend().uniform(t, lo, hi, PhiloxState{seed, 0});
  return t;
}

}  // namespace detail

using namespace detail;

Tensor contiguous(const Tensor& x) {
  OpScope scope("contiguous", x);
  check_defined(x, "contiguous", "x");
  return scope.out(x.is_contiguous() ? x : clone(x));
}

Tensor clone(const Tensor& x) {
  OpScope scope("clone", x);
  check_defined(x, "clone", "x");
  Tensor out = empty_tensor(x.sizes(), x.dtype(), x.device());
  backend(x.device()).copy(out, x);
  if (should_record({x})) record("clone", {x}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return scope.out(out);
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  OpScope scope("to_dtype", x);
  scope.attr("dtype", dtype);
  check_defined(x, "to", "x");
  if (x.dtype() == dtype) return scope.out(x);
  Tensor out = raw_cast(x, dtype);
  if (should_record({x})) {
    KILN_CHECK(is_floating(dtype), "to: cannot cast a tensor that requires grad to ", dtype_name(dtype),
               " (gradients need a floating-point type); detach() it first");
    const DType from = x.dtype();
    record("to_dtype", {x}, {out}, [from](const TensorList& g) { return TensorList{raw_cast(g[0], from)}; });
  }
  return scope.out(out);
}

Tensor to_device(const Tensor& x, Device device) {
  OpScope scope("to_device", x);
  scope.attr("device", device.str());
  check_defined(x, "to", "x");
  const Device from = x.device();
  if (from == device) return scope.out(x);
  backend(device);  // "built without CUDA" before anything else
  Tensor src = raw_contiguous(x);
  Tensor out = empty_tensor(x.sizes(), x.dtype(), device);
  if (device.is_cpu()) {
    backend(from).copy_to_cpu(out, src);
  } else if (from.is_cpu()) {
    backend(device).copy_from_cpu(out, src);
  } else {
    Tensor host = empty_tensor(x.sizes(), x.dtype(), kCPU);
    backend(from).copy_to_cpu(host, src);
    backend(device).copy_from_cpu(out, host);
  }
  if (should_record({x}))
    record("to_device", {x}, {out}, [from](const TensorList& g) { return TensorList{to_device(g[0], from)}; });
  return scope.out(out);
}

// ---- Tensor methods: copies and in-place -----------------------------------

Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::to(DType d) const { return to_dtype(*this, d); }
Tensor Tensor::to(Device d) const { return to_device(*this, d); }
Tensor Tensor::to(Device d, DType t) const { return to_dtype(to_device(*this, d), t); }

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  OpScope scope("fill_", *this);
  scope.attr("value", value);
  check_inplace(*this, {}, "fill_");
  backend(device()).fill(*this, value);
  bump_version();
  scope.out(*this);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  OpScope scope("copy_", *this, src);
  check_inplace(*this, {src}, "copy_");
  check_defined(src, "copy_", "src");
  Tensor s = src;
  if (s.device() != device()) s = to_device(s.detach(), device());
  backend(device()).copy(*this, raw_expand(s, sizes()));
  bump_version();
  scope.out(*this);
  return *this;
}

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  OpScope scope("add_", *this, o);
  scope.attr("alpha", alpha);
  check_inplace(*this, {o}, "add_");
  check_same_device(*this, o, "add_");
  Tensor other = raw_expand(raw_cast(o, dtype()), sizes());
  if (alpha != 1.0) {
    Tensor scaled = empty_tensor(sizes(), dtype(), device());
    Tensor a = raw_expand(raw_cast(scalar_tensor(alpha, TensorOptions(dtype(), device())), dtype()), sizes());
    backend(device()).binary(BinaryOp::Mul, scaled, other, a);
    other = scaled;
  }
  backend(device()).binary(BinaryOp::Add, *this, *this, other);
  bump_version();
  scope.out(*this);
  return *this;
}

Tensor& Tensor::mul_(const Tensor& o) {
  OpScope scope("mul_", *this, o);
  check_inplace(*this, {o}, "mul_");
  check_same_device(*this, o, "mul_");
  backend(device()).binary(BinaryOp::Mul, *this, *this, raw_expand(raw_cast(o, dtype()), sizes()));
  bump_version();
  scope.out(*this);
  return *this;
}

Tensor& Tensor::mul_(double s) { return mul_(scalar_tensor(s, TensorOptions(dtype(), device()))); }

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  OpScope scope("masked_fill_", *this, mask);
  scope.attr("value", value);
  check_inplace(*this, {}, "masked_fill_");
  KILN_CHECK(mask.dtype() == DType::Bool, "masked_fill_: mask must be bool, got ", dtype_name(mask.dtype()));
  check_same_device(*this, mask, "masked_fill_");
  Tensor v = raw_expand(scalar_tensor(value, TensorOptions(dtype(), device())), sizes());
  backend(device()).where(*this, raw_expand(mask, sizes()), v, *this);
  bump_version();
  scope.out(*this);
  return *this;
}

KILN_REGISTER_OP("clone", true, [] {
  return std::vector<OpSample>{{"3x4", {sample_tensor({3, 4}, 1)}, [](const TensorList& x) { return clone(x[0]); }}};
});
KILN_REGISTER_OP("contiguous", true, [] {
  return std::vector<OpSample>{
      {"transposed 3x4", {sample_tensor({3, 4}, 2)}, [](const TensorList& x) { return contiguous(x[0].t()); }}};
});
KILN_REGISTER_OP("to_dtype", true, [] {
  // float32 rounding (~6e-8 relative) needs a wider step than 1e-6 to measure.
  return std::vector<OpSample>{{"f64->f32->f64", {sample_tensor({2, 3}, 3)}, [](const TensorList& x) {
                                  return to_dtype(to_dtype(x[0], DType::Float32), DType::Float64) * 1.0;
                                }, 1e-3, 1e-3, 1e-3}};
});

}  // namespace kiln
