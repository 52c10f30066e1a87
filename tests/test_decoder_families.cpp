// GPT-2, Llama, Mistral and Qwen2 against transformers (the parity oracle: no
// real weights can be installed here). transformers 4.36 (in .venv-hf; 4.48
// in .venv-hf48 for Qwen2) builds randomly initialised base and causal-LM
// models (GPT-2 at two sizes; Llama with grouped- and multi-query attention,
// attention bias, tied and untied heads, linear and dynamic rope scaling;
// Mistral's sliding window at two sizes; Qwen2's q/k/v biases, untied and
// tied), saves them and records
// what they compute (tests/reference/decoder_family_reference.py); kiln loads
// the same directories through the Auto layer (nn/auto.h) and must give the
// same per-position outputs with padding (1e-4), loss and gradients of a
// training step (2e-4 relative), the same greedy ids as generate() for 32
// new tokens, and directories kiln saves must load back in transformers with
// the same outputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "family_test_util.h"
#include "kiln.h"
#include "nn/auto.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::at_tokens;
using testing::hf48_python;
using testing::hf_python;
using testing::max_abs_diff;
using testing::quoted;
using Reference = testing::FamilyReference;

const Reference& reference() {
  const std::string script = testing::source_file("/tests/reference/decoder_family_reference.py");
  static const Reference r = testing::family_reference("decoder_families", script, [&](const std::string& tmp) {
    for (const auto& [python, families] : {std::pair{hf_python(), "gpt2,llama,mistral"}, std::pair{hf48_python(), "qwen2"}})
      testing::run_or_throw(quoted(python) + " " + quoted(script) + " build --workdir " + quoted(tmp) + " --families " +
                                families,
                            "reference script");
  });
  return r;
}

std::map<std::string, Tensor> golden(const std::string& c, const std::string& head) {
  return nn::load_safetensors(reference().dir + "/" + c + "/" + head + ".golden.safetensors");
}

std::string tmp_dir(const std::string& what) {
  return std::string(KILN_BINARY_DIR) + "/decoder_families_" + what + "_" + std::to_string(::getpid());
}

struct HeadRun {
  std::shared_ptr<nn::Module> model;
  Tensor output;  // logits (B, T, V), or last_hidden_state
  Tensor loss;    // the reference's
};

// <case>/<head> through the Auto layer on the golden inputs: the output
// without labels, the loss with them (the base model's: mean((h * mask)^3)).
HeadRun run_head(const std::string& dir, const std::string& head, const std::map<std::string, Tensor>& g) {
  const Tensor& ids = g.at("input_ids");
  const Tensor& mask = g.at("attention_mask");
  HeadRun r;
  nn::LoadReport report;
  if (head == "Model") {
    auto m = nn::AutoModel::from_pretrained(dir, &report);
    r.output = m->forward(ids, mask).last_hidden_state;
    EXPECT_FALSE(m->forward(ids, mask).pooler_output.defined());
    Tensor hm = mul(r.output, to_dtype(mask, DType::Float32).unsqueeze(-1));
    r.loss = mean(mul(mul(hm, hm), hm));
    r.model = m;
  } else {
    auto m = nn::AutoModelForCausalLM::from_pretrained(dir, &report);
    r.output = m->forward(ids, mask).logits;
    r.loss = m->forward(ids, mask, g.at("labels")).loss;
    r.model = m;
  }
  EXPECT_TRUE(report.new_heads.empty()) << dir << ": " << report.new_heads.front();
  EXPECT_TRUE(report.ignored.empty()) << dir << ": " << report.ignored.front();
  return r;
}

