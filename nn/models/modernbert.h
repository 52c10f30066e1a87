// ModernBERT (model_type "modernbert", transformers >= 4.48): a pre-norm
// encoder without position embeddings, biases off by default, rotary
// embeddings, a GeGLU MLP, and attention alternating between global layers
// and local ones (a sliding window); transformers' module tree and names
// ("model.", "embeddings.tok_embeddings", "layers.N.attn_norm", "attn.Wqkv",
// "attn.Wo", "mlp_norm", "mlp.Wi", "mlp.Wo", "final_norm", "head.dense",
// "head.norm", "decoder", "classifier").
//
//   ids, attention_mask: (B, T) int64; hidden (B, T, C = hidden_size);
//   H heads, D = C / H; F intermediate_size (Wi is (2F, C): input, gate).
//
// Layer i is global when i % global_attn_every_n_layers == 0, else local:
// query t attends keys s with |t - s| <= local_attention / 2 (transformers'
// eager mask, both sides), and its rotary theta is local_rope_theta (when
// set) instead of global_rope_theta (Note [Rotary embeddings], nn/rotary.h).
// Layer 0 has no attn_norm (transformers' Identity). The GeGLU MLP is
// Wo(act(input) * gate) with input, gate the two halves of Wi(x).
// transformers' unpadded flash-attention path computes what the padded one
// does at the real positions; kiln runs the padded one.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/models/distilbert.h"  // TiedProjection
#include "kiln/nn/rotary.h"

namespace kiln {

// transformers' ModernBertConfig (4.48): the structural fields vocab_size,
// hidden_size, intermediate_size, num_hidden_layers and num_attention_heads
// are required; the rest take transformers' defaults; keys that do not
// change what the model computes (reference_compile,
// deterministic_flash_attn, repad_logits_with_grad, sparse_prediction, ...)
// and unknown keys are kept verbatim in `extra`.
struct ModernBertConfig {
  int64_t vocab_size = 50368;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 1152;
  int64_t num_hidden_layers = 22;
  int64_t num_attention_heads = 12;
  std::string hidden_activation = "gelu";  // one of BertConfig::known_activations()
  int64_t max_position_embeddings = 8192;
  double initializer_range = 0.02;
  double initializer_cutoff_factor = 2.0;
  double norm_eps = 1e-5;
  bool norm_bias = false;
  double global_rope_theta = 160000.0;
  std::optional<double> local_rope_theta = 10000.0;  // null: local layers use global_rope_theta
  bool attention_bias = false;
  double attention_dropout = 0.0;
  int64_t global_attn_every_n_layers = 3;
  int64_t local_attention = 128;  // the window: local_attention / 2 keys on each side
  double embedding_dropout = 0.0;
  bool mlp_bias = false;
  double mlp_dropout = 0.0;
  bool decoder_bias = true;
  bool tie_word_embeddings = true;  // the masked-LM decoder is the token embedding
  std::string classifier_pooling = "cls";  // "cls" or "mean"
  double classifier_dropout = 0.0;
  bool classifier_bias = false;
  std::string classifier_activation = "gelu";
  std::optional<int64_t> pad_token_id = 50283;
  std::optional<int64_t> bos_token_id = 50281;
  std::optional<int64_t> eos_token_id = 50282;
  std::optional<int64_t> cls_token_id = 50281;
  std::optional<int64_t> sep_token_id = 50282;
  std::optional<std::string> problem_type;
  std::vector<std::string> architectures = {"ModernBertModel"};
  std::map<std::string, std::string> extra;  // other keys, as JSON text

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  bool is_global_layer(int64_t i) const { return i % global_attn_every_n_layers == 0; }
  double rope_theta_of_layer(int64_t i) const {
    return is_global_layer(i) || !local_rope_theta ? global_rope_theta : *local_rope_theta;
  }
  HiddenAct act() const;             // hidden_activation
  HiddenAct classifier_act() const;  // classifier_activation
  void validate(const std::string& source = "ModernBertConfig") const;
  static ModernBertConfig from_json_string(const std::string& text, const std::string& source = "config.json");
  std::string to_json_string() const;  // keys sorted, 2-space indent, model_type "modernbert"
  BertConfig bert_equivalent() const;  // the BERT-schema config of the same sizes (model-size estimate)
  bool operator==(const ModernBertConfig&) const = default;
};

namespace nn {

class ModernBertEmbeddings : public Module, public Callable<ModernBertEmbeddings> {
 public:
  explicit ModernBertEmbeddings(const ModernBertConfig& c);
  Tensor forward(const Tensor& ids) const;  // ids (B, T) -> drop(norm(tok_embeddings(ids))) (B, T, C)
  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> drop;
};

class ModernBertAttention : public Module, public Callable<ModernBertAttention> {
 public:
  ModernBertAttention(const ModernBertConfig& c, int64_t layer_idx);
  // x (B, T, C); mask (B, 1, 1, T) key bias or (B, 1, T, T) with the window,
  // or undefined; cos, sin (T, D) of this layer's theta -> Wo(attention) (B, T, C)
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin) const;
  std::shared_ptr<Linear> Wqkv, Wo;  // (3C, C) as q | k | v, (C, C)
  std::shared_ptr<Dropout> out_drop;
  int64_t heads;
  double dropout;  // on the attention weights
};

class ModernBertMLP : public Module, public Callable<ModernBertMLP> {
 public:
  explicit ModernBertMLP(const ModernBertConfig& c);
  Tensor forward(const Tensor& x) const;  // (B, T, C) -> Wo(drop(act(input) * gate)) (B, T, C)
  std::shared_ptr<Linear> Wi, Wo;         // (2F, C), (C, F)
  std::shared_ptr<Dropout> drop;
  HiddenAct act;
};

class ModernBertEncoderLayer : public Module, public Callable<ModernBertEncoderLayer> {
 public:
  ModernBertEncoderLayer(const ModernBertConfig& c, int64_t layer_idx);
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin) const;
  std::shared_ptr<LayerNorm> attn_norm;  // null in layer 0
  std::shared_ptr<ModernBertAttention> attn;
  std::shared_ptr<LayerNorm> mlp_norm;
  std::shared_ptr<ModernBertMLP> mlp;
  bool global;
};

