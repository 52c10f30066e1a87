// Directories kiln saves load in Hugging Face transformers (4.36, in .venv-hf,
// on Debian's PyTorch) without missing or unexpected weights, and compute the
// same outputs there as in kiln.
#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace kiln
