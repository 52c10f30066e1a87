// Fused ops for the transformer training step: multi_head_attention (q, k, v
// apart or packed in one (B, T, 3C) projection), linear_fused, linear_gelu and
// dropout_add.
//
// Note [Fused attention]: attention composed from primitives makes a dozen
// passes over the (B, heads, T, T) scores (scale, mask, softmax, the dropout
// mask, its scaling and product; the same again backward) and copies q, k, v
// into per-head contiguous layouts before each batched GEMM (and the context
// back out of them). The fused op runs, per (batch, head) pair, two GEMMs that
// read the heads in place, one pass for scale + mask + softmax and one for
// dropout; backward recomputes nothing but the dropped probabilities. It
// saves the softmax probabilities (B, heads, T, T) and the bool keep mask.
// The dropout mask is drawn by the bernoulli op with the generator call the
// composite's dropout would make, and every element goes through the
// composite's arithmetic in its order, so the two agree to rounding of the
// GEMMs. Devices without the kernel (Backend::has_fused_attention) and
// autocast scopes (Note [Autocast policy] casts the attention GEMMs) run the
// composite itself: batched GEMMs around scaled_masked_softmax, which is one
// fused scale + mask + softmax kernel on CUDA. float16/bfloat16 attention on a device with a vendor
// kernel (Backend::sdpa_supported; cuDNN on CUDA, Note [cuDNN attention])
// runs there instead, before either path: it saves q, k, v, the output and
// the (B, heads, T) float32 logsumexp, not the probabilities, and its dropout
// mask is the device's own Philox draw at one generator call, which backward
// redraws from the same state (so it matches the composite in distribution,
// not element by element).
#include "ops/fused.h"

#include <cmath>

#include "core/random.h"
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask_bias,
                           double p, bool training, Generator* gen) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  auto split = [&](const Tensor& x) { return reshape(x, {B, T, heads, C / heads}).transpose(1, 2); };
  Tensor scores = matmul(split(q), split(k).transpose(-1, -2));  // (B, NH, T, T)
  Tensor probs = dropout(scaled_masked_softmax(scores, 1.0 / std::sqrt(static_cast<double>(C / heads)), mask_bias), p,
                         training, gen);
  return matmul(probs, split(v)).transpose(1, 2).reshape({B, T, C});
}

// q/k/v as the kernel takes them: unit stride in the last dim.
Tensor kernel_operand(const Tensor& x) { return x.stride(2) == 1 ? x : raw_contiguous(x); }

void check_attention_args(const Tensor& q, int64_t heads, const Tensor& mask_bias, double p) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  KILN_CHECK(heads >= 1 && C % heads == 0, "multi_head_attention: hidden size ", C, " is not divisible into ", heads,
             " heads");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "multi_head_attention: dropout probability must be in [0, 1], got ", p);
  if (mask_bias.defined()) {
    KILN_CHECK(mask_bias.dim() == 4 && (mask_bias.size(0) == B || mask_bias.size(0) == 1) && mask_bias.size(1) == 1 &&
                   mask_bias.size(2) == 1 && mask_bias.size(3) == T,
               "multi_head_attention: mask_bias must be (", B, ", 1, 1, ", T, ") or (1, 1, 1, ", T, "), got ",
               shape_str(mask_bias.sizes()));
    KILN_CHECK(!(grad_enabled() && mask_bias.requires_grad()),
               "multi_head_attention: mask_bias gets no gradient; pass it detached");
    check_same_device(q, mask_bias, "multi_head_attention");
  }
}

bool use_fused(const Tensor& q, double p, bool training) {
  return backend(q.device()).has_fused_attention() && !autocast::is_active() &&
         (q.dtype() == DType::Float32 || q.dtype() == DType::Float64) && q.numel() > 0 && !(training && p == 1.0);
}

// Columns [j*C, (j+1)*C) of qkv (B, T, 3C), as a view without history.
Tensor column_block(const Tensor& qkv, int64_t j, int64_t C) {
  return make_tensor(qkv.storage(), {qkv.size(0), qkv.size(1), C}, {qkv.stride(0), qkv.stride(1), qkv.stride(2)},
                     qkv.offset() + j * C * qkv.stride(2), qkv.dtype());
}

