// DistilBERT as a model family (nn/model_family.h): modules and config in
// nn/models/distilbert.h; here its weight-name map, config reader and builders.
#include "nn/model_family.h"
#include "nn/models/distilbert.h"

namespace kiln::nn {

namespace {

ConfigFacts read_distilbert_config(const std::string& text, const std::string& source, std::string& normalized) {
  const DistilBertConfig c = DistilBertConfig::from_json_string(text, source);
  normalized = c.to_json_string();
  ConfigFacts f;
  f.vocab_size = c.vocab_size;
  f.hidden_size = c.dim;
  f.num_layers = c.n_layers;
  f.num_heads = c.n_heads;
  f.max_position_embeddings = c.max_position_embeddings;
  f.max_sequence_length = c.max_position_embeddings;
  f.type_vocab_size = 0;  // no token types
  f.pad_token_id = c.pad_token_id;
  f.shape_fields = {{"vocab_size", c.vocab_size}, {"dim", c.dim},
                    {"n_layers", c.n_layers},     {"n_heads", c.n_heads},
                    {"hidden_dim", c.hidden_dim}, {"max_position_embeddings", c.max_position_embeddings}};
  return f;
}

TensorShapes distilbert_shapes(const ModelConfig& mc) {
  const DistilBertConfig c = mc.as<DistilBertConfig>();
  const int64_t V = c.vocab_size, C = c.dim, F = c.hidden_dim;
  TensorShapes s;
  s.required = {
      {"embeddings.word_embeddings.weight", {V, C}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, C}},
      {"embeddings.LayerNorm.weight", {C}},
      {"embeddings.LayerNorm.bias", {C}},
  };
  s.optional = {
      {"embeddings.position_ids", {1, c.max_position_embeddings}},
      {"vocab_transform.weight", {C, C}},
      {"vocab_transform.bias", {C}},
      {"vocab_layer_norm.weight", {C}},
      {"vocab_layer_norm.bias", {C}},
      {"vocab_projector.weight", {V, C}},
      {"vocab_projector.bias", {V}},
      {"pre_classifier.weight", {C, C}},
      {"pre_classifier.bias", {C}},
  };
  s.layer_prefix = "transformer.layer.";
  for (const char* p : {"attention.q_lin.", "attention.k_lin.", "attention.v_lin.", "attention.out_lin."}) {
    s.layer.push_back({std::string(p) + "weight", {C, C}});
    s.layer.push_back({std::string(p) + "bias", {C}});
  }
  s.layer.insert(s.layer.end(), {{"sa_layer_norm.weight", {C}},
                                 {"sa_layer_norm.bias", {C}},
                                 {"ffn.lin1.weight", {F, C}},
                                 {"ffn.lin1.bias", {F}},
                                 {"ffn.lin2.weight", {C, F}},
                                 {"ffn.lin2.bias", {C}},
                                 {"output_layer_norm.weight", {C}},
                                 {"output_layer_norm.bias", {C}}});
  s.num_layers = c.n_layers;
  s.layers_field = "n_layers";
  return s;
}

}  // namespace

const ModelFamily& distilbert_family() {
  static const ModelFamily f{
      "distilbert",
      "DistilBert",
      WeightNames{"distilbert.",
                  {"vocab_projector.weight"},
                  {},
                  {"vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier.", "classifier."},
                  distilbert_shapes},
      read_distilbert_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<DistilBertModel>(c.as<DistilBertConfig>(), pool);
      },
      [](const ModelConfig& c) -> std::shared_ptr<MaskedLanguageModel> {
        return std::make_shared<DistilBertForMaskedLM>(c.as<DistilBertConfig>());
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<DistilBertForSequenceClassification>(c.as<DistilBertConfig>(), n);
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<DistilBertForTokenClassification>(c.as<DistilBertConfig>(), n);
      },
      nullptr,  // no causal LM
      nullptr,
  };
  return f;
}

}  // namespace kiln::nn
