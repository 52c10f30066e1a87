// ModernBertConfig (nn/models/modernbert.h): config.json as transformers'
// ModernBertConfig (4.48) reads and writes it.
#include <cmath>

#include <nlohmann/json.hpp>

#include "nn/config_fields.h"
#include "nn/model_size.h"
#include "nn/models/modernbert.h"

namespace kiln {
namespace {

using json = nlohmann::json;
using config_fields::optional_json;

constexpr const char* kFieldNames[] = {
    "model_type",          "architectures",         "vocab_size",        "hidden_size",
    "intermediate_size",   "num_hidden_layers",     "num_attention_heads", "hidden_activation",
    "max_position_embeddings", "initializer_range", "initializer_cutoff_factor", "norm_eps",
    "norm_bias",           "global_rope_theta",     "local_rope_theta",  "attention_bias",
    "attention_dropout",   "global_attn_every_n_layers", "local_attention", "embedding_dropout",
    "mlp_bias",            "mlp_dropout",           "decoder_bias",      "tie_word_embeddings",
    "classifier_pooling",  "classifier_dropout",    "classifier_bias",   "classifier_activation",
    "pad_token_id",        "bos_token_id",          "eos_token_id",      "cls_token_id",
    "sep_token_id",        "problem_type"};

}  // namespace

HiddenAct ModernBertConfig::act() const { return config_fields::activation_named(hidden_activation); }
HiddenAct ModernBertConfig::classifier_act() const { return config_fields::activation_named(classifier_activation); }

void ModernBertConfig::validate(const std::string& source) const {
  config_fields::check_sizes({{"vocab_size", vocab_size},
                              {"hidden_size", hidden_size},
                              {"intermediate_size", intermediate_size},
                              {"num_hidden_layers", num_hidden_layers},
                              {"num_attention_heads", num_attention_heads},
                              {"max_position_embeddings", max_position_embeddings},
                              {"global_attn_every_n_layers", global_attn_every_n_layers},
                              {"local_attention", local_attention}},
                             source);
  KILN_CHECK(hidden_size % num_attention_heads == 0, source, ": hidden_size = ", hidden_size,
             " is not divisible by num_attention_heads = ", num_attention_heads);
  KILN_CHECK(head_dim() % 2 == 0, source, ": the head size hidden_size / num_attention_heads = ", head_dim(),
             " must be even (rotary embeddings rotate pairs)");
  config_fields::check_probabilities({{"attention_dropout", attention_dropout},
                                      {"embedding_dropout", embedding_dropout},
                                      {"mlp_dropout", mlp_dropout},
                                      {"classifier_dropout", classifier_dropout}},
                                     source);
  for (const auto& [field, value] : {std::pair{"norm_eps", norm_eps}, std::pair{"initializer_range", initializer_range},
                                     std::pair{"initializer_cutoff_factor", initializer_cutoff_factor},
                                     std::pair{"global_rope_theta", global_rope_theta},
                                     std::pair{"local_rope_theta", local_rope_theta.value_or(1.0)}})
    KILN_CHECK(std::isfinite(value) && value > 0.0, source, ": ", field, " = ", value, " must be positive and finite");
  KILN_CHECK(classifier_pooling == "cls" || classifier_pooling == "mean", source, ": classifier_pooling '",
             classifier_pooling, "' is not supported (transformers accepts cls, mean)");
  config_fields::check_activation("hidden_activation", hidden_activation, source);
  config_fields::check_activation("classifier_activation", classifier_activation, source);
  config_fields::check_token_ids({{"bos_token_id", bos_token_id},
                                  {"eos_token_id", eos_token_id},
                                  {"cls_token_id", cls_token_id},
                                  {"sep_token_id", sep_token_id}},
                                 vocab_size, source);
  config_fields::check_common_fields(problem_type, pad_token_id, vocab_size, extra,
                                     {std::begin(kFieldNames), std::end(kFieldNames)}, "ModernBertConfig", source);
}

BertConfig ModernBertConfig::bert_equivalent() const {
  // Wi is (2F, C): count it as an FFN of width 2F (the estimate bounds memory, not exact parameters)
  return config_fields::bert_schema(vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
                                    2 * intermediate_size, max_position_embeddings);
}

ModernBertConfig ModernBertConfig::from_json_string(const std::string& text, const std::string& source) {
  const json j = config_fields::parse_object(text, source);
  config_fields::FieldReader r(j, source);
  r.expect_model_type("modernbert");
  ModernBertConfig c;
  r.require("vocab_size", c.vocab_size);
  r.require("hidden_size", c.hidden_size);
  r.require("intermediate_size", c.intermediate_size);
  r.require("num_hidden_layers", c.num_hidden_layers);
  r.require("num_attention_heads", c.num_attention_heads);
  r.optional("hidden_activation", c.hidden_activation);
  r.optional("max_position_embeddings", c.max_position_embeddings);
  r.optional("initializer_range", c.initializer_range);
  r.optional("initializer_cutoff_factor", c.initializer_cutoff_factor);
  r.optional("norm_eps", c.norm_eps);
  r.optional("norm_bias", c.norm_bias);
  r.optional("global_rope_theta", c.global_rope_theta);
  r.optional("local_rope_theta", c.local_rope_theta);
  r.optional("attention_bias", c.attention_bias);
  r.optional("attention_dropout", c.attention_dropout);
  r.optional("global_attn_every_n_layers", c.global_attn_every_n_layers);
  r.optional("local_attention", c.local_attention);
  r.optional("embedding_dropout", c.embedding_dropout);
  r.optional("mlp_bias", c.mlp_bias);
  r.optional("mlp_dropout", c.mlp_dropout);
  r.optional("decoder_bias", c.decoder_bias);
  r.optional("tie_word_embeddings", c.tie_word_embeddings);
  r.optional("classifier_pooling", c.classifier_pooling);
  r.optional("classifier_dropout", c.classifier_dropout);
  r.optional("classifier_bias", c.classifier_bias);
  r.optional("classifier_activation", c.classifier_activation);
  r.optional("bos_token_id", c.bos_token_id);
  r.optional("eos_token_id", c.eos_token_id);
  r.optional("cls_token_id", c.cls_token_id);
  r.optional("sep_token_id", c.sep_token_id);
  config_fields::finish_reading(r, c, source);
  return c;
}

std::string ModernBertConfig::to_json_string() const {
  validate();
  json j = config_fields::json_with_common_fields(*this, "modernbert");
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["hidden_activation"] = hidden_activation;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initializer_range"] = initializer_range;
  j["initializer_cutoff_factor"] = initializer_cutoff_factor;
  j["norm_eps"] = norm_eps;
  j["norm_bias"] = norm_bias;
  j["global_rope_theta"] = global_rope_theta;
  j["local_rope_theta"] = local_rope_theta ? json(*local_rope_theta) : json(nullptr);
  j["attention_bias"] = attention_bias;
  j["attention_dropout"] = attention_dropout;
  j["global_attn_every_n_layers"] = global_attn_every_n_layers;
  j["local_attention"] = local_attention;
  j["embedding_dropout"] = embedding_dropout;
  j["mlp_bias"] = mlp_bias;
  j["mlp_dropout"] = mlp_dropout;
  j["decoder_bias"] = decoder_bias;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["classifier_pooling"] = classifier_pooling;
  j["classifier_dropout"] = classifier_dropout;
  j["classifier_bias"] = classifier_bias;
  j["classifier_activation"] = classifier_activation;
  j["pad_token_id"] = optional_json(pad_token_id);
  j["bos_token_id"] = optional_json(bos_token_id);
  j["eos_token_id"] = optional_json(eos_token_id);
  j["cls_token_id"] = optional_json(cls_token_id);
  j["sep_token_id"] = optional_json(sep_token_id);
  return j.dump(2) + "\n";
}

}  // namespace kiln
