// nn::Module bookkeeping and the BERT classes: Hugging Face parameter names,
// tied decoder, initialisation, state_dict errors, task heads, training step.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kiln.h"
#include "nn/models/bert.h"
#include "nn/hf_checkpoint.h"
#include "tiny_models.h"

namespace kiln {
namespace {

BertConfig tiny_config() { return kiln::testing::tiny_bert_config(); }

std::set<std::string> keys(const nn::Module& m) {
  std::set<std::string> s;
  for (auto& [n, t] : m.state_dict()) s.insert(n);
  return s;
}

TEST(BertModel, MaskedLMHasHuggingFaceNamesAndTiedDecoder) {
  manual_seed(1);
  nn::BertForMaskedLM m(tiny_config());
  const auto k = keys(m);
  for (const char* name : {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                           "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
                           "bert.encoder.layer.0.attention.self.query.weight",
                           "bert.encoder.layer.1.attention.output.LayerNorm.bias",
                           "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias",
                           "cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.weight",
                           "cls.predictions.bias"})
    EXPECT_TRUE(k.count(name)) << name;
  EXPECT_FALSE(k.count("cls.predictions.decoder.weight")) << "the tied decoder must not be saved twice";
  EXPECT_FALSE(k.count("bert.pooler.dense.weight")) << "BertForMaskedLM has no pooler";
  EXPECT_EQ(m.cls->predictions->decoder->weight.impl_ptr(), m.bert->embeddings->word_embeddings->weight.impl_ptr());
}

TEST(BertModel, InitialisationFollowsBert) {
  manual_seed(2);
  BertConfig c = tiny_config();
  c.hidden_size = 64;
  c.intermediate_size = 256;
  nn::BertModel m(c);
  const Tensor& w = m.encoder->layer->items[0]->intermediate->dense->weight;
  const double mu = mean(w).item<double>(), sd = std::sqrt(var(w).item<double>());
  EXPECT_NEAR(mu, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.002);
  EXPECT_EQ(amin(m.embeddings->norm->weight).item<float>(), 1.0f);
  EXPECT_EQ(amax(abs(m.embeddings->norm->bias)).item<float>(), 0.0f);
  EXPECT_EQ(amax(abs(m.encoder->layer->items[1]->output->dense->bias)).item<float>(), 0.0f);
  // padding row of the word embeddings starts at zero, as transformers' nn.Embedding(padding_idx)
  EXPECT_EQ(amax(abs(m.embeddings->word_embeddings->weight.select(0, 0))).item<float>(), 0.0f);
}

TEST(BertModel, LoadStateDictReportsMissingUnexpectedAndMisshapedKeys) {
  nn::BertModel m(tiny_config());
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : m.state_dict()) state[n] = t.clone().detach();
  state.erase("encoder.layer.0.attention.self.key.bias");
  state["encoder.layer.9.extra.weight"] = zeros({2});
  state["pooler.dense.weight"] = zeros({3, 3});
  try {
    m.load_state_dict(state);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing keys: encoder.layer.0.attention.self.key.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected keys: encoder.layer.9.extra.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pooler.dense.weight (checkpoint [3, 3], model [16, 16])"), std::string::npos) << msg;
  }
}

TEST(BertModel, LoadStateDictCopiesValues) {
  manual_seed(3);
  nn::BertModel a(tiny_config()), b(tiny_config());
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : a.state_dict()) state[n] = t;
  b.load_state_dict(state);
  for (auto& [n, t] : b.state_dict()) EXPECT_EQ(amax(abs(sub(t, state[n]))).item<double>(), 0.0) << n;
}