class ModernBertModel : public EncoderModel, public Callable<ModernBertModel> {
 public:
  using config_type = ModernBertConfig;  // from_pretrained<ModernBertModel>
  // add_pooling_layer: ModernBERT has no pooler (accepted for the Auto layer's signature).
  explicit ModernBertModel(const ModernBertConfig& c, bool add_pooling_layer = false);
  // token_type_ids are accepted and ignored (ModernBERT has none).
  EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor()) const override;
  const ModelConfig& model_config() const override { return family_config; }
  ModernBertConfig config;
  ModelConfig family_config;
  std::shared_ptr<ModernBertEmbeddings> embeddings;
  std::shared_ptr<ModuleList<ModernBertEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> final_norm;
  std::shared_ptr<const RopeCache> global_rope, local_rope;  // max_position_embeddings rows each
};

// dense (classifier_bias) -> classifier_activation -> norm.
class ModernBertPredictionHead : public Module, public Callable<ModernBertPredictionHead> {
 public:
  explicit ModernBertPredictionHead(const ModernBertConfig& c);
  Tensor forward(const Tensor& x) const;  // (N, C) -> (N, C)
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> norm;
  HiddenAct act;
};

// head -> decoder (the token embedding when tie_word_embeddings, with its own
// bias when decoder_bias).
class ModernBertForMaskedLM : public MaskedLanguageModel, public Callable<ModernBertForMaskedLM> {
 public:
  using config_type = ModernBertConfig;
  explicit ModernBertForMaskedLM(const ModernBertConfig& c);
  MaskedLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return model->family_config; }
  Tensor logits_of(const Tensor& h) const;  // (N, C) -> (N, V)
  std::shared_ptr<ModernBertModel> model;
  std::shared_ptr<ModernBertPredictionHead> head;
  std::shared_ptr<TiedProjection> tied_decoder;  // "decoder" when tied: the embedding's weight, own bias
  std::shared_ptr<Linear> decoder;               // "decoder" when untied
};

// pooled (h[:, 0], or the masked mean with classifier_pooling "mean") -> head
// -> dropout(classifier_dropout) -> classifier.
class ModernBertForSequenceClassification : public SequenceClassifier,
                                            public Callable<ModernBertForSequenceClassification> {
 public:
  using config_type = ModernBertConfig;
  ModernBertForSequenceClassification(const ModernBertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return model->family_config; }
  std::shared_ptr<ModernBertModel> model;
  std::shared_ptr<ModernBertPredictionHead> head;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

// head -> dropout(classifier_dropout) -> classifier at every position.
class ModernBertForTokenClassification : public TokenClassifier, public Callable<ModernBertForTokenClassification> {
 public:
  using config_type = ModernBertConfig;
  ModernBertForTokenClassification(const ModernBertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return model->family_config; }
  std::shared_ptr<ModernBertModel> model;
  std::shared_ptr<ModernBertPredictionHead> head;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

}  // namespace nn
}  // namespace kiln
