// Fused ops for the transformer training step: multi_head_attention (q, k, v
// apart or packed in one (B, T, 3C) projection; causal or not; k, v of their
// own length S), linear_fused, linear_gelu and dropout_add.
//
// Note [Fused attention]: attention composed from primitives makes a dozen
// passes over the (B, heads, T, S) scores (scale, mask, softmax, the dropout
// mask, its scaling and product; the same again backward) and copies q, k, v
// into per-head contiguous layouts before each batched GEMM (and the context
// back out of them). The fused op runs, per (batch, head) pair, two GEMMs that
// read the heads in place, one pass for scale + mask + softmax and one for
// dropout; backward recomputes nothing but the dropped probabilities. It
// saves the softmax probabilities (B, heads, T, S) and the bool keep mask.
// The dropout mask is drawn by the bernoulli op with the generator call the
// composite's dropout would make, and every element goes through the
// composite's arithmetic in its order, so the two agree to rounding of the
// GEMMs. The mask is either a key bias (B|1, 1, 1, S) or a full additive
// mask (B|1, 1|heads, T, S); the kernel reads it through a broadcast view,
// never a copy expanded to (B, heads, T, S).
// Causal attention is bottom-right aligned (query t attends keys
// s <= t + S - T; see ops/fused.h): the composite is the scores plus the
// mask, masked_fill(-inf) above that diagonal, softmax. The CPU kernel
// computes only the blocks below the diagonal, forward and backward (Note
// [Causal attention blocks], core/cpu/attention.cpp): about half the work at
// S = T. Devices without the kernel (Backend::has_fused_attention) and
// autocast scopes (Note [Autocast policy] casts the attention GEMMs) run the
// composite itself: batched GEMMs around scaled_masked_softmax, which is one
// fused scale + mask + softmax kernel on CUDA (causal: mul, add, masked_fill,
// softmax). float16/bfloat16 attention on a device with a vendor kernel
// (Backend::sdpa_supported; cuDNN on CUDA, Note [cuDNN attention]) runs there
// instead, before either path, when it takes the problem (a key bias or none,
// causal or not; full masks never): it saves q, k, v, the output and the
// (B, heads, T) float32 logsumexp, not the probabilities, and its dropout
// mask is the device's own Philox draw at one generator call, which backward
// redraws from the same state (so it matches the composite in distribution,
// not element by element).
#include "ops/fused.h"

#include <cmath>
#include <limits>

#include "core/random.h"
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// (T, S) bool: true above the bottom-right aligned diagonal, s > t + S - T.
Tensor causal_excluded(int64_t T, int64_t S, Device dev) {
  NoGradGuard ng;
  const TensorOptions o(DType::Int64, dev);
  Tensor diff = sub(reshape(arange(0.0, static_cast<double>(S), 1.0, o), {1, S}),
                    reshape(arange(0.0, static_cast<double>(T), 1.0, o), {T, 1}));  // s - t
  return gt(diff, static_cast<double>(S - T));
}

// The oracle: q (B, T, C), k, v (B, S, C) -> (B, T, C), composed from public ops.
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask_bias,
                           double p, bool training, Generator* gen, bool causal) {
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), C = q.size(2);
  auto split = [&](const Tensor& x, int64_t L) { return reshape(x, {B, L, heads, C / heads}).transpose(1, 2); };
  Tensor scores = matmul(split(q, T), split(k, S).transpose(-1, -2));  // (B, NH, T, S)
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / heads));
  Tensor probs;
  if (causal) {
    Tensor s = mul(scores, scale);
    if (mask_bias.defined()) s = add(s, mask_bias);
    s = masked_fill(s, causal_excluded(T, S, q.device()), -std::numeric_limits<double>::infinity());
    probs = softmax(s, -1);
  } else {
    probs = scaled_masked_softmax(scores, scale, mask_bias);
  }
  return matmul(dropout(probs, p, training, gen), split(v, S)).transpose(1, 2).reshape({B, T, C});
}

// q/k/v as the kernel takes them: unit stride in the last dim.
Tensor kernel_operand(const Tensor& x) { return x.stride(2) == 1 ? x : raw_contiguous(x); }

