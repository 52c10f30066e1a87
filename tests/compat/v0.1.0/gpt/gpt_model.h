// A small GPT (GPT-2's architecture and parameter names) written against
// kiln's public API, as a user writes a model: Modules with parameters and
// submodules, called as m(x) (Note [Module call]), causal fused attention with
// a KV cache for generation (nn/generation.h, Note [KV cache]).
//
//   ids (B, T) -> wte + wpe -> n_layer x Block -> ln_f -> logits (B, T, V)
//   Block: x + attn(ln_1(x)), then x + mlp(ln_2(x))       (pre-LN, as GPT-2)
//   the LM head is tied to wte (logits = h @ wte^T)
#pragma once

#include <kiln/kiln.h>

#include <cmath>
#include <memory>
#include <string>

namespace gpt {

using kiln::Tensor;
namespace nn = kiln::nn;

struct Config {
  int64_t vocab_size = 256;
  int64_t n_positions = 256;
  int64_t n_embd = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  double dropout = 0.0;
};

// Causal self-attention: one (C, 3C) projection to q, k, v, the fused
// attention op (causal, aligned bottom-right so that T new queries see the S
// cached keys), an output projection.
// [attention]
class Attention : public nn::Module, public nn::Callable<Attention> {
 public:
  Attention(const Config& c, int64_t layer) : heads_(c.n_head), layer_(layer), dropout_(c.dropout) {
    // GPT-2's initialisation: N(0, 0.02), the residual projection scaled by 1/sqrt(2 n_layer).
    c_attn = register_module("c_attn", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd, true, 0.02));
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd, true,
                                                                    0.02 / std::sqrt(2.0 * c.n_layer)));
  }
  // x (B, T, C) -> (B, T, C); with a cache, appends this layer's k and v.
  Tensor forward(const Tensor& x, nn::KVCache* cache) const {
    const int64_t C = x.size(2);
    const std::vector<Tensor> qkv = kiln::split((*c_attn)(x), C, 2);  // 3 x (B, T, C)
    Tensor k = qkv[1], v = qkv[2];
    if (cache) std::tie(k, v) = cache->append(layer_, k, v);          // (B, S, C)
    const Tensor y = kiln::multi_head_attention(qkv[0], k, v, heads_, Tensor(), dropout_, is_training(), nullptr,
                                                /*causal=*/true);
    return (*c_proj)(y);
  }
  std::shared_ptr<nn::Linear> c_attn, c_proj;

 private:
  int64_t heads_, layer_;
  double dropout_;
};
// [attention]

class Mlp : public nn::Module, public nn::Callable<Mlp> {
 public:
  explicit Mlp(const Config& c) {
    c_fc = register_module("c_fc", std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd, true, 0.02));
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd, true,
                                                                    0.02 / std::sqrt(2.0 * c.n_layer)));
  }
  Tensor forward(const Tensor& x) const { return (*c_proj)(kiln::gelu((*c_fc)(x), "tanh")); }
  std::shared_ptr<nn::Linear> c_fc, c_proj;
};

class Block : public nn::Module, public nn::Callable<Block> {
 public:
  Block(const Config& c, int64_t layer) {
    ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd));  // eps 1e-5, as GPT-2
    attn = register_module("attn", std::make_shared<Attention>(c, layer));
    ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd));
    mlp = register_module("mlp", std::make_shared<Mlp>(c));
  }
  Tensor forward(const Tensor& x, nn::KVCache* cache) const {
    const Tensor h = x + (*attn)((*ln_1)(x), cache);
    return h + (*mlp)((*ln_2)(h));
  }
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};

// [gpt]
class GPT : public nn::Module, public nn::Callable<GPT> {
 public:
  explicit GPT(const Config& c) : config(c) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, std::nullopt, 0.02));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.n_positions, c.n_embd, std::nullopt, 0.01));
    h = register_module("h", std::make_shared<nn::ModuleList<Block>>());
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c, i));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd));
  }
  // ids (B, T) int64 at positions [start, start + T), start = cache->length()
  // (0 without a cache) -> logits (B, T, V).
  Tensor forward(const Tensor& ids, nn::KVCache* cache = nullptr) const {
    const int64_t T = ids.size(1), start = cache ? cache->length() : 0;
    KILN_CHECK(start + T <= config.n_positions, "GPT: ", start + T, " positions, the model has ", config.n_positions);
    const Tensor pos = kiln::arange(static_cast<double>(start), static_cast<double>(start + T), 1.0,
                                    kiln::TensorOptions(kiln::DType::Int64, ids.device()));
    Tensor x = (*wte)(ids) + (*wpe)(pos.reshape({1, T}));
    for (const auto& block : *h) x = (*block)(x, cache);
    return kiln::matmul((*ln_f)(x), wte->weight.transpose(0, 1));  // tied head
  }
  Config config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList<Block>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};
// [gpt]

}  // namespace gpt
