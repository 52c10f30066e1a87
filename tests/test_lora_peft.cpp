// kiln's LoRA against Hugging Face PEFT (tests/reference/peft_reference.py,
// the .venv-hf environment): a PEFT adapter on a transformers-made BERT and
// GPT-2 loaded by kiln gives PEFT's logits, and an adapter kiln makes and
// saves, loaded by PEFT onto the same base, gives kiln's (adapted and merged).
#include <gtest/gtest.h>

#include <filesystem>

#include "family_test_util.h"
#include "kiln.h"

namespace kiln {
namespace {

using testing::family_reference;
using testing::max_abs_diff;
using testing::quoted;
using testing::source_file;
namespace fs = std::filesystem;

testing::FamilyReference peft_reference() {
  const std::string script = source_file("/tests/reference/peft_reference.py");
  return family_reference("peft-reference", script, [&](const std::string& out) {
    testing::run_or_throw(quoted(testing::hf_python()) + " " + script + " build --out " + quoted(out),
                          "PEFT's reference adapters");
  });
}

// The task model of a reference case's base directory.
std::shared_ptr<nn::Module> base_model(const std::string& arch, const std::string& dir) {
  if (arch == "GPT2LMHeadModel") return nn::AutoModelForCausalLM::from_pretrained(dir);
  return nn::AutoModelForSequenceClassification::from_pretrained(dir, 3);
}

Tensor kiln_logits(const nn::Module& m, const std::map<std::string, Tensor>& x) {
  NoGradGuard g;
  const Tensor& ids = x.at("input_ids");
  const Tensor& mask = x.at("attention_mask");
  if (auto* lm = dynamic_cast<const nn::CausalLanguageModel*>(&m)) return lm->forward(ids, mask).logits;
  return dynamic_cast<const nn::SequenceClassifier&>(m).forward(ids, mask).logits;
}

// Logits at the unpadded positions (a decoder's padded rows are not compared).
Tensor unpadded(const Tensor& logits, const Tensor& mask) {
  return logits.dim() == 3 ? testing::at_tokens(logits, mask) : logits.to(DType::Float64);
}

TEST(LoraPeft, PeftAdaptersLoadInKiln) {
  const testing::FamilyReference ref = peft_reference();
  for (auto& [name, c] : ref.manifest.items()) {
    SCOPED_TRACE(name);
    const std::string dir = ref.dir + "/" + name, arch = c["arch"];
    auto model = base_model(arch, dir + "/base");
    model->eval();
    const nn::LoraConfig lc = nn::load_adapter(*model, dir + "/adapter");
    EXPECT_EQ(lc.init_lora_weights, "false");
    EXPECT_FALSE(nn::adapted_layers(*model).empty());
    const auto x = nn::load_safetensors(dir + "/inputs.safetensors");
    const auto want = nn::load_safetensors(dir + "/outputs.safetensors").at("output");
    const Tensor mask = x.at("attention_mask");
    EXPECT_LE(max_abs_diff(unpadded(kiln_logits(*model, x), mask), unpadded(want, mask)), 1e-5);
  }
}

TEST(LoraPeft, KilnAdaptersLoadInPeft) {
  const testing::FamilyReference ref = peft_reference();
  const fs::path root = testing::fresh_dir("lora_peft", "kiln");
  for (auto& [name, c] : ref.manifest.items()) {
    SCOPED_TRACE(name);
    const std::string dir = ref.dir + "/" + name, arch = c["arch"];
    auto model = base_model(arch, dir + "/base");
    model->eval();
    nn::LoraConfig lc;
    lc.r = 6;
    lc.lora_alpha = 12;
    lc.use_rslora = name == "bert";
    lc.bias = name == "bert" ? "lora_only" : "all";
    lc.target_modules = name == "bert" ? std::vector<std::string>{"key", "intermediate.dense"}
                                       : std::vector<std::string>{"c_fc", "c_attn"};
    lc.task_type = name == "bert" ? "SEQ_CLS" : "CAUSAL_LM";
    nn::add_lora(*model, lc);
    {  // a trained adapter: B, biases and the head away from their start
      manual_seed(31);
      NoGradGuard g;
      for (auto& [n, p] : nn::trainable_parameters(*model)) p.add_(randn(p.sizes()) * 0.05);
    }
    const std::string adapter = (root / name).string();
    nn::save_adapter(*model, lc, adapter);
    const nn::LoraConfig written = nn::LoraConfig::from_file(adapter + "/adapter_config.json");
    EXPECT_EQ(written.fan_in_fan_out, name == "gpt2") << "PEFT's flag for Conv1D layers";
    const std::string in = (root / (name + "-in.safetensors")).string(), out = (root / (name + "-out.safetensors")).string();
    fs::copy_file(dir + "/inputs.safetensors", in);
    testing::run_or_throw(quoted(testing::hf_python()) + " " + source_file("/tests/reference/peft_reference.py") +
                              " run --base " + quoted(dir + "/base") + " --adapter " + quoted(adapter) + " --arch " +
                              arch + " --inputs " + quoted(in) + " --out " + quoted(out),
                          "PEFT loading kiln's adapter");
    const auto x = nn::load_safetensors(in);
    const auto peft = nn::load_safetensors(out);
    const Tensor mask = x.at("attention_mask");
    const Tensor mine = unpadded(kiln_logits(*model, x), mask);
    EXPECT_GT(max_abs_diff(mine, unpadded(kiln_logits(*base_model(arch, dir + "/base"), x), mask)), 1e-3)
        << "the adapter changes nothing: the comparison would prove nothing";
    EXPECT_LE(max_abs_diff(mine, unpadded(peft.at("output"), mask)), 1e-5);
    EXPECT_LE(max_abs_diff(mine, unpadded(peft.at("merged"), mask)), 1e-5);
  }
}

}  // namespace
}  // namespace kiln
