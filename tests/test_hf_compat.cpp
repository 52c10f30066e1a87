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

// Saves `model`, runs transformers' `arch` on the same inputs, returns its output.
Tensor run_in_transformers(const nn::Module& model, const BertConfig& c, const std::string& arch,
                           const Tensor& ids, const Tensor& mask) {
  const std::string dir = std::string(KILN_BINARY_DIR) + "/hf_compat_" + arch;
  nn::save_pretrained(model, c, dir);
  const std::string in = dir + "_inputs.safetensors", out = dir + "_outputs.safetensors";
  nn::save_safetensors(in, {{"input_ids", ids}, {"attention_mask", mask}});
  const std::string py = env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
  const std::string cmd = py + " " + KILN_SOURCE_DIR + "/tests/reference/hf_load_check.py --model-dir " + dir +
                          " --arch " + arch + " --inputs " + in + " --out " + out;
  if (std::system(cmd.c_str()) != 0) throw Error("transformers check failed: " + cmd);
  return nn::load_safetensors(out).at("output");
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
