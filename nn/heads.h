// Note [Task model interfaces]
// What a training task, a tool or the exporter needs of a model, whatever its
// family: each task's interface is an abstract Module, and each family's
// class for that task (BertForSequenceClassification,
// RobertaForSequenceClassification, ...) derives from it. The Auto layer
// (nn/auto.h) builds the family's class from a config.json and hands it out
// as the interface, so train/, tools/ and export/ never name a family, and a
// new family adds files (nn/models/), not branches.
//
//   ids, attention_mask, token_type_ids: (B, T) int64 (mask 1 = attend;
//   undefined: all ones / all zeros); hidden states (B, T, C).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

class KVCache;  // nn/generation.h

struct EncoderOutputs {
  Tensor last_hidden_state;  // (B, T, C)
  Tensor pooler_output;      // (B, C) or undefined without a pooler
};
using BertOutputs = EncoderOutputs;

struct MaskedLMOutput {
  Tensor loss;    // scalar, when labels were given
  Tensor logits;  // (B, T, V) without labels; (M, V) at the M labelled positions with labels
};

struct ClassificationOutput {
  Tensor loss;    // when labels were given
  Tensor logits;  // (B, num_labels); token classification: (B, T, num_labels)
};

struct CausalLMOutput {
  Tensor loss;    // scalar, when labels were given
  Tensor logits;  // (B, T, V) without labels; (M, V) at the M predicted positions with labels
};

// A base model (BertModel, RobertaModel, ..., and a decoder's stack, GPT2Model):
// hidden states, and the pooled first token when it has a pooler.
class EncoderModel : public Module {
 public:
  virtual EncoderOutputs forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                                 const Tensor& token_type_ids = Tensor()) const = 0;
  virtual const ModelConfig& model_config() const = 0;  // Note [Model-agnostic config]
};

// Masked language modelling. labels (B, T) with -100 where no prediction is
// wanted; with labels the head runs only at labelled positions.
class MaskedLanguageModel : public Module {
 public:
  virtual MaskedLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                                 const Tensor& token_type_ids = Tensor(), const Tensor& labels = Tensor()) const = 0;
  virtual const ModelConfig& model_config() const = 0;  // Note [Model-agnostic config]
};

// Sequence classification, as transformers' *ForSequenceClassification: the
// loss follows problem_type, or when it is unset, transformers' rule: one
// label -> "regression"; integer labels -> "single_label_classification";
// else "multi_label_classification".
//   regression: mse_loss(logits, labels), labels (B) or (B, num_labels) float;
//   single_label_classification: cross_entropy, labels (B) int64;
//   multi_label_classification: binary_cross_entropy_with_logits, labels
//     (B, num_labels) of 0/1 (any float dtype).
class SequenceClassifier : public Module {
 public:
  SequenceClassifier(int64_t num_labels, std::optional<std::string> problem_type);
  virtual ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                                       const Tensor& token_type_ids = Tensor(),
                                       const Tensor& labels = Tensor()) const = 0;
  virtual const ModelConfig& model_config() const = 0;  // Note [Model-agnostic config]
  // The problem type a batch with these labels trains as (the rule above).
  std::string problem_type_for(const Tensor& labels) const;
  // The loss of logits (B, num_labels) against labels, by problem_type_for.
  Tensor loss(const Tensor& logits, const Tensor& labels) const;
  int64_t num_labels;
  std::optional<std::string> problem_type;  // from the config
};

// Token classification: a label per position; cross-entropy over the
// positions whose label is not -100. labels (B, T) int64 -> logits (B, T, num_labels).
class TokenClassifier : public Module {
 public:
  explicit TokenClassifier(int64_t num_labels);
  virtual ClassificationOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                                       const Tensor& token_type_ids = Tensor(),
                                       const Tensor& labels = Tensor()) const = 0;
  virtual const ModelConfig& model_config() const = 0;  // Note [Model-agnostic config]
  // Cross-entropy of logits (B, T, num_labels) against labels (B, T) (-100 ignored).
  Tensor loss(const Tensor& logits, const Tensor& labels) const;
  int64_t num_labels;
};

// Causal language modelling, as transformers' *ForCausalLM / GPT2LMHeadModel.
// labels (B, T) int64, -100 where no prediction is wanted; the loss is
// shifted as transformers shifts it: position t's logits predict labels[t + 1]
// (cross-entropy over the pairs whose label is not -100), and with labels the
// head runs only at those positions. With a KV cache (Note [KV cache]), ids
// are the new tokens after the cached ones and attention_mask, when given,
// is (B, S) over the cached and the new positions.
class CausalLanguageModel : public Module {
 public:
  virtual CausalLMOutput forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                                 const Tensor& labels = Tensor(), KVCache* cache = nullptr) const = 0;
  virtual const ModelConfig& model_config() const = 0;  // Note [Model-agnostic config]
};

// The rows of h (B, T, C) that predict a label, (M, C), and those labels (M):
// h[:, t] for labels[:, t + 1] != -100 (the causal-LM shift).
std::pair<Tensor, Tensor> shifted_labelled_rows(const Tensor& h, const Tensor& labels);
// A causal LM's output from its final hidden states h (B, T, C) and its LM
// head (rows (N, C) -> (N, V)): the head at every position without labels,
// else at the predicted rows only, with the shifted cross-entropy.
CausalLMOutput causal_lm_output(const Tensor& h, const Tensor& labels, const std::function<Tensor(const Tensor&)>& head);

// The additive attention bias (B, 1, 1, T) of a (B, T) attention mask: 0
// where attended, the float's lowest value where masked (as transformers);
// undefined for an undefined mask. `like` gives dtype and device.
Tensor attention_mask_bias(const Tensor& attention_mask, const Tensor& ids, const Tensor& like);

// The rows of h (B, T, C) where labels (B, T) != -100, (M, C), and those
// labels (M): what a masked-LM head runs on when labels are given.
std::pair<Tensor, Tensor> labelled_rows(const Tensor& h, const Tensor& labels);

}  // namespace kiln::nn
