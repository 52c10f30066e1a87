// RoBERTa and XLM-RoBERTa as model families (nn/model_family.h): modules in
// nn/models/roberta.h, config BertConfig (their config.json has BERT's
// fields); here the weight-name map and builders, which the two share.
#include "nn/model_family.h"
#include "nn/models/bert_schema.h"
#include "nn/models/roberta.h"

namespace kiln::nn {

namespace {
TensorShapes roberta_shapes(const ModelConfig& mc) {
  const BertConfig c = mc.as<BertConfig>();
  TensorShapes s = bert_encoder_shapes(c);
  const int64_t V = c.vocab_size, H = c.hidden_size;
  s.optional.insert(s.optional.end(), {
                                          {"lm_head.dense.weight", {H, H}},
                                          {"lm_head.dense.bias", {H}},
                                          {"lm_head.layer_norm.weight", {H}},
                                          {"lm_head.layer_norm.bias", {H}},
                                          {"lm_head.bias", {V}},
                                          {"lm_head.decoder.weight", {V, H}},
                                          {"lm_head.decoder.bias", {V}},
                                          {"classifier.dense.weight", {H, H}},
                                          {"classifier.dense.bias", {H}},
                                      });
  return s;
}

ModelFamily roberta_like(const char* model_type, const char* class_prefix) {
  return ModelFamily{
      model_type,
      class_prefix,
      WeightNames{"roberta.",
                  {"lm_head.decoder.weight"},
                  {{"lm_head.decoder.bias", "lm_head.bias"}},
                  {"lm_head.", "classifier.", "pooler."},
                  roberta_shapes},
      read_bert_schema_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<RobertaModel>(c.as<BertConfig>(), pool);
      },
      [](const ModelConfig& c) -> std::shared_ptr<MaskedLanguageModel> {
        return std::make_shared<RobertaForMaskedLM>(c.as<BertConfig>());
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<RobertaForSequenceClassification>(c.as<BertConfig>(), n);
      },
      [](const ModelConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<RobertaForTokenClassification>(c.as<BertConfig>(), n);
      },
      nullptr,  // no causal LM
      nullptr,
  };
}
}  // namespace

const ModelFamily& roberta_family() {
  static const ModelFamily f = roberta_like("roberta", "Roberta");
  return f;
}

const ModelFamily& xlm_roberta_family() {
  static const ModelFamily f = roberta_like("xlm-roberta", "XLMRoberta");
  return f;
}

}  // namespace kiln::nn
