// Fused ops of Llama-style decoders and ModernBERT (ops/decoder_ops.cpp):
// RMS norm, rotary position embedding and gated activations (SwiGLU, GeGLU).
// Each equals a composition of public ops, the one nn/models/llama.cpp
// used before them (tests/test_decoder_ops.cpp checks forward and gradients
// against it), runs one kernel each way (CPU: core/cpu/decoder_kernels.cpp,
// CUDA: cuda/decoder_kernels.cu) and is registered with gradient-check samples.
#pragma once

#include <string>
#include <vector>

#include "kiln/ops/ops.h"

namespace kiln {

// x (..., C), weight (C) or undefined -> (..., C). transformers' LlamaRMSNorm:
//   x32 = x.to(float32)                       (float64 stays float64)
//   y   = weight * (x32 * rsqrt(mean(x32 * x32, -1, keepdim) + eps)).to(x.dtype)
// The statistic is taken in float32 (float64 for float64 x) and the
// normalised value rounded to x's dtype before the weight multiplies it, so
// the result has x's dtype, or promote(weight, x) with a weight of another
// dtype (float32 weights on bfloat16 x give float32, as in transformers).
// Autocast: float32, as layer_norm (Note [Autocast policy]). eps >= 0.
// Backward: dx and dweight (summed over rows in a fixed order).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

// x (B, T, heads * D), any strides (a column slice of a fused QKV projection
// reads in place); cos, sin (T, D) tables, D even -> (B, T, heads * D)
// contiguous. Per head, with halves x1 = x[..., :D/2], x2 = x[..., D/2:]:
//   rotate_half(x) = cat(-x2, x1),   y = x * cos + rotate_half(x) * sin
// (apply_rotary in nn/models/llama.cpp, transformers' apply_rotary_pos_emb;
// the halves of cos and sin need not be equal). The result has
// promote(x, cos, sin)'s dtype, as the composite's products. cos and sin are
// tables and get no gradient: passing ones that require grad (with grad
// mode on) is an error, detach them. Backward, dy's halves dy1, dy2:
//   dx1 = dy1 * cos1 + dy2 * sin2,   dx2 = dy2 * cos2 - dy1 * sin1
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads);

// act(a) * b elementwise; a and b of one shape, dtype and device, any strides
// (the two halves of a fused (..., 2I) projection read in place) -> a's
// shape, contiguous. activation (gated_activation_names()):
//   "silu", "swish"                       a * sigmoid(a)         (SwiGLU, Llama)
//   "gelu", "gelu_python"                 gelu(a), the exact erf (GeGLU, ModernBERT)
//   "gelu_tanh", "gelu_pytorch_tanh",     gelu(a, "tanh")
//   "gelu_new", "gelu_fast"
// The same scalar formulas as sigmoid and gelu (core/activation_math.h).
// Backward: da = dy * b * act'(a), db = dy * act(a).
Tensor gated_activation(const Tensor& a, const Tensor& b, const std::string& activation);

// The activation names gated_activation accepts, in its table's order.
const std::vector<std::string>& gated_activation_names();
// The canonical name ("silu", "gelu" or "gelu_tanh") of one of them; for
// any other name kiln::Error naming it and the accepted ones.
const std::string& gated_activation_canonical(const std::string& activation);

}  // namespace kiln
