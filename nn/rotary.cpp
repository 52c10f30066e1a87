// Rotary position embeddings (nn/rotary.h, Note [Rotary embeddings]).
#include "nn/rotary.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/decoder_ops.h"
#include "ops/ops.h"

namespace kiln::nn {

std::pair<Tensor, Tensor> rope_tables(int64_t D, double theta, int64_t start, int64_t T, TensorOptions opts,
                                      double position_scale) {
  KILN_CHECK(D > 0 && D % 2 == 0, "rope_tables: head_dim must be positive and even, got ", D);
  KILN_CHECK(T >= 0 && start >= 0, "rope_tables: positions [", start, ", ", start + T, ") must be non-negative");
  // transformers computes inv_freq = 1 / theta^(2i / D) and the angles in float32: so does this.
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    inv[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / static_cast<double>(static_cast<float>(std::pow(theta, static_cast<double>(static_cast<float>(2 * i) /
                                                                                         static_cast<float>(D))))));
  std::vector<double> cos_v(static_cast<size_t>(T * D)), sin_v(cos_v.size());  // float32 values
  for (int64_t t = 0; t < T; ++t) {
    const float p = static_cast<float>(static_cast<double>(start + t) * position_scale);
    for (int64_t i = 0; i < D; ++i) {
      const float angle = p * inv[static_cast<size_t>(i % (D / 2))];  // emb = cat(freqs, freqs)
      cos_v[static_cast<size_t>(t * D + i)] = std::cos(angle);
      sin_v[static_cast<size_t>(t * D + i)] = std::sin(angle);
    }
  }
  const TensorOptions on_cpu(opts.dtype.value_or(DType::Float32), kCPU);
  return {to_device(tensor(cos_v, {T, D}, on_cpu), opts.device), to_device(tensor(sin_v, {T, D}, on_cpu), opts.device)};
}

RopeCache::RopeCache(int64_t head_dim, double theta, int64_t positions)
    : head_dim_(head_dim), positions_(positions), theta_(theta) {
  KILN_CHECK(head_dim > 0 && head_dim % 2 == 0, "RopeCache: head_dim must be positive and even, got ", head_dim);
  KILN_CHECK(positions > 0, "RopeCache: positions must be positive, got ", positions);
  // float32 on the CPU now, not in the first forward: a traced export's traces then all run the same ops
  NoGradGuard no_grad;
  std::tie(cos_, sin_) = rope_tables(head_dim_, theta_, 0, positions_, TensorOptions(DType::Float32, kCPU));
}

std::pair<Tensor, Tensor> RopeCache::tables(int64_t start, int64_t T, TensorOptions opts) const {
  KILN_CHECK(start >= 0 && T >= 0 && start + T <= positions_, "RopeCache: positions [", start, ", ", start + T,
             ") exceed the ", positions_, " the tables hold");
  const DType dtype = opts.dtype.value_or(DType::Float32);
  std::lock_guard<std::mutex> lock(mu_);
  if (!cos_.defined() || cos_.dtype() != dtype || cos_.device() != opts.device) {
    NoGradGuard no_grad;
    std::tie(cos_, sin_) = rope_tables(head_dim_, theta_, 0, positions_, TensorOptions(dtype, opts.device));
  }
  return {cos_.narrow(0, start, T), sin_.narrow(0, start, T)};
}

Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads) {
  return rotary_embedding(x, cos, sin, heads);  // one fused op (ops/decoder_ops.h)
}

}  // namespace kiln::nn
