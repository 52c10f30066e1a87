// Llama-style decoders (model_type "llama", "mistral", "qwen2"): pre-norm blocks of
// RMSNorm, attention with rotary position embeddings and grouped-query
// key/value heads, and a SwiGLU MLP; transformers' module tree and names
// ("model.", "embed_tokens", "layers.N.self_attn.q_proj", "mlp.gate_proj",
// "input_layernorm", "norm", "lm_head").
//
//   ids, attention_mask: (B, T) int64 (with a KV cache the mask covers the
//   cached and the new positions, (B, S)); hidden (B, T, C = hidden_size);
//   H query heads, K = num_key_value_heads, D = C / H; F intermediate_size.
//
// Rotary embeddings: Note [Rotary embeddings] (nn/rotary.h). rope_scaling,
// as transformers 4.36 reads it ({"type", "factor"}; 4.48 also writes
// "rope_type", and its "default" is none):
//   "linear":  positions are divided by factor;
//   "dynamic": (NTK) when the sequence (cached + new) is longer than
//              max_position_embeddings, theta becomes
//              theta * (factor * S / P - (factor - 1))^(D / (D - 2)).
// Any other type is a config error naming it.
//
// Mistral's sliding_window w: position p attends keys (p - w, p]
// (transformers 4.36's eager mask); Llama has none. Qwen2 (transformers
// >= 4.37) is Llama's blocks with biases on q, k and v (not o); its
// use_sliding_window = true is refused (transformers applies that window
// only under flash-attention: its eager and SDPA paths ignore it).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/generation.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/rotary.h"  // apply_rotary

namespace kiln {

struct RopeScaling {
  std::string type;  // "linear" or "dynamic"
  double factor = 1.0;  // > 1
  bool operator==(const RopeScaling&) const = default;
};

// transformers' LlamaConfig and MistralConfig (4.36) and Qwen2Config (4.48),
// one struct: the structural fields vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads and
// max_position_embeddings are required; the rest take the family's defaults
// (Mistral: 8 key/value heads, sliding_window 4096; Qwen2: no bos/eos ids);
// unknown keys are kept verbatim in `extra`.
struct LlamaConfig {
  std::string model_type = "llama";  // "llama", "mistral" or "qwen2"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // divides num_attention_heads
  std::string hidden_act = "silu";   // one of BertConfig::known_activations()
  int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  int64_t pretraining_tp = 1;  // transformers splits its matmuls in this many slices: the same math
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;  // llama and qwen2
  bool attention_bias = false;              // llama only: biases on q, k, v and o
  double attention_dropout = 0.0;
  std::optional<int64_t> sliding_window;    // mistral only; null: none
  int64_t max_window_layers = 28;           // qwen2 only, kept as written (use_sliding_window is refused)
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id = 1;
  std::optional<int64_t> eos_token_id = 2;
  std::optional<int64_t> pad_token_id;
  std::optional<std::string> problem_type;
  std::vector<std::string> architectures;
  std::map<std::string, std::string> extra;  // other keys, as JSON text

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  bool qkv_bias() const { return attention_bias || model_type == "qwen2"; }  // biases on q_proj, k_proj, v_proj
  bool o_bias() const { return attention_bias; }                            // and on o_proj
  HiddenAct act() const;
  void validate(const std::string& source = "LlamaConfig") const;
  static LlamaConfig from_json_string(const std::string& text, const std::string& source = "config.json");
  std::string to_json_string() const;  // keys sorted, 2-space indent
  BertConfig bert_equivalent() const;  // the BERT-schema config of the same sizes (model-size estimate)
  bool operator==(const LlamaConfig&) const = default;
};

namespace nn {

// weight * x / sqrt(mean(x^2) + eps) over the last dimension, as
// transformers' LlamaRMSNorm (weight starts at ones).
class RMSNorm : public Module, public Callable<RMSNorm> {
 public:
  RMSNorm(int64_t dim, double eps);
  Tensor forward(const Tensor& x) const;
  Tensor weight;  // (dim)
  double eps;
};

// Note [Rotary embeddings]: cos and sin (T, D) for positions [start,
// start + T) of a sequence of `total` positions (cached + new), with the
// config's theta and scaling.
std::pair<Tensor, Tensor> rotary_tables(const LlamaConfig& c, int64_t start, int64_t T, int64_t total,
                                        TensorOptions opts);

class LlamaAttention : public Module, public Callable<LlamaAttention> {
 public:
  LlamaAttention(const LlamaConfig& c, int64_t layer_idx);
  // x (B, T, C); mask (B or 1, 1, 1 or T, S) additive or undefined; cos/sin
  // (T, D); cache: this layer appends its rotated keys and values (K heads)
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin, KVCache* cache) const;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;  // (H D, C), (K D, C), (K D, C), (C, H D)
  int64_t heads, kv_heads, layer_idx;
  double dropout;
};

class LlamaMLP : public Module, public Callable<LlamaMLP> {
 public:
  explicit LlamaMLP(const LlamaConfig& c);
  Tensor forward(const Tensor& x) const;  // down(act(gate(x)) * up(x)): (B, T, C) -> (B, T, C)
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;  // (F, C), (F, C), (C, F)
  HiddenAct act;
};

class LlamaDecoderLayer : public Module, public Callable<LlamaDecoderLayer> {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, int64_t layer_idx);
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin, KVCache* cache) const;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
};

class LlamaModel : public EncoderModel, public Callable<LlamaModel> {
 public:
  using config_type = LlamaConfig;
  explicit LlamaModel(const LlamaConfig& c, bool add_pooling_layer = false);  // no pooler
  EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor()) const override;
  // Hidden states after the final norm for ids at positions [start, start + T),
  // start = cache ? cache->length() : 0 (Note [KV cache]).
  Tensor hidden(const Tensor& ids, const Tensor& attention_mask, KVCache* cache) const;
  const ModelConfig& model_config() const override { return family_config; }
  LlamaConfig config;
  ModelConfig family_config;
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<LlamaDecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
};

// LlamaForCausalLM / MistralForCausalLM: logits = norm(h) lm_head^T, the
// head tied to embed_tokens when tie_word_embeddings.
class LlamaForCausalLM : public CausalLanguageModel, public Callable<LlamaForCausalLM> {
 public:
  using config_type = LlamaConfig;
  explicit LlamaForCausalLM(const LlamaConfig& c);
  CausalLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(), const Tensor& labels = Tensor(),
                         KVCache* cache = nullptr) const override;
  const ModelConfig& model_config() const override { return model->family_config; }
  Tensor head(const Tensor& h) const;  // (..., C) -> (..., V)
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<Linear> lm_head;  // untied only
};

}  // namespace nn
}  // namespace kiln
