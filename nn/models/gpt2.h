// GPT-2 (model_type "gpt2"): a pre-LN causal decoder with learned positions,
// transformers' module tree and names ("transformer.", "h.N.ln_1",
// "attn.c_attn", "mlp.c_fc", "ln_f", "lm_head"), and its Conv1D layout:
// weights stored (in, out), y = x W + b, so files load and save as they are.
//
//   ids, attention_mask: (B, T) int64 (with a KV cache the mask covers the
//   cached and the new positions, (B, S)); hidden (B, T, C = n_embd);
//   F = n_inner (4 C when null); V vocabulary; P n_positions.
//
// GPT2Config reads config.json as transformers' GPT2Config: vocab_size,
// n_positions, n_embd, n_layer and n_head are required (transformers'
// attribute-map names hidden_size, max_position_embeddings,
// num_attention_heads, num_hidden_layers are read as those when absent); the
// rest take transformers' defaults; unknown keys (summary_*, task_specific_params,
// ...) are kept verbatim in `extra` and written back. token_type_ids are
// accepted and ignored (transformers adds wte(token_type_ids) when given one;
// kiln's tools never pass decoders token types).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/generation.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model_config.h"

namespace kiln {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  std::optional<int64_t> n_inner;  // the MLP width; null: 4 * n_embd
  std::string activation_function = "gelu_new";  // one of BertConfig::known_activations()
  double resid_pdrop = 0.1;
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  bool scale_attn_weights = true;               // scores / sqrt(head_dim)
  bool scale_attn_by_inverse_layer_idx = false;  // and / (layer index + 1)
  bool reorder_and_upcast_attn = false;          // float32 scores under autocast: kiln's attention computes them so
  bool tie_word_embeddings = true;               // lm_head is wte
  std::optional<int64_t> bos_token_id = 50256;
  std::optional<int64_t> eos_token_id = 50256;
  std::optional<int64_t> pad_token_id;
  std::optional<std::string> problem_type;
  std::vector<std::string> architectures = {"GPT2LMHeadModel"};
  std::map<std::string, std::string> extra;  // other keys, as JSON text

  int64_t inner() const { return n_inner.value_or(4 * n_embd); }
  HiddenAct act() const;
  void validate(const std::string& source = "GPT2Config") const;
  static GPT2Config from_json_string(const std::string& text, const std::string& source = "config.json");
  std::string to_json_string() const;  // keys sorted, 2-space indent, model_type "gpt2"
  BertConfig bert_equivalent() const;  // the BERT-schema config of the same sizes (model-size estimate)
  bool operator==(const GPT2Config&) const = default;
};

namespace nn {

// transformers' Conv1D: weight (in, out), y = x W + b.
class Conv1D : public Module, public Callable<Conv1D>, public Adaptable {
 public:
  Conv1D(int64_t out, int64_t in, double init_std);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out), the bias inside the GEMM
  Tensor forward_fused(const Tensor& x) const { return forward(x); }
  Tensor forward_gelu(const Tensor& x, const std::string& approximate = "none") const;  // as Linear's
  Tensor& base_weight() override { return weight; }
  Tensor& base_bias() override { return bias; }
  bool weight_is_in_out() const override { return true; }
  Tensor weight;                          // (in, out)
  Tensor bias;                            // (out)
};

class GPT2Attention : public Module, public Callable<GPT2Attention> {
 public:
  GPT2Attention(const GPT2Config& c, int64_t layer_idx);
  // x (B, T, C); mask_bias (B, 1, 1, S) additive or undefined; cache: this
  // layer appends its keys and values (S = cached + T) -> (B, T, C)
  Tensor forward(const Tensor& x, const Tensor& mask_bias, KVCache* cache) const;
  std::shared_ptr<Conv1D> c_attn, c_proj;  // (C, 3C), (C, C)
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
  int64_t heads, layer_idx;
  double q_scale;  // multiplies q so that the fused attention's 1/sqrt(d) gives GPT-2's scale
};

class GPT2MLP : public Module, public Callable<GPT2MLP> {
 public:
  explicit GPT2MLP(const GPT2Config& c);
  Tensor forward(const Tensor& x) const;  // (B, T, C) -> (B, T, C), before the residual dropout
  std::shared_ptr<Conv1D> c_fc, c_proj;   // (C, F), (F, C)
  std::shared_ptr<Dropout> dropout;
  HiddenAct act;
};

class GPT2Block : public Module, public Callable<GPT2Block> {
 public:
  GPT2Block(const GPT2Config& c, int64_t layer_idx);
  Tensor forward(const Tensor& x, const Tensor& mask_bias, KVCache* cache) const;  // (B, T, C) -> (B, T, C)
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;
};

class GPT2Model : public EncoderModel, public Callable<GPT2Model> {
 public:
  using config_type = GPT2Config;  // from_pretrained<GPT2Model>
  // add_pooling_layer: GPT-2 has no pooler (accepted for the Auto layer's signature).
  explicit GPT2Model(const GPT2Config& c, bool add_pooling_layer = false);
  EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor()) const override;
  // Hidden states after ln_f for ids at positions [start, start + T), start =
  // cache ? cache->length() : 0 (Note [KV cache]).
  Tensor hidden(const Tensor& ids, const Tensor& attention_mask, KVCache* cache) const;
  const ModelConfig& model_config() const override { return family_config; }
  GPT2Config config;
  ModelConfig family_config;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList<GPT2Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

// The LM head: logits = ln_f(h) wte^T (tied) or lm_head.weight (V, C) when
// tie_word_embeddings is false; no bias.
class GPT2LMHeadModel : public CausalLanguageModel, public Callable<GPT2LMHeadModel> {
 public:
  using config_type = GPT2Config;
  explicit GPT2LMHeadModel(const GPT2Config& c);
  CausalLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(), const Tensor& labels = Tensor(),
                         KVCache* cache = nullptr) const override;
  const ModelConfig& model_config() const override { return transformer->family_config; }
  Tensor head(const Tensor& h) const;  // (..., C) -> (..., V)
  std::shared_ptr<GPT2Model> transformer;
  std::shared_ptr<Linear> lm_head;  // untied only; tied: wte
};

}  // namespace nn
}  // namespace kiln