TEST(BertModel, HeadsOnABaseCheckpointAreReportedAsNew) {
  manual_seed(4);
  nn::BertModel base(tiny_config());
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : base.state_dict()) state[n] = t;
  nn::BertForSequenceClassification cls(tiny_config(), 3);
  nn::LoadReport r = nn::load_hf_state(cls, state, "base");
  std::set<std::string> heads(r.new_heads.begin(), r.new_heads.end());
  EXPECT_EQ(heads, (std::set<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_TRUE(r.ignored.empty());
  EXPECT_EQ(amax(abs(sub(cls.bert->embeddings->word_embeddings->weight, base.embeddings->word_embeddings->weight)))
                .item<double>(), 0.0);
}

TEST(BertModel, LegacyGammaBetaNamesAndPrefixesMap) {
  manual_seed(5);
  nn::BertForMaskedLM src(tiny_config());
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : src.state_dict()) {
    std::string k = n;
    if (k.size() > 17 && k.substr(k.size() - 17) == "LayerNorm.weight") k = k.substr(0, k.size() - 6) + "gamma";
    state[k] = t;
  }
  state["cls.predictions.decoder.weight"] = src.bert->embeddings->word_embeddings->weight;  // as older files hold it
  nn::BertModel base(tiny_config(), false);
  nn::LoadReport r = nn::load_hf_state(base, state, "mlm");
  EXPECT_EQ(amax(abs(sub(base.embeddings->norm->weight, src.bert->embeddings->norm->weight))).item<double>(), 0.0);
  std::set<std::string> ignored(r.ignored.begin(), r.ignored.end());
  EXPECT_TRUE(ignored.count("cls.predictions.bias"));
}

TEST(BertModel, MismatchedConfigIsAClearError) {
  nn::BertModel m(tiny_config());
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : m.state_dict()) state[n] = t;
  BertConfig other = tiny_config();
  other.intermediate_size = 48;
  nn::BertModel wrong(other);
  try {
    nn::load_hf_state(wrong, state, "model.safetensors");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("intermediate.dense.weight (checkpoint [32, 16], model [48, 16])"), std::string::npos) << msg;
  }
}

TEST(BertModel, AttentionMaskHidesPaddedPositions) {
  manual_seed(6);
  nn::BertModel m(tiny_config());
  m.eval();
  NoGradGuard g;
  Tensor ids = tensor_from({5, 6, 7, 8, 9, 10}, {1, 6});
  Tensor ids2 = tensor_from({5, 6, 7, 8, 33, 41}, {1, 6});  // different padding tokens
  Tensor mask = tensor_from({1, 1, 1, 1, 0, 0}, {1, 6});
  Tensor a = m.forward(ids, mask).last_hidden_state.narrow(1, 0, 4);
  Tensor b = m.forward(ids2, mask).last_hidden_state.narrow(1, 0, 4);
  EXPECT_LT(amax(abs(sub(a, b))).item<double>(), 1e-6);
  Tensor c = m.forward(ids2).last_hidden_state.narrow(1, 0, 4);
  EXPECT_GT(amax(abs(sub(a, c))).item<double>(), 1e-4);
}

TEST(BertModel, MaskedLMLossDecreasesWithSGD) {
  manual_seed(7);
  nn::BertForMaskedLM m(tiny_config());
  Tensor ids = randint(1, 50, {4, 12});
  Tensor labels = where(lt(rand({4, 12}), 0.3), ids, -100.0);
  labels = to_dtype(labels, DType::Int64);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    nn::MaskedLMOutput out = m.forward(ids, Tensor(), Tensor(), labels);
    m.zero_grad();
    out.loss.backward();
    NoGradGuard g;
    for (Tensor p : m.parameters()) p.add_(p.grad(), -0.5);
    if (step == 0) first = out.loss.item<double>();
    last = out.loss.item<double>();
  }
  EXPECT_LT(last, first * 0.7) << "first " << first << " last " << last;
}

TEST(BertModel, SequenceLengthBeyondPositionsIsAnError) {
  nn::BertModel m(tiny_config());
  try {
    m.forward(zeros({1, 30}, TensorOptions(DType::Int64)));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds max_position_embeddings 24"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
