// Fused ops for the transformer training step: multi_head_attention (q, k, v
// apart or packed in one (B, T, 3C) projection), linear_fused and dropout_add.
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
// composite itself.
#include "ops/fused.h"

#include <cmath>

#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask_bias,
                           double p, bool training, Generator* gen) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  auto split = [&](const Tensor& x) { return reshape(x, {B, T, heads, C / heads}).transpose(1, 2); };
  Tensor scores = mul(matmul(split(q), split(k).transpose(-1, -2)), 1.0 / std::sqrt(static_cast<double>(C / heads)));
  if (mask_bias.defined()) scores = add(scores, mask_bias);
  Tensor probs = dropout(softmax(scores, -1), p, training, gen);
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
