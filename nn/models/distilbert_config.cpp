// DistilBertConfig (nn/models/distilbert.h): config.json as transformers'
// DistilBertConfig reads and writes it.
#include <cmath>

#include <nlohmann/json.hpp>

#include "nn/config_fields.h"
#include "nn/model_size.h"
#include "nn/models/distilbert.h"

namespace kiln {
namespace {

using json = nlohmann::json;

constexpr const char* kFieldNames[] = {
    "model_type", "architectures", "vocab_size", "max_position_embeddings", "sinusoidal_pos_embds", "n_layers",
    "n_heads", "dim", "hidden_dim", "dropout", "attention_dropout", "activation", "initializer_range", "qa_dropout",
    "seq_classif_dropout", "pad_token_id", "problem_type"};

}  // namespace

HiddenAct DistilBertConfig::act() const { return config_fields::activation_named(activation); }

void DistilBertConfig::validate(const std::string& source) const {
  config_fields::check_sizes({{"vocab_size", vocab_size},
                              {"max_position_embeddings", max_position_embeddings},
                              {"n_layers", n_layers},
                              {"n_heads", n_heads},
                              {"dim", dim},
                              {"hidden_dim", hidden_dim}},
                             source);
  KILN_CHECK(dim % n_heads == 0, source, ": dim = ", dim, " is not divisible by n_heads = ", n_heads);
  KILN_CHECK(!sinusoidal_pos_embds || dim % 2 == 0, source, ": sinusoidal_pos_embds needs an even dim, got ", dim);
  config_fields::check_probabilities({{"dropout", dropout},
                                      {"attention_dropout", attention_dropout},
                                      {"qa_dropout", qa_dropout},
                                      {"seq_classif_dropout", seq_classif_dropout}},
                                     source);
  KILN_CHECK(std::isfinite(initializer_range) && initializer_range > 0.0, source,
             ": initializer_range = ", initializer_range, " must be positive and finite");
  config_fields::check_activation("activation", activation, source);
  config_fields::check_common_fields(problem_type, pad_token_id, vocab_size, extra,
                                     {std::begin(kFieldNames), std::end(kFieldNames)}, "DistilBertConfig", source);
}

BertConfig DistilBertConfig::bert_equivalent() const {
  return config_fields::bert_schema(vocab_size, dim, n_layers, n_heads, hidden_dim, max_position_embeddings);
}

DistilBertConfig DistilBertConfig::from_json_string(const std::string& text, const std::string& source) {
  const json j = config_fields::parse_object(text, source);
  config_fields::FieldReader r(j, source);
  r.expect_model_type("distilbert");
  DistilBertConfig c;
  r.require("vocab_size", c.vocab_size);
  r.require_aliased("dim", "hidden_size", c.dim);
  r.require_aliased("n_layers", "num_hidden_layers", c.n_layers);
  r.require_aliased("n_heads", "num_attention_heads", c.n_heads);
  r.require("hidden_dim", c.hidden_dim);
  r.require("max_position_embeddings", c.max_position_embeddings);
  r.optional("sinusoidal_pos_embds", c.sinusoidal_pos_embds);
  r.optional("dropout", c.dropout);
  r.optional("attention_dropout", c.attention_dropout);
  r.optional("activation", c.activation);
  r.optional("initializer_range", c.initializer_range);
  r.optional("qa_dropout", c.qa_dropout);
  r.optional("seq_classif_dropout", c.seq_classif_dropout);
  config_fields::finish_reading(r, c, source);
  return c;
}

std::string DistilBertConfig::to_json_string() const {
  validate();
  json j = config_fields::json_with_common_fields(*this, "distilbert");
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["sinusoidal_pos_embds"] = sinusoidal_pos_embds;
  j["n_layers"] = n_layers;
  j["n_heads"] = n_heads;
  j["dim"] = dim;
  j["hidden_dim"] = hidden_dim;
  j["dropout"] = dropout;
  j["attention_dropout"] = attention_dropout;
  j["activation"] = activation;
  j["initializer_range"] = initializer_range;
  j["qa_dropout"] = qa_dropout;
  j["seq_classif_dropout"] = seq_classif_dropout;
  j["pad_token_id"] = pad_token_id ? json(*pad_token_id) : json(nullptr);
  return j.dump(2) + "\n";
}

}  // namespace kiln
