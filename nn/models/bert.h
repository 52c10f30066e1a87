// BERT (post-LN encoder) with Hugging Face's module tree and parameter names,
// so that state_dict() keys are exactly those of a transformers checkpoint.
//
//   ids, token_type_ids, attention_mask: (B, T) int64   (mask 1 = attend)
//   hidden states: (B, T, C)   C = hidden_size, NH heads of HS = C / NH
//
// BertForMaskedLM ties its decoder to embeddings.word_embeddings.weight: the
// decoder holds no parameter of its own, so the tied weight is saved once
// (under the embedding's name), as Hugging Face writes it.
#pragma once

#include <memory>
#include <vector>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

Tensor activation(const Tensor& x, HiddenAct act);
// activation(a, act) * b: the fused gated_activation (ops/decoder_ops.h) for
// gelu, gelu_tanh and silu (GeGLU, SwiGLU), the composite for the others.
Tensor gated(const Tensor& a, const Tensor& b, HiddenAct act);
// activation(layer(x), act) with the layer's bias in its GEMM, GELU fused
// into it too where possible (Notes [Bias in the GEMM], [Linear and GELU];
// adapters take part, Note [Projections through the layer]). `Layer` is a
// Linear or GPT-2's Conv1D.
template <typename Layer>
Tensor linear_act(const Layer& layer, const Tensor& x, HiddenAct act) {
  if (act == HiddenAct::Gelu) return layer.forward_gelu(x);
  if (act == HiddenAct::GeluTanh) return layer.forward_gelu(x, "tanh");
  return activation(layer.forward_fused(x), act);
}

class BertEmbeddings : public Module, public Callable<BertEmbeddings> {
 public:
  explicit BertEmbeddings(const BertConfig& c);
  // ids (B, T); token_type_ids (B, T) or undefined (zeros) -> (B, T, C)
  Tensor forward(const Tensor& ids, const Tensor& token_type_ids) const;
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> drop;
  Tensor position_ids;  // buffer (1, max_position_embeddings), as transformers keeps it
};

class BertSelfAttention : public Module, public Callable<BertSelfAttention> {
 public:
  explicit BertSelfAttention(const BertConfig& c);
  // x (B, T, C), mask_bias (B, 1, 1, T) additive or undefined -> (B, T, C)
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<Linear> query, key, value;
  FusedWeights qkv_weights;  // Note [Fused projection weights] (nn/layers.h)
  std::shared_ptr<Dropout> drop;
  int64_t heads, head_size;
};

// dense -> dropout -> LayerNorm(residual + .): BertSelfOutput and BertOutput.
class BertResidualOutput : public Module, public Callable<BertResidualOutput> {
 public:
  BertResidualOutput(int64_t in, const BertConfig& c);
  Tensor forward(const Tensor& h, const Tensor& residual) const;
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> drop;
};

class BertAttention : public Module, public Callable<BertAttention> {
 public:
  explicit BertAttention(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

class BertIntermediate : public Module, public Callable<BertIntermediate> {
 public:
  explicit BertIntermediate(const BertConfig& c);
  Tensor forward(const Tensor& x) const { return activation(dense->forward(x), act); }
  std::shared_ptr<Linear> dense;
  HiddenAct act;
};

class BertLayer : public Module, public Callable<BertLayer> {
 public:
  explicit BertLayer(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

class BertEncoder : public Module, public Callable<BertEncoder> {
 public:
  explicit BertEncoder(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask_bias) const;
  std::shared_ptr<ModuleList<BertLayer>> layer;
};

class BertPooler : public Module, public Callable<BertPooler> {
 public:
  explicit BertPooler(const BertConfig& c);
  Tensor forward(const Tensor& h) const;  // tanh(dense(h[:, 0])) -> (B, C)
  std::shared_ptr<Linear> dense;
};

class BertModel : public EncoderModel, public Callable<BertModel> {
 public:
  explicit BertModel(const BertConfig& c, bool add_pooling_layer = true);
  // attention_mask / token_type_ids may be undefined (all ones / all zeros).
  BertOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                      const Tensor& token_type_ids = Tensor()) const override;
  const ModelConfig& model_config() const override { return family_config; }
  BertConfig config;
  ModelConfig family_config;  // config, as the Auto layer's interfaces hand it out
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;  // null without pooling layer
};

// Mean of last_hidden_state over positions where attention_mask is 1
// (sentence-transformers pooling): (B, T, C), (B, T) -> (B, C).
Tensor mean_pool(const Tensor& hidden, const Tensor& attention_mask);

class BertPredictionHeadTransform : public Module, public Callable<BertPredictionHeadTransform> {
 public:
  explicit BertPredictionHeadTransform(const BertConfig& c);
  Tensor forward(const Tensor& h) const { return norm->forward(activation(dense->forward(h), act)); }
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> norm;
  HiddenAct act;
};

class BertLMPredictionHead : public Module, public Callable<BertLMPredictionHead> {
 public:
  BertLMPredictionHead(const BertConfig& c, std::shared_ptr<Embedding> tied);
  // h (N, C) -> logits (N, V) with the tied decoder
  Tensor forward(const Tensor& h) const;
  std::shared_ptr<BertPredictionHeadTransform> transform;
  Tensor bias;  // (V)
  std::shared_ptr<Embedding> decoder;  // tied: not registered
};

// "cls" of BertForMaskedLM / BertForPreTraining.
class BertPreTrainingHeads : public Module, public Callable<BertPreTrainingHeads> {
 public:
  BertPreTrainingHeads(const BertConfig& c, std::shared_ptr<Embedding> tied, bool next_sentence);
  std::shared_ptr<BertLMPredictionHead> predictions;
  std::shared_ptr<Linear> seq_relationship;  // null without next-sentence head
};

class BertForMaskedLM : public MaskedLanguageModel, public Callable<BertForMaskedLM> {
 public:
  explicit BertForMaskedLM(const BertConfig& c);
  // labels (B, T) with -100 where no prediction is wanted. With labels the
  // head runs only at labelled positions (same loss, less work).
  MaskedLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                         const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return bert->family_config; }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<BertPreTrainingHeads> cls;
};

struct PreTrainingOutput {
  Tensor loss, mlm_loss, nsp_loss;
  Tensor mlm_logits, nsp_logits;
};

class BertForPreTraining : public Module, public Callable<BertForPreTraining> {
 public:
  explicit BertForPreTraining(const BertConfig& c);
  PreTrainingOutput forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                            const Tensor& mlm_labels = Tensor(), const Tensor& next_sentence_label = Tensor()) const;
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<BertPreTrainingHeads> cls;
};

// transformers' BertForSequenceClassification: the pooled [CLS] output through
// dropout and a linear head; the loss by problem type (SequenceClassifier, nn/heads.h).
class BertForSequenceClassification : public SequenceClassifier, public Callable<BertForSequenceClassification> {
 public:
  BertForSequenceClassification(const BertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return bert->family_config; }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

// transformers' BertForTokenClassification: BertModel without the pooler,
// dropout and a linear head on every position; cross-entropy over the
// positions whose label is not -100.
//   ids, attention_mask, token_type_ids (B, T); labels (B, T) int64 -> logits (B, T, num_labels)
class BertForTokenClassification : public TokenClassifier, public Callable<BertForTokenClassification> {
 public:
  BertForTokenClassification(const BertConfig& c, int64_t num_labels = 2);
  ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                               const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const override;
  const ModelConfig& model_config() const override { return bert->family_config; }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> classifier;
};

}  // namespace kiln::nn
