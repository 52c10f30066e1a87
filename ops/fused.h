// Fused ops for the transformer training step (ops/fused.cpp). Each equals a
// composition of public ops (tests/test_fused_ops.cpp checks forward and
// gradients against it) and is registered with gradient-check samples.
#pragma once

#include <string>

#include "kiln/ops/ops.h"

namespace kiln {

// Multi-head scaled-dot-product attention on (B, T, C) projections with
// C = heads * head_size; q, k, v may be column slices of one (B, T, 3C) tensor.
// Equals, with split(x) = x.view({B, T, heads, hs}).transpose(1, 2):
//   probs = dropout(softmax(matmul(split(q), split(k)^T) * (1/sqrt(hs)) + mask_bias), p, training, gen)
//   out   = matmul(probs, split(v)).transpose(1, 2).reshape({B, T, C})
// mask_bias: (B, 1, 1, T) or (1, 1, 1, T) additive key bias (no gradient), or
// undefined. Draws the dropout mask exactly as dropout() would (one generator
// call over (B, heads, T, T)), so it gives the composite's numbers.
Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                            const Tensor& mask_bias = Tensor(), double p = 0.0, bool training = false,
                            Generator* gen = nullptr);

// The same on a packed (B, T, 3C) projection: q, k, v are its column blocks
// [0, C), [C, 2C), [2C, 3C). Its gradient is one (B, T, 3C) tensor, so a fused
// QKV linear layer feeds it without slicing copies.
Tensor multi_head_attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask_bias = Tensor(), double p = 0.0,
                                bool training = false, Generator* gen = nullptr);

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
