// Fused ops for the transformer training step (ops/fused.cpp). Each equals a
// composition of public ops (tests/test_fused_ops.cpp checks forward and
// gradients against it) and is registered with gradient-check samples.
#pragma once

#include <string>

#include "kiln/ops/ops.h"

namespace kiln {

// Multi-head scaled-dot-product attention on (B, T, C) queries against (B, S, C)
// keys and values, C = heads * head_size; q, k, v may be column slices of one
// (B, T, 3C) tensor. Equals, with split(x) = x.view({B, L, heads, hs}).transpose(1, 2)
// (L = T for q, S for k and v):
//   scores = matmul(split(q), split(k)^T) * (1/sqrt(hs)) + mask_bias   (B, heads, T, S)
//   causal: scores = masked_fill(scores, s > t + (S - T), -inf)
//   probs  = dropout(softmax(scores), p, training, gen)
//   out    = matmul(probs, split(v)).transpose(1, 2).reshape({B, T, C})
// mask_bias (no gradient), or undefined: a key bias (B, 1, 1, S) or
// (1, 1, 1, S), or a full additive mask (B or 1, 1 or heads, T, S).
// causal: query t (0-based) attends keys s <= t + (S - T): the diagonal is
// aligned bottom-right, so T new queries against a KV cache of S >= T keys
// (the last T of them the queries' own positions) attend what a decoder
// allows; with S == T it is the usual lower triangle. (PyTorch's SDPA
// is_causal is aligned top-left, s <= t; flash-attention's and cuDNN's
// "bottom right" causal masks are this one.) causal with S < T is an error.
// With causal, mask_bias adds to the attended scores; a row whose attended
// scores are all -inf gives NaN, as the composite's softmax does. Draws the
// dropout mask exactly as dropout() would (one generator call over
// (B, heads, T, S)), so it gives the composite's numbers (Note [Fused
// attention], ops/fused.cpp). On CUDA, float16 and bfloat16 run cuDNN's fused
// attention where it takes the problem (a key bias or none; causal within
// Note [cuDNN causal masks]), the composite otherwise (full masks always).
Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                            const Tensor& mask_bias = Tensor(), double p = 0.0, bool training = false,
                            Generator* gen = nullptr, bool causal = false);

// The same on a packed (B, T, 3C) projection: q, k, v are its column blocks
// [0, C), [C, 2C), [2C, 3C) (so S = T). Its gradient is one (B, T, 3C)
// tensor, so a fused QKV linear layer feeds it without slicing copies.
Tensor multi_head_attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask_bias = Tensor(), double p = 0.0,
                                bool training = false, Generator* gen = nullptr, bool causal = false);

// linear(x, weight, bias) with the bias added inside the GEMM (Note [Bias in
// the GEMM]); falls back to linear() without a bias, under autocast, or for
// mixed dtypes.
Tensor linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias);

// gelu(linear(x, weight, bias), approximate) as one op (Note [Linear and
// GELU], ops/fused.cpp): saves the pre-activation; backward is GELU's backward
// then linear's. Falls back to the composition where linear_fused does.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& approximate = "none");

// add(dropout(x, p, training, gen), residual) in one pass, with the same mask
// (Note [Dropout and residual]); residual same shape as x, or undefined for
// plain dropout.
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training, Generator* gen = nullptr);

}  // namespace kiln