TEST(DecoderFamilies, OutputsLossAndGradientsMatchTransformers) {
  const Reference& ref = reference();
  int compared = 0;
  for (const std::string c : ref.manifest["cases"])
    for (const std::string head : ref.manifest["heads"]) {
      const std::string what = c + "/" + head;
      SCOPED_TRACE(what);
      const auto g = golden(c, head);
      HeadRun r = run_head(ref.dir + "/" + c + "/" + head, head, g);
      const Tensor& want = head == "Model" ? g.at("last_hidden_state") : g.at("logits");
      ASSERT_EQ(r.output.sizes(), want.sizes());
      const Tensor& mask = g.at("attention_mask");
      const double diff = max_abs_diff(at_tokens(r.output, mask), at_tokens(want, mask));
      EXPECT_LE(diff, testing::output_tolerance(want)) << "outputs differ by " << diff;
      const double want_loss = g.at("loss").item<double>();
      EXPECT_NEAR(r.loss.item<double>(), want_loss, 1e-5 * std::max(1.0, std::abs(want_loss)));
      r.loss.backward();
      testing::expect_gradients_match(*r.model, g, what);
      ++compared;
    }
  EXPECT_EQ(compared, 18);  // 9 cases x 2 heads
}

// Greedy decoding on the KV cache gives transformers' generate() ids (32 new
// tokens, two prompts), and so does the uncached loop.
TEST(DecoderFamilies, GreedyGenerationMatchesTransformers) {
  const Reference& ref = reference();
  for (const std::string c : ref.manifest["cases"]) {
    SCOPED_TRACE(c);
    const auto g = golden(c, "LMHeadModel");
    auto m = nn::AutoModelForCausalLM::from_pretrained(ref.dir + "/" + c + "/LMHeadModel");
    m->eval();
    const json config = json::parse(m->model_config().to_json_string());
    nn::GenerationConfig gc;
    gc.max_new_tokens = ref.manifest["new_tokens"];
    gc.eos_token_id = config.at("eos_token_id").get<int64_t>();
    gc.pad_token_id = *gc.eos_token_id;
    const nn::DecoderStep step = [&](const Tensor& ids, nn::KVCache* cache) {
      return m->forward(ids, Tensor(), Tensor(), cache).logits;
    };
    const Tensor want = g.at("generated");
    const Tensor cached = nn::generate(step, g.at("prompt"), gc);
    EXPECT_EQ(cached.to_vector<int64_t>(), want.to_vector<int64_t>());
    // Dynamic NTK scaling rescales only the new positions as the sequence
    // grows (transformers' cache keeps the keys it computed), so rerunning
    // the whole sequence each step is another computation there.
    if (c == "llama-dynamic") continue;
    gc.use_cache = false;
    EXPECT_EQ(nn::generate(step, g.at("prompt"), gc).to_vector<int64_t>(), want.to_vector<int64_t>());
  }
}

// Note [KV cache]: logits of steps on the cache (a prompt, then one token at
// a time, with an attention mask over cached + new positions) are the full
// forward's at those positions.
TEST(DecoderFamilies, CachedStepsGiveTheFullForward) {
  auto m = nn::AutoModelForCausalLM::from_pretrained(reference().dir + "/gpt2-small/LMHeadModel");
  m->eval();
  NoGradGuard no_grad;
  const Tensor ids = golden("gpt2-small", "LMHeadModel").at("generated").narrow(1, 0, 12);  // (2, 12)
  const Tensor mask = ones({2, 12}, TensorOptions(DType::Int64));
  const Tensor full = m->forward(ids, mask).logits;  // (2, 12, V)
  nn::KVCache cache;
  std::vector<Tensor> steps = {m->forward(ids.narrow(1, 0, 5), mask.narrow(1, 0, 5), Tensor(), &cache).logits};
  for (int64_t t = 5; t < 12; ++t)
    steps.push_back(m->forward(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), Tensor(), &cache).logits);
  EXPECT_EQ(cache.length(), 12);
  EXPECT_LE(max_abs_diff(cat(steps, 1), full), 1e-5);
  EXPECT_KILN_ERROR(m->forward(ids.narrow(1, 0, 1), mask, Tensor(), &cache),
                    "attention_mask [2, 12] must be (batch, cached + new positions) = [2, 13]");
}

