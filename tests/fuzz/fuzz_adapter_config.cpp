// Fuzz target: a LoRA adapter_config.json (nn::LoraConfig::from_json, PEFT's
// format; nn/lora.h) on arbitrary text, then its adapters on a tiny BERT.
//
// Properties: reading either succeeds or throws kiln::Error; an accepted
// config validates, its JSON reads back to the same fields (a fixed point);
// add_lora on a 2-layer BERT either attaches adapters that leave a fresh
// model's outputs unchanged (B starts at zero) or throws kiln::Error (no
// such layer, not a linear layer, a rank past the layer's size).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"
#include "kiln.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_adapter_config: property violated: %s\n", what);
  std::abort();
}

bool same(const kiln::nn::LoraConfig& a, const kiln::nn::LoraConfig& b) {
  return a.r == b.r && a.lora_alpha == b.lora_alpha && a.lora_dropout == b.lora_dropout &&
         a.target_modules == b.target_modules && a.target_regex == b.target_regex && a.bias == b.bias &&
         a.modules_to_save == b.modules_to_save && a.use_rslora == b.use_rslora &&
         a.init_lora_weights == b.init_lora_weights && a.task_type == b.task_type &&
         a.base_model_name_or_path == b.base_model_name_or_path;
}

kiln::BertConfig tiny() {
  kiln::BertConfig c;
  c.vocab_size = 20;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 8;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::nn::LoraConfig config;
  try {
    config = kiln::nn::LoraConfig::from_json(kiln::parse_json_bounded(text, "fuzz.json"), "fuzz.json");
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  try {
    config.validate();
    const kiln::nn::LoraConfig back = kiln::nn::LoraConfig::from_json(config.to_json(), "roundtrip.json");
    require(same(back, config), "adapter_config.json is a fixed point");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "an accepted config validates and reads back");
  }
  kiln::manual_seed(1);
  kiln::nn::BertForSequenceClassification model(tiny(), 2);
  model.eval();
  const kiln::Tensor ids = kiln::randint(0, 20, {1, 5});
  kiln::NoGradGuard g;
  const kiln::Tensor before = model.forward(ids).logits;
  config.init_lora_weights = "true";  // B = 0: the adapted model must compute the same
  try {
    kiln::nn::add_lora(model, config);
  } catch (const kiln::Error&) {
    require(kiln::nn::adapted_layers(model).empty(), "a rejected config attaches nothing");
    return 0;
  }
  const kiln::Tensor after = model.forward(ids).logits;
  require(kiln::amax(kiln::abs(kiln::sub(after, before))).item<double>() == 0.0, "a fresh adapter changes nothing");
  return 0;
}
