// RoBERTa and XLM-RoBERTa (model_type "roberta", "xlm-roberta"): BERT's
// encoder (BertEncoder, BertPooler) under RoBERTa's embeddings and heads,
// with transformers' module tree and parameter names ("roberta.", "lm_head.",
// "classifier.dense" / "classifier.out_proj"). XLM-R is the same network;
// only its config's model_type and architectures differ.
//
//   ids, attention_mask, token_type_ids: (B, T) int64; hidden (B, T, C).
//
// Note [Padding-offset positions]
// RoBERTa numbers positions from pad_token_id + 1 and gives every padding
// token the position pad_token_id (fairseq's convention, which transformers
// keeps): position = pad + cumsum(ids != pad) * (ids != pad) along T. So a
// sequence of T real tokens needs max_position_embeddings >= T + pad + 1 (514
// positions for 512 tokens with pad 1), and a padded sequence's real tokens
// have the positions they have unpadded.
#pragma once

#include <memory>

#include "kiln/nn/models/bert.h"
#include "kiln/nn/heads.h"

namespace kiln::nn {

class RobertaEmbeddings : public Module, public Callable<RobertaEmbeddings> {
 public:
  explicit RobertaEmbeddings(const BertConfig& c);
  // ids (B, T); token_type_ids (B, T) or undefined (zeros) -> (B, T, C)
  Tensor forward(const Tensor& ids, const Tensor& token_type_ids) const;
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> drop;
  int64_t pad;  // pad_token_id: the padding index and the position offset
};

// The position ids of Note [Padding-offset positions]: ids (B, T) -> (B, T) int64.
Tensor roberta_position_ids(const Tensor& ids, int64_t pad);

class RobertaModel : public EncoderModel, public Callable<RobertaModel> {
 public:
  explicit RobertaModel(const BertConfig& c, bool add_pooling_layer = true);
  EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor()) const override;
  const ModelConfig& model_config() const override { return family_config; }
  BertConfig config;
  ModelConfig family_config;  // config, as the Auto layer's interfaces hand it out
  std::shared_ptr<RobertaEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;  // null without pooling layer
};

// "lm_head": dense -> exact GELU -> layer_norm -> decoder tied to the word
// embeddings, with its own bias. h (N, C) -> logits (N, V).
class RobertaLMHead : public Module, public Callable<RobertaLMHead> {
 public:
  RobertaLMHead(const BertConfig& c, std::shared_ptr<Embedding> tied);
  Tensor forward(const Tensor& h) const;
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> layer_norm;
  Tensor bias;                         // (V)
  std::shared_ptr<Embedding> decoder;  // tied: not registered
};

class RobertaForMaskedLM : public MaskedLanguageModel, public Callable<RobertaForMaskedLM> {
 public:
  explicit RobertaForMaskedLM(const BertConfig& c);
  MaskedLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return roberta->family_config; }
  std::shared_ptr<RobertaModel> roberta;
  std::shared_ptr<RobertaLMHead> lm_head;
};

// "classifier": the first token's hidden state through dropout, dense, tanh,
// dropout and out_proj: (B, T, C) -> (B, num_labels).
class RobertaClassificationHead : public Module, public Callable<RobertaClassificationHead> {
 public:
  RobertaClassificationHead(const BertConfig& c, int64_t num_labels);
  Tensor forward(const Tensor& h) const;
  std::shared_ptr<Linear> dense, out_proj;
  std::shared_ptr<Dropout> drop;
};

class RobertaForSequenceClassification : public SequenceClassifier,
                                         public Callable<RobertaForSequenceClassification> {
 public:
  RobertaForSequenceClassification(const BertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return roberta->family_config; }
  std::shared_ptr<RobertaModel> roberta;
  std::shared_ptr<RobertaClassificationHead> classifier;
};

class RobertaForTokenClassification : public TokenClassifier, public Callable<RobertaForTokenClassification> {
 public:
  RobertaForTokenClassification(const BertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return roberta->family_config; }
  std::shared_ptr<RobertaModel> roberta;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

}  // namespace kiln::nn
