// Directories kiln saves load in Hugging Face transformers (4.36, in .venv-hf,
// on Debian's PyTorch) without missing or unexpected weights, and compute the
// same outputs there as in kiln.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hostile_util.h"
#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::env_or;

BertConfig tiny(const std::string& arch) {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = 120;
  c.max_position_embeddings = 32;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  c.architectures = {arch};
  return c;
}

// Saves `model`, runs transformers' `arch` on the same inputs (and labels,
// when given: its loss is then out["loss"]), returns its output.
std::map<std::string, Tensor> run_in_transformers_with(const nn::Module& model, const BertConfig& c,
                                                       const std::string& arch, const Tensor& ids, const Tensor& mask,
                                                       const Tensor& labels, const std::string& tag) {
  const std::string dir = std::string(KILN_BINARY_DIR) + "/hf_compat_" + arch + tag;
  nn::save_pretrained(model, c, dir);
  const std::string in = dir + "_inputs.safetensors", out = dir + "_outputs.safetensors";
  nn::NamedTensors inputs{{"input_ids", ids}, {"attention_mask", mask}};
  if (labels.defined()) inputs.emplace_back("labels", labels);
  nn::save_safetensors(in, inputs);
  const std::string py = env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
  const std::string cmd = py + " " + KILN_SOURCE_DIR + "/tests/reference/hf_load_check.py --model-dir " + dir +
                          " --arch " + arch + " --inputs " + in + " --out " + out;
  if (std::system(cmd.c_str()) != 0) throw Error("transformers check failed: " + cmd);
  return nn::load_safetensors(out);
}

Tensor run_in_transformers(const nn::Module& model, const BertConfig& c, const std::string& arch,
                           const Tensor& ids, const Tensor& mask) {
  return run_in_transformers_with(model, c, arch, ids, mask, Tensor(), "").at("output");
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b))).item<double>(); }

struct Inputs {
  Tensor ids = tensor_from({2, 17, 5, 99, 3, 0, 0, 4, 8, 15, 16, 23, 42, 7}, {2, 7});
  Tensor mask = tensor_from({1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1}, {2, 7});
};

TEST(HfCompat, MaskedLMLoadsInTransformers) {
  manual_seed(11);
  BertConfig c = tiny("BertForMaskedLM");
  nn::BertForMaskedLM m(c);
  m.eval();
  Inputs in;
  Tensor hf = run_in_transformers(m, c, "BertForMaskedLM", in.ids, in.mask);
  NoGradGuard g;
  Tensor ours = m.forward(in.ids, in.mask).logits;
  ASSERT_EQ(hf.sizes(), ours.sizes());
  EXPECT_LT(max_abs_diff(hf, ours), 1e-5);
}

TEST(HfCompat, BertModelLoadsInTransformers) {
  manual_seed(12);
  BertConfig c = tiny("BertModel");
  nn::BertModel m(c);
  m.eval();
  Inputs in;
  Tensor hf = run_in_transformers(m, c, "BertModel", in.ids, in.mask);
  NoGradGuard g;
  Tensor ours = m.forward(in.ids, in.mask).last_hidden_state;
  EXPECT_LT(max_abs_diff(hf, ours), 1e-5);
}

TEST(HfCompat, SequenceClassificationLoadsInTransformers) {
  manual_seed(13);
  BertConfig c = tiny("BertForSequenceClassification");
  nn::BertForSequenceClassification m(c, 2);
  m.eval();
  Inputs in;
  Tensor hf = run_in_transformers(m, c, "BertForSequenceClassification", in.ids, in.mask);
  NoGradGuard g;
  Tensor ours = m.forward(in.ids, in.mask).logits;
  EXPECT_LT(max_abs_diff(hf, ours), 1e-5);
}

TEST(HfCompat, TokenClassificationLoadsInTransformers) {
  manual_seed(15);
  BertConfig c = tiny("BertForTokenClassification");
  c.extra["id2label"] = R"({"0": "O", "1": "B-PER", "2": "I-PER", "3": "B-LOC", "4": "I-LOC"})";
  nn::BertForTokenClassification m(c, 5);
  m.eval();
  Inputs in;
  const Tensor labels = tensor_from({-100, 1, 4, 0, -100, -100, -100, -100, 2, 3, 3, 0, -100, 1}, {2, 7});
  const auto hf = run_in_transformers_with(m, c, "BertForTokenClassification", in.ids, in.mask, labels, "");
  NoGradGuard g;
  const nn::ClassificationOutput ours = m.forward(in.ids, in.mask, Tensor(), labels);
  ASSERT_EQ(hf.at("output").sizes(), ours.logits.sizes());
  EXPECT_LT(max_abs_diff(hf.at("output"), ours.logits), 1e-5);
  EXPECT_NEAR(hf.at("loss").item<double>(), ours.loss.item<double>(), 1e-5);
}

