// The decoder ops (ops/decoder_ops.h): rms_norm, rotary_embedding and
// gated_activation. Each checks its arguments, runs one backend kernel
// (core/backend.h) and records one autograd node whose backward is one
// kernel too. The composites they replace run two (a GELU gate) to six
// (RMS norm) kernels forward, each a pass over the activations, and save
// their intermediates for backward.
#include "ops/decoder_ops.h"

#include <cmath>

#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// x (..., C) as rows; weight undefined or of x's dtype.
Tensor rms_norm_rows(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t C = x.size(-1);
  int64_t R = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) R *= x.size(d);
  const DType stat = x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor xr = raw_view(x, {R, C});  // contiguous
  Tensor w = weight.defined() ? raw_contiguous(weight) : Tensor();
  Tensor y = empty_tensor({R, C}, x.dtype(), x.device());
  Tensor rstd = empty_tensor({R}, stat, x.device());
  if (R > 0 && C > 0) backend(x.device()).rms_norm(y, rstd, xr, w, eps);
  Tensor out = raw_view(y, x.sizes());
  if (should_record({x, weight})) {
    const auto need = grad_mask({x, weight});
    SavedTensor sx(xr, "rms_norm"), sw(w, "rms_norm");
    const Shape xs = x.sizes();
    record("rms_norm", {x, weight}, {out}, [=](const TensorList& g) {
      Tensor xv = sx.get();
      Tensor dy = raw_cast(raw_view(g[0], {R, C}), xv.dtype());
      Tensor dx = empty_tensor({R, C}, xv.dtype(), xv.device());
      Tensor dw = need[1] ? empty_tensor({C}, xv.dtype(), xv.device()) : Tensor();
      if (R > 0 && C > 0) backend(xv.device()).rms_norm_backward(dx, dw, dy, xv, rstd, sw.get());
      else if (dw.defined()) dw = raw_zeros({C}, xv.dtype(), xv.device());  // no rows: nothing summed
      return TensorList{need[0] ? raw_view(dx, xs) : Tensor(), dw};
    });
  }
  return out;
}

struct GatedName {
  const char* name;
  GatedAct act;
  const char* canonical;
};
// The one table of gated_activation's names (gated_activation_names(),
// gated_activation_canonical(); the ONNX exporter lowers by the latter).
// transformers' spellings as BertConfig maps them (nn/bert_config.cpp):
// gelu_python is the exact erf form; gelu_new, gelu_pytorch_tanh and
// gelu_fast are the tanh approximation (gelu_fast writes the same formula
// as x * 0.7978845608 * (1 + 0.044715 x^2)).
constexpr GatedName kGatedActivations[] = {
    {"silu", GatedAct::Silu, "silu"},
    {"swish", GatedAct::Silu, "silu"},
    {"gelu", GatedAct::Gelu, "gelu"},
    {"gelu_python", GatedAct::Gelu, "gelu"},
    {"gelu_tanh", GatedAct::GeluTanh, "gelu_tanh"},
    {"gelu_pytorch_tanh", GatedAct::GeluTanh, "gelu_tanh"},
    {"gelu_new", GatedAct::GeluTanh, "gelu_tanh"},
    {"gelu_fast", GatedAct::GeluTanh, "gelu_tanh"},
};

const GatedName& gated_entry(const std::string& name) {
  for (const GatedName& g : kGatedActivations)
    if (name == g.name) return g;
  std::string known;
  for (const std::string& n : gated_activation_names()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  fail("gated_activation: unknown activation '", name, "' (accepted: ", known, ")");
}

}  // namespace

const std::vector<std::string>& gated_activation_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const GatedName& g : kGatedActivations) out.push_back(g.name);
    return out;
  }();
  return names;
}