// A key bias (B|1, 1, 1, S), as opposed to a full mask (B|1, 1|heads, T, S).
bool is_key_bias(const Tensor& mask_bias) {
  return mask_bias.defined() && mask_bias.dim() == 4 && mask_bias.size(1) == 1 && mask_bias.size(2) == 1;
}

// q (B, T, C); S: the keys' length.
void check_attention_args(const Tensor& q, int64_t S, int64_t heads, const Tensor& mask_bias, double p, bool causal) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  KILN_CHECK(heads >= 1 && C % heads == 0, "multi_head_attention: hidden size ", C, " is not divisible into ", heads,
             " heads");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "multi_head_attention: dropout probability must be in [0, 1], got ", p);
  KILN_CHECK(!causal || S >= T, "multi_head_attention: causal attention needs at least as many keys as queries "
             "(query t attends keys s <= t + S - T), got ", T, " queries and ", S, " keys");
  if (mask_bias.defined()) {
    const bool batch_ok = mask_bias.dim() == 4 && (mask_bias.size(0) == B || mask_bias.size(0) == 1) &&
                          mask_bias.size(3) == S;
    const bool key_bias = batch_ok && mask_bias.size(1) == 1 && mask_bias.size(2) == 1;
    const bool full = batch_ok && (mask_bias.size(1) == 1 || mask_bias.size(1) == heads) && mask_bias.size(2) == T;
    KILN_CHECK(key_bias || full, "multi_head_attention: mask_bias must be a key bias (", B, ", 1, 1, ", S,
               ") or (1, 1, 1, ", S, "), or a full mask (", B, " or 1, 1 or ", heads, ", ", T, ", ", S,
               ") for ", T, " queries and ", S, " keys, got ", shape_str(mask_bias.sizes()));
    KILN_CHECK(!(grad_enabled() && mask_bias.requires_grad()),
               "multi_head_attention: mask_bias gets no gradient; pass it detached");
    check_same_device(q, mask_bias, "multi_head_attention");
  }
}

bool use_fused(const Tensor& q, const Tensor& k, double p, bool training) {
  return backend(q.device()).has_fused_attention() && !autocast::is_active() &&
         (q.dtype() == DType::Float32 || q.dtype() == DType::Float64) && q.numel() > 0 && k.numel() > 0 &&
         !(training && p == 1.0);
}

// Columns [j*C, (j+1)*C) of qkv (B, T, 3C), as a view without history.
Tensor column_block(const Tensor& qkv, int64_t j, int64_t C) {
  return make_tensor(qkv.storage(), {qkv.size(0), qkv.size(1), C}, {qkv.stride(0), qkv.stride(1), qkv.stride(2)},
                     qkv.offset() + j * C * qkv.stride(2), qkv.dtype());
}

// The fused path. `inputs` are what the node records: {q, k, v} or {qkv}
// (packed, when q/k/v are its column blocks); the gradients match.
Tensor attention_fused(const TensorList& inputs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                       const Tensor& mask_bias, double p, bool training, Generator* gen, bool causal) {
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), C = q.size(2);
  const bool packed = inputs.size() == 1;
  const int64_t hs = C / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const bool drop = training && p > 0.0;
  // The keep mask: the same bernoulli call dropout() makes (Note [Fused attention]).
  Tensor keep = drop ? bernoulli({B, heads, T, S}, 1.0 - p, TensorOptions(DType::Bool, q.device()), gen) : Tensor();
  const double keep_scale = drop ? 1.0 / (1.0 - p) : 1.0;
  // The mask as a (B, heads, T, S) view of its own (small) contiguous copy in q's dtype.
  const Tensor mask = mask_bias.defined()
                          ? raw_expand(raw_contiguous(raw_cast(mask_bias.detach(), q.dtype())), {B, heads, T, S})
                          : Tensor();
  Tensor probs = empty_tensor({B, heads, T, S}, q.dtype(), q.device());
  Tensor out = empty_tensor({B, T, C}, q.dtype(), q.device());
  backend(q.device()).attention(out, probs, q, k, v, mask, keep, heads, scale, keep_scale, causal);
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
                              kv, vv, probs, keep, heads, scale, keep_scale, causal);
        return TensorList{dqkv};
      }
      Tensor dq = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dk = empty_tensor({B, S, C}, qv.dtype(), qv.device());
      Tensor dv = empty_tensor({B, S, C}, qv.dtype(), qv.device());
      be.attention_backward(dq, dk, dv, dctx, qv, kv, vv, probs, keep, heads, scale, keep_scale, causal);
      return TensorList{dq, dk, dv};
    });
  }
  return out;
}