// The three problem types of BertForSequenceClassification give transformers'
// loss on the same labels: regression (one output, inferred and stated),
// multi-label (float 0/1 labels) and single-label.
TEST(HfCompat, SequenceClassificationProblemTypesMatchTransformersLoss) {
  Inputs in;
  struct Case {
    std::string problem;  // "" : inferred
    int64_t labels;
    Tensor y;
  };
  const std::vector<Case> cases = {
      {"", 1, tensor({3.8, 0.5}, {2})},
      {"regression", 1, tensor({1.25, 4.0}, {2})},
      {"multi_label_classification", 3, tensor({1, 0, 1, 0, 0, 1}, {2, 3})},
      {"single_label_classification", 3, tensor_from({2, 0})},
  };
  int k = 0;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.problem.empty() ? "inferred" : cs.problem);
    manual_seed(16 + static_cast<uint64_t>(k));
    BertConfig c = tiny("BertForSequenceClassification");
    if (!cs.problem.empty()) c.problem_type = cs.problem;
    std::string id2label = "{";  // transformers takes num_labels from it
    for (int64_t i = 0; i < cs.labels; ++i) id2label += (i ? ", \"" : "\"") + std::to_string(i) + "\": \"L" + std::to_string(i) + "\"";
    c.extra["id2label"] = id2label + "}";
    nn::BertForSequenceClassification m(c, cs.labels);
    m.eval();
    const auto hf = run_in_transformers_with(m, c, "BertForSequenceClassification", in.ids, in.mask, cs.y,
                                             "_" + std::to_string(k++));
    NoGradGuard g;
    const nn::ClassificationOutput ours = m.forward(in.ids, in.mask, Tensor(), cs.y);
    EXPECT_LT(max_abs_diff(hf.at("output"), ours.logits), 1e-5);
    EXPECT_NEAR(hf.at("loss").item<double>(), ours.loss.item<double>(), 1e-5);
  }
}

// config.json is checked against model.safetensors' header before any model
// is built: a mismatch names the tensor and both shapes (a missing layer, the
// config field that implies it), where it used to be found only after
// building the whole model from the config (or never, for a huge layer count).
TEST(HfCompat, ConfigCheckedAgainstCheckpointBeforeBuilding) {
  manual_seed(14);
  const BertConfig c = tiny("BertModel");  // vocab 120, hidden 128, 2 layers, intermediate 512
  testing::ScratchPath scratch("hf_compat");
  const std::string dir = scratch / "model";
  nn::save_pretrained(nn::BertModel(c), c, dir);
  EXPECT_NO_THROW(nn::from_pretrained<nn::BertModel>(dir));
  EXPECT_NO_THROW(nn::from_pretrained<nn::BertForMaskedLM>(dir));  // heads fresh, base checked
  const auto with = [&](const std::string& field, int64_t value) {
    BertConfig other = c;
    if (field == "vocab_size") other.vocab_size = value;
    if (field == "num_hidden_layers") other.num_hidden_layers = value;
    if (field == "intermediate_size") other.intermediate_size = value;
    other.to_json_file(dir + "/config.json");
  };
  with("vocab_size", 121);
  EXPECT_KILN_ERROR(nn::from_pretrained<nn::BertModel>(dir),
                    "model.safetensors: tensor 'embeddings.word_embeddings.weight' has shape [120, 128] but",
                    "config.json implies [121, 128]");
  with("intermediate_size", 256);
  EXPECT_KILN_ERROR(nn::from_pretrained<nn::BertForSequenceClassification>(dir, nullptr, 2),
                    "tensor 'encoder.layer.0.intermediate.dense.bias' has shape [512] but", "implies [256]");
  with("num_hidden_layers", 2000);
  EXPECT_KILN_ERROR(nn::from_pretrained<nn::BertModel>(dir),
                    "checkpoint lacks 'encoder.layer.2.attention.self.query.weight', which",
                    "config.json's num_hidden_layers = 2000 implies");
  with("num_hidden_layers", 1);  // fewer layers than the file: the rest is ignored, as before
  nn::LoadReport report;
  EXPECT_NO_THROW(nn::from_pretrained<nn::BertModel>(dir, &report));
  EXPECT_EQ(report.ignored.size(), 16u);
}

}  // namespace
}  // namespace kiln
