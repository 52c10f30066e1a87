// Internal: reading the fields of a Hugging Face config.json object, shared
// by the families' config readers (BertConfig, DistilBertConfig, ...). Every
// error is a kiln::Error "<source>: field '<key>' ..." naming the field.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/models/bert_config.h"
#include "nn/model_size.h"

namespace kiln::config_fields {

using json = nlohmann::json;

inline constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

// A JSON value for an error message: its text, cut short when long.
inline std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

inline std::string joined(const std::vector<std::string>& names) {
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
  // A required field that transformers' attribute_map also names `alias`
  // (DistilBERT's dim as hidden_size, GPT-2's n_embd): the alias is read when
  // the field is absent; when both are present they must agree. The alias
  // counts as used either way (it is not kept twice in `extra`).
  void require_aliased(const std::string& field, const std::string& alias, int64_t& out) {
    const auto f = obj_.find(field), a = obj_.find(alias);
    KILN_CHECK(f == obj_.end() || a == obj_.end() || *f == *a, source_, ": '", alias, "' and '", field,
               "' disagree (transformers reads ", alias, " as ", field, ")");
    (void)get(alias);
    require(f == obj_.end() && a != obj_.end() ? alias : field, out);
  }
  // "model_type", when present, must be `want` (a family's reader reads only its own).
  void expect_model_type(const std::string& want) {
    std::string type = want;
    optional("model_type", type);
    KILN_CHECK(type == want, source_, ": model_type '", type, "' is not ", want);
  }
  void optional(const std::string& key, int64_t& out) {
    if (const json* v = get(key)) out = integer(key, *v);
  }
  void optional(const std::string& key, double& out) {
    if (const json* v = get(key)) out = number(key, *v);
  }
  void optional(const std::string& key, bool& out) {
    if (const json* v = get(key)) {
      KILN_CHECK(v->is_boolean(), source_, ": field '", key, "' must be true or false, got ", v->type_name(), " ",
                 brief(*v));
      out = v->get<bool>();
    }
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
    KILN_CHECK(v->is_array(), source_, ": field '", key, "' must be an array of strings, got ", v->type_name(), " ",
               brief(*v));
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
    KILN_CHECK(v.is_number_integer(), source_, ": field '", key, "' must be an integer, got ", v.type_name(), " ",
               brief(v));
    KILN_CHECK(v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMaxSize) : v.get<int64_t>() >= -kMaxSize,
               source_, ": field '", key, "' = ", brief(v), " is out of range");
    return v.get<int64_t>();
  }
  double number(const std::string& key, const json& v) const {
    KILN_CHECK(v.is_number(), source_, ": field '", key, "' must be a number, got ", v.type_name(), " ", brief(v));
    return v.get<double>();
  }
  std::string string(const std::string& key, const json& v) const {
    KILN_CHECK(v.is_string(), source_, ": field '", key, "' must be a string, got ", v.type_name(), " ", brief(v));
    return v.get<std::string>();
  }

  const json& obj_;
  const std::string& source_;
  std::vector<std::string> used_;
};

// JSON null for an absent optional id.
inline json optional_json(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

// transformers' activation names as BertConfig reads them (HiddenAct), and
// the check that `name` is one: kiln::Error "<source>: <field> 'x' is not
// supported (known: ...)".
HiddenAct activation_named(const std::string& name);
void check_activation(const char* field, const std::string& name, const std::string& source);

// Each id that is set (bos_token_id, eos_token_id, ...) in [0, vocab_size).
void check_token_ids(std::initializer_list<std::pair<const char*, std::optional<int64_t>>> ids, int64_t vocab_size,
                     const std::string& source);

// The BERT-schema config of a family's sizes: what the model-size estimate
// (Note [Model size limit]) counts.
BertConfig bert_schema(int64_t vocab_size, int64_t hidden, int64_t layers, int64_t heads, int64_t intermediate,
                       int64_t positions);

// config.json text as a bounded JSON object (Note [Bounded JSON]), else
// kiln::Error "<source>: config must be a JSON object, got <type>".
json parse_object(const std::string& text, const std::string& source);

// Each size in [1, kMaxSize] and each dropout probability in [0, 1), else
// kiln::Error "<source>: <field> = <value> must be in ...".
void check_sizes(std::initializer_list<std::pair<const char*, int64_t>> sizes, const std::string& source);
void check_probabilities(std::initializer_list<std::pair<const char*, double>> probs, const std::string& source);

// The checks every family's validate() shares, each a kiln::Error
// "<source>: <field> ...": problem_type one of transformers' three;
// pad_token_id in [0, vocab_size); `extra` holding none of the struct's own
// field names (`fields`), each value bounded JSON, and id2label as
// parse_id2label accepts it.
void check_common_fields(const std::optional<std::string>& problem_type, const std::optional<int64_t>& pad_token_id,
                         int64_t vocab_size, const std::map<std::string, std::string>& extra,
                         const std::vector<std::string>& fields, const std::string& struct_name,
                         const std::string& source);
// That the config text kiln writes (`saved_bytes`: indented, so it can be
// longer than the text read) is readable again: a checkpoint saved from it
// would not load otherwise.
void check_saved_size(size_t saved_bytes, const std::string& source);

// The label names of a config's id2label object (JSON text) in id order. The
// keys must be the canonical decimal ids "0", "1", ..., n - 1, each once (no
// sign, spaces or leading zeros), the values strings; else a kiln::Error
// "<what>: ...".
std::vector<std::string> parse_id2label(const std::string& json_text, const std::string& what);

// The end of every family's from_json_string: the fields every family's
// config has (pad_token_id, problem_type, architectures), the keys nothing
// read kept verbatim in `extra`, then validate, the model-size limit, and
// that the config kiln would write is readable again.
template <typename Config>
void finish_reading(FieldReader& r, Config& c, const std::string& source) {
  r.optional("pad_token_id", c.pad_token_id);
  r.optional("problem_type", c.problem_type);
  r.optional("architectures", c.architectures);
  c.extra = r.unused();
  c.validate(source);
  check_model_size(c.bert_equivalent(), source);  // Note [Model size limit]
  check_saved_size(c.to_json_string().size(), source);
}

// The start of every family's to_json_string (after validate()): the kept
// unknown keys, model_type and architectures; the family adds its fields.
template <typename Config>
json json_with_common_fields(const Config& c, const std::string& model_type) {
  json j = json::object();
  for (const auto& [key, text] : c.extra) j[key] = json::parse(text);
  j["model_type"] = model_type;
  j["architectures"] = c.architectures;
  if (c.problem_type) j["problem_type"] = *c.problem_type;
  return j;
}

}  // namespace kiln::config_fields
