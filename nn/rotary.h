// Rotary position embeddings, shared by the families that use them (Llama,
// Mistral, Qwen2: nn/models/llama.h; ModernBERT: nn/models/modernbert.h).
//
// Note [Rotary embeddings]
// Position p rotates each head's pairs (x[i], x[i + D/2]) by p * theta^(-2i/D)
// (transformers' rotate_half layout, not interleaved pairs):
//   rope(x) = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1),
// with cos, sin (T, D) = cos/sin of cat(freqs, freqs), freqs[t, i] =
// (start + t) * position_scale * theta^(-2i/D). transformers computes the
// inverse frequencies and the angles in float32 whatever the model's dtype:
// so does rope_tables. A family's scaling (Llama's linear and dynamic NTK)
// picks theta and position_scale (nn/models/llama.cpp).
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>

#include "kiln/ops/ops.h"

namespace kiln::nn {

// cos and sin (T, D) for positions [start, start + T), D even, in opts'
// dtype (float32 when unset) on opts' device.
std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, double theta, int64_t start, int64_t T, TensorOptions opts,
                                      double position_scale = 1.0);

// The tables of positions [0, positions) for one theta, computed once per
// dtype and device and handed out as row views [start, start + T): a forward
// pays no trigonometry, and a traced export sees one constant whose contents
// do not depend on the sequence length (Note [Dynamic axes],
// export/tracer.cpp). The float32 CPU tables are made by the constructor;
// another dtype or device's on first use. Thread-safe.
class RopeCache {
 public:
  RopeCache(int64_t head_dim, double theta, int64_t positions);
  // start + T <= positions, else kiln::Error naming both.
  std::pair<Tensor, Tensor> tables(int64_t start, int64_t T, TensorOptions opts) const;

 private:
  int64_t head_dim_, positions_;
  double theta_;
  mutable std::mutex mu_;
  mutable Tensor cos_, sin_;  // (positions, D), or undefined before the first call
};

// rope(x) per head: x (B, T, heads * D) (a strided view is fine), cos and sin
// (T, D) -> (B, T, heads * D).
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads);

}  // namespace kiln::nn
