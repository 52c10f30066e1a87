#include "nn/model_family.h"

namespace kiln::nn {

std::string ModelFamily::architecture(ModelTask task) const {
  switch (task) {
    case ModelTask::Base: return class_prefix + "Model";
    case ModelTask::MaskedLM: return class_prefix + "ForMaskedLM";
    case ModelTask::SequenceClassification: return class_prefix + "ForSequenceClassification";
    case ModelTask::TokenClassification: return class_prefix + "ForTokenClassification";
  }
  fail("ModelFamily::architecture: unknown task");
}

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&bert_family(), &roberta_family(), &xlm_roberta_family(),
                                                          &distilbert_family()};
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
