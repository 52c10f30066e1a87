#include "nn/layers.h"

#include <cmath>

#include "core/op_scope.h"
#include "nn/lora.h"
#include "ops/fused.h"

namespace kiln::nn {

namespace {

// U(-bound, bound) of the given shape.
Tensor uniform_init(const Shape& shape, double bound) { return rand(shape) * (2.0 * bound) - bound; }

void check_features(int64_t in, int64_t out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
}

Tensor embedding_weight(int64_t num, int64_t dim, std::optional<int64_t> pad, double init_std) {
  KILN_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  Tensor w = randn({num, dim}) * init_std;
  if (pad) {
    KILN_CHECK(*pad >= 0 && *pad < num, "Embedding: padding_idx ", *pad, " out of range for ", num, " embeddings");
    NoGradGuard g;
    w.select(0, *pad).zero_();
  }
  return w;
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias) {
  check_features(in, out);
  // torch.nn.Linear.reset_parameters: kaiming_uniform_(a = sqrt(5)) gives
  // bound sqrt(6 / ((1 + a^2) in)) = 1/sqrt(in); the bias uses 1/sqrt(in) too.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  register_parameter("weight", weight, uniform_init({out, in}, bound));
  if (with_bias) register_parameter("bias", bias, uniform_init({out}, bound));
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, double init_std) {
  check_features(in, out);
  register_parameter("weight", weight, randn({out, in}) * init_std);
  if (with_bias) register_parameter("bias", bias, zeros({out}));
}

Tensor Linear::forward_fused(const Tensor& x) const { return with_adapter(linear_fused(x, weight, bias), x); }

Tensor Linear::forward_gelu(const Tensor& x, const std::string& approximate) const {
  if (!adapter_term_needed(*this)) return linear_gelu(x, weight, bias, approximate);
  return gelu(forward_fused(x), approximate);
}

namespace {

// The layers' weights, then their biases (every layer has one, or none has).
std::vector<Tensor> projection_sources(const std::vector<const Linear*>& layers) {
  KILN_CHECK(!layers.empty(), "fused_projection: no layers");
  std::vector<Tensor> sources;
  for (const Linear* l : layers) {
    KILN_CHECK(l->bias.defined() == layers[0]->bias.defined(), "fused_projection: every layer needs a bias, or none");
    sources.push_back(l->weight);
  }
  for (const Linear* l : layers)
    if (l->bias.defined()) sources.push_back(l->bias);
  return sources;
}

std::pair<Tensor, Tensor> concatenated(const std::vector<Tensor>& sources, size_t layers) {
  const std::vector<Tensor> w(sources.begin(), sources.begin() + static_cast<std::ptrdiff_t>(layers));
  const std::vector<Tensor> b(sources.begin() + static_cast<std::ptrdiff_t>(layers), sources.end());
  return {cat(w, 0), b.empty() ? Tensor() : cat(b, 0)};
}

}  // namespace

// Note [Fused projection weights].
std::pair<Tensor, Tensor> FusedWeights::get(const std::vector<const Linear*>& layers) const {
  const std::vector<Tensor> sources = projection_sources(layers);
  // The ONNX tracer (the op observer of this thread, core/op_scope.h) must see the cat.
  bool in_graph = kiln::detail::tls_op_observer != nullptr;
  if (grad_enabled())
    for (const Tensor& t : sources) in_graph = in_graph || t.requires_grad();
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_graph) {  // an op of the graph: no copy kept
    sources_.clear();
    weight_ = bias_ = Tensor();
    return concatenated(sources, layers.size());
  }
  bool same = sources.size() == sources_.size();
  for (size_t i = 0; same && i < sources.size(); ++i)
    same = sources[i].impl_ptr() == sources_[i].impl_ptr() && sources[i].version() == versions_[i] &&
           sources[i].raw_data() == data_[i];
  if (!same) {
    std::tie(weight_, bias_) = concatenated(sources, layers.size());
    sources_ = sources;
    versions_.clear();
    data_.clear();
    for (const Tensor& t : sources) {
      versions_.push_back(t.version());
      data_.push_back(t.raw_data());
    }
  }
  return {weight_, bias_};
}

Tensor fused_projection(const Tensor& x, const std::vector<const Linear*>& layers, const FusedWeights* cache) {
  std::vector<Tensor> terms;
  bool any_term = false;
  for (const Linear* l : layers) any_term = any_term || adapter_term_needed(*l);
  const auto [w, b] = cache != nullptr ? cache->get(layers) : concatenated(projection_sources(layers), layers.size());
  Tensor y = linear_fused(x, w, b);  // (..., sum of out)
  if (!any_term) return y;
  for (const Linear* l : layers) {
    Tensor t = l->adapter_term(x);
    if (!t.defined()) {
      Shape s = x.sizes();
      s.back() = l->weight.size(0);
      t = zeros(s, TensorOptions(y.dtype(), y.device()));
    }
    terms.push_back(t);
  }
  return add(y, cat(terms, -1));
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad) : Embedding(num, dim, pad, 1.0) {}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, double init_std) : padding_idx(pad) {
  register_parameter("weight", weight, embedding_weight(num, dim, pad, init_std));
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool with_bias) : eps(eps) {
  KILN_CHECK(dim > 0, "LayerNorm: dim must be positive, got ", dim);
  KILN_CHECK(eps > 0 && std::isfinite(eps), "LayerNorm: eps must be positive and finite, got ", eps);
  register_parameter("weight", weight, ones({dim}));
  if (with_bias) register_parameter("bias", bias, zeros({dim}));
}

Dropout::Dropout(double p) : p(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
}

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  KILN_CHECK(this->approximate == "none" || this->approximate == "tanh",
             "GELU: approximate must be \"none\" or \"tanh\", got \"", this->approximate, "\"");
}

}  // namespace kiln::nn