// The fused path. `inputs` are what the node records: {q, k, v} or {qkv}
// (packed, when q/k/v are its column blocks); the gradients match.
Tensor attention_fused(const TensorList& inputs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                       const Tensor& mask_bias, double p, bool training, Generator* gen) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  const bool packed = inputs.size() == 1;
  const int64_t hs = C / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const bool drop = training && p > 0.0;
  // The keep mask: the same bernoulli call dropout() makes (Note [Fused attention]).
  Tensor keep = drop ? bernoulli({B, heads, T, T}, 1.0 - p, TensorOptions(DType::Bool, q.device()), gen) : Tensor();
  const double keep_scale = drop ? 1.0 / (1.0 - p) : 1.0;
  Tensor mask;
  if (mask_bias.defined()) {
    Tensor m = raw_view(raw_contiguous(raw_cast(mask_bias.detach(), q.dtype())), {mask_bias.size(0), T});
    mask = raw_contiguous(raw_expand(m, {B, T}));
  }
  Tensor probs = empty_tensor({B, heads, T, T}, q.dtype(), q.device());
  Tensor out = empty_tensor({B, T, C}, q.dtype(), q.device());
  backend(q.device()).attention(out, probs, q, k, v, mask, keep, heads, scale, keep_scale);
  if (should_record(inputs)) {
    const char* name = packed ? "multi_head_attention_qkv" : "multi_head_attention";
    SavedTensor sq(q, name), sk(k, name), sv(v, name);
    record(name, inputs, {out}, [=](const TensorList& g) {
      Tensor qv = sq.get(), kv = sk.get(), vv = sv.get();
      Tensor dctx = raw_contiguous(raw_cast(g[0], qv.dtype()));
      Backend& be = backend(qv.device());
      if (packed) {
        Tensor dqkv = empty_tensor({B, T, 3 * C}, qv.dtype(), qv.device());
        be.attention_backward(column_block(dqkv, 0, C), column_block(dqkv, 1, C), column_block(dqkv, 2, C), dctx, qv,
                              kv, vv, probs, keep, heads, scale, keep_scale);
        return TensorList{dqkv};
      }
      Tensor dq = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dk = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dv = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      be.attention_backward(dq, dk, dv, dctx, qv, kv, vv, probs, keep, heads, scale, keep_scale);
      return TensorList{dq, dk, dv};
    });
  }
  return out;
}

// ---- the vendor kernel (Note [cuDNN attention], cuda/attention_cudnn.cpp) ----

// q (B, T, C) or a column block of the packed projection.
bool use_sdpa(const Tensor& q, int64_t heads, const Tensor& mask_bias, double p, bool training) {
  const int64_t C = q.size(2);
  if (q.numel() == 0 || (q.dtype() != DType::Float16 && q.dtype() != DType::BFloat16) || heads < 1 ||
      C % heads != 0 || (training && p == 1.0))
    return false;
  return backend(q.device()).sdpa_supported(q.dtype(), q.size(1), C / heads, mask_bias.defined(), training ? p : 0.0);
}

// The key bias as the kernel takes it: (B, T) contiguous in q's dtype, with
// -inf (a float32 lowest cast down) clamped to the dtype's lowest finite value
// so a fully masked row stays finite, as it does in float32.
Tensor sdpa_mask(const Tensor& mask_bias, DType dtype, int64_t B, int64_t T) {
  if (!mask_bias.defined()) return Tensor();
  const double lowest = dtype == DType::Float16 ? -65504.0 : -3.3895313892515355e38;
  Tensor m = clamp(raw_cast(mask_bias.detach(), DType::Float32), lowest, std::nullopt);
  m = raw_view(raw_contiguous(raw_cast(m, dtype)), {mask_bias.size(0), T});
  return raw_contiguous(raw_expand(m, {B, T}));
}

