// The model families kiln builds from a Hugging Face config.json, by its
// model_type (as transformers' Auto mappings): each family is a config, its
// modules and its weight-name map, in its own files (nn/models/), and one line
// in model_families() (nn/model_family.cpp). Nothing above nn/ names a family:
// it asks the Auto layer (nn/auto.h) for a task's interface (nn/heads.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/hf_checkpoint.h"
#include "kiln/nn/model_config.h"

namespace kiln::nn {

// The heads a family has, as transformers' AutoModel / AutoModelFor* classes.
enum class ModelTask { Base, MaskedLM, SequenceClassification, TokenClassification, CausalLM };

struct ModelFamily {
  std::string model_type;    // config.json's "model_type"
  std::string class_prefix;  // transformers' class names: "Bert" -> BertModel, BertForMaskedLM, ...
  WeightNames names;
  // Reads config.json text (Note [Model-agnostic config]): validates it as
  // the family's config (kiln::Error "<source>: <field> ..."), sets
  // `normalized` to the text as the family writes it, returns its facts.
  ConfigFacts (*read_config)(const std::string& text, const std::string& source, std::string& normalized);
  std::shared_ptr<EncoderModel> (*base)(const ModelConfig&, bool add_pooling_layer);
  std::shared_ptr<MaskedLanguageModel> (*masked_lm)(const ModelConfig&);
  std::shared_ptr<SequenceClassifier> (*sequence_classification)(const ModelConfig&, int64_t num_labels);
  std::shared_ptr<TokenClassifier> (*token_classification)(const ModelConfig&, int64_t num_labels);
  std::shared_ptr<CausalLanguageModel> (*causal_lm)(const ModelConfig&);
  // The causal-LM class when it is not "<prefix>ForCausalLM" ("GPT2LMHeadModel").
  const char* causal_lm_class;
  // A builder is null where the family has no such head in kiln (encoders
  // have no causal LM, GPT-2 no masked LM).

  // The transformers class of a task: "RobertaForSequenceClassification".
  std::string architecture(ModelTask task) const;
  bool has(ModelTask task) const;
  // The CLI's name of a task: "base", "masked-lm", "sequence-classification",
  // "token-classification", "causal-lm".
  static const char* task_name(ModelTask task);
  // has(task), else kiln::Error "<source>: model_type 'gpt2' has no masked-lm
  // head in kiln (it has: base, causal-lm)".
  void require(ModelTask task, const std::string& source) const;
};

// Every family, in the order supported_model_types() lists them.
const std::vector<const ModelFamily*>& model_families();
std::vector<std::string> supported_model_types();
// The family of a model_type; kiln::Error "<source>: model_type 'x' is not
// supported (kiln supports: bert, roberta, ...)" for any other.
const ModelFamily& model_family(const std::string& model_type, const std::string& source = "config.json");

// The family files' entries (nn/models/*_family.cpp).
const ModelFamily& bert_family();
const ModelFamily& roberta_family();
const ModelFamily& xlm_roberta_family();
const ModelFamily& distilbert_family();
const ModelFamily& modernbert_family();
const ModelFamily& gpt2_family();
const ModelFamily& llama_family();
const ModelFamily& mistral_family();
const ModelFamily& qwen2_family();

}  // namespace kiln::nn
