// LlamaConfig (nn/models/llama.h): config.json as transformers' LlamaConfig
// and MistralConfig (4.36) and Qwen2Config (4.48) read and write it.
#include <cmath>

#include <nlohmann/json.hpp>

#include "nn/config_fields.h"
#include "nn/model_size.h"
#include "nn/models/llama.h"

namespace kiln {
namespace {

using json = nlohmann::json;
using config_fields::optional_json;

// The fields of every family; those of some only (rope_scaling: llama, qwen2;
// attention_bias, pretraining_tp: llama; sliding_window: mistral, qwen2;
// use_sliding_window, max_window_layers: qwen2) are in the others' `extra`
// when present, as transformers ignores them there.
constexpr const char* kFieldNames[] = {
    "model_type",          "architectures",     "vocab_size",          "hidden_size",       "intermediate_size",
    "num_hidden_layers",   "num_attention_heads", "num_key_value_heads", "hidden_act",     "max_position_embeddings",
    "initializer_range",   "rms_norm_eps",      "rope_theta",          "attention_dropout", "tie_word_embeddings",
    "bos_token_id",        "eos_token_id",      "pad_token_id",        "problem_type"};
constexpr const char* kLlamaOnly[] = {"rope_scaling", "attention_bias", "pretraining_tp"};
constexpr const char* kMistralOnly[] = {"sliding_window"};
constexpr const char* kQwen2Only[] = {"rope_scaling", "sliding_window", "use_sliding_window", "max_window_layers"};

bool known_model_type(const std::string& t) { return t == "llama" || t == "mistral" || t == "qwen2"; }

// rope_scaling as transformers 4.36 validates it: null, or {"type": "linear" | "dynamic", "factor": > 1};
// transformers 4.48 also writes the type as "rope_type", and {"rope_type": "default"} means none.
std::optional<RopeScaling> read_rope_scaling(const json* v, const std::string& source) {
  if (!v || v->is_null()) return std::nullopt;
  KILN_CHECK(v->is_object(), source, ": rope_scaling must be null or an object {\"type\", \"factor\"}, got ",
             config_fields::brief(*v));
  const auto type = v->find("type") != v->end() ? v->find("type") : v->find("rope_type");
  KILN_CHECK(type != v->end() && type->is_string(), source, ": rope_scaling needs a string \"type\", got ",
             config_fields::brief(*v));
  RopeScaling r;
  r.type = type->get<std::string>();
  if (r.type == "default") {
    for (const auto& [key, value] : v->items())
      KILN_CHECK(key == "type" || key == "rope_type", source, ": rope_scaling field '", key,
                 "' is not supported (type 'default' takes none)");
    return std::nullopt;
  }
  KILN_CHECK(r.type == "linear" || r.type == "dynamic", source, ": rope_scaling type '", r.type,
             "' is not supported (kiln supports linear, dynamic)");
  const auto factor = v->find("factor");
  KILN_CHECK(factor != v->end() && factor->is_number(), source, ": rope_scaling needs a number \"factor\", got ",
             config_fields::brief(*v));
  r.factor = factor->get<double>();
  KILN_CHECK(std::isfinite(r.factor) && r.factor > 1.0, source, ": rope_scaling factor = ", r.factor,
             " must be a finite number > 1");
  for (const auto& [key, value] : v->items())
    KILN_CHECK(key == "type" || key == "rope_type" || key == "factor", source, ": rope_scaling field '", key,
               "' is not supported (type '", r.type, "' takes only a factor)");
  return r;
}

}  // namespace

HiddenAct LlamaConfig::act() const { return config_fields::activation_named(hidden_act); }

void LlamaConfig::validate(const std::string& source) const {
  KILN_CHECK(known_model_type(model_type), source, ": model_type '", model_type, "' is not llama, mistral or qwen2");
  config_fields::check_sizes({{"vocab_size", vocab_size},
                              {"hidden_size", hidden_size},
                              {"intermediate_size", intermediate_size},
                              {"num_hidden_layers", num_hidden_layers},
                              {"num_attention_heads", num_attention_heads},
                              {"num_key_value_heads", num_key_value_heads},
                              {"max_position_embeddings", max_position_embeddings},
                              {"pretraining_tp", pretraining_tp},
                              {"max_window_layers", max_window_layers}},
                             source);
  KILN_CHECK(hidden_size % num_attention_heads == 0, source, ": hidden_size = ", hidden_size,
             " is not divisible by num_attention_heads = ", num_attention_heads);
  KILN_CHECK(head_dim() % 2 == 0, source, ": the head size hidden_size / num_attention_heads = ", head_dim(),
             " must be even (rotary embeddings rotate pairs)");
  KILN_CHECK(num_attention_heads % num_key_value_heads == 0, source, ": num_attention_heads = ", num_attention_heads,
             " is not divisible by num_key_value_heads = ", num_key_value_heads);
  config_fields::check_probabilities({{"attention_dropout", attention_dropout}}, source);
  for (const auto& [field, value] : {std::pair{"rms_norm_eps", rms_norm_eps},
                                     std::pair{"initializer_range", initializer_range},
                                     std::pair{"rope_theta", rope_theta}})
    KILN_CHECK(std::isfinite(value) && value > 0.0, source, ": ", field, " = ", value, " must be positive and finite");
  if (sliding_window)
    KILN_CHECK(*sliding_window >= 1, source, ": sliding_window = ", *sliding_window, " must be >= 1 (or null)");
  config_fields::check_activation("hidden_act", hidden_act, source);
  config_fields::check_token_ids({{"bos_token_id", bos_token_id}, {"eos_token_id", eos_token_id}}, vocab_size, source);
  std::vector<std::string> fields(std::begin(kFieldNames), std::end(kFieldNames));
  if (model_type == "qwen2")
    KILN_CHECK(!sliding_window, source, ": use_sliding_window = true is not supported for qwen2 (transformers "
               "applies Qwen2's window only under flash-attention; its eager and SDPA attention ignore it)");
  if (model_type == "llama") fields.insert(fields.end(), std::begin(kLlamaOnly), std::end(kLlamaOnly));
  else if (model_type == "mistral") fields.insert(fields.end(), std::begin(kMistralOnly), std::end(kMistralOnly));
  else fields.insert(fields.end(), std::begin(kQwen2Only), std::end(kQwen2Only));
  config_fields::check_common_fields(problem_type, pad_token_id, vocab_size, extra, fields, "LlamaConfig", source);
}

BertConfig LlamaConfig::bert_equivalent() const {
  return config_fields::bert_schema(vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
                                    max_position_embeddings);
}

LlamaConfig LlamaConfig::from_json_string(const std::string& text, const std::string& source) {
  const json j = config_fields::parse_object(text, source);
  config_fields::FieldReader r(j, source);
  LlamaConfig c;
  r.optional("model_type", c.model_type);
  KILN_CHECK(known_model_type(c.model_type), source, ": model_type '", c.model_type,
             "' is not llama, mistral or qwen2");
  const bool mistral = c.model_type == "mistral", qwen2 = c.model_type == "qwen2";
  if (mistral) {  // MistralConfig's defaults
    c.num_key_value_heads = 8;
    c.sliding_window = 4096;
  }
  if (qwen2) {  // Qwen2Config sets no token ids
    c.bos_token_id.reset();
    c.eos_token_id.reset();
  }
  c.architectures = {mistral ? "MistralForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  r.require("vocab_size", c.vocab_size);
  r.require("hidden_size", c.hidden_size);
  r.require("intermediate_size", c.intermediate_size);
  r.require("num_hidden_layers", c.num_hidden_layers);
  r.require("num_attention_heads", c.num_attention_heads);
  r.require("max_position_embeddings", c.max_position_embeddings);
  if (!mistral) c.num_key_value_heads = c.num_attention_heads;  // LlamaConfig: null means multi-head
  std::optional<int64_t> kv;
  r.optional("num_key_value_heads", kv);
  if (kv) c.num_key_value_heads = *kv;
  r.optional("hidden_act", c.hidden_act);
  r.optional("initializer_range", c.initializer_range);
  r.optional("rms_norm_eps", c.rms_norm_eps);
  r.optional("rope_theta", c.rope_theta);
  r.optional("attention_dropout", c.attention_dropout);
  r.optional("tie_word_embeddings", c.tie_word_embeddings);
  r.optional("bos_token_id", c.bos_token_id);
  r.optional("eos_token_id", c.eos_token_id);
  if (mistral) {
    r.optional("sliding_window", c.sliding_window);
  } else if (qwen2) {
    c.rope_scaling = read_rope_scaling(r.get("rope_scaling"), source);
    bool use_window = false;
    r.optional("use_sliding_window", use_window);
    std::optional<int64_t> window = 4096;
    r.optional("sliding_window", window);
    if (use_window) c.sliding_window = window ? window : std::optional<int64_t>(4096);  // refused by validate()
    r.optional("max_window_layers", c.max_window_layers);
  } else {
    c.rope_scaling = read_rope_scaling(r.get("rope_scaling"), source);
    r.optional("attention_bias", c.attention_bias);
    r.optional("pretraining_tp", c.pretraining_tp);
  }
  config_fields::finish_reading(r, c, source);
  return c;
}

std::string LlamaConfig::to_json_string() const {
  validate();
  json j = config_fields::json_with_common_fields(*this, model_type);
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["hidden_act"] = hidden_act;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initializer_range"] = initializer_range;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["attention_dropout"] = attention_dropout;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = optional_json(bos_token_id);
  j["eos_token_id"] = optional_json(eos_token_id);
  if (pad_token_id) j["pad_token_id"] = *pad_token_id;
  const json rope = rope_scaling ? json{{"type", rope_scaling->type}, {"factor", rope_scaling->factor}} : json(nullptr);
  if (model_type == "mistral") {
    j["sliding_window"] = optional_json(sliding_window);
  } else if (model_type == "qwen2") {
    j["rope_scaling"] = rope;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;  // as Qwen2Config writes it without use_sliding_window
    j["max_window_layers"] = max_window_layers;
  } else {
    j["rope_scaling"] = rope;
    j["attention_bias"] = attention_bias;
    j["pretraining_tp"] = pretraining_tp;
  }
  return j.dump(2) + "\n";
}

}  // namespace kiln