// q, k, v: row-contiguous operands (strides (T * W, W, 1)); the gradients are
// allocated in the same layout (the kernel's backward graph assumes it).
// Undefined when the backend declines this exact problem (nothing was drawn
// from the generator then).
Tensor attention_sdpa(const TensorList& inputs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                      const Tensor& mask_bias, double p, bool training, Generator* gen) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  const bool packed = inputs.size() == 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / heads));
  const double drop = training ? p : 0.0;
  Generator& g = gen ? *gen : default_generator();
  const PhiloxState st = drop > 0.0 ? g.state() : PhiloxState{};
  const Tensor mask = sdpa_mask(mask_bias, q.dtype(), B, T);
  Tensor out = empty_tensor({B, T, C}, q.dtype(), q.device());
  Tensor stats = empty_tensor({B, heads, T}, DType::Float32, q.device());
  if (!backend(q.device()).sdpa_forward(out, stats, q, k, v, mask, heads, scale, drop, st)) return Tensor();
  if (drop > 0.0) g.next();  // the call is st: the one the forward used
  if (should_record(inputs)) {
    const char* name = packed ? "multi_head_attention_qkv" : "multi_head_attention";
    // The output is saved through an alias without autograd history: the node
    // must not own its own output (a reference cycle).
    SavedTensor sq(q, name), sk(k, name), sv(v, name),
        so(make_tensor(out.storage(), out.sizes(), out.strides(), out.offset(), out.dtype()), name);
    record(name, inputs, {out}, [=](const TensorList& grads) {
      Tensor qv = sq.get(), kv = sk.get(), vv = sv.get(), ov = so.get();
      Tensor dout = raw_contiguous(raw_cast(grads[0], qv.dtype()));
      Backend& be = backend(qv.device());
      if (packed) {
        Tensor dqkv = empty_tensor({B, T, 3 * C}, qv.dtype(), qv.device());
        be.sdpa_backward(column_block(dqkv, 0, C), column_block(dqkv, 1, C), column_block(dqkv, 2, C), dout, qv, kv,
                         vv, ov, stats, mask, heads, scale, drop, st);
        return TensorList{dqkv};
      }
      Tensor dq = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dk = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dv = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      be.sdpa_backward(dq, dk, dv, dout, qv, kv, vv, ov, stats, mask, heads, scale, drop, st);
      return TensorList{dq, dk, dv};
    });
  }
  return out;
}

}  // namespace

Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask_bias,
                            double p, bool training, Generator* gen) {
  check_defined(q, "multi_head_attention", "q");
  check_defined(k, "multi_head_attention", "k");
  check_defined(v, "multi_head_attention", "v");
  KILN_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
             "multi_head_attention: q, k, v must be (batch, seq, hidden) of one shape, got ", shape_str(q.sizes()),
             ", ", shape_str(k.sizes()), ", ", shape_str(v.sizes()));
  check_same_device(q, k, "multi_head_attention");
  check_same_device(q, v, "multi_head_attention");
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "multi_head_attention: q, k, v dtypes differ (",
             dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()), ")");
  check_attention_args(q, heads, mask_bias, p);
  if (use_sdpa(q, heads, mask_bias, p, training)) {
    Tensor out = attention_sdpa({q, k, v}, raw_contiguous(q), raw_contiguous(k), raw_contiguous(v), heads, mask_bias, p,
                                training, gen);
    if (out.defined()) return out;
  }
  if (!use_fused(q, p, training)) return attention_composite(q, k, v, heads, mask_bias, p, training, gen);
  Tensor qk = kernel_operand(q), kk = kernel_operand(k), vk = kernel_operand(v);
  return attention_fused({q, k, v}, qk, kk, vk, heads, mask_bias, p, training, gen);
}

