// BERT as a model family (nn/model_family.h): its modules are nn/bert.h, its
// config nn/bert_config.h; here its weight-name map and builders.
#include "nn/bert.h"
#include "nn/model_family.h"

namespace kiln::nn {

namespace {
std::vector<std::pair<std::string, Shape>> bert_head_shapes(const BertConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden_size;
  return {
      {"cls.predictions.transform.dense.weight", {H, H}},
      {"cls.predictions.transform.dense.bias", {H}},
      {"cls.predictions.transform.LayerNorm.weight", {H}},
      {"cls.predictions.transform.LayerNorm.bias", {H}},
      {"cls.predictions.bias", {V}},
      {"cls.predictions.decoder.weight", {V, H}},
      {"cls.predictions.decoder.bias", {V}},
      {"cls.seq_relationship.weight", {2, H}},
      {"cls.seq_relationship.bias", {2}},
  };
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
                  bert_head_shapes},
      [](const BertConfig& c, bool pool) -> std::shared_ptr<EncoderModel> { return std::make_shared<BertModel>(c, pool); },
      [](const BertConfig& c) -> std::shared_ptr<MaskedLanguageModel> { return std::make_shared<BertForMaskedLM>(c); },
      [](const BertConfig& c, int64_t n) -> std::shared_ptr<SequenceClassifier> {
        return std::make_shared<BertForSequenceClassification>(c, n);
      },
      [](const BertConfig& c, int64_t n) -> std::shared_ptr<TokenClassifier> {
        return std::make_shared<BertForTokenClassification>(c, n);
      },
  };
  return f;
}

}  // namespace kiln::nn
