#include "nn/models/bert_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "nn/config_fields.h"
#include "nn/model_size.h"

namespace kiln {
namespace {

using json = nlohmann::json;
using config_fields::FieldReader;
using config_fields::joined;
using config_fields::kMaxSize;

// Every key BertConfig reads or writes itself (the rest goes to `extra`).
constexpr const char* kFieldNames[] = {
    "model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers",
    "num_attention_heads", "intermediate_size", "hidden_act", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range", "layer_norm_eps", "pad_token_id", "classifier_dropout",
    "position_embedding_type", "problem_type"};

struct ActivationName {
  const char* name;
  HiddenAct act;
};
constexpr ActivationName kActivations[] = {
    {"gelu", HiddenAct::Gelu},          {"gelu_python", HiddenAct::Gelu},
    {"gelu_new", HiddenAct::GeluTanh},  {"gelu_pytorch_tanh", HiddenAct::GeluTanh},
    {"gelu_fast", HiddenAct::GeluTanh}, {"relu", HiddenAct::Relu},
    {"silu", HiddenAct::Silu},          {"swish", HiddenAct::Silu},
    {"tanh", HiddenAct::Tanh},
};

// The families whose config.json has BERT's fields, with the defaults that differ.
struct SchemaFamily {
  const char* model_type;
  const char* base_architecture;  // architectures when the file has none
  int64_t pad_token_id;           // transformers' default for the family
  bool positions_after_pad;       // Note [Padding-offset positions] (nn/models/roberta.h)
};
constexpr SchemaFamily kSchemaFamilies[] = {
    {"bert", "BertModel", 0, false},
    {"roberta", "RobertaModel", 1, true},
    {"xlm-roberta", "XLMRobertaModel", 1, true},
};

const SchemaFamily* schema_family(const std::string& model_type) {
  for (const SchemaFamily& f : kSchemaFamilies)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

}  // namespace

const std::vector<std::string>& BertConfig::known_activations() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& a : kActivations) out.push_back(a.name);
    return out;
  }();
  return names;
}

HiddenAct BertConfig::activation() const {
  for (const auto& a : kActivations)
    if (hidden_act == a.name) return a.act;
  fail("BertConfig: unknown hidden_act '", hidden_act, "' (known: ", joined(known_activations()), ")");
}

void BertConfig::validate(const std::string& source) const {
  const auto& types = bert_schema_model_types();
  KILN_CHECK(std::find(types.begin(), types.end(), model_type) != types.end(), source, ": model_type '",
             model_type, "' does not have BERT's config schema (", joined(types), " do)");
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"intermediate_size", intermediate_size},
      {"max_position_embeddings", max_position_embeddings},
      {"type_vocab_size", type_vocab_size},
  };
  for (const auto& [field, value] : sizes)
    KILN_CHECK(value >= 1 && value <= kMaxSize, source, ": ", field, " = ", value,
               " must be in [1, ", kMaxSize, "]");
  KILN_CHECK(hidden_size % num_attention_heads == 0, source, ": hidden_size = ", hidden_size,
             " is not divisible by num_attention_heads = ", num_attention_heads);
  const std::pair<const char*, double> probs[] = {
      {"hidden_dropout_prob", hidden_dropout_prob},
      {"attention_probs_dropout_prob", attention_probs_dropout_prob},
      {"classifier_dropout", classifier_dropout.value_or(0.0)},
  };
  for (const auto& [field, p] : probs)
    KILN_CHECK(p >= 0.0 && p < 1.0, source, ": ", field, " = ", p, " must be in [0, 1)");
  KILN_CHECK(std::isfinite(layer_norm_eps) && layer_norm_eps > 0.0, source, ": layer_norm_eps = ",
             layer_norm_eps, " must be positive and finite");
  KILN_CHECK(std::isfinite(initializer_range) && initializer_range > 0.0, source,
             ": initializer_range = ", initializer_range, " must be positive and finite");
  bool known_act = false;
  for (const auto& a : kActivations) known_act = known_act || hidden_act == a.name;
  KILN_CHECK(known_act, source, ": hidden_act '", hidden_act, "' is not supported (known: ",
             joined(known_activations()), ")");
  KILN_CHECK(position_embedding_type == "absolute", source, ": position_embedding_type '",
             position_embedding_type, "' is not supported (kiln implements \"absolute\")");
  config_fields::check_common_fields(problem_type, pad_token_id, vocab_size, extra,
                                     {std::begin(kFieldNames), std::end(kFieldNames)}, "BertConfig", source);
}