Tensor multi_head_attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask_bias, double p, bool training,
                                Generator* gen) {
  check_defined(qkv, "multi_head_attention_qkv", "qkv");
  KILN_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
             "multi_head_attention_qkv: qkv must be (batch, seq, 3 * hidden), got ", shape_str(qkv.sizes()));
  const int64_t C = qkv.size(2) / 3;
  if (use_sdpa(column_block(qkv, 0, C), heads, mask_bias, p, training)) {
    check_attention_args(column_block(qkv, 0, C), heads, mask_bias, p);
    const Tensor kq = raw_contiguous(qkv);  // q, k, v and the gradient's blocks in one layout
    Tensor out = attention_sdpa({qkv}, column_block(kq, 0, C), column_block(kq, 1, C), column_block(kq, 2, C), heads,
                                mask_bias, p, training, gen);
    if (out.defined()) return out;
  }
  if (!use_fused(qkv, p, training) || qkv.stride(2) != 1) {
    if (use_fused(qkv, p, training)) return multi_head_attention_qkv(contiguous(qkv), heads, mask_bias, p, training, gen);
    check_attention_args(column_block(qkv, 0, C), heads, mask_bias, p);
    return attention_composite(narrow(qkv, 2, 0, C), narrow(qkv, 2, C, C), narrow(qkv, 2, 2 * C, C), heads, mask_bias,
                               p, training, gen);
  }
  Tensor q = column_block(qkv, 0, C), k = column_block(qkv, 1, C), v = column_block(qkv, 2, C);
  check_attention_args(q, heads, mask_bias, p);
  return attention_fused({qkv}, q, k, v, heads, mask_bias, p, training, gen);
}

// Note [Bias in the GEMM]: linear() is matmul then add(bias): the GEMM
// zeroes its output (a pass), writes it, and the add reads it and writes a new
// tensor. linear_fused starts the output as the bias rows and lets the GEMM
// accumulate into it (Backend::addmm): one pass fewer each way, which matters
// most for the MLM decoder's (masked rows, vocabulary) logits. Backward is
// linear's: g @ W, g^T @ x and the column sums of g.
Tensor linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined(x, "linear_fused", "x");
  check_defined(weight, "linear_fused", "weight");
  const bool plain = !bias.defined() || autocast::is_active() || !is_floating(x.dtype()) ||
                     weight.dtype() != x.dtype() || bias.dtype() != x.dtype() || weight.dim() != 2 ||
                     x.dim() < 1 || bias.dim() != 1 || x.size(-1) != weight.size(1) ||
                     bias.size(0) != weight.size(0) || x.numel() == 0 || weight.numel() == 0;
  if (plain) return linear(x, weight, bias);  // also the place for linear's argument errors
  check_same_device(x, weight, "linear_fused");
  check_same_device(x, bias, "linear_fused");
  const int64_t in = weight.size(1), out_f = weight.size(0), R = x.numel() / in;
  Tensor x2 = raw_view(raw_contiguous(x), {R, in});
  Tensor wt = make_tensor(weight.storage(), {in, out_f}, {weight.stride(1), weight.stride(0)}, weight.offset(),
                          weight.dtype());  // W^T as a view
  Tensor y = empty_tensor({R, out_f}, x.dtype(), x.device());
  backend(x.device()).addmm(y, x2, wt, raw_contiguous(bias));
  Shape out_shape = x.sizes();
  out_shape.back() = out_f;
  Tensor out = raw_view(y, out_shape);
  if (should_record({x, weight, bias})) {
    const auto need = grad_mask({x, weight, bias});
    SavedTensor sx(need[1] ? x2 : Tensor(), "linear_fused"), sw(need[0] ? weight : Tensor(), "linear_fused");
    const Shape xs = x.sizes();
    record("linear_fused", {x, weight, bias}, {out}, [=](const TensorList& g) {
      Tensor g2 = raw_view(raw_contiguous(g[0]), {R, out_f});
      Tensor dx = need[0] ? raw_view(matmul(g2, sw.get()), xs) : Tensor();
      Tensor dw = need[1] ? matmul(transpose(g2, 0, 1), sx.get()) : Tensor();
      Tensor db = need[2] ? sum(g2, {0}) : Tensor();
      return TensorList{dx, dw, db};
    });
  }
  return out;
}