// kiln's saves (tied, and with tie_word_embeddings false an own lm_head)
// load in transformers with no missing or unexpected weights and compute
// there what they compute in kiln, loss included.
TEST(DecoderFamilies, SavedDirectoriesLoadBackInTransformers) {
  const Reference& ref = reference();
  const auto g = golden("gpt2-small", "LMHeadModel");
  const Tensor& ids = g.at("input_ids");
  const Tensor& mask = g.at("attention_mask");
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const std::string src = ref.dir + "/gpt2-small/LMHeadModel";
    GPT2Config config = nn::load_model_config(src).as<GPT2Config>();
    std::shared_ptr<nn::CausalLanguageModel> m;
    if (tied) {
      m = nn::AutoModelForCausalLM::from_pretrained(src);
    } else {
      config.tie_word_embeddings = false;
      manual_seed(4);
      m = nn::AutoModelForCausalLM::from_config(ModelConfig::from_json_string(config.to_json_string()));
    }
    const std::string dir = tmp_dir(tied ? "tied" : "untied");
    nn::save_pretrained(*m, m->model_config(), dir);
    EXPECT_EQ(nn::task_name_of(dir), "causal-lm");
    NoGradGuard no_grad;
    const Tensor logits = m->forward(ids, mask).logits;
    const Tensor loss = m->forward(ids, mask, g.at("labels")).loss;
    const auto hf = testing::run_in_transformers(dir, "GPT2LMHeadModel",
                                                 {{"input_ids", ids}, {"attention_mask", mask}, {"labels", g.at("labels")}});
    EXPECT_LE(max_abs_diff(at_tokens(hf.at("output"), mask), at_tokens(logits, mask)), 1e-5);
    EXPECT_NEAR(hf.at("loss").item<double>(), loss.item<double>(), 1e-5);
    // and back in kiln, the untied head as saved
    auto again = nn::AutoModelForCausalLM::from_pretrained(dir);
    EXPECT_EQ(max_abs_diff(again->forward(ids, mask).logits, logits), 0.0);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

// GPT2Config as transformers writes it; the Auto layer names the family and
// head, and refuses mismatches by field or tensor name.
TEST(DecoderFamilies, Gpt2ConfigAndMismatches) {
  const Reference& ref = reference();
  const std::string lm = ref.dir + "/gpt2-small/LMHeadModel";
  EXPECT_EQ(nn::model_type_of(lm), "gpt2");
  EXPECT_EQ(nn::task_name_of(lm), "causal-lm");
  EXPECT_EQ(nn::task_name_of(ref.dir + "/gpt2-small/Model"), "base");
  const json original = json::parse(std::ifstream(lm + "/config.json"));
  const ModelConfig mc = nn::load_model_config(lm);
  const json written = json::parse(mc.to_json_string());
  for (const auto& [k, v] : original.items()) EXPECT_EQ(written.at(k), v) << k;  // unknown keys verbatim
  EXPECT_EQ(mc.facts().hidden_size, 64);
  EXPECT_EQ(mc.facts().num_layers, 2);
  EXPECT_EQ(mc.facts().max_sequence_length, 40);
  json aliased = original;
  aliased.erase("n_embd");
  aliased["hidden_size"] = 64;
  EXPECT_EQ(ModelConfig::from_json_string(aliased.dump()).as<GPT2Config>().n_embd, 64);
  aliased["n_embd"] = 32;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(aliased.dump()), "'hidden_size' and 'n_embd' disagree");
  json odd = original;
  odd["n_head"] = 5;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump(), "odd.json"),
                    "odd.json: n_embd = 64 is not divisible by n_head = 5");
  odd = original;
  odd["activation_function"] = "swiglu";
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump()), "activation_function 'swiglu' is not supported");
  odd = original;
  odd["eos_token_id"] = 1000;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump()), "eos_token_id = 1000 is outside [0, vocab_size = 1000)");
  odd = original;
  odd.erase("n_layer");
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump()), "missing required field 'n_layer'");

  // heads GPT-2 does not have, by name
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(lm),
                    "model_type 'gpt2' has no masked-lm head in kiln (it has: base, causal-lm)");
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_config(mc, 2), "has no sequence-classification head");
  const std::string tmp = tmp_dir("bad");
  fs::remove_all(tmp);
  const auto variant = [&](const std::string& name, const std::string& weights_from,
                           const std::function<void(json&)>& edit) {
    return testing::config_variant(tmp + "/" + name, lm, weights_from, edit);
  };
  const std::string deep = variant("deep", lm, [](json& c) { c["n_layer"] = 3; });
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(deep),
                    "checkpoint lacks 'h.2.ln_1.weight', which " + deep + "/config.json's n_layer = 3 implies");
  const std::string wide = variant("wide", lm, [](json& c) { c["n_inner"] = 128; });
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(wide),
                    "tensor 'transformer.h.0.mlp.c_fc.bias' has shape [256] but " + wide + "/config.json implies [128]");
  // an untied config over a tied file: the head starts fresh and is reported, as transformers does
  const std::string untied = variant("untied", lm, [](json& c) { c["tie_word_embeddings"] = false; });
  nn::LoadReport report;
  (void)nn::AutoModelForCausalLM::from_pretrained(untied, &report);
  EXPECT_EQ(report.new_heads, std::vector<std::string>{"lm_head.weight"});
  // another family's weights under a GPT-2 config, and GPT-2's under theirs
  // (DistilBERT's "transformer.layer.N." names are its own, not GPT-2's)
  DistilBertConfig dc;
  dc.vocab_size = 100;
  dc.dim = 32;
  dc.n_layers = 1;
  dc.n_heads = 2;
  dc.hidden_dim = 64;
  dc.max_position_embeddings = 16;
  manual_seed(5);
  const std::string distil = tmp + "/distil";
  nn::save_pretrained(nn::DistilBertModel(dc), ModelConfig::from_json_string(dc.to_json_string()), distil);
  EXPECT_EQ(nn::AutoModel::from_pretrained(distil)->model_config().model_type(), "distilbert");
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(distil),
                    "model_type 'distilbert' has no causal-lm head in kiln (it has: base, masked-lm, "
                    "sequence-classification, token-classification)");
  const std::string mixed = variant("mixed", distil, [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(mixed), "checkpoint lacks 'wte.weight'");
  const std::string reverse = testing::config_variant(tmp + "/reverse", distil, lm, [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModel::from_pretrained(reverse), "is named as a gpt2 model's");
  // positions past n_positions
  auto m = nn::AutoModel::from_pretrained(ref.dir + "/gpt2-small/Model");
  EXPECT_KILN_ERROR(m->forward(zeros({1, 41}, TensorOptions(DType::Int64))),
                    "sequence length 41 exceeds n_positions 40");
  fs::remove_all(tmp);
}

// Llama, Mistral and Qwen2 saves (untied; tied with attention bias; sliding
// window; q/k/v biases untied and tied) load in transformers with the same
// logits and loss.
TEST(DecoderFamilies, LlamaStyleSavesLoadBackInTransformers) {
  const Reference& ref = reference();
  for (const std::string c : {"llama-small", "llama-mini", "mistral-small", "qwen2-small", "qwen2-mini"}) {
    SCOPED_TRACE(c);
    const std::string src = ref.dir + "/" + c + "/LMHeadModel";
    const auto g = golden(c, "LMHeadModel");
    const Tensor& ids = g.at("input_ids");
    const Tensor& mask = g.at("attention_mask");
    auto m = nn::AutoModelForCausalLM::from_pretrained(src);
    const std::string dir = tmp_dir(c);
    nn::save_pretrained(*m, m->model_config(), dir);
    NoGradGuard no_grad;
    const Tensor logits = m->forward(ids, mask).logits;
    const Tensor loss = m->forward(ids, mask, g.at("labels")).loss;
    const auto hf = testing::run_in_transformers(dir, m->model_config().architectures().at(0),
                                                 {{"input_ids", ids}, {"attention_mask", mask}, {"labels", g.at("labels")}});
    EXPECT_LE(max_abs_diff(at_tokens(hf.at("output"), mask), at_tokens(logits, mask)),
              testing::output_tolerance(hf.at("output")));  // logits up to ~15
    EXPECT_NEAR(hf.at("loss").item<double>(), loss.item<double>(), 1e-5 * std::max(1.0, loss.item<double>()));
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

// LlamaConfig / MistralConfig as transformers writes them, with their
// defaults, and their errors by field; mismatched weights by tensor name.
TEST(DecoderFamilies, LlamaConfigAndMismatches) {
  const Reference& ref = reference();
  const std::string lm = ref.dir + "/llama-mini/LMHeadModel";
  EXPECT_EQ(nn::model_type_of(lm), "llama");
  EXPECT_EQ(nn::task_name_of(lm), "causal-lm");
  EXPECT_EQ(nn::model_type_of(ref.dir + "/mistral-small/LMHeadModel"), "mistral");
  const json original = json::parse(std::ifstream(lm + "/config.json"));
  const ModelConfig mc = nn::load_model_config(lm);
  const json written = json::parse(mc.to_json_string());
  for (const auto& [k, v] : original.items()) EXPECT_EQ(written.at(k), v) << k;
  const LlamaConfig c = mc.as<LlamaConfig>();
  EXPECT_EQ(c.num_key_value_heads, 1);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "linear");
  EXPECT_TRUE(c.attention_bias);
  // defaults: Llama's key/value heads are its heads; Mistral's are 8, with a 4096 window
  json plain = original;
  plain.erase("num_key_value_heads");
  EXPECT_EQ(ModelConfig::from_json_string(plain.dump()).as<LlamaConfig>().num_key_value_heads, 4);
  json mistral = {{"model_type", "mistral"},      {"vocab_size", 100},          {"hidden_size", 64},
                  {"intermediate_size", 128},     {"num_hidden_layers", 1},     {"num_attention_heads", 8},
                  {"max_position_embeddings", 64}};
  const LlamaConfig m = ModelConfig::from_json_string(mistral.dump()).as<LlamaConfig>();
  EXPECT_EQ(m.num_key_value_heads, 8);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.architectures, std::vector<std::string>{"MistralForCausalLM"});

  const auto bad = [&](const std::function<void(json&)>& edit, const std::string& message) {
    json j = original;
    edit(j);
    EXPECT_KILN_ERROR(ModelConfig::from_json_string(j.dump(), "bad.json"), message);
  };
  bad([](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; },
      "bad.json: rope_scaling type 'yarn' is not supported (kiln supports linear, dynamic)");
  bad([](json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
      "rope_scaling type 'llama3' is not supported");
  bad([](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}}; }, "rope_scaling factor = 0.5 must be");
  bad([](json& j) { j["rope_scaling"] = {{"type", "linear"}}; }, "rope_scaling needs a number \"factor\"");
  bad([](json& j) { j["rope_scaling"] = "linear"; }, "rope_scaling must be null or an object");
  bad([](json& j) { j["num_key_value_heads"] = 3; },
      "num_attention_heads = 4 is not divisible by num_key_value_heads = 3");
  bad([](json& j) { j["hidden_size"] = 258; }, "hidden_size = 258 is not divisible by num_attention_heads = 4");
  bad([](json& j) { j["hidden_size"] = 260; }, "head size hidden_size / num_attention_heads = 65 must be even");
  bad([](json& j) { j.erase("intermediate_size"); }, "missing required field 'intermediate_size'");
  bad([](json& j) { j["hidden_act"] = "swiglu"; }, "hidden_act 'swiglu' is not supported");

  const std::string tmp = tmp_dir("llama_bad");
  fs::remove_all(tmp);
  const auto variant = [&](const std::string& name, const std::string& weights_from,
                           const std::function<void(json&)>& edit) {
    return testing::config_variant(tmp + "/" + name, lm, weights_from, edit);
  };
  const std::string gqa = variant("gqa", lm, [](json& c) { c["num_key_value_heads"] = 2; });
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(gqa), "self_attn.k_proj.bias' has shape [64] but " +
                                                                        gqa + "/config.json implies [128]");
  const std::string nobias = variant("nobias", lm, [](json& c) { c["attention_bias"] = false; });
  nn::LoadReport report;
  (void)nn::AutoModelForCausalLM::from_pretrained(nobias, &report);
  EXPECT_EQ(report.ignored.size(), 16u);  // 4 layers x q, k, v, o biases the config does not have
  const std::string gpt = variant("gpt", ref.dir + "/gpt2-small/LMHeadModel", [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(gpt), "is named as a gpt2 model's, but");
  fs::remove_all(tmp);
}