// ---- the vendor kernel (Note [cuDNN attention], cuda/attention_cudnn.cpp) ----

// q (B, T, C) or a column block of the packed projection; S: the keys' length.
bool use_sdpa(const Tensor& q, int64_t S, int64_t heads, const Tensor& mask_bias, double p, bool training,
              bool causal) {
  const int64_t C = q.size(2);
  if (q.numel() == 0 || S == 0 || (q.dtype() != DType::Float16 && q.dtype() != DType::BFloat16) || heads < 1 ||
      C % heads != 0 || (training && p == 1.0) || (mask_bias.defined() && !is_key_bias(mask_bias)) ||
      (causal && S < q.size(1)))
    return false;
  return backend(q.device()).sdpa_supported(q.dtype(), q.size(1), S, C / heads, mask_bias.defined(),
                                            training ? p : 0.0, causal);
}

// The key bias as the kernel takes it: (B, S) contiguous in q's dtype, with
// -inf (a float32 lowest cast down) clamped to the dtype's lowest finite value
// so a fully masked row stays finite, as it does in float32.
Tensor sdpa_mask(const Tensor& mask_bias, DType dtype, int64_t B, int64_t S) {
  if (!mask_bias.defined()) return Tensor();
  const double lowest = dtype == DType::Float16 ? -65504.0 : -3.3895313892515355e38;
  Tensor m = clamp(raw_cast(mask_bias.detach(), DType::Float32), lowest, std::nullopt);
  m = raw_view(raw_contiguous(raw_cast(m, dtype)), {mask_bias.size(0), S});
  return raw_contiguous(raw_expand(m, {B, S}));
}

// q, k, v: row-contiguous operands (strides (L * W, W, 1)); the gradients are
// allocated in the same layout (the kernel's backward graph assumes it).
// Undefined when the backend declines this exact problem (nothing was drawn
// from the generator then).
Tensor attention_sdpa(const TensorList& inputs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                      const Tensor& mask_bias, double p, bool training, Generator* gen, bool causal) {
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), C = q.size(2);
  const bool packed = inputs.size() == 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / heads));
  const double drop = training ? p : 0.0;
  Generator& g = gen ? *gen : default_generator();
  const PhiloxState st = drop > 0.0 ? g.state() : PhiloxState{};
  const Tensor mask = sdpa_mask(mask_bias, q.dtype(), B, S);
  Tensor out = empty_tensor({B, T, C}, q.dtype(), q.device());
  Tensor stats = empty_tensor({B, heads, T}, DType::Float32, q.device());
  if (!backend(q.device()).sdpa_forward(out, stats, q, k, v, mask, heads, scale, drop, st, causal)) return Tensor();
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
                         vv, ov, stats, mask, heads, scale, drop, st, causal);
        return TensorList{dqkv};
      }
      Tensor dq = empty_tensor({B, T, C}, qv.dtype(), qv.device());
      Tensor dk = empty_tensor({B, S, C}, qv.dtype(), qv.device());
      Tensor dv = empty_tensor({B, S, C}, qv.dtype(), qv.device());
      be.sdpa_backward(dq, dk, dv, dout, qv, kv, vv, ov, stats, mask, heads, scale, drop, st, causal);
      return TensorList{dq, dk, dv};
    });
  }
  return out;
}

}  // namespace

Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask_bias,
                            double p, bool training, Generator* gen, bool causal) {
  OpScope scope("multi_head_attention", q, k, v, mask_bias);
  scope.attr("heads", heads);
  scope.attr("p", p);
  scope.attr("training", training);
  scope.attr("causal", causal);
  check_defined(q, "multi_head_attention", "q");
  check_defined(k, "multi_head_attention", "k");
  check_defined(v, "multi_head_attention", "v");
  KILN_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                 k.size(2) == q.size(2),
             "multi_head_attention: q, k, v must be (batch, seq, hidden) with k and v of one shape (batch, keys, "
             "hidden), got ", shape_str(q.sizes()), ", ", shape_str(k.sizes()), ", ", shape_str(v.sizes()));
  check_same_device(q, k, "multi_head_attention");
  check_same_device(q, v, "multi_head_attention");
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "multi_head_attention: q, k, v dtypes differ (",
             dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()), ")");
  const int64_t S = k.size(1);
  check_attention_args(q, S, heads, mask_bias, p, causal);
  if (use_sdpa(q, S, heads, mask_bias, p, training, causal)) {
    Tensor out = attention_sdpa({q, k, v}, raw_contiguous(q), raw_contiguous(k), raw_contiguous(v), heads, mask_bias, p,
                                training, gen, causal);
    if (out.defined()) return scope.out(out);
  }
  if (!use_fused(q, k, p, training)) return scope.out(attention_composite(q, k, v, heads, mask_bias, p, training, gen, causal));
  Tensor qk = kernel_operand(q), kk = kernel_operand(k), vk = kernel_operand(v);
  return scope.out(attention_fused({q, k, v}, qk, kk, vk, heads, mask_bias, p, training, gen, causal));
}

