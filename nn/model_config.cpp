#include "nn/model_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "nn/config_fields.h"
#include "nn/model_family.h"

namespace kiln {

using json = nlohmann::json;

namespace config_fields {

std::vector<std::string> parse_id2label(const std::string& json_text, const std::string& what) {
  const json j = parse_json_bounded(json_text, what);
  KILN_CHECK(j.is_object(), what, " must be an object mapping label ids to names, got ", j.type_name());
  std::vector<std::string> labels(j.size());
  std::vector<bool> seen(j.size(), false);
  for (const auto& [key, value] : j.items()) {
    // Canonical decimal ids only: "01", " 1", "+1" would parse to ids that may collide.
    const bool digits =
        !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    KILN_CHECK(digits && (key.size() == 1 || key[0] != '0'), what, ": key '", key,
               "' is not a label id (a non-negative decimal integer without sign, spaces or leading zeros)");
    size_t id = 0;
    for (char ch : key)
      KILN_CHECK(!__builtin_mul_overflow(id, 10, &id) && !__builtin_add_overflow(id, size_t(ch - '0'), &id), what,
                 ": label id '", key, "' is too large");
    KILN_CHECK(id < labels.size(), what, ": label id ", id, " is out of range: ", labels.size(),
               " labels need the ids 0 to ", labels.size() - 1);
    KILN_CHECK(!seen[id], what, ": label id ", id, " appears twice");
    KILN_CHECK(value.is_string(), what, ": the name of label ", id, " must be a string, got ", value.type_name(), " ",
               brief(value));
    seen[id] = true;
    labels[id] = value.get<std::string>();
  }
  return labels;
}

void check_common_fields(const std::optional<std::string>& problem_type, const std::optional<int64_t>& pad_token_id,
                         int64_t vocab_size, const std::map<std::string, std::string>& extra,
                         const std::vector<std::string>& fields, const std::string& struct_name,
                         const std::string& source) {
  if (problem_type)
    KILN_CHECK(*problem_type == "regression" || *problem_type == "single_label_classification" ||
                   *problem_type == "multi_label_classification",
               source, ": problem_type '", *problem_type,
               "' is not one of regression, single_label_classification, multi_label_classification");
  if (pad_token_id)
    KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, source, ": pad_token_id = ", *pad_token_id,
               " is outside [0, vocab_size = ", vocab_size, ")");
  for (const auto& [key, text] : extra) {
    KILN_CHECK(std::find(fields.begin(), fields.end(), key) == fields.end(), source, ": extra holds '", key,
               "', which is a ", struct_name, " field");
    (void)parse_json_bounded(text, source + ": extra['" + key + "']");
  }
  if (const auto it = extra.find("id2label"); it != extra.end()) (void)parse_id2label(it->second, source + ": id2label");
}

json parse_object(const std::string& text, const std::string& source) {
  json j = parse_json_bounded(text, source);  // Note [Bounded JSON]
  KILN_CHECK(j.is_object(), source, ": config must be a JSON object, got ", j.type_name());
  return j;
}

HiddenAct activation_named(const std::string& name) {
  BertConfig b;
  b.hidden_act = name;
  return b.activation();
}

void check_activation(const char* field, const std::string& name, const std::string& source) {
  const auto& acts = BertConfig::known_activations();
  KILN_CHECK(std::find(acts.begin(), acts.end(), name) != acts.end(), source, ": ", field, " '", name,
             "' is not supported (known: ", joined(acts), ")");
}

void check_token_ids(std::initializer_list<std::pair<const char*, std::optional<int64_t>>> ids, int64_t vocab_size,
                     const std::string& source) {
  for (const auto& [field, id] : ids)
    if (id)
      KILN_CHECK(*id >= 0 && *id < vocab_size, source, ": ", field, " = ", *id, " is outside [0, vocab_size = ",
                 vocab_size, ")");
}

BertConfig bert_schema(int64_t vocab_size, int64_t hidden, int64_t layers, int64_t heads, int64_t intermediate,
                       int64_t positions) {
  BertConfig b;
  b.vocab_size = vocab_size;
  b.hidden_size = hidden;
  b.num_hidden_layers = layers;
  b.num_attention_heads = heads;
  b.intermediate_size = intermediate;
  b.max_position_embeddings = positions;
  b.type_vocab_size = 1;
  return b;
}

void check_sizes(std::initializer_list<std::pair<const char*, int64_t>> sizes, const std::string& source) {
  for (const auto& [field, value] : sizes)
    KILN_CHECK(value >= 1 && value <= kMaxSize, source, ": ", field, " = ", value, " must be in [1, ", kMaxSize, "]");
}

void check_probabilities(std::initializer_list<std::pair<const char*, double>> probs, const std::string& source) {
  for (const auto& [field, p] : probs)
    KILN_CHECK(p >= 0.0 && p < 1.0, source, ": ", field, " = ", p, " must be in [0, 1)");
}

void check_saved_size(size_t saved_bytes, const std::string& source) {
  KILN_CHECK(saved_bytes <= kMaxJsonBytes, source, ": this config would be ", saved_bytes,
             " bytes once saved, over the limit of ", kMaxJsonBytes, " bytes that config.json is read with");
}

}  // namespace config_fields

namespace {

json parsed(const std::string& text, const std::string& source) { return config_fields::parse_object(text, source); }

}  // namespace

ModelConfig::ModelConfig() : ModelConfig(BertConfig()) {}

ModelConfig::ModelConfig(const BertConfig& c) {
  *this = from_json_string(c.to_json_string(), "BertConfig");
}

ModelConfig ModelConfig::from_json_string(const std::string& text, const std::string& source) {
  const json j = parsed(text, source);
  std::string type = "bert";
  if (const auto it = j.find("model_type"); it != j.end()) {
    KILN_CHECK(it->is_string(), source, ": field 'model_type' must be a string, got ", it->type_name(), " ",
               config_fields::brief(*it));
    type = it->get<std::string>();
  }
  const nn::ModelFamily& family = nn::model_family(type, source);
  ModelConfig c{Empty{}};
  c.facts_ = family.read_config(text, source, c.text_);
  c.model_type_ = family.model_type;
  return c;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  return from_json_string(read_file_bounded(path, path, kMaxJsonBytes), path);  // Note [Bounded input]
}

std::vector<std::string> ModelConfig::architectures() const {
  const json j = json::parse(text_);
  std::vector<std::string> out;
  if (const auto it = j.find("architectures"); it != j.end() && it->is_array())
    for (const json& a : *it)
      if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

std::vector<std::string> ModelConfig::id2label(const std::string& source) const {
  const json j = json::parse(text_);
  const auto it = j.find("id2label");
  if (it == j.end()) return {};
  return config_fields::parse_id2label(it->dump(), source + ": id2label");
}

std::optional<std::string> ModelConfig::problem_type() const {
  const json j = json::parse(text_);
  const auto it = j.find("problem_type");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

ModelConfig ModelConfig::with_field(const std::string& key, const std::string& json_text) const {
  json j = json::parse(text_);
  j[key] = parse_json_bounded(json_text, "ModelConfig::with_field('" + key + "')");
  return from_json_string(j.dump(2), model_type_ + " config");
}

void ModelConfig::to_json_file(const std::string& path) const { write_file_atomic(path, text_); }

}  // namespace kiln
