// Basic layers with PyTorch's parameter names, shapes and defaults.
//   Linear     weight (out, in), bias (out)          x (..., in) -> (..., out)
//   Embedding  weight (V, C)                         ids (...)   -> (..., C)
//   LayerNorm  weight (C) = 1, bias (C) = 0          x (..., C)  -> (..., C)
//   Dropout    p; identity in eval mode
//   GELU, ReLU, Tanh: no parameters
//
// Defaults are torch.nn's: Linear weight and bias U(-1/sqrt(in), 1/sqrt(in))
// (kaiming_uniform with a = sqrt(5)), Embedding N(0, 1), LayerNorm eps 1e-5.
// A model with its own scheme says so where it builds its layers: BERT
// (nn/models/bert.cpp) passes initializer_range (N(0, 0.02) weights, zero biases)
// and its config's layer_norm_eps (1e-12).
//
// Each is called as m(x), the same as m.forward(x) (Note [Module call],
// nn/module.h).
//
// Note [Projections through the layer]: model code applies a Linear through
// its methods (forward, forward_fused, forward_gelu; fused_projection for
// several at once), never through its weight alone, so whatever the layer
// carries besides its weight (a LoRA adapter, nn/lora.h) takes part wherever
// the layer is used.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct LoraAdapter;  // nn/lora.h

// A layer that can carry a LoRA adapter (Linear; GPT-2's Conv1D): its output
// gains the adapter's low-rank term (Note [LoRA], nn/lora.h).
class Adaptable {
 public:
  virtual ~Adaptable() = default;
  // y + the adapter's term for input x; y itself without an adapter (or with
  // one merged into the weight).
  Tensor with_adapter(const Tensor& y, const Tensor& x) const { return adapter ? add_adapter_term(y, x) : y; }
  // The adapter's term (..., out) for x, undefined when there is none to add.
  Tensor adapter_term(const Tensor& x) const;
  // The base weight; (out, in), or (in, out) where weight_is_in_out (Conv1D).
  virtual Tensor& base_weight() = 0;
  virtual Tensor& base_bias() = 0;
  virtual bool weight_is_in_out() const { return false; }

  std::shared_ptr<LoraAdapter> adapter;  // null: none (nn/lora.h attaches one)

 private:
  Tensor add_adapter_term(const Tensor& y, const Tensor& x) const;
};

class Linear : public Module, public Callable<Linear>, public Adaptable {
 public:
  // PyTorch's initialisation: weight and bias U(-1/sqrt(in), 1/sqrt(in)).
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // weight N(0, init_std), bias 0 (BERT's and GPT-2's initialisation).
  Linear(int64_t in_features, int64_t out_features, bool bias, double init_std);
  Tensor forward(const Tensor& x) const { return with_adapter(linear(x, weight, bias), x); }
  // The same with the bias inside the GEMM (linear_fused, Note [Bias in the GEMM]).
  Tensor forward_fused(const Tensor& x) const;
  // gelu(forward(x), approximate) as one op where there is no adapter
  // (linear_gelu, Note [Linear and GELU]); composed with one.
  Tensor forward_gelu(const Tensor& x, const std::string& approximate = "none") const;
  Tensor& base_weight() override { return weight; }
  Tensor& base_bias() override { return bias; }
  Tensor weight, bias;
};

// Several layers on the same input as one GEMM: their weights concatenated
// (out_1 + out_2 + ..., in), their outputs side by side on the last axis
// (BERT's query | key | value into the fused attention), each layer's adapter
// term added to its own block. Every layer needs a bias, or none does.
//
// Note [Fused projection weights]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The concatenation is a copy of every weight (3 C^2 floats for q | k | v:
// 12% of all-MiniLM-L6-v2's forward at 1 x 32, profiled). With grad recorded
// it is an op of the graph (its backward splits the gradient) and runs each
// call. Where no grad is recorded (no-grad inference, or weights that are all
// frozen) a FusedWeights passed in keeps the last concatenation and hands it
// back while every source is the same tensor, at the same data and version
// (an in-place write, the optimizer's step, load_state_dict's copy all bump
// it); anything else rebuilds it. A call that records grad drops it, so
// training holds no second copy of the weights; so does a traced forward
// (kiln export), whose graph must show the concatenation of the parameters.
class FusedWeights {
 public:
  // (cat of the weights along the output axis, cat of the biases or undefined).
  std::pair<Tensor, Tensor> get(const std::vector<const Linear*>& layers) const;

 private:
  mutable std::mutex mutex_;
  mutable std::vector<Tensor> sources_;  // weights then biases, held so no storage is reused
  mutable std::vector<uint32_t> versions_;
  mutable std::vector<const void*> data_;
  mutable Tensor weight_, bias_;
};

Tensor fused_projection(const Tensor& x, const std::vector<const Linear*>& layers,
                        const FusedWeights* cache = nullptr);

class Embedding : public Module, public Callable<Embedding> {
 public:
  // PyTorch's initialisation: N(0, 1), the padding row zero.
  Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt);
  // N(0, init_std), the padding row zero (BERT's initialisation).
  Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx, double init_std);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids, padding_idx); }
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

class LayerNorm : public Module, public Callable<LayerNorm> {
 public:
  // bias false: none (torch's LayerNorm(bias=False), ModernBERT's norms).
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) const { return layer_norm(x, {weight.size(0)}, weight, bias, eps); }
  Tensor weight, bias;
  double eps;
};

class Dropout : public Module, public Callable<Dropout> {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training()); }
  double p;
};

class GELU : public Module, public Callable<GELU> {
 public:
  explicit GELU(std::string approximate = "none");  // "none" (erf) or "tanh", as torch.nn.GELU
  Tensor forward(const Tensor& x) const { return gelu(x, approximate); }
  std::string approximate;
};

class ReLU : public Module, public Callable<ReLU> {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
};

class Tanh : public Module, public Callable<Tanh> {
 public:
  Tensor forward(const Tensor& x) const { return tanh(x); }
};

}  // namespace kiln::nn