Tensor multi_head_attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask_bias, double p, bool training,
                                Generator* gen, bool causal) {
  OpScope scope("multi_head_attention_qkv", qkv, mask_bias);
  scope.attr("heads", heads);
  scope.attr("p", p);
  scope.attr("training", training);
  scope.attr("causal", causal);
  check_defined(qkv, "multi_head_attention_qkv", "qkv");
  KILN_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
             "multi_head_attention_qkv: qkv must be (batch, seq, 3 * hidden), got ", shape_str(qkv.sizes()));
  const int64_t C = qkv.size(2) / 3, T = qkv.size(1);
  if (use_sdpa(column_block(qkv, 0, C), T, heads, mask_bias, p, training, causal)) {
    check_attention_args(column_block(qkv, 0, C), T, heads, mask_bias, p, causal);
    const Tensor kq = raw_contiguous(qkv);  // q, k, v and the gradient's blocks in one layout
    Tensor out = attention_sdpa({qkv}, column_block(kq, 0, C), column_block(kq, 1, C), column_block(kq, 2, C), heads,
                                mask_bias, p, training, gen, causal);
    if (out.defined()) return scope.out(out);
  }
  const Tensor q = column_block(qkv, 0, C);
  if (!use_fused(qkv, qkv, p, training) || qkv.stride(2) != 1) {
    if (use_fused(qkv, qkv, p, training))
      return scope.out(multi_head_attention_qkv(contiguous(qkv), heads, mask_bias, p, training, gen, causal));
    check_attention_args(q, T, heads, mask_bias, p, causal);
    return scope.out(attention_composite(narrow(qkv, 2, 0, C), narrow(qkv, 2, C, C), narrow(qkv, 2, 2 * C, C), heads, mask_bias,
                               p, training, gen, causal));
  }
  check_attention_args(q, T, heads, mask_bias, p, causal);
  return scope.out(attention_fused({qkv}, q, column_block(qkv, 1, C), column_block(qkv, 2, C), heads, mask_bias, p, training,
                         gen, causal));
}

