// Elementwise ops with NumPy broadcasting and PyTorch type promotion.
// Forward: promote, broadcast, run backend().unary/binary/where.
// Backward: written with ops (they run under NoGradGuard), reduced back to
// each input's shape with sum_to and cast back to its dtype.
#include <cmath>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[static_cast<size_t>(i - lead)] == 1 && g.size(i) != 1)) dims.push_back(i);
  Tensor s = dims.empty() ? g : sum(g, dims, true);
  return reshape(s, shape);
}

namespace {

// A Python-number-like scalar next to tensor t: same dtype category as t
// unless the value needs a wider one (2.5 with an int tensor -> float32).
Tensor wrap_scalar(double v, const Tensor& t) {
  DType dt = t.dtype();
  if (!is_floating(dt) && v != std::floor(v)) dt = DType::Float32;
  else if (dt == DType::Bool) dt = DType::Int64;  // arithmetic on bools counts: b + 1 -> int64
  return scalar_tensor(v, TensorOptions(dt, t.device()));
}

// What a backward keeps of an input: the shape and dtype its gradient needs.
struct InputMeta {
  Shape sizes;
  DType dtype;
  explicit InputMeta(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()) {}
};

Tensor grad_for(const Tensor& g, const InputMeta& input) { return raw_cast(sum_to(g, input.sizes), input.dtype); }

// Runs a binary kernel on promoted, broadcast operands; no history.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  check_same_device(a, b, name);
  DType dt = promote_types(a.dtype(), b.dtype());
  // A 0-dim operand does not widen the other's category (tensor + scalar).
  if (a.dim() == 0 && b.dim() > 0 && is_floating(a.dtype()) == is_floating(b.dtype()) &&
      (b.dtype() != DType::Bool || a.dtype() == DType::Bool))
    dt = b.dtype();
  if (b.dim() == 0 && a.dim() > 0 && is_floating(a.dtype()) == is_floating(b.dtype()) &&
      (a.dtype() != DType::Bool || b.dtype() == DType::Bool))
    dt = a.dtype();
  KILN_CHECK(!(dt == DType::Bool && op == BinaryOp::Sub), name,
             ": subtracting bool tensors is not supported; cast them to an integer or floating type first");
  const bool needs_float = op == BinaryOp::Pow || op >= BinaryOp::ReluBackward;
  if (needs_float && !is_floating(dt)) dt = DType::Float32;
  if (op == BinaryOp::Div && !is_floating(dt)) dt = DType::Float32;  // true division, like PyTorch
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty_tensor(shape, is_comparison(op) ? DType::Bool : dt, a.device());
  backend(a.device()).binary(op, out, raw_expand(raw_cast(a, dt), shape), raw_expand(raw_cast(b, dt), shape));
  return out;
}

Tensor unary_forward(UnaryOp op, const Tensor& x, const char* name, bool float_only = true) {
  check_defined(x, name, "x");
  KILN_CHECK(float_only || x.dtype() != DType::Bool, name, ": not defined for bool tensors; cast first");
  const DType dt = float_only && !is_floating(x.dtype()) ? DType::Float32 : x.dtype();
  Tensor in = raw_cast(x, dt);
  Tensor out = empty_tensor(x.sizes(), dt, x.device());
  backend(x.device()).unary(op, out, in);
  return out;
}

// The broadcast shape of a and b, or nullopt when they do not broadcast.
std::optional<Shape> try_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor helper(BinaryOp op, const Tensor& x, const Tensor& g) {
  Tensor out = empty_tensor(g.sizes(), g.dtype(), g.device());
  backend(g.device()).binary(op, out, raw_expand(raw_cast(x, g.dtype()), g.sizes()), g);
  return out;
}

}  // namespace