const std::string& gated_activation_canonical(const std::string& activation) {
  static const std::vector<std::string> canonical = [] {
    std::vector<std::string> out;
    for (const GatedName& g : kGatedActivations) out.push_back(g.canonical);
    return out;
  }();
  return canonical[static_cast<size_t>(&gated_entry(activation) - kGatedActivations)];
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  OpScope scope("rms_norm", x_in, weight_in);
  scope.attr("eps", eps);
  Tensor x = x_in, weight = weight_in;
  autocast::cast_inputs("rms_norm", x, weight);  // Note [Autocast policy]
  check_defined(x, "rms_norm", "x");
  KILN_CHECK(is_floating(x.dtype()), "rms_norm: expected a floating-point x, got ", dtype_name(x.dtype()));
  KILN_CHECK(x.dim() >= 1, "rms_norm: x must have a last dim to normalise, got a 0-dim tensor");
  if (weight.defined()) {
    KILN_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight of shape ",
               shape_str(weight.sizes()), " for input of shape ", shape_str(x.sizes()), " (expected [", x.size(-1),
               "])");
    KILN_CHECK(is_floating(weight.dtype()), "rms_norm: expected a floating-point weight, got ",
               dtype_name(weight.dtype()));
    check_same_device(x, weight, "rms_norm");
  }
  KILN_CHECK(eps >= 0.0 && std::isfinite(eps), "rms_norm: eps must be finite and >= 0, got ", eps);
  // A weight of another dtype: the composite's last product promotes (weight * normed).
  if (weight.defined() && weight.dtype() != x.dtype()) return scope.out(mul(weight, rms_norm_rows(x, Tensor(), eps)));
  return scope.out(rms_norm_rows(x, weight, eps));
}

Tensor rotary_embedding(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in, int64_t heads) {
  OpScope scope("rotary_embedding", x_in, cos_in, sin_in);
  scope.attr("heads", heads);
  check_defined(x_in, "rotary_embedding", "x");
  check_defined(cos_in, "rotary_embedding", "cos");
  check_defined(sin_in, "rotary_embedding", "sin");
  KILN_CHECK(x_in.dim() == 3, "rotary_embedding: x must be (batch, seq, heads * head_dim), got ",
             shape_str(x_in.sizes()));
  KILN_CHECK(is_floating(x_in.dtype()) && is_floating(cos_in.dtype()) && is_floating(sin_in.dtype()),
             "rotary_embedding: x, cos, sin must be floating-point, got ", dtype_name(x_in.dtype()), ", ",
             dtype_name(cos_in.dtype()), ", ", dtype_name(sin_in.dtype()));
  const int64_t B = x_in.size(0), T = x_in.size(1), W = x_in.size(2);
  KILN_CHECK(heads >= 1 && W % heads == 0, "rotary_embedding: width ", W, " of x ", shape_str(x_in.sizes()),
             " is not divisible into ", heads, " heads");
  const int64_t D = W / heads;
  KILN_CHECK(D % 2 == 0, "rotary_embedding: head_dim must be even to rotate its halves, got ", D, " (width ", W,
             " / ", heads, " heads)");
  KILN_CHECK(cos_in.sizes() == Shape({T, D}) && sin_in.sizes() == Shape({T, D}),
             "rotary_embedding: cos and sin must be (seq, head_dim) = ", shape_str({T, D}), " for x ",
             shape_str(x_in.sizes()), " and ", heads, " heads, got ", shape_str(cos_in.sizes()), " and ",
             shape_str(sin_in.sizes()));
  check_same_device(x_in, cos_in, "rotary_embedding");
  check_same_device(x_in, sin_in, "rotary_embedding");
  KILN_CHECK(!(grad_enabled() && (cos_in.requires_grad() || sin_in.requires_grad())),
             "rotary_embedding: cos and sin are position tables and get no gradient; pass them detached");
  // The composite's products promote: compute in that dtype (x's cast records, so dx comes back in x's dtype).
  const DType dt = promote_types(promote_types(x_in.dtype(), cos_in.dtype()), sin_in.dtype());
  const Tensor x = x_in.dtype() == dt ? x_in : to_dtype(x_in, dt);
  const Tensor c = raw_contiguous(raw_cast(cos_in.detach(), dt)), s = raw_contiguous(raw_cast(sin_in.detach(), dt));
  Tensor out = empty_tensor({B, T, W}, dt, x.device());
  if (out.numel() > 0) backend(x.device()).rotary_embedding(out, x, c, s, heads, false);
  if (should_record({x})) {
    record("rotary_embedding", {x}, {out}, [=](const TensorList& g) {
      Tensor dy = raw_cast(g[0], dt);
      Tensor dx = empty_tensor({B, T, W}, dt, dy.device());
      if (dx.numel() > 0) backend(dy.device()).rotary_embedding(dx, dy, c, s, heads, true);
      return TensorList{dx};
    });
  }
  return scope.out(out);
}

