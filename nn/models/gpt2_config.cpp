// GPT2Config (nn/models/gpt2.h): config.json as transformers' GPT2Config
// reads and writes it.
#include <cmath>

#include <nlohmann/json.hpp>

#include "nn/config_fields.h"
#include "nn/model_size.h"
#include "nn/models/gpt2.h"

namespace kiln {
namespace {

using json = nlohmann::json;
using config_fields::optional_json;

constexpr const char* kFieldNames[] = {"model_type",
                                       "architectures",
                                       "vocab_size",
                                       "n_positions",
                                       "n_embd",
                                       "n_layer",
                                       "n_head",
                                       "n_inner",
                                       "activation_function",
                                       "resid_pdrop",
                                       "embd_pdrop",
                                       "attn_pdrop",
                                       "layer_norm_epsilon",
                                       "initializer_range",
                                       "scale_attn_weights",
                                       "scale_attn_by_inverse_layer_idx",
                                       "reorder_and_upcast_attn",
                                       "tie_word_embeddings",
                                       "bos_token_id",
                                       "eos_token_id",
                                       "pad_token_id",
                                       "problem_type"};

}  // namespace

HiddenAct GPT2Config::act() const { return config_fields::activation_named(activation_function); }

void GPT2Config::validate(const std::string& source) const {
  config_fields::check_sizes({{"vocab_size", vocab_size},
                              {"n_positions", n_positions},
                              {"n_embd", n_embd},
                              {"n_layer", n_layer},
                              {"n_head", n_head},
                              {"n_inner", inner()}},
                             source);
  KILN_CHECK(n_embd % n_head == 0, source, ": n_embd = ", n_embd, " is not divisible by n_head = ", n_head);
  config_fields::check_probabilities(
      {{"resid_pdrop", resid_pdrop}, {"embd_pdrop", embd_pdrop}, {"attn_pdrop", attn_pdrop}}, source);
  KILN_CHECK(std::isfinite(layer_norm_epsilon) && layer_norm_epsilon > 0.0, source,
             ": layer_norm_epsilon = ", layer_norm_epsilon, " must be positive and finite");
  KILN_CHECK(std::isfinite(initializer_range) && initializer_range > 0.0, source,
             ": initializer_range = ", initializer_range, " must be positive and finite");
  config_fields::check_activation("activation_function", activation_function, source);
  config_fields::check_token_ids({{"bos_token_id", bos_token_id}, {"eos_token_id", eos_token_id}}, vocab_size, source);
  config_fields::check_common_fields(problem_type, pad_token_id, vocab_size, extra,
                                     {std::begin(kFieldNames), std::end(kFieldNames)}, "GPT2Config", source);
}

BertConfig GPT2Config::bert_equivalent() const {
  return config_fields::bert_schema(vocab_size, n_embd, n_layer, n_head, inner(), n_positions);
}

GPT2Config GPT2Config::from_json_string(const std::string& text, const std::string& source) {
  const json j = config_fields::parse_object(text, source);
  config_fields::FieldReader r(j, source);
  r.expect_model_type("gpt2");
  GPT2Config c;
  r.require("vocab_size", c.vocab_size);
  r.require_aliased("n_positions", "max_position_embeddings", c.n_positions);
  r.require_aliased("n_embd", "hidden_size", c.n_embd);
  r.require_aliased("n_layer", "num_hidden_layers", c.n_layer);
  r.require_aliased("n_head", "num_attention_heads", c.n_head);
  r.optional("n_inner", c.n_inner);
  r.optional("activation_function", c.activation_function);
  r.optional("resid_pdrop", c.resid_pdrop);
  r.optional("embd_pdrop", c.embd_pdrop);
  r.optional("attn_pdrop", c.attn_pdrop);
  r.optional("layer_norm_epsilon", c.layer_norm_epsilon);
  r.optional("initializer_range", c.initializer_range);
  r.optional("scale_attn_weights", c.scale_attn_weights);
  r.optional("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx);
  r.optional("reorder_and_upcast_attn", c.reorder_and_upcast_attn);
  r.optional("tie_word_embeddings", c.tie_word_embeddings);
  r.optional("bos_token_id", c.bos_token_id);
  r.optional("eos_token_id", c.eos_token_id);
  config_fields::finish_reading(r, c, source);
  return c;
}

std::string GPT2Config::to_json_string() const {
  validate();
  json j = config_fields::json_with_common_fields(*this, "gpt2");
  j["vocab_size"] = vocab_size;
  j["n_positions"] = n_positions;
  j["n_embd"] = n_embd;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_inner"] = optional_json(n_inner);
  j["activation_function"] = activation_function;
  j["resid_pdrop"] = resid_pdrop;
  j["embd_pdrop"] = embd_pdrop;
  j["attn_pdrop"] = attn_pdrop;
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["initializer_range"] = initializer_range;
  j["scale_attn_weights"] = scale_attn_weights;
  j["scale_attn_by_inverse_layer_idx"] = scale_attn_by_inverse_layer_idx;
  j["reorder_and_upcast_attn"] = reorder_and_upcast_attn;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = optional_json(bos_token_id);
  j["eos_token_id"] = optional_json(eos_token_id);
  if (pad_token_id) j["pad_token_id"] = *pad_token_id;
  return j.dump(2) + "\n";
}

}  // namespace kiln