// ---- binary arithmetic --------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  OpScope scope("add", a, b);
  scope.attr("alpha", alpha);
  Tensor bb = alpha == 1.0 ? b : mul(b, alpha);
  Tensor out = binary_forward(BinaryOp::Add, a, bb, "add");
  if (should_record({a, bb}))
    record("add", {a, bb}, {out}, [ma = InputMeta(a), mb = InputMeta(bb)](const TensorList& g) {
      return TensorList{grad_for(g[0], ma), grad_for(g[0], mb)};
    });
  return scope.out(out);
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  OpScope scope("sub", a, b);
  scope.attr("alpha", alpha);
  Tensor bb = alpha == 1.0 ? b : mul(b, alpha);
  Tensor out = binary_forward(BinaryOp::Sub, a, bb, "sub");
  if (should_record({a, bb}))
    record("sub", {a, bb}, {out}, [ma = InputMeta(a), mb = InputMeta(bb)](const TensorList& g) {
      return TensorList{grad_for(g[0], ma), grad_for(neg(g[0]), mb)};
    });
  return scope.out(out);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  OpScope scope("mul", a, b);
  Tensor out = binary_forward(BinaryOp::Mul, a, b, "mul");
  if (should_record({a, b})) {
    const auto need = grad_mask({a, b});
    SavedTensor sa(need[1] ? a : Tensor(), "mul"), sb(need[0] ? b : Tensor(), "mul");
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    record("mul", {a, b}, {out}, [=](const TensorList& g) {
      Tensor ga = need[0] ? raw_cast(sum_to(mul(g[0], sb.get()), as), ad) : Tensor();
      Tensor gb = need[1] ? raw_cast(sum_to(mul(g[0], sa.get()), bs), bd) : Tensor();
      return TensorList{ga, gb};
    });
  }
  return scope.out(out);
}

Tensor div(const Tensor& a, const Tensor& b) {
  OpScope scope("div", a, b);
  Tensor out = binary_forward(BinaryOp::Div, a, b, "div");
  if (should_record({a, b})) {
    const auto need = grad_mask({a, b});
    SavedTensor sb(b, "div"), so(need[1] ? out : Tensor(), "div");
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    record("div", {a, b}, {out}, [=](const TensorList& g) {
      Tensor bv = sb.get();
      Tensor ga = need[0] ? raw_cast(sum_to(div(g[0], bv), as), ad) : Tensor();
      Tensor gb = need[1] ? raw_cast(sum_to(neg(mul(g[0], div(so.get(), bv))), bs), bd) : Tensor();
      return TensorList{ga, gb};
    });
  }
  return scope.out(out);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  OpScope scope("pow", a, b);
  Tensor out = binary_forward(BinaryOp::Pow, a, b, "pow");
  if (should_record({a, b})) {
    const auto need = grad_mask({a, b});
    SavedTensor sa(a, "pow"), sb(b, "pow"), so(need[1] ? out : Tensor(), "pow");
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    record("pow", {a, b}, {out}, [=](const TensorList& g) {
      Tensor av = sa.get(), bv = sb.get();
      Tensor ga, gb;
      if (need[0]) ga = raw_cast(sum_to(mul(g[0], mul(bv, pow(av, sub(bv, 1.0)))), as), ad);
      if (need[1]) gb = raw_cast(sum_to(mul(g[0], mul(so.get(), log(av))), bs), bd);
      return TensorList{ga, gb};
    });
  }
  return scope.out(out);
}

Tensor pow(const Tensor& a, double exponent) {
  OpScope scope("pow", a);
  scope.attr("exponent", exponent);
  check_defined(a, "pow", "a");
  Tensor e = scalar_tensor(exponent, TensorOptions(is_floating(a.dtype()) ? a.dtype() : DType::Float32, a.device()));
  Tensor out = binary_forward(BinaryOp::Pow, a, e, "pow");
  if (should_record({a})) {
    SavedTensor sa(a, "pow");
    const DType ad = a.dtype();
    record("pow", {a}, {out}, [=](const TensorList& g) {
      return TensorList{raw_cast(mul(g[0], mul(pow(sa.get(), exponent - 1.0), exponent)), ad)};
    });
  }
  return scope.out(out);
}

