// ModernBERT as a model family (nn/model_family.h): modules and config in
// nn/models/modernbert.h; here its weight-name map, config reader and builders.
#include "nn/model_family.h"
#include "nn/models/modernbert.h"

namespace kiln::nn {

namespace {

ConfigFacts read_modernbert_config(const std::string& text, const std::string& source, std::string& normalized) {
  const ModernBertConfig c = ModernBertConfig::from_json_string(text, source);
  normalized = c.to_json_string();
  ConfigFacts f;
  f.vocab_size = c.vocab_size;
  f.hidden_size = c.hidden_size;
  f.num_layers = c.num_hidden_layers;
  f.num_heads = c.num_attention_heads;
  f.max_position_embeddings = c.max_position_embeddings;
  f.max_sequence_length = c.max_position_embeddings;
  f.type_vocab_size = 0;  // no token types
  f.pad_token_id = c.pad_token_id;
  f.shape_fields = {{"vocab_size", c.vocab_size},
                    {"hidden_size", c.hidden_size},
                    {"intermediate_size", c.intermediate_size},
                    {"num_hidden_layers", c.num_hidden_layers},
                    {"num_attention_heads", c.num_attention_heads},
                    {"norm_bias", c.norm_bias ? 1 : 0},
                    {"attention_bias", c.attention_bias ? 1 : 0},
                    {"mlp_bias", c.mlp_bias ? 1 : 0},
                    {"classifier_bias", c.classifier_bias ? 1 : 0},
                    {"decoder_bias", c.decoder_bias ? 1 : 0}};
  return f;
}

// Names without the "model." prefix. Layer 0 has no attn_norm (transformers'
// Identity): the other layers' are left to the loader, which names a missing one.
TensorShapes modernbert_shapes(const ModelConfig& mc) {
  const ModernBertConfig c = mc.as<ModernBertConfig>();
  const int64_t V = c.vocab_size, C = c.hidden_size, F = c.intermediate_size;
  const auto norm = [&](const std::string& name, std::vector<std::pair<std::string, Shape>>& into) {
    into.push_back({name + ".weight", {C}});
    if (c.norm_bias) into.push_back({name + ".bias", {C}});
  };
  const auto linear = [&](const std::string& name, Shape shape, bool bias,
                          std::vector<std::pair<std::string, Shape>>& into) {
    into.push_back({name + ".weight", shape});
    if (bias) into.push_back({name + ".bias", {shape[0]}});
  };
  TensorShapes s;
  s.required = {{"embeddings.tok_embeddings.weight", {V, C}}};
  norm("embeddings.norm", s.required);
  norm("final_norm", s.required);
  linear("head.dense", {C, C}, c.classifier_bias, s.optional);
  norm("head.norm", s.optional);
  linear("decoder", {V, C}, c.decoder_bias, s.optional);
  s.layer_prefix = "layers.";
  linear("attn.Wqkv", {3 * C, C}, c.attention_bias, s.layer);
  linear("attn.Wo", {C, C}, c.attention_bias, s.layer);
  norm("mlp_norm", s.layer);
  linear("mlp.Wi", {2 * F, C}, c.mlp_bias, s.layer);
  linear("mlp.Wo", {C, F}, c.mlp_bias, s.layer);
  s.num_layers = c.num_hidden_layers;
  s.layers_field = "num_hidden_layers";
  return s;
}

}  // namespace

const ModelFamily& modernbert_family() {
  static const ModelFamily f{
      "modernbert",
      "ModernBert",
      WeightNames{"model.", {"decoder.weight"}, {}, {"head.", "decoder.", "classifier."}, modernbert_shapes},
      read_modernbert_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<ModernBertModel>(c.as<ModernBertConfig>(), pool);
      },
      [](const ModelConfig& c) -> std::shared_ptr<MaskedLanguageModel> {
        return std::make_shared<ModernBertForMaskedLM>(c.as<ModernBertConfig>());
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<ModernBertForSequenceClassification>(c.as<ModernBertConfig>(), n);
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<ModernBertForTokenClassification>(c.as<ModernBertConfig>(), n);
      },
      nullptr,  // no causal LM
      nullptr,
  };
  return f;
}

}  // namespace kiln::nn