std::vector<std::string> BertConfig::id2label(const std::string& source) const {
  const auto it = extra.find("id2label");
  if (it == extra.end()) return {};
  return config_fields::parse_id2label(it->second, source + ": id2label");
}

BertConfig BertConfig::from_json_string(const std::string& text, const std::string& source_name) {
  const json j = parse_json_bounded(text, source_name);  // Note [Bounded JSON]
  KILN_CHECK(j.is_object(), source_name, ": config must be a JSON object, got ", j.type_name());
  FieldReader r(j, source_name);
  BertConfig c;
  r.optional("model_type", c.model_type);
  const SchemaFamily* family = schema_family(c.model_type);
  KILN_CHECK(family, source_name, ": model_type '", c.model_type, "' does not have BERT's config schema (",
             joined(bert_schema_model_types()), " do)");
  c.pad_token_id = family->pad_token_id;
  c.architectures = {family->base_architecture};
  r.require("vocab_size", c.vocab_size);
  r.require("hidden_size", c.hidden_size);
  r.require("num_hidden_layers", c.num_hidden_layers);
  r.require("num_attention_heads", c.num_attention_heads);
  r.require("intermediate_size", c.intermediate_size);
  r.require("max_position_embeddings", c.max_position_embeddings);
  r.require("type_vocab_size", c.type_vocab_size);
  r.optional("hidden_act", c.hidden_act);
  r.optional("hidden_dropout_prob", c.hidden_dropout_prob);
  r.optional("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  r.optional("initializer_range", c.initializer_range);
  r.optional("layer_norm_eps", c.layer_norm_eps);
  r.optional("pad_token_id", c.pad_token_id);
  r.optional("classifier_dropout", c.classifier_dropout);
  r.optional("position_embedding_type", c.position_embedding_type);
  r.optional("problem_type", c.problem_type);
  r.optional("architectures", c.architectures);
  c.extra = r.unused();
  c.validate(source_name);
  check_model_size(c, source_name);  // Note [Model size limit]
  config_fields::check_saved_size(c.to_json_string().size(), source_name);
  return c;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  return from_json_string(read_file_bounded(path, path, kMaxJsonBytes), path);  // Note [Bounded input]
}

std::string BertConfig::to_json_string() const {
  validate();
  json j = json::object();
  for (const auto& [key, text] : extra) j[key] = json::parse(text);  // validate() accepted it
  j["model_type"] = model_type;
  j["architectures"] = architectures;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["pad_token_id"] = pad_token_id ? json(*pad_token_id) : json(nullptr);
  j["classifier_dropout"] = classifier_dropout ? json(*classifier_dropout) : json(nullptr);
  j["position_embedding_type"] = position_embedding_type;
  if (problem_type) j["problem_type"] = *problem_type;  // transformers leaves its default (None) out too
  return j.dump(2) + "\n";
}

void BertConfig::to_json_file(const std::string& path) const {
  const std::string text = to_json_string();
  write_file_atomic(path, text);
}

int64_t BertConfig::max_sequence_length() const {
  const SchemaFamily* f = schema_family(model_type);
  if (!f || !f->positions_after_pad) return max_position_embeddings;
  return std::max<int64_t>(0, max_position_embeddings - pad_token_id.value_or(0) - 1);
}

const std::vector<std::string>& BertConfig::bert_schema_model_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const SchemaFamily& f : kSchemaFamilies) v.push_back(f.model_type);
    return v;
  }();
  return names;
}

std::vector<std::string> BertConfig::preset_names() {
  return {"bert-tiny", "bert-mini", "bert-small", "bert-base"};
}

BertConfig BertConfig::preset(const std::string& name) {
  struct Shape {
    const char* name;
    int64_t layers, hidden, heads, ffn;
  };
  constexpr Shape kPresets[] = {
      {"bert-tiny", 2, 128, 2, 512},
      {"bert-mini", 4, 256, 4, 1024},
      {"bert-small", 4, 512, 8, 2048},
      {"bert-base", 12, 768, 12, 3072},
  };
  for (const Shape& s : kPresets) {
    if (name != s.name) continue;
    BertConfig c;  // HF defaults: vocab 30522, 512 positions, 2 token types
    c.num_hidden_layers = s.layers;
    c.hidden_size = s.hidden;
    c.num_attention_heads = s.heads;
    c.intermediate_size = s.ffn;
    return c;
  }
  fail("BertConfig::preset: unknown preset '", name, "' (known: ", joined(preset_names()), ")");
}

}  // namespace kiln
