// RoBERTa and XLM-RoBERTa as model families (nn/model_family.h): modules in
// nn/models/roberta.h, config BertConfig (their config.json has BERT's
// fields); here the weight-name map and builders, which the two share.
#include "nn/model_family.h"
#include "nn/models/roberta.h"

namespace kiln::nn {

namespace {
std::vector<std::pair<std::string, Shape>> roberta_head_shapes(const BertConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden_size;
  return {
      {"lm_head.dense.weight", {H, H}},       {"lm_head.dense.bias", {H}},
      {"lm_head.layer_norm.weight", {H}},     {"lm_head.layer_norm.bias", {H}},
      {"lm_head.bias", {V}},                  {"lm_head.decoder.weight", {V, H}},
      {"lm_head.decoder.bias", {V}},          {"classifier.dense.weight", {H, H}},
      {"classifier.dense.bias", {H}},
  };
}

ModelFamily roberta_like(const char* model_type, const char* class_prefix) {
  return ModelFamily{
      model_type,
      class_prefix,
      WeightNames{"roberta.",
                  {"lm_head.decoder.weight"},
                  {{"lm_head.decoder.bias", "lm_head.bias"}},
                  {"lm_head.", "classifier.", "pooler."},
                  roberta_head_shapes},
      [](const BertConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<RobertaModel>(c, pool);
      },
      [](const BertConfig& c) -> std::shared_ptr<MaskedLanguageModel> { return std::make_shared<RobertaForMaskedLM>(c); },
      [](const BertConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<RobertaForSequenceClassification>(c, n);
      },
      [](const BertConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<RobertaForTokenClassification>(c, n);
      },
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