// Note [Linear and GELU]: BERT's intermediate layer is gelu(linear(x)).
// linear_gelu hands the GEMM, the bias and the activation to the backend in
// one call (Backend::linear_gelu) and keeps the pre-activation h = x W^T + b
// that GELU's backward needs; its output is not saved. On the CPU (the
// oracle) that is addmm, then the GELU kernel: the same kernels, in the same
// order, as gelu(linear_fused(x, W, b)), so the two are bit-identical forward
// and backward. CUDA runs the tanh form as one cuBLASLt GEMM with a GELU
// epilogue (Note [cuBLASLt epilogues], cuda/gemm_lt.cpp). Backward:
//   dh = GELU'(h) * g                      (the GeluBackward kernel)
//   dx = dh W,  dW = dh^T x,  db = sum_rows(dh)
// The DGELU epilogues fuse GELU' into the GEMM that produces g, which
// belongs to the next layer's backward, so they have no place here.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "linear_gelu: approximate must be 'none' or 'tanh', got '",
             approximate, "'");
  check_defined(x, "linear_gelu", "x");
  check_defined(weight, "linear_gelu", "weight");
  const bool tanh_form = approximate == "tanh";
  const bool plain = !bias.defined() || autocast::is_active() || !is_floating(x.dtype()) ||
                     weight.dtype() != x.dtype() || bias.dtype() != x.dtype() || weight.dim() != 2 ||
                     x.dim() < 1 || bias.dim() != 1 || x.size(-1) != weight.size(1) ||
                     bias.size(0) != weight.size(0) || x.numel() == 0 || weight.numel() == 0;
  if (plain) return gelu(linear(x, weight, bias), approximate);  // also the place for linear's argument errors
  check_same_device(x, weight, "linear_gelu");
  check_same_device(x, bias, "linear_gelu");
  const int64_t in = weight.size(1), out_f = weight.size(0), R = x.numel() / in;
  Tensor x2 = raw_view(raw_contiguous(x), {R, in});                                  // (R, in)
  Tensor wt = make_tensor(weight.storage(), {in, out_f}, {weight.stride(1), weight.stride(0)}, weight.offset(),
                          weight.dtype());                                            // W^T (in, out) as a view
  Tensor pre = empty_tensor({R, out_f}, x.dtype(), x.device());                       // h = x W^T + b
  Tensor y = empty_tensor({R, out_f}, x.dtype(), x.device());                         // gelu(h)
  backend(x.device()).linear_gelu(y, pre, x2, wt, raw_contiguous(bias), tanh_form);
  Shape out_shape = x.sizes();
  out_shape.back() = out_f;
  Tensor out = raw_view(y, out_shape);
  if (should_record({x, weight, bias})) {
    const auto need = grad_mask({x, weight, bias});
    SavedTensor sx(need[1] ? x2 : Tensor(), "linear_gelu"), sw(need[0] ? weight : Tensor(), "linear_gelu");
    const Shape xs = x.sizes();
    const BinaryOp dgelu = tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward;
    record("linear_gelu", {x, weight, bias}, {out}, [=](const TensorList& g) {
      Tensor g2 = raw_view(raw_contiguous(g[0]), {R, out_f});
      Tensor dh = empty_tensor(g2.sizes(), g2.dtype(), g2.device());  // GELU's backward, as gelu() records it
      backend(g2.device()).binary(dgelu, dh, raw_cast(pre, g2.dtype()), g2);
      Tensor dx = need[0] ? raw_view(matmul(dh, sw.get()), xs) : Tensor();
      Tensor dw = need[1] ? matmul(transpose(dh, 0, 1), sx.get()) : Tensor();
      Tensor db = need[2] ? sum(dh, {0}) : Tensor();
      return TensorList{dx, dw, db};
    });
  }
  return out;
}

