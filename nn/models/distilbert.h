// DistilBERT (model_type "distilbert"): a 6-layer BERT distilled from
// bert-base, with transformers' module tree and names ("distilbert.",
// "transformer.layer.N.attention.q_lin", "sa_layer_norm", "ffn.lin1",
// "vocab_projector", "pre_classifier"). Post-LN blocks as BERT's, without
// token types or a pooler; no dropout after the attention's out_lin (only on
// the attention weights and after the FFN). token_type_ids are accepted and
// ignored, as transformers' DistilBERT has no input for them.
//
//   ids, attention_mask: (B, T) int64; hidden (B, T, C = dim); F = hidden_dim.
//
// DistilBertConfig reads config.json as transformers' DistilBertConfig: the
// structural fields vocab_size, dim, n_layers, n_heads, hidden_dim and
// max_position_embeddings are required (transformers' names hidden_size,
// num_attention_heads, num_hidden_layers are read as dim, n_heads and
// n_layers when those are absent); the rest take transformers' defaults;
// unknown keys are kept verbatim in `extra` and written back. The errors and
// bounds are BertConfig's (nn/models/bert_config.h).
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

namespace kiln {

struct DistilBertConfig {
  int64_t vocab_size = 30522;
  int64_t max_position_embeddings = 512;
  bool sinusoidal_pos_embds = false;  // fixed sin/cos positions (a buffer, never trained)
  int64_t n_layers = 6;
  int64_t n_heads = 12;
  int64_t dim = 768;
  int64_t hidden_dim = 3072;
  double dropout = 0.1;
  double attention_dropout = 0.1;
  std::string activation = "gelu";  // one of BertConfig::known_activations()
  double initializer_range = 0.02;
  double qa_dropout = 0.1;
  double seq_classif_dropout = 0.2;
  std::optional<int64_t> pad_token_id = 0;
  std::optional<std::string> problem_type;  // as BertConfig's
  std::vector<std::string> architectures = {"DistilBertModel"};
  std::map<std::string, std::string> extra;  // other keys, as JSON text

  static constexpr double kLayerNormEps = 1e-12;  // transformers' DistilBERT fixes it
  HiddenAct act() const;
  void validate(const std::string& source = "DistilBertConfig") const;
  static DistilBertConfig from_json_string(const std::string& text, const std::string& source = "config.json");
  std::string to_json_string() const;  // keys sorted, 2-space indent, model_type "distilbert"
  // The BERT-schema config of the same sizes (for the model-size estimate).
  BertConfig bert_equivalent() const;
  bool operator==(const DistilBertConfig&) const = default;
};

namespace nn {

// Fixed positions (sinusoidal_pos_embds): weight (P, C) is a buffer, saved
// but never trained, as transformers freezes it.
class SinusoidalPositions : public Module, public Callable<SinusoidalPositions> {
 public:
  SinusoidalPositions(int64_t positions, int64_t dim);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids, std::nullopt); }
  Tensor weight;
};

// A decoder whose weight is another module's (not registered, so not saved)
// and whose bias (when `bias`) is its own: x (N, C) -> x tied^T + bias (N, V).
class TiedProjection : public Module, public Callable<TiedProjection> {
 public:
  TiedProjection(std::shared_ptr<Embedding> tied, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Embedding> tied;
  Tensor bias;  // (V), or undefined
};

class DistilBertEmbeddings : public Module, public Callable<DistilBertEmbeddings> {
 public:
  explicit DistilBertEmbeddings(const DistilBertConfig& c);
  Tensor forward(const Tensor& ids) const;  // ids (B, T) -> (B, T, C)
  std::shared_ptr<Embedding> word_embeddings;
  std::shared_ptr<Embedding> position_embeddings;          // learned, or
  std::shared_ptr<SinusoidalPositions> fixed_positions;    // sinusoidal (same name)
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> drop;
};

class DistilBertAttention : public Module, public Callable<DistilBertAttention> {
 public:
  explicit DistilBertAttention(const DistilBertConfig& c);
  // x (B, T, C), mask_bias (B, 1, 1, T) additive or undefined -> out_lin(attention) (B, T, C)
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<Linear> q_lin, k_lin, v_lin, out_lin;
  FusedWeights qkv_weights;  // Note [Fused projection weights] (nn/layers.h)
  std::shared_ptr<Dropout> drop;  // on the attention weights
  int64_t heads;
};

class DistilBertFFN : public Module, public Callable<DistilBertFFN> {
 public:
  explicit DistilBertFFN(const DistilBertConfig& c);
  std::shared_ptr<Linear> lin1, lin2;  // (F, C), (C, F)
  std::shared_ptr<Dropout> drop;
  HiddenAct act;
};

class TransformerBlock : public Module, public Callable<TransformerBlock> {
 public:
  explicit TransformerBlock(const DistilBertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;  // (B, T, C) -> (B, T, C)
  std::shared_ptr<DistilBertAttention> attention;
  std::shared_ptr<LayerNorm> sa_layer_norm, output_layer_norm;
  std::shared_ptr<DistilBertFFN> ffn;
};

class DistilBertTransformer : public Module, public Callable<DistilBertTransformer> {
 public:
  explicit DistilBertTransformer(const DistilBertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<ModuleList<TransformerBlock>> layer;
};

class DistilBertModel : public EncoderModel, public Callable<DistilBertModel> {
 public:
  using config_type = DistilBertConfig;  // from_pretrained<DistilBertModel>
  // add_pooling_layer: DistilBERT has no pooler (accepted for the Auto layer's signature).
  explicit DistilBertModel(const DistilBertConfig& c, bool add_pooling_layer = false);
  EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor()) const override;
  const ModelConfig& model_config() const override { return family_config; }
  DistilBertConfig config;
  ModelConfig family_config;
  std::shared_ptr<DistilBertEmbeddings> embeddings;
  std::shared_ptr<DistilBertTransformer> transformer;
};

// vocab_transform -> activation -> vocab_layer_norm -> vocab_projector (tied
// to the word embeddings, own bias "vocab_projector.bias").
class DistilBertForMaskedLM : public MaskedLanguageModel, public Callable<DistilBertForMaskedLM> {
 public:
  using config_type = DistilBertConfig;
  explicit DistilBertForMaskedLM(const DistilBertConfig& c);
  MaskedLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return distilbert->family_config; }
  Tensor head(const Tensor& h) const;  // (N, C) -> (N, V)
  std::shared_ptr<DistilBertModel> distilbert;
  std::shared_ptr<Linear> vocab_transform;
  std::shared_ptr<LayerNorm> vocab_layer_norm;
  std::shared_ptr<TiedProjection> vocab_projector;
};

// h[:, 0] -> pre_classifier -> ReLU -> dropout(seq_classif_dropout) -> classifier.
class DistilBertForSequenceClassification : public SequenceClassifier,
                                            public Callable<DistilBertForSequenceClassification> {
 public:
  using config_type = DistilBertConfig;
  DistilBertForSequenceClassification(const DistilBertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return distilbert->family_config; }
  std::shared_ptr<DistilBertModel> distilbert;
  std::shared_ptr<Linear> pre_classifier, classifier;
  std::shared_ptr<Dropout> drop;
};

// dropout(dropout) -> classifier at every position.
class DistilBertForTokenClassification : public TokenClassifier, public Callable<DistilBertForTokenClassification> {
 public:
  using config_type = DistilBertConfig;
  DistilBertForTokenClassification(const DistilBertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return distilbert->family_config; }
  std::shared_ptr<DistilBertModel> distilbert;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

}  // namespace nn
}  // namespace kiln