// Qwen2Config as transformers 4.48 writes it (its defaults: no bos/eos ids),
// biases on q, k and v only, and its errors by field and tensor name.
TEST(DecoderFamilies, Qwen2ConfigAndMismatches) {
  const Reference& ref = reference();
  const std::string lm = ref.dir + "/qwen2-mini/LMHeadModel";
  EXPECT_EQ(nn::model_type_of(lm), "qwen2");
  EXPECT_EQ(nn::task_name_of(lm), "causal-lm");
  const json original = json::parse(std::ifstream(lm + "/config.json"));
  const ModelConfig mc = nn::load_model_config(lm);
  const json written = json::parse(mc.to_json_string());
  for (const auto& [k, v] : original.items()) EXPECT_EQ(written.at(k), v) << k;
  const LlamaConfig c = mc.as<LlamaConfig>();
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_FALSE(c.o_bias());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 1e6);
  json plain = {{"model_type", "qwen2"},      {"vocab_size", 100},      {"hidden_size", 64},
                {"intermediate_size", 128},   {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                {"max_position_embeddings", 64}, {"rope_scaling", {{"rope_type", "default"}}}};
  const LlamaConfig q = ModelConfig::from_json_string(plain.dump()).as<LlamaConfig>();
  EXPECT_EQ(q.num_key_value_heads, 4);
  EXPECT_FALSE(q.bos_token_id.has_value());
  EXPECT_FALSE(q.rope_scaling.has_value());
  EXPECT_EQ(q.architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  plain["use_sliding_window"] = true;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(plain.dump(), "q.json"),
                    "q.json: use_sliding_window = true is not supported for qwen2");
  plain["use_sliding_window"] = false;
  plain["attention_bias"] = true;  // a Llama field: kept verbatim, not Qwen2's
  EXPECT_FALSE(ModelConfig::from_json_string(plain.dump()).as<LlamaConfig>().o_bias());
  plain["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(plain.dump()), "rope_scaling type 'yarn' is not supported");

  // Llama's weights (no biases) under a Qwen2 config of the same shape, and back
  const std::string tmp = tmp_dir("qwen2_bad");
  fs::remove_all(tmp);
  const std::string small = ref.dir + "/qwen2-small/LMHeadModel", llama = ref.dir + "/llama-small/LMHeadModel";
  const std::string unbiased = testing::config_variant(tmp + "/unbiased", small, llama, [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForCausalLM::from_pretrained(unbiased), "self_attn.q_proj.bias");
  const std::string biased = testing::config_variant(tmp + "/biased", llama, small, [](json&) {});
  nn::LoadReport report;
  (void)nn::AutoModelForCausalLM::from_pretrained(biased, &report);
  EXPECT_EQ(report.ignored.size(), 6u);  // 2 layers x q, k, v biases Llama does not have
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