// Note [Dropout and residual]: dropout(x) + residual composed is a bernoulli
// float mask, keep * 1/(1-p), x * that, + residual: four passes and a float
// mask. dropout_add draws the same mask (one bernoulli call of x's shape, as
// dropout() makes) as bool and applies it and the residual in one pass;
// backward is one pass for x, and residual's gradient is the incoming one.
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen) {
  check_defined(x, "dropout_add", "x");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_add: dropout probability must be in [0, 1], got ", p);
  if (residual.defined()) {
    KILN_CHECK(residual.sizes() == x.sizes(), "dropout_add: residual of shape ", shape_str(residual.sizes()),
               " does not match x ", shape_str(x.sizes()));
    check_same_device(x, residual, "dropout_add");
  }
  auto composed = [&] {
    Tensor d = dropout(x, p, training, gen);
    return residual.defined() ? add(d, residual) : d;
  };
  if (!training || p == 0.0 || p == 1.0 || !is_floating(x.dtype()) ||
      (residual.defined() && residual.dtype() != x.dtype()) || x.numel() == 0)
    return composed();
  Tensor keep = bernoulli(x.sizes(), 1.0 - p, TensorOptions(DType::Bool, x.device()), gen);
  const double scale = 1.0 / (1.0 - p);
  Tensor xc = raw_contiguous(x);
  Tensor rc = residual.defined() ? raw_contiguous(residual) : Tensor();
  Tensor out = empty_tensor(x.sizes(), x.dtype(), x.device());
  backend(x.device()).masked_scale_add(out, xc, keep, scale, rc);
  const TensorList inputs = residual.defined() ? TensorList{x, residual} : TensorList{x};
  if (should_record(inputs)) {
    const bool with_residual = residual.defined();
    const DType out_dtype = out.dtype();  // not `out` itself: the node must not own its output (a cycle)
    record("dropout_add", inputs, {out}, [=](const TensorList& g) {
      Tensor gc = raw_contiguous(raw_cast(g[0], out_dtype));
      Tensor dx = empty_tensor(gc.sizes(), gc.dtype(), gc.device());
      backend(gc.device()).masked_scale_add(dx, gc, keep, scale, Tensor());
      return with_residual ? TensorList{dx, g[0]} : TensorList{dx};
    });
  }
  return out;
}

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("multi_head_attention", true, [] {
  return S{{"2 heads, key mask", {sample_tensor({2, 3, 4}, 120), sample_tensor({2, 3, 4}, 121), sample_tensor({2, 3, 4}, 122)},
            [](const L& x) {
              Tensor mask = tensor({0, 0, -1e4, 0, 0, 0}, {2, 1, 1, 3}, DType::Float64);
              return multi_head_attention(x[0], x[1], x[2], 2, mask);
            }},
           {"dropout p=0.3 fixed seed, slices of one qkv",
            {sample_tensor({2, 3, 12}, 123)},
            [](const L& x) {
              Generator gen(4321);
              return multi_head_attention(narrow(x[0], 2, 0, 4), narrow(x[0], 2, 4, 4), narrow(x[0], 2, 8, 4), 1,
                                          Tensor(), 0.3, true, &gen);
            }}};
});
KILN_REGISTER_OP("linear_fused", true, [] {
  return S{{"3-D input", {sample_tensor({2, 3, 4}, 128), sample_tensor({5, 4}, 129), sample_tensor({5}, 130)},
            [](const L& x) { return linear_fused(x[0], x[1], x[2]); }}};
});
KILN_REGISTER_OP("linear_gelu", true, [] {
  return S{{"3-D input, erf", {sample_tensor({2, 3, 4}, 131), sample_tensor({5, 4}, 132), sample_tensor({5}, 133)},
            [](const L& x) { return linear_gelu(x[0], x[1], x[2]); }},
           {"2-D input, tanh", {sample_tensor({3, 4}, 134), sample_tensor({6, 4}, 135), sample_tensor({6}, 136)},
            [](const L& x) { return linear_gelu(x[0], x[1], x[2], "tanh"); }}};
});
KILN_REGISTER_OP("dropout_add", true, [] {
  return S{{"p=0.3 with residual", {sample_tensor({4, 6}, 125), sample_tensor({4, 6}, 126)}, [](const L& x) {
              Generator gen(77);
              return dropout_add(x[0], x[1], 0.3, true, &gen);
            }},
           {"p=0.5 no residual", {sample_tensor({3, 5}, 127)}, [](const L& x) {
              Generator gen(78);
              return dropout_add(x[0], Tensor(), 0.5, true, &gen);
            }}};
});
KILN_REGISTER_OP("multi_head_attention_qkv", true, [] {
  return S{{"3 heads, dropout p=0.2, batch-1 mask", {sample_tensor({2, 4, 18}, 124)}, [](const L& x) {
              Generator gen(99);
              Tensor mask = tensor({0, -1e4, 0, 0}, {1, 1, 1, 4}, DType::Float64);
              return multi_head_attention_qkv(x[0], 3, mask, 0.2, true, &gen);
            }}};
});

}  // namespace kiln
