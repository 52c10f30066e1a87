#include "nn/model_family.h"

namespace kiln::nn {

std::string ModelFamily::architecture(ModelTask task) const {
  switch (task) {
    case ModelTask::Base: return class_prefix + "Model";
    case ModelTask::MaskedLM: return class_prefix + "ForMaskedLM";
    case ModelTask::SequenceClassification: return class_prefix + "ForSequenceClassification";
    case ModelTask::TokenClassification: return class_prefix + "ForTokenClassification";
    case ModelTask::CausalLM: return causal_lm_class ? causal_lm_class : class_prefix + "ForCausalLM";
  }
  fail("ModelFamily::architecture: unknown task");
}

bool ModelFamily::has(ModelTask task) const {
  switch (task) {
    case ModelTask::Base: return base != nullptr;
    case ModelTask::MaskedLM: return masked_lm != nullptr;
    case ModelTask::SequenceClassification: return sequence_classification != nullptr;
    case ModelTask::TokenClassification: return token_classification != nullptr;
    case ModelTask::CausalLM: return causal_lm != nullptr;
  }
  return false;
}

const char* ModelFamily::task_name(ModelTask task) {
  switch (task) {
    case ModelTask::Base: return "base";
    case ModelTask::MaskedLM: return "masked-lm";
    case ModelTask::SequenceClassification: return "sequence-classification";
    case ModelTask::TokenClassification: return "token-classification";
    case ModelTask::CausalLM: return "causal-lm";
  }
  return "";
}

void ModelFamily::require(ModelTask task, const std::string& source) const {
  if (has(task)) return;
  std::string heads;
  for (ModelTask t : {ModelTask::Base, ModelTask::MaskedLM, ModelTask::SequenceClassification,
                      ModelTask::TokenClassification, ModelTask::CausalLM})
    if (has(t)) heads += (heads.empty() ? "" : ", ") + std::string(task_name(t));
  fail(source, ": model_type '", model_type, "' has no ", task_name(task), " head in kiln (it has: ", heads, ")");
}

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&bert_family(), &roberta_family(), &xlm_roberta_family(),
                                                          &distilbert_family(), &modernbert_family(), &gpt2_family(), &llama_family(),
                                                          &mistral_family(), &qwen2_family()};
  return all;
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const ModelFamily* f : model_families()) out.push_back(f->model_type);
  return out;
}

const ModelFamily& model_family(const std::string& model_type, const std::string& source) {
  std::string known;
  for (const ModelFamily* f : model_families()) {
    if (f->model_type == model_type) return *f;
    known += (known.empty() ? "" : ", ") + f->model_type;
  }
  fail(source, ": model_type '", model_type, "' is not supported (kiln supports: ", known, ")");
}

const WeightNames& weight_names_for(const std::string& model_type) { return model_family(model_type).names; }

}  // namespace kiln::nn