// Note [Bias in the GEMM]: linear() is matmul then add(bias): the GEMM
// zeroes its output (a pass), writes it, and the add reads it and writes a new
// tensor. linear_fused starts the output as the bias rows and lets the GEMM
// accumulate into it (Backend::addmm): one pass fewer each way, which matters
// most for the MLM decoder's (masked rows, vocabulary) logits. Backward is
// linear's: g @ W, g^T @ x and the column sums of g.
Tensor linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  OpScope scope("linear_fused", x, weight, bias);
  check_defined(x, "linear_fused", "x");
  check_defined(weight, "linear_fused", "weight");
  const bool plain = !bias.defined() || autocast::is_active() || !is_floating(x.dtype()) ||
                     weight.dtype() != x.dtype() || bias.dtype() != x.dtype() || weight.dim() != 2 ||
                     x.dim() < 1 || bias.dim() != 1 || x.size(-1) != weight.size(1) ||
                     bias.size(0) != weight.size(0) || x.numel() == 0 || weight.numel() == 0;
  if (plain) return scope.out(linear(x, weight, bias));  // also the place for linear's argument errors
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
  return scope.out(out);
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
  OpScope scope("linear_gelu", x, weight, bias);
  scope.attr("approximate", approximate);
  KILN_CHECK(approximate == "none" || approximate == "tanh", "linear_gelu: approximate must be 'none' or 'tanh', got '",
             approximate, "'");
  check_defined(x, "linear_gelu", "x");
  check_defined(weight, "linear_gelu", "weight");
  const bool tanh_form = approximate == "tanh";
  const bool plain = !bias.defined() || autocast::is_active() || !is_floating(x.dtype()) ||
                     weight.dtype() != x.dtype() || bias.dtype() != x.dtype() || weight.dim() != 2 ||
                     x.dim() < 1 || bias.dim() != 1 || x.size(-1) != weight.size(1) ||
                     bias.size(0) != weight.size(0) || x.numel() == 0 || weight.numel() == 0;
  if (plain) return scope.out(gelu(linear(x, weight, bias), approximate));  // also the place for linear's argument errors
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
  return scope.out(out);
}

// Note [Dropout and residual]: dropout(x) + residual composed is a bernoulli
// float mask, keep * 1/(1-p), x * that, + residual: four passes and a float
// mask. dropout_add draws the same mask (one bernoulli call of x's shape, as
// dropout() makes) as bool and applies it and the residual in one pass;
// backward is one pass for x, and residual's gradient is the incoming one.
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen) {
  OpScope scope("dropout_add", x, residual);
  scope.attr("p", p);
  scope.attr("training", training);
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
    return scope.out(composed());
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
  return scope.out(out);
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
            }},
           {"causal, 2 heads, key mask", {sample_tensor({2, 5, 4}, 150), sample_tensor({2, 5, 4}, 151),
                                          sample_tensor({2, 5, 4}, 152)},
            [](const L& x) {
              Tensor mask = tensor({0, 0, 0, -1e4, 0, 0, 0, 0, 0, 0}, {2, 1, 1, 5}, DType::Float64);
              return multi_head_attention(x[0], x[1], x[2], 2, mask, 0.0, false, nullptr, true);
            }},
           {"causal KV cache: 2 queries against 5 keys, dropout p=0.25",
            {sample_tensor({2, 2, 4}, 153), sample_tensor({2, 5, 4}, 154), sample_tensor({2, 5, 4}, 155)},
            [](const L& x) {
              Generator gen(4322);
              return multi_head_attention(x[0], x[1], x[2], 2, Tensor(), 0.25, true, &gen, true);
            }},
           {"3 queries against 4 keys, full mask (1, 2, T, S), causal",
            {sample_tensor({2, 3, 4}, 156), sample_tensor({2, 4, 4}, 157), sample_tensor({2, 4, 4}, 158)},
            [](const L& x) {
              const Tensor mask = sample_tensor({1, 2, 3, 4}, 159, -2.0, 2.0);
              return multi_head_attention(x[0], x[1], x[2], 2, mask, 0.0, false, nullptr, true);
            }},
           {"4 queries against 3 keys, full mask (B, 1, T, S)",
            {sample_tensor({2, 4, 6}, 160), sample_tensor({2, 3, 6}, 161), sample_tensor({2, 3, 6}, 162)},
            [](const L& x) {
              const Tensor mask = sample_tensor({2, 1, 4, 3}, 163, -2.0, 2.0);
              return multi_head_attention(x[0], x[1], x[2], 3, mask);
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
            }},
           {"causal, 2 heads, dropout p=0.2", {sample_tensor({2, 5, 12}, 164)}, [](const L& x) {
              Generator gen(100);
              return multi_head_attention_qkv(x[0], 2, Tensor(), 0.2, true, &gen, true);
            }}};
});

}  // namespace kiln
