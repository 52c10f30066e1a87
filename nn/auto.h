// The Auto layer: models built from a Hugging Face directory by its
// config.json, as transformers' AutoModel / AutoModelFor* classes do. The
// family comes from "model_type" (nn/model_family.h; an unknown one is one
// kiln::Error naming it and the supported ones), the head from the task
// asked for; a directory's own head from "architectures" (task_of). Each
// returns the task's interface (Note [Task model interfaces], nn/heads.h).
//
//   auto clf = nn::AutoModelForSequenceClassification::from_pretrained("roberta-sst2", 2);
//   nn::ClassificationOutput o = clf->forward(ids, mask);
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kiln/nn/heads.h"
#include "kiln/nn/hf_checkpoint.h"
#include "kiln/nn/model_family.h"

namespace kiln::nn {

// dir/config.json's model_type (check_model_dir(dir, false) first; a file
// without one is "bert", as kiln has always read it), checked to be one
// kiln supports.
std::string model_type_of(const std::string& dir);

// The head a config's architectures name (its family's class for a task),
// or nullopt when they name none of the family's heads.
std::optional<ModelTask> task_of(const ModelConfig& config);
// task_of(dir/config.json) as the CLI's task names: "sequence-classification",
// "token-classification", "masked-lm", "causal-lm", "base"; "" when architectures name no
// head of the family.
std::string task_name_of(const std::string& dir);

struct AutoModel {
  static std::shared_ptr<EncoderModel> from_config(const ModelConfig& config, bool add_pooling_layer = true);
  static std::shared_ptr<EncoderModel> from_pretrained(const std::string& dir, LoadReport* report = nullptr,
                                                       bool add_pooling_layer = true);
  // The model of any task, as a Module (num_labels for the classifiers).
  static std::shared_ptr<Module> from_pretrained(const std::string& dir, ModelTask task, LoadReport* report = nullptr,
                                                 int64_t num_labels = 2);
};

struct AutoModelForMaskedLM {
  static std::shared_ptr<MaskedLanguageModel> from_config(const ModelConfig& config);
  static std::shared_ptr<MaskedLanguageModel> from_pretrained(const std::string& dir, LoadReport* report = nullptr);
};

struct AutoModelForSequenceClassification {
  static std::shared_ptr<SequenceClassifier> from_config(const ModelConfig& config, int64_t num_labels = 2);
  static std::shared_ptr<SequenceClassifier> from_pretrained(const std::string& dir, int64_t num_labels = 2,
                                                             LoadReport* report = nullptr);
};

// Decoders (GPT2LMHeadModel, ...): Note [KV cache] for generation.
struct AutoModelForCausalLM {
  static std::shared_ptr<CausalLanguageModel> from_config(const ModelConfig& config);
  static std::shared_ptr<CausalLanguageModel> from_pretrained(const std::string& dir, LoadReport* report = nullptr);
};

struct AutoModelForTokenClassification {
  static std::shared_ptr<TokenClassifier> from_config(const ModelConfig& config, int64_t num_labels = 2);
  static std::shared_ptr<TokenClassifier> from_pretrained(const std::string& dir, int64_t num_labels = 2,
                                                          LoadReport* report = nullptr);
};

}  // namespace kiln::nn
