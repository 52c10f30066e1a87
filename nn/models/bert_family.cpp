// BERT as a model family (nn/model_family.h): its modules are nn/bert.h, its
// config nn/bert_config.h; here its weight-name map and builders, and what
// the BERT-schema families share (nn/models/bert_schema.h).
#include "nn/models/bert.h"
#include "nn/model_family.h"
#include "nn/models/bert_schema.h"

namespace kiln::nn {

ConfigFacts read_bert_schema_config(const std::string& text, const std::string& source, std::string& normalized) {
  const BertConfig c = BertConfig::from_json_string(text, source);
  normalized = c.to_json_string();
  ConfigFacts f;
  f.vocab_size = c.vocab_size;
  f.hidden_size = c.hidden_size;
  f.num_layers = c.num_hidden_layers;
  f.num_heads = c.num_attention_heads;
  f.max_position_embeddings = c.max_position_embeddings;
  f.max_sequence_length = c.max_sequence_length();
  f.type_vocab_size = c.type_vocab_size;
  f.pad_token_id = c.pad_token_id;
  f.shape_fields = {{"vocab_size", c.vocab_size},
                    {"hidden_size", c.hidden_size},
                    {"num_hidden_layers", c.num_hidden_layers},
                    {"num_attention_heads", c.num_attention_heads},
                    {"intermediate_size", c.intermediate_size},
                    {"max_position_embeddings", c.max_position_embeddings},
                    {"type_vocab_size", c.type_vocab_size}};
  return f;
}

TensorShapes bert_encoder_shapes(const BertConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size;
  TensorShapes s;
  s.required = {
      {"embeddings.word_embeddings.weight", {V, H}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, H}},
      {"embeddings.token_type_embeddings.weight", {c.type_vocab_size, H}},
      {"embeddings.LayerNorm.weight", {H}},
      {"embeddings.LayerNorm.bias", {H}},
  };
  s.optional = {
      {"embeddings.position_ids", {1, c.max_position_embeddings}},
      {"pooler.dense.weight", {H, H}},
      {"pooler.dense.bias", {H}},
  };
  s.layer_prefix = "encoder.layer.";
  for (const char* p : {"attention.self.query.", "attention.self.key.", "attention.self.value."}) {
    s.layer.push_back({std::string(p) + "weight", {H, H}});
    s.layer.push_back({std::string(p) + "bias", {H}});
  }
  s.layer.insert(s.layer.end(), {
                                    {"attention.output.dense.weight", {H, H}},
                                    {"attention.output.dense.bias", {H}},
                                    {"attention.output.LayerNorm.weight", {H}},
                                    {"attention.output.LayerNorm.bias", {H}},
                                    {"intermediate.dense.weight", {I, H}},
                                    {"intermediate.dense.bias", {I}},
                                    {"output.dense.weight", {H, I}},
                                    {"output.dense.bias", {H}},
                                    {"output.LayerNorm.weight", {H}},
                                    {"output.LayerNorm.bias", {H}},
                                });
  s.num_layers = c.num_hidden_layers;
  s.layers_field = "num_hidden_layers";
  return s;
}

namespace {
TensorShapes bert_shapes(const ModelConfig& mc) {
  const BertConfig c = mc.as<BertConfig>();
  TensorShapes s = bert_encoder_shapes(c);
  const int64_t V = c.vocab_size, H = c.hidden_size;
  s.optional.insert(s.optional.end(), {
                                          {"cls.predictions.transform.dense.weight", {H, H}},
                                          {"cls.predictions.transform.dense.bias", {H}},
                                          {"cls.predictions.transform.LayerNorm.weight", {H}},
                                          {"cls.predictions.transform.LayerNorm.bias", {H}},
                                          {"cls.predictions.bias", {V}},
                                          {"cls.predictions.decoder.weight", {V, H}},
                                          {"cls.predictions.decoder.bias", {V}},
                                          {"cls.seq_relationship.weight", {2, H}},
                                          {"cls.seq_relationship.bias", {2}},
                                      });
  return s;
}
}  // namespace

const ModelFamily& bert_family() {
  static const ModelFamily f{
      "bert",
      "Bert",
      WeightNames{"bert.",
                  {"cls.predictions.decoder.weight"},
                  {{"cls.predictions.decoder.bias", "cls.predictions.bias"}},
                  {"cls.", "classifier.", "pooler."},
                  bert_shapes},
      read_bert_schema_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<BertModel>(c.as<BertConfig>(), pool);
      },
      [](const ModelConfig& c) -> std::shared_ptr<MaskedLanguageModel> {
        return std::make_shared<BertForMaskedLM>(c.as<BertConfig>());
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<BertForSequenceClassification>(c.as<BertConfig>(), n);
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<BertForTokenClassification>(c.as<BertConfig>(), n);
      },
      nullptr,  // no causal LM
      nullptr,
  };
  return f;
}

}  // namespace kiln::nn