Tensor gated_activation(const Tensor& a, const Tensor& b, const std::string& activation) {
  OpScope scope("gated_activation", a, b);
  scope.attr("activation", activation);
  const GatedAct act = gated_entry(activation).act;
  check_defined(a, "gated_activation", "a");
  check_defined(b, "gated_activation", "b");
  KILN_CHECK(is_floating(a.dtype()), "gated_activation: expected floating-point a and b, got ",
             dtype_name(a.dtype()));
  KILN_CHECK(a.sizes() == b.sizes(), "gated_activation: a ", shape_str(a.sizes()), " and b ",
             shape_str(b.sizes()), " must have one shape");
  KILN_CHECK(a.dtype() == b.dtype(), "gated_activation: a and b dtypes differ (", dtype_name(a.dtype()), ", ",
             dtype_name(b.dtype()), ")");
  check_same_device(a, b, "gated_activation");
  Tensor out = empty_tensor(a.sizes(), a.dtype(), a.device());
  if (out.numel() > 0) backend(a.device()).gated_activation(out, a, b, act);
  if (should_record({a, b})) {
    const auto need = grad_mask({a, b});
    SavedTensor sa(a, "gated_activation"), sb(b, "gated_activation");
    record("gated_activation", {a, b}, {out}, [=](const TensorList& g) {
      Tensor av = sa.get(), bv = sb.get();
      Tensor dy = raw_cast(g[0], av.dtype());
      Tensor da = empty_tensor(av.sizes(), av.dtype(), av.device());
      Tensor db = empty_tensor(av.sizes(), av.dtype(), av.device());
      if (da.numel() > 0) backend(av.device()).gated_activation_backward(da, db, dy, av, bv, act);
      return TensorList{need[0] ? da : Tensor(), need[1] ? db : Tensor()};
    });
  }
  return scope.out(out);
}

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("rms_norm", true, [] {
  return S{{"weight", {sample_tensor({3, 6}, 170), sample_tensor({6}, 171)},
            [](const L& x) { return rms_norm(x[0], x[1], 1e-5); }},
           {"no weight, 3-D, odd width", {sample_tensor({2, 3, 5}, 172)},
            [](const L& x) { return rms_norm(x[0], Tensor(), 1e-6); }}};
});
KILN_REGISTER_OP("rotary_embedding", true, [] {
  // cos and sin: fixed tables of unequal halves (no gradient)
  return S{{"2 heads of 4", {sample_tensor({2, 3, 8}, 173)}, [](const L& x) {
              return rotary_embedding(x[0], sample_tensor({3, 4}, 174), sample_tensor({3, 4}, 175), 2);
            }},
           {"column slice of a (B, T, 3C) projection, 1 head of 6", {sample_tensor({2, 2, 18}, 176)},
            [](const L& x) {
              return rotary_embedding(narrow(x[0], 2, 6, 6), sample_tensor({2, 6}, 177), sample_tensor({2, 6}, 178), 1);
            }}};
});
KILN_REGISTER_OP("gated_activation", true, [] {
  return S{{"silu", {sample_tensor({3, 5}, 179, -3, 3), sample_tensor({3, 5}, 180)},
            [](const L& x) { return gated_activation(x[0], x[1], "silu"); }},
           {"gelu", {sample_tensor({2, 2, 3}, 181, -3, 3), sample_tensor({2, 2, 3}, 182)},
            [](const L& x) { return gated_activation(x[0], x[1], "gelu"); }},
           {"gelu_tanh, the halves of one (R, 2I) tensor", {sample_tensor({3, 8}, 183, -3, 3)}, [](const L& x) {
              return gated_activation(narrow(x[0], 1, 0, 4), narrow(x[0], 1, 4, 4), "gelu_tanh");
            }}};
});

}  // namespace kiln
