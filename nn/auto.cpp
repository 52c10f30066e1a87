#include "nn/auto.h"

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/json_util.h"

namespace kiln::nn {

namespace {

// Built from pretrained_config(dir) (ModelConfig looks the family up before
// reading its fields, so an unknown model_type is the Auto layer's error),
// then the weights loaded; a head the family lacks is an error naming it
// (before the weights are checked).
template <typename Build>
auto load(const std::string& dir, ModelTask task, LoadReport* report, Build build) {
  model_family(model_type_of(dir)).require(task, dir + "/config.json");  // before the weights are read
  const ModelConfig config = pretrained_config(dir);
  auto model = build(model_family(config.model_type()), config);
  LoadReport r = load_pretrained_weights(*model, dir, config);
  if (report) *report = r;
  return model;
}

}  // namespace

std::string model_type_of(const std::string& dir) {
  check_model_dir(dir, false);
  const std::string path = dir + "/config.json";
  const nlohmann::json j = parse_json_bounded(read_file_bounded(path, path, kMaxJsonBytes), path);  // Note [Bounded JSON]
  KILN_CHECK(j.is_object(), path, ": config must be a JSON object, got ", j.type_name());
  std::string type = "bert";
  if (j.contains("model_type")) {
    KILN_CHECK(j["model_type"].is_string(), path, ": field 'model_type' must be a string, got ", j["model_type"].type_name());
    type = j["model_type"].get<std::string>();
  }
  return model_family(type, path).model_type;
}

std::optional<ModelTask> task_of(const ModelConfig& config) {
  const ModelFamily& family = model_family(config.model_type());
  for (const std::string& a : config.architectures())
    for (ModelTask t : {ModelTask::TokenClassification, ModelTask::SequenceClassification, ModelTask::MaskedLM,
                        ModelTask::CausalLM, ModelTask::Base})
      if (family.has(t) && a == family.architecture(t)) return t;
  return std::nullopt;
}

std::string task_name_of(const std::string& dir) {
  (void)model_type_of(dir);  // an unsupported family is that error, not BertConfig's
  const std::optional<ModelTask> t = task_of(load_model_config(dir));
  return t ? ModelFamily::task_name(*t) : "";
}

std::shared_ptr<EncoderModel> AutoModel::from_config(const ModelConfig& config, bool add_pooling_layer) {
  const ModelFamily& f = model_family(config.model_type());
  f.require(ModelTask::Base, "AutoModel::from_config");
  return f.base(config, add_pooling_layer);
}

std::shared_ptr<EncoderModel> AutoModel::from_pretrained(const std::string& dir, LoadReport* report,
                                                         bool add_pooling_layer) {
  return load(dir, ModelTask::Base, report,
              [&](const ModelFamily& f, const ModelConfig& c) { return f.base(c, add_pooling_layer); });
}

std::shared_ptr<Module> AutoModel::from_pretrained(const std::string& dir, ModelTask task, LoadReport* report,
                                                   int64_t num_labels) {
  switch (task) {
    case ModelTask::Base: return from_pretrained(dir, report, true);
    case ModelTask::MaskedLM: return AutoModelForMaskedLM::from_pretrained(dir, report);
    case ModelTask::SequenceClassification:
      return AutoModelForSequenceClassification::from_pretrained(dir, num_labels, report);
    case ModelTask::TokenClassification: return AutoModelForTokenClassification::from_pretrained(dir, num_labels, report);
    case ModelTask::CausalLM: return AutoModelForCausalLM::from_pretrained(dir, report);
  }
  fail("AutoModel::from_pretrained: unknown task");
}

std::shared_ptr<MaskedLanguageModel> AutoModelForMaskedLM::from_config(const ModelConfig& config) {
  const ModelFamily& f = model_family(config.model_type());
  f.require(ModelTask::MaskedLM, "AutoModelForMaskedLM::from_config");
  return f.masked_lm(config);
}

std::shared_ptr<MaskedLanguageModel> AutoModelForMaskedLM::from_pretrained(const std::string& dir, LoadReport* report) {
  return load(dir, ModelTask::MaskedLM, report, [](const ModelFamily& f, const ModelConfig& c) { return f.masked_lm(c); });
}

std::shared_ptr<SequenceClassifier> AutoModelForSequenceClassification::from_config(const ModelConfig& config,
                                                                                    int64_t num_labels) {
  const ModelFamily& f = model_family(config.model_type());
  f.require(ModelTask::SequenceClassification, "AutoModelForSequenceClassification::from_config");
  return f.sequence_classification(config, num_labels);
}

std::shared_ptr<SequenceClassifier> AutoModelForSequenceClassification::from_pretrained(const std::string& dir,
                                                                                        int64_t num_labels,
                                                                                        LoadReport* report) {
  return load(dir, ModelTask::SequenceClassification, report,
              [&](const ModelFamily& f, const ModelConfig& c) { return f.sequence_classification(c, num_labels); });
}

std::shared_ptr<TokenClassifier> AutoModelForTokenClassification::from_config(const ModelConfig& config,
                                                                              int64_t num_labels) {
  const ModelFamily& f = model_family(config.model_type());
  f.require(ModelTask::TokenClassification, "AutoModelForTokenClassification::from_config");
  return f.token_classification(config, num_labels);
}

std::shared_ptr<TokenClassifier> AutoModelForTokenClassification::from_pretrained(const std::string& dir,
                                                                                  int64_t num_labels,
                                                                                  LoadReport* report) {
  return load(dir, ModelTask::TokenClassification, report,
              [&](const ModelFamily& f, const ModelConfig& c) { return f.token_classification(c, num_labels); });
}

std::shared_ptr<CausalLanguageModel> AutoModelForCausalLM::from_config(const ModelConfig& config) {
  const ModelFamily& f = model_family(config.model_type());
  f.require(ModelTask::CausalLM, "AutoModelForCausalLM::from_config");
  return f.causal_lm(config);
}

std::shared_ptr<CausalLanguageModel> AutoModelForCausalLM::from_pretrained(const std::string& dir, LoadReport* report) {
  return load(dir, ModelTask::CausalLM, report, [](const ModelFamily& f, const ModelConfig& c) { return f.causal_lm(c); });
}

}  // namespace kiln::nn