static Tensor extremum(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  Tensor out = binary_forward(op, a, b, name);
  if (should_record({a, b})) {
    SavedTensor sa(a, name), sb(b, name);
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    const bool is_max = op == BinaryOp::Maximum;
    record(name, {a, b}, {out}, [=](const TensorList& g) {
      Tensor av = sa.get(), bv = sb.get();
      // ties share the gradient equally, as PyTorch does
      Tensor a_wins = to_dtype(is_max ? gt(av, bv) : lt(av, bv), g[0].dtype());
      Tensor tie = mul(to_dtype(eq(av, bv), g[0].dtype()), 0.5);
      Tensor wa = add(a_wins, tie);
      Tensor wb = 1.0 - wa;
      return TensorList{raw_cast(sum_to(mul(g[0], wa), as), ad), raw_cast(sum_to(mul(g[0], wb), bs), bd)};
    });
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  OpScope scope("maximum", a, b);
  return scope.out(extremum(BinaryOp::Maximum, a, b, "maximum"));
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  OpScope scope("minimum", a, b);
  return scope.out(extremum(BinaryOp::Minimum, a, b, "minimum"));
}

Tensor add(const Tensor& a, double b) { check_defined(a, "add", "a"); return add(a, wrap_scalar(b, a)); }
Tensor sub(const Tensor& a, double b) { check_defined(a, "sub", "a"); return sub(a, wrap_scalar(b, a)); }
Tensor mul(const Tensor& a, double b) { check_defined(a, "mul", "a"); return mul(a, wrap_scalar(b, a)); }
Tensor div(const Tensor& a, double b) { check_defined(a, "div", "a"); return div(a, wrap_scalar(b, a)); }

// ---- unary --------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  OpScope scope("neg", x);
  Tensor out = unary_forward(UnaryOp::Neg, x, "neg", false);
  if (should_record({x})) record("neg", {x}, {out}, [](const TensorList& g) { return TensorList{neg(g[0])}; });
  return scope.out(out);
}

Tensor abs(const Tensor& x) {
  OpScope scope("abs", x);
  Tensor out = unary_forward(UnaryOp::Abs, x, "abs", false);
  if (should_record({x})) {
    SavedTensor sx(x, "abs");
    record("abs", {x}, {out}, [sx](const TensorList& g) {
      Tensor xv = sx.get();
      Tensor sign = sub(to_dtype(gt(xv, 0.0), g[0].dtype()), to_dtype(lt(xv, 0.0), g[0].dtype()));
      return TensorList{mul(g[0], sign)};
    });
  }
  return scope.out(out);
}

