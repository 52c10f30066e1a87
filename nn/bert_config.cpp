#include "nn/bert_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "nn/model_size.h"

namespace kiln {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

// A JSON value for an error message: its text, cut short when long.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

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

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads the fields of one JSON object, remembering which keys were used.
class FieldReader {
 public:
  FieldReader(const json& obj, const std::string& source) : obj_(obj), source_(source) {}

  const json* get(const std::string& key) {
    used_.push_back(key);
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  void require(const std::string& key, int64_t& out) {
    const json* v = get(key);
    KILN_CHECK(v, source_, ": missing required field '", key, "'");
    out = integer(key, *v);
  }
  void optional(const std::string& key, int64_t& out) {
    if (const json* v = get(key)) out = integer(key, *v);
  }
  void optional(const std::string& key, double& out) {
    if (const json* v = get(key)) out = number(key, *v);
  }
  void optional(const std::string& key, std::string& out) {
    if (const json* v = get(key)) out = string(key, *v);
  }
  void optional(const std::string& key, std::optional<int64_t>& out) {
    if (const json* v = get(key)) out = v->is_null() ? std::nullopt : std::optional(integer(key, *v));
  }
  void optional(const std::string& key, std::optional<double>& out) {
    if (const json* v = get(key)) out = v->is_null() ? std::nullopt : std::optional(number(key, *v));
  }
  void optional(const std::string& key, std::optional<std::string>& out) {
    if (const json* v = get(key)) out = v->is_null() ? std::nullopt : std::optional(string(key, *v));
  }
  void optional(const std::string& key, std::vector<std::string>& out) {
    const json* v = get(key);
    if (!v) return;
    KILN_CHECK(v->is_array(), source_, ": field '", key, "' must be an array of strings, got ",
               v->type_name(), " ", brief(*v));
    out.clear();
    for (const json& s : *v) out.push_back(string(key, s));
  }
  // The keys of the object that no get() asked for.
  std::map<std::string, std::string> unused() const {
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : obj_.items())
      if (std::find(used_.begin(), used_.end(), key) == used_.end()) out.emplace(key, value.dump());
    return out;
  }

 private:
  int64_t integer(const std::string& key, const json& v) const {
    KILN_CHECK(v.is_number_integer(), source_, ": field '", key, "' must be an integer, got ",
               v.type_name(), " ", brief(v));
    KILN_CHECK(v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMaxSize)
                                      : v.get<int64_t>() >= -kMaxSize,
               source_, ": field '", key, "' = ", brief(v), " is out of range");
    return v.get<int64_t>();
  }
  double number(const std::string& key, const json& v) const {
    KILN_CHECK(v.is_number(), source_, ": field '", key, "' must be a number, got ", v.type_name(),
               " ", brief(v));
    return v.get<double>();
  }
  std::string string(const std::string& key, const json& v) const {
    KILN_CHECK(v.is_string(), source_, ": field '", key, "' must be a string, got ", v.type_name(),
               " ", brief(v));
    return v.get<std::string>();
  }

  const json& obj_;
  const std::string& source_;
  std::vector<std::string> used_;
};

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
  if (problem_type)
    KILN_CHECK(*problem_type == "regression" || *problem_type == "single_label_classification" ||
                   *problem_type == "multi_label_classification",
               source, ": problem_type '", *problem_type,
               "' is not one of regression, single_label_classification, multi_label_classification");
  if (pad_token_id)
    KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, source, ": pad_token_id = ",
               *pad_token_id, " is outside [0, vocab_size = ", vocab_size, ")");
  for (const auto& [key, text] : extra) {
    KILN_CHECK(std::find(std::begin(kFieldNames), std::end(kFieldNames), key) == std::end(kFieldNames),
               source, ": extra holds '", key, "', which is a BertConfig field");
    (void)parse_json_bounded(text, source + ": extra['" + key + "']");
  }
  if (extra.count("id2label")) (void)id2label(source);
}

std::vector<std::string> BertConfig::id2label(const std::string& source) const {
  const auto it = extra.find("id2label");
  if (it == extra.end()) return {};
  const std::string what = source + ": id2label";
  const json j = parse_json_bounded(it->second, what);
  KILN_CHECK(j.is_object(), what, " must be an object mapping label ids to names, got ", j.type_name());
  std::vector<std::string> labels(j.size());
  std::vector<bool> seen(j.size(), false);
  for (const auto& [key, value] : j.items()) {
    // Canonical decimal ids only: "01", " 1", "+1" would parse to ids that may collide.
    const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    KILN_CHECK(digits && (key.size() == 1 || key[0] != '0'), what, ": key '", key,
               "' is not a label id (a non-negative decimal integer without sign, spaces or leading zeros)");
    size_t id = 0;
    for (char ch : key)
      KILN_CHECK(!__builtin_mul_overflow(id, 10, &id) && !__builtin_add_overflow(id, size_t(ch - '0'), &id),
                 what, ": label id '", key, "' is too large");
    KILN_CHECK(id < labels.size(), what, ": label id ", id, " is out of range: ", labels.size(),
               " labels need the ids 0 to ", labels.size() - 1);
    KILN_CHECK(!seen[id], what, ": label id ", id, " appears twice");
    KILN_CHECK(value.is_string(), what, ": the name of label ", id, " must be a string, got ",
               value.type_name(), " ", brief(value));
    seen[id] = true;
    labels[id] = value.get<std::string>();
  }
  return labels;
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
  // What kiln writes for this config (indented, so it can be longer than the
  // text read) must be readable again: a checkpoint saved from it would not load.
  const size_t saved = c.to_json_string().size();
  KILN_CHECK(saved <= kMaxJsonBytes, source_name, ": this config would be ", saved,
             " bytes once saved, over the limit of ", kMaxJsonBytes, " bytes that config.json is read with");
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
