// Basic layers with Hugging Face / PyTorch parameter names and shapes.
//   Linear     weight (out, in), bias (out)          x (..., in) -> (..., out)
//   Embedding  weight (V, C)                         ids (...)   -> (..., C)
//   LayerNorm  weight (C) = 1, bias (C) = 0          x (..., C)  -> (..., C)
//   Dropout    p; identity in eval mode
#pragma once

#include <optional>

#include "nn/module.h"

namespace kiln::nn {

class Linear : public Module {
 public:
  // Initialised N(0, init_std), bias 0 (BERT's initialisation).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, double init_std = 0.02);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt, double init_std = 0.02);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids, padding_idx); }
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-12);
  Tensor forward(const Tensor& x) const { return layer_norm(x, {weight.size(0)}, weight, bias, eps); }
  Tensor weight, bias;
  double eps;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p) : p(p) {}
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training()); }
  double p;
};

}  // namespace kiln::nn