// Unary ops whose derivative is a function of the output y (exp, sqrt, ...).
#define KILN_UNARY_FROM_OUTPUT(NAME, OP, GRAD)                                              \
  Tensor NAME(const Tensor& x) {                                                           \
    OpScope scope(#NAME, x);                                                               \
    Tensor out = unary_forward(UnaryOp::OP, x, #NAME);                                     \
    if (should_record({x})) {                                                              \
      SavedTensor sy(out, #NAME);                                                          \
      record(#NAME, {x}, {out}, [sy](const TensorList& g) {                                \
        Tensor y = sy.get();                                                               \
        return TensorList{GRAD};                                                           \
      });                                                                                  \
    }                                                                                      \
    return scope.out(out);                                                                 \
  }
// Unary ops whose derivative is a function of the input x.
#define KILN_UNARY_FROM_INPUT(NAME, OP, GRAD)                                               \
  Tensor NAME(const Tensor& x) {                                                           \
    OpScope scope(#NAME, x);                                                               \
    Tensor out = unary_forward(UnaryOp::OP, x, #NAME);                                     \
    if (should_record({x})) {                                                              \
      SavedTensor sx(x, #NAME);                                                            \
      record(#NAME, {x}, {out}, [sx](const TensorList& g) {                                \
        Tensor xv = sx.get();                                                              \
        return TensorList{GRAD};                                                           \
      });                                                                                  \
    }                                                                                      \
    return scope.out(out);                                                                 \
  }

KILN_UNARY_FROM_OUTPUT(exp, Exp, mul(g[0], y))
KILN_UNARY_FROM_OUTPUT(sqrt, Sqrt, div(g[0], mul(y, 2.0)))
KILN_UNARY_FROM_OUTPUT(rsqrt, Rsqrt, mul(g[0], mul(pow(y, 3.0), -0.5)))
KILN_UNARY_FROM_OUTPUT(tanh, Tanh, helper(BinaryOp::TanhBackward, y, g[0]))
KILN_UNARY_FROM_OUTPUT(sigmoid, Sigmoid, helper(BinaryOp::SigmoidBackward, y, g[0]))
KILN_UNARY_FROM_INPUT(log, Log, div(g[0], xv))
KILN_UNARY_FROM_INPUT(erf, Erf, mul(g[0], mul(exp(neg(mul(xv, xv))), 1.1283791670955126)))
#undef KILN_UNARY_FROM_OUTPUT
#undef KILN_UNARY_FROM_INPUT

Tensor relu(const Tensor& x) {
  OpScope scope("relu", x);
  Tensor out = unary_forward(UnaryOp::Relu, x, "relu", false);
  if (should_record({x})) {
    SavedTensor sy(out, "relu");
    record("relu", {x}, {out}, [sy](const TensorList& g) { return TensorList{helper(BinaryOp::ReluBackward, sy.get(), g[0])}; });
  }
  return scope.out(out);
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  OpScope scope("gelu", x);
  scope.attr("approximate", approximate);
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
             approximate, "'");
  const bool tanh_form = approximate == "tanh";
  const char* name = tanh_form ? "gelu_tanh" : "gelu";
  Tensor out = unary_forward(tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, name);
  if (should_record({x})) {
    SavedTensor sx(x, name);
    record(name, {x}, {out}, [sx, tanh_form](const TensorList& g) {
      return TensorList{helper(tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward, sx.get(), g[0])};
    });
  }
  return scope.out(out);
}

// ---- selection ------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  OpScope scope("where", cond, a, b);
  check_defined(cond, "where", "cond");
  check_defined(a, "where", "a");
  check_defined(b, "where", "b");
  KILN_CHECK(cond.dtype() == DType::Bool, "where: condition must be a bool tensor, got ", dtype_name(cond.dtype()));
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  if (a.dim() == 0 && b.dim() > 0) dt = is_floating(b.dtype()) || !is_floating(a.dtype()) ? b.dtype() : dt;
  if (b.dim() == 0 && a.dim() > 0) dt = is_floating(a.dtype()) || !is_floating(b.dtype()) ? a.dtype() : dt;
  std::optional<Shape> ca = try_broadcast(cond.sizes(), a.sizes());
  std::optional<Shape> cab = ca ? try_broadcast(*ca, b.sizes()) : std::nullopt;
  KILN_CHECK(cab.has_value(), "where: condition ", shape_str(cond.sizes()), ", a ", shape_str(a.sizes()), " and b ",
             shape_str(b.sizes()), " cannot be broadcast together");
  const Shape shape = *cab;
  Tensor out = empty_tensor(shape, dt, a.device());
  backend(a.device()).where(out, raw_expand(cond, shape), raw_expand(raw_cast(a, dt), shape),
                            raw_expand(raw_cast(b, dt), shape));
  if (should_record({a, b})) {
    const Tensor c = cond.detach();
    const Shape as = a.sizes(), bs = b.sizes();
    const DType ad = a.dtype(), bd = b.dtype();
    record("where", {a, b}, {out}, [=](const TensorList& g) {
      Tensor zero = zeros({}, TensorOptions(g[0].dtype(), g[0].device()));
      return TensorList{raw_cast(sum_to(where(c, g[0], zero), as), ad),
                        raw_cast(sum_to(where(c, zero, g[0]), bs), bd)};
    });
  }
  return scope.out(out);
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  check_defined(a, "where", "a");
  return where(cond, a, wrap_scalar(b, a));
}

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  check_defined(b, "where", "b");
  return where(cond, wrap_scalar(a, b), b);
}

// x and mask broadcast together, as torch.masked_fill (out of place) does.
static void check_masked_fill(const Tensor& x, const Tensor& mask) {
  check_defined(mask, "masked_fill", "mask");
  KILN_CHECK(mask.dtype() == DType::Bool, "masked_fill: mask must be a bool tensor, got ", dtype_name(mask.dtype()));
  check_defined(x, "masked_fill", "x");
  KILN_CHECK(try_broadcast(x.sizes(), mask.sizes()).has_value(), "masked_fill: mask ", shape_str(mask.sizes()),
             " and input ", shape_str(x.sizes()), " cannot be broadcast together");
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_masked_fill(x, mask);
  return where(mask, wrap_scalar(value, x), x);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  OpScope scope("masked_fill", x, mask, value);
  check_masked_fill(x, mask);
  check_defined(value, "masked_fill", "value");
  KILN_CHECK(value.dim() == 0, "masked_fill: value must be a 0-dim tensor, got ", shape_str(value.sizes()));
  check_same_device(x, value, "masked_fill");
  return scope.out(where(mask, to_dtype(value, x.dtype()), x));
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  OpScope scope("clamp", x);
  scope.attr("min", lo);
  scope.attr("max", hi);
  check_defined(x, "clamp", "x");
  KILN_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  KILN_CHECK(!(lo && hi && *lo > *hi), "clamp: min ", *lo, " is greater than max ", *hi);
  Tensor out = x;
  if (lo) out = where(lt(out, *lo), wrap_scalar(*lo, x), out);
  if (hi) out = where(gt(out, *hi), wrap_scalar(*hi, x), out);
  return scope.out(out);
}

// ---- comparisons (no gradient) -------------------------------------------------------
#define KILN_COMPARISON(NAME, OP)                                                            \
  Tensor NAME(const Tensor& a, const Tensor& b) {                                            \
    OpScope scope(#NAME, a, b);                                                              \
    return scope.out(binary_forward(BinaryOp::OP, a, b, #NAME));                             \
  }                                                                                          \
  Tensor NAME(const Tensor& a, double b) {                                                   \
    check_defined(a, #NAME, "a");                                                            \
    return NAME(a, wrap_scalar(b, a));                                                       \
  }
KILN_COMPARISON(eq, Eq)
KILN_COMPARISON(ne, Ne)
KILN_COMPARISON(lt, Lt)
KILN_COMPARISON(le, Le)
KILN_COMPARISON(gt, Gt)
KILN_COMPARISON(ge, Ge)
#undef KILN_COMPARISON

Tensor logical_not(const Tensor& x) {
  OpScope scope("logical_not", x);
  check_defined(x, "logical_not", "x");
  Tensor out = empty_tensor(x.sizes(), DType::Bool, x.device());
  backend(x.device()).unary(UnaryOp::LogicalNot, out, x);
  return scope.out(out);
}

// ---- operators ----------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { check_defined(b, "div", "b"); return div(wrap_scalar(a, b), b); }
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::pow(double e) const { return kiln::pow(*this, e); }

// ---- registry samples ---------------------------------------------------------------
using S = std::vector<OpSample>;
using L = TensorList;

static S binary_samples(Tensor (*f)(const Tensor&, const Tensor&), double lo = -1.0, double hi = 1.0) {
  return S{{"same shape", {sample_tensor({3, 4}, 20, lo, hi), sample_tensor({3, 4}, 21, lo, hi)},
            [f](const L& x) { return f(x[0], x[1]); }},
           {"broadcast 3x1 * 4", {sample_tensor({3, 1}, 22, lo, hi), sample_tensor({4}, 23, lo, hi)},
            [f](const L& x) { return f(x[0], x[1]); }},
           {"broadcast 2x3x4 * 3x1", {sample_tensor({2, 3, 4}, 24, lo, hi), sample_tensor({3, 1}, 25, lo, hi)},
            [f](const L& x) { return f(x[0], x[1]); }}};
}

static S unary_samples(Tensor (*f)(const Tensor&), double lo = -2.0, double hi = 2.0) {
  return S{{"3x4", {sample_tensor({3, 4}, 30, lo, hi)}, [f](const L& x) { return f(x[0]); }},
           {"2x3x5", {sample_tensor({2, 3, 5}, 31, lo, hi)}, [f](const L& x) { return f(x[0]); }}};
}

KILN_REGISTER_OP("add", true, [] {
  S s = binary_samples([](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); });
  s.push_back({"scalar", {sample_tensor({3}, 26)}, [](const L& x) { return x[0] + 2.0; }});
  return s;
});
KILN_REGISTER_OP("sub", true, [] { return binary_samples([](const Tensor& a, const Tensor& b) { return sub(a, b); }); });
KILN_REGISTER_OP("mul", true, [] {
  S s = binary_samples([](const Tensor& a, const Tensor& b) { return mul(a, b); });
  s.push_back({"self * self", {sample_tensor({3}, 27)}, [](const L& x) { return x[0] * x[0]; }});
  return s;
});
KILN_REGISTER_OP("div", true, [] {
  return binary_samples([](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.5, 2.0);
});
KILN_REGISTER_OP("pow", true, [] {
  S s = binary_samples([](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2.0);
  s.push_back({"scalar exponent", {sample_tensor({3, 4}, 28, 0.5, 2.0)}, [](const L& x) { return pow(x[0], 2.5); }});
  return s;
});
KILN_REGISTER_OP("maximum", true, [] { return binary_samples([](const Tensor& a, const Tensor& b) { return maximum(a, b); }); });
KILN_REGISTER_OP("minimum", true, [] { return binary_samples([](const Tensor& a, const Tensor& b) { return minimum(a, b); }); });
KILN_REGISTER_OP("neg", true, [] { return unary_samples([](const Tensor& x) { return neg(x); }); });
KILN_REGISTER_OP("abs", true, [] { return unary_samples([](const Tensor& x) { return abs(x); }); });
KILN_REGISTER_OP("exp", true, [] { return unary_samples([](const Tensor& x) { return exp(x); }); });
KILN_REGISTER_OP("log", true, [] { return unary_samples([](const Tensor& x) { return log(x); }, 0.2, 3.0); });
KILN_REGISTER_OP("sqrt", true, [] { return unary_samples([](const Tensor& x) { return sqrt(x); }, 0.2, 3.0); });
KILN_REGISTER_OP("rsqrt", true, [] { return unary_samples([](const Tensor& x) { return rsqrt(x); }, 0.2, 3.0); });
KILN_REGISTER_OP("tanh", true, [] { return unary_samples([](const Tensor& x) { return tanh(x); }); });
KILN_REGISTER_OP("erf", true, [] { return unary_samples([](const Tensor& x) { return erf(x); }); });
KILN_REGISTER_OP("sigmoid", true, [] { return unary_samples([](const Tensor& x) { return sigmoid(x); }); });
KILN_REGISTER_OP("relu", true, [] { return unary_samples([](const Tensor& x) { return relu(x); }); });
KILN_REGISTER_OP("gelu", true, [] { return unary_samples([](const Tensor& x) { return gelu(x); }); });
KILN_REGISTER_OP("gelu_tanh", true, [] { return unary_samples([](const Tensor& x) { return gelu(x, "tanh"); }); });
KILN_REGISTER_OP("where", true, [] {
  return S{{"broadcast", {sample_tensor({3, 4}, 40), sample_tensor({3, 4}, 41), sample_tensor({4}, 42)},
            [](const L& x) { return where(gt(x[0], 0.0), x[1], x[2]); }},
           {"all three broadcast", {sample_tensor({3, 1}, 49), sample_tensor({1, 4}, 38), sample_tensor({3, 1}, 39)},
            [](const L& x) { return where(gt(x[0], 0.0), x[1], x[2]); }},
           {"scalar a", {sample_tensor({2, 3}, 37), sample_tensor({3}, 36)},
            [](const L& x) { return where(gt(x[0], 0.0), 0.25, x[1]); }}};
});
KILN_REGISTER_OP("clamp", true, [] {
  return S{{"both bounds", {sample_tensor({4, 5}, 43)}, [](const L& x) { return clamp(x[0], -0.5, 0.5); }},
           {"min only", {sample_tensor({4, 5}, 44)}, [](const L& x) { return clamp(x[0], 0.1, std::nullopt); }}};
});
KILN_REGISTER_OP("masked_fill", true, [] {
  return S{{"row mask", {sample_tensor({3, 4}, 45), sample_tensor({4}, 46)},
            [](const L& x) { return masked_fill(x[0], gt(x[1], 0.0), -3.0); }},
           {"mask broadcasts the input up", {sample_tensor({4}, 35), sample_tensor({3, 1}, 34)},
            [](const L& x) { return masked_fill(x[0], gt(x[1], 0.0), 2.0); }},
           {"0-dim tensor value", {sample_tensor({3, 4}, 33), sample_tensor({1, 4}, 32), sample_tensor({}, 31)},
            [](const L& x) { return masked_fill(x[0], gt(x[1], 0.0), x[2]); }}};
});
KILN_REGISTER_OP("compare", false, [] {
  return S{{"lt", {sample_tensor({3, 4}, 47), sample_tensor({4}, 48)}, [](const L& x) { return lt(x[0], x[1]); }}};
});

}  // namespace kiln
