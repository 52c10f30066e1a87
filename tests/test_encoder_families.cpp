// RoBERTa, XLM-RoBERTa, DistilBERT and ModernBERT against transformers (the
// parity oracle: no real weights of these families can be installed here).
// transformers 4.36 (in .venv-hf; 4.48 in .venv-hf48 for ModernBERT) builds
// randomly initialised models of each family at two sizes,
// saves them and records what they compute
// (tests/reference/encoder_family_reference.py); kiln loads the same
// directories through the Auto layer (nn/auto.h) and must give the same
// per-position outputs with padding (1e-4), loss and gradients of a training
// step (1e-4 relative); directories kiln saves must load back in
// transformers with the same outputs; and models of the real XLM-R
// tokenizer's vocabulary and of a RoBERTa-style tokenizer from the real GPT-2
// BPE files (a RoBERTa and a ModernBERT) run end to end from SST-2 text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer/pipeline_tokenizer.h"
#include "kiln.h"
#include "nn/auto.h"
#include "family_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::env_or;
using testing::quoted;

using testing::at_tokens;
using testing::config_variant;
using testing::hf48_python;
using testing::hf_python;
using testing::max_abs_diff;
using testing::source_file;
using Reference = testing::FamilyReference;

std::string reference_script() { return source_file("/tests/reference/encoder_family_reference.py"); }

// Built once per build (testing::family_reference).
const Reference& reference() {
  static const Reference r = testing::family_reference("encoder_families", reference_script(), [](const std::string& tmp) {
    const std::string tokenizer = testing::data_file("tokenizers/xlm-roberta/tokenizer.json");
    const std::string ids = tmp + "/text_ids.json";
    testing::run_or_throw(quoted(testing::python()) + " " + quoted(reference_script()) + " tokenize --tokenizer " +
                              quoted(tokenizer) + " --sentences " + quoted(testing::data_file("sst2/dev.tsv")) +
                              " --out " + quoted(ids),
                          "reference tokenization");
    // a RoBERTa-style tokenizer.json from the real GPT-2 BPE files, and its ids for the same sentences
    const std::string roberta_tok = tmp + "/roberta_tokenizer.json", roberta_ids = tmp + "/roberta_text_ids.json";
    testing::run_or_throw(quoted(testing::python()) + " " + quoted(reference_script()) +
                              " roberta-tokenizer --gpt2-dir " + quoted(testing::data_file("tokenizers/gpt2")) +
                              " --out " + quoted(roberta_tok),
                          "reference RoBERTa tokenizer");
    testing::run_or_throw(quoted(testing::python()) + " " + quoted(reference_script()) + " tokenize --tokenizer " +
                              quoted(roberta_tok) + " --sentences " + quoted(testing::data_file("sst2/dev.tsv")) +
                              " --out " + quoted(roberta_ids),
                          "reference tokenization (RoBERTa)");
    const std::string roberta_text = " --roberta-text-ids " + quoted(roberta_ids) + " --roberta-tokenizer " +
                                     quoted(roberta_tok);
    testing::run_or_throw(quoted(hf_python()) + " " + quoted(reference_script()) + " build --workdir " + quoted(tmp) +
                              " --families roberta,xlm-roberta,distilbert --text-ids " + quoted(ids) +
                              " --xlmr-tokenizer " + quoted(tokenizer) + roberta_text,
                          "reference script");
    testing::run_or_throw(quoted(hf48_python()) + " " + quoted(reference_script()) + " build --workdir " + quoted(tmp) +
                              " --families modernbert" + roberta_text,
                          "reference script (transformers 4.48)");
  });
  return r;
}

struct HeadRun {
  Tensor loss;
  Tensor output;  // logits, or last_hidden_state for the base model
  Tensor pooled;  // base model only
};

// Loads <case>/<head> through the Auto layer and runs the reference's step:
// forward with the golden inputs and labels, the loss, backward.
HeadRun run_head(const std::string& model_dir, const std::string& head, const std::map<std::string, Tensor>& g,
                 std::shared_ptr<nn::Module>* model_out = nullptr) {
  const Tensor& ids = g.at("input_ids");
  const Tensor& mask = g.at("attention_mask");
  HeadRun r;
  std::shared_ptr<nn::Module> model;
  nn::LoadReport report;
  if (head == "Model") {
    auto m = nn::AutoModel::from_pretrained(model_dir, &report);
    nn::EncoderOutputs o = m->forward(ids, mask);
    r.output = o.last_hidden_state;
    r.pooled = o.pooler_output;
    // the reference's loss: mean((h * mask)^2) + sum(pooled); without a
    // pooler mean((h * mask)^3) (the squares of a layer norm's output sum to a constant)
    Tensor hm = mul(o.last_hidden_state, to_dtype(mask, DType::Float32).unsqueeze(-1));
    r.loss = o.pooler_output.defined() ? add(mean(mul(hm, hm)), sum(o.pooler_output)) : mean(mul(mul(hm, hm), hm));
    model = m;
  } else if (head == "ForMaskedLM") {
    auto m = nn::AutoModelForMaskedLM::from_pretrained(model_dir, &report);
    r.output = m->forward(ids, mask).logits;
    r.loss = m->forward(ids, mask, Tensor(), g.at("labels")).loss;
    model = m;
  } else if (head == "ForSequenceClassification") {
    auto m = nn::AutoModelForSequenceClassification::from_pretrained(model_dir, 3, &report);
    nn::ClassificationOutput o = m->forward(ids, mask, Tensor(), g.count("labels") ? g.at("labels") : Tensor());
    r.output = o.logits;
    r.loss = o.loss;
    model = m;
  } else {
    auto m = nn::AutoModelForTokenClassification::from_pretrained(model_dir, 5, &report);
    nn::ClassificationOutput o = m->forward(ids, mask, Tensor(), g.at("labels"));
    r.output = o.logits;
    r.loss = o.loss;
    model = m;
  }
  EXPECT_TRUE(report.new_heads.empty()) << model_dir << ": " << report.new_heads.front();
  EXPECT_TRUE(report.ignored.empty()) << model_dir << ": " << report.ignored.front();
  if (model_out) *model_out = model;
  return r;
}

void expect_outputs_match(const HeadRun& r, const std::string& head, const std::map<std::string, Tensor>& g,
                          const std::string& what) {
  const Tensor& mask = g.at("attention_mask");
  const bool per_token = head != "ForSequenceClassification";
  const Tensor& want = head == "Model" ? g.at("last_hidden_state") : g.at("logits");
  ASSERT_EQ(r.output.sizes(), want.sizes()) << what;
  const double diff = per_token ? max_abs_diff(at_tokens(r.output, mask), at_tokens(want, mask))
                                : max_abs_diff(r.output, want);
  EXPECT_LE(diff, 1e-4) << what << ": outputs differ by " << diff;
  if (head == "Model") {
    ASSERT_EQ(r.pooled.defined(), g.count("pooler_output") > 0) << what << ": a pooler on one side only";
    if (r.pooled.defined()) {
      EXPECT_LE(max_abs_diff(r.pooled, g.at("pooler_output")), 1e-4) << what;
    }
  }
}

TEST(EncoderFamilies, OutputsLossAndGradientsMatchTransformers) {
  const Reference& ref = reference();
  int compared = 0;
  for (const std::string c : ref.manifest["cases"]) {
    if (c.ends_with("-text")) continue;
    for (const std::string head : ref.manifest["heads"]) {
      const std::string what = c + "/" + head;
      SCOPED_TRACE(what);
      const auto g = nn::load_safetensors(ref.dir + "/" + c + "/" + head + ".golden.safetensors");
      std::shared_ptr<nn::Module> model;
      manual_seed(1);
      HeadRun r = run_head(ref.dir + "/" + c + "/" + head, head, g, &model);
      expect_outputs_match(r, head, g, what);
      const double want_loss = g.at("loss").item<double>();
      EXPECT_NEAR(r.loss.item<double>(), want_loss, 1e-5 * std::max(1.0, std::abs(want_loss))) << what;
      r.loss.backward();
      testing::expect_gradients_match(*model, g, what);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 32);  // 4 families x 2 sizes x 4 heads
}

// kiln's own save of each head loads in transformers (no missing or
// unexpected weights) and computes there what it computes in kiln.
TEST(EncoderFamilies, SavedDirectoriesLoadBackInTransformers) {
  const Reference& ref = reference();
  for (const std::string c :
       {"roberta-small", "xlm-roberta-small", "distilbert-small", "modernbert-small", "modernbert-mini"}) {
    for (const std::string head : ref.manifest["heads"]) {
      const std::string what = c + "/" + head;
      SCOPED_TRACE(what);
      const std::string src = ref.dir + "/" + c + "/" + head;
      const auto g = nn::load_safetensors(src + ".golden.safetensors");
      const ModelConfig config = nn::load_model_config(src);
      std::shared_ptr<nn::Module> model;
      HeadRun r;
      {
        NoGradGuard no_grad;
        r = run_head(src, head, g, &model);
      }
      std::string dir = KILN_BINARY_DIR;  // += (GCC 12's -Warray-bounds misreads a chain of + here)
      dir += "/encoder_families_saved_" + c + "_" + head + "_" + std::to_string(::getpid());
      nn::save_pretrained(*model, config, dir);
      EXPECT_EQ(nn::task_name_of(dir), head == "Model"                       ? "base"
                                       : head == "ForMaskedLM"               ? "masked-lm"
                                       : head == "ForSequenceClassification" ? "sequence-classification"
                                                                             : "token-classification");
      const Tensor hf = testing::run_in_transformers(
                            dir, config.architectures().at(0),
                            {{"input_ids", g.at("input_ids")}, {"attention_mask", g.at("attention_mask")}})
                            .at("output");
      const Tensor& mask = g.at("attention_mask");
      ASSERT_EQ(hf.sizes(), r.output.sizes());
      const double diff = head == "ForSequenceClassification" ? max_abs_diff(hf, r.output)
                                                              : max_abs_diff(at_tokens(hf, mask), at_tokens(r.output, mask));
      // float32 rounding of two implementations: 1.1e-5 seen on ModernBERT's
      // MLM logits (magnitude ~10) with oneDNN's GEMM in the sanitizer build.
      EXPECT_LE(diff, 3e-5) << what;
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
}

// Text end to end: the real XLM-R tokenizer (Unigram), and a RoBERTa-style
// tokenizer built from the real GPT-2 BPE files (byte-level BPE,
// RobertaProcessing; beside a RoBERTa and a ModernBERT of its vocabulary),
// each beside its model as the reference saved it, give
// the tokenizers package's ids for SST-2 sentences, and a model of that
// vocabulary gives transformers' outputs from them.
TEST(EncoderFamilies, EndToEndFromText) {
  const Reference& ref = reference();
  for (const std::string c : {"xlmr-text", "roberta-text", "modernbert-text"}) {
    SCOPED_TRACE(c);
    const std::string base = ref.dir + "/" + c + "/Model";
    const json text =
        json::parse(std::ifstream(ref.dir + (c == "xlmr-text" ? "/text_ids.json" : "/roberta_text_ids.json")));
    auto tok = data::open_text_tokenizer(base);
    const std::vector<std::string> sentences = text["sentences"];
    ASSERT_EQ(sentences.size(), 4u);
    EXPECT_EQ(tok->pad_id(), 1);
    const std::vector<data::Encoding> enc = tok->encode_batch(sentences);
    const auto g = nn::load_safetensors(base + ".golden.safetensors");
    const Tensor& ids = g.at("input_ids");
    const std::vector<int64_t> want = ids.to_vector<int64_t>();
    for (size_t i = 0; i < enc.size(); ++i) {
      const size_t T = static_cast<size_t>(ids.size(1));
      ASSERT_LE(enc[i].ids.size(), T);
      for (size_t t = 0; t < T; ++t)
        EXPECT_EQ(t < enc[i].ids.size() ? int64_t{enc[i].ids[t]} : int64_t{1}, want[i * T + t]) << "sentence " << i;
    }
    NoGradGuard no_grad;
    for (const std::string head : {"Model", "ForSequenceClassification"}) {
      const auto gh = nn::load_safetensors(ref.dir + "/" + c + "/" + head + ".golden.safetensors");
      expect_outputs_match(run_head(ref.dir + "/" + c + "/" + head, head, gh), head, gh, c + "/" + head);
    }
  }
}

// The Auto layer names the family and head a directory holds, and refuses
// what it cannot build with one error naming the field or tensor.
TEST(EncoderFamilies, AutoLayerPicksFamilyAndRefusesMismatches) {
  const Reference& ref = reference();
  const std::string roberta = ref.dir + "/roberta-small/ForSequenceClassification";
  EXPECT_EQ(nn::model_type_of(roberta), "roberta");
  EXPECT_EQ(nn::model_type_of(ref.dir + "/xlm-roberta-small/Model"), "xlm-roberta");
  EXPECT_EQ(nn::task_name_of(roberta), "sequence-classification");
  EXPECT_EQ(nn::task_name_of(ref.dir + "/roberta-small/ForTokenClassification"), "token-classification");
  EXPECT_EQ(nn::task_name_of(ref.dir + "/roberta-small/ForMaskedLM"), "masked-lm");
  EXPECT_EQ(nn::supported_model_types(),
            (std::vector<std::string>{"bert", "roberta", "xlm-roberta", "distilbert", "modernbert", "gpt2", "llama",
                                      "mistral", "qwen2"}));

  const std::string tmp = std::string(KILN_BINARY_DIR) + "/encoder_families_bad_" + std::to_string(::getpid());
  fs::remove_all(tmp);
  const auto variant = [&](const std::string& name, const std::string& weights_from,
                           const std::function<void(json&)>& edit) {
    return config_variant(tmp + "/" + name, roberta, weights_from, edit);
  };
  // an unknown family: one error naming it and the supported ones
  const std::string gpt = variant("gpt", roberta, [](json& c) { c["model_type"] = "gpt_neox"; });
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(gpt, 3),
                    "model_type 'gpt_neox' is not supported (kiln supports: bert, roberta, xlm-roberta, distilbert, "
                    "modernbert, gpt2, llama, mistral, qwen2)");
  EXPECT_KILN_ERROR(nn::task_name_of(gpt), "model_type 'gpt_neox' is not supported");
  // a BERT checkpoint under a RoBERTa config
  manual_seed(3);
  BertConfig bc = BertConfig::preset("bert-tiny");
  bc.vocab_size = 1000;
  bc.hidden_size = 64;
  bc.num_attention_heads = 4;
  bc.intermediate_size = 256;
  bc.max_position_embeddings = 40;
  bc.architectures = {"BertForSequenceClassification"};
  nn::BertForSequenceClassification bert(bc, 3);
  nn::save_pretrained(bert, bc, tmp + "/bert");
  const std::string mixed = variant("mixed", tmp + "/bert", [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(mixed, 3),
                    "' is named as a bert model's, but");
  // shapes the config does not imply, and a missing layer
  const std::string wide = variant("wide", roberta, [](json& c) { c["hidden_size"] = 128; });
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(wide, 3), "config.json implies [128]");
  const std::string deep = variant("deep", roberta, [](json& c) { c["num_hidden_layers"] = 3; });
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(deep, 3),
                    "checkpoint lacks 'encoder.layer.2.attention.self.query.weight'");
  // positions: RoBERTa's offset leaves max_position_embeddings - pad - 1 tokens
  auto m = nn::AutoModel::from_pretrained(ref.dir + "/roberta-small/Model");
  EXPECT_KILN_ERROR(m->forward(zeros({1, 39}, TensorOptions(DType::Int64))), "at most 38 tokens");
  EXPECT_EQ(m->forward(zeros({1, 38}, TensorOptions(DType::Int64))).last_hidden_state.size(1), 38);
  fs::remove_all(tmp);
}

// Note [Sharded checkpoints]: transformers' shards load in kiln; kiln's load
// in transformers and in kiln bit for bit; a hostile index is refused.
TEST(EncoderFamilies, ShardedCheckpointsBothWays) {
  const Reference& ref = reference();
  const std::string src = ref.dir + "/roberta-small/ForMaskedLM";
  ASSERT_TRUE(fs::exists(src + "-sharded/model.safetensors.index.json"));
  ASSERT_FALSE(fs::exists(src + "-sharded/model.safetensors"));
  const auto g = nn::load_safetensors(src + ".golden.safetensors");
  HeadRun from_shards;
  std::shared_ptr<nn::Module> model;
  {
    NoGradGuard no_grad;
    from_shards = run_head(src + "-sharded", "ForMaskedLM", g, &model);
  }
  expect_outputs_match(from_shards, "ForMaskedLM", g, "transformers' shards");

  const std::string dir = std::string(KILN_BINARY_DIR) + "/encoder_families_shards_" + std::to_string(::getpid());
  nn::save_pretrained(*model, nn::load_config(src), dir, "", 100'000);
  const size_t shards = nn::weight_files(dir).size();
  EXPECT_GE(shards, 3u);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  auto again = nn::AutoModelForMaskedLM::from_pretrained(dir);
  const auto a = model->state_dict(), b = again->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(max_abs_diff(a[i].second, b[i].second), 0.0) << a[i].first;
  const Tensor hf = testing::run_in_transformers(
                        dir, "RobertaForMaskedLM",
                        {{"input_ids", g.at("input_ids")}, {"attention_mask", g.at("attention_mask")}})
                        .at("output");
  const Tensor& mask = g.at("attention_mask");
  EXPECT_LE(max_abs_diff(at_tokens(hf, mask), at_tokens(from_shards.output, mask)), 1e-5);

  // hostile indexes: each one error naming what is wrong
  const std::string index = dir + "/model.safetensors.index.json";
  const json good = json::parse(std::ifstream(index));
  const auto with_index = [&](const json& j) { std::ofstream(index, std::ios::trunc) << j.dump(); };
  const std::string first = good["weight_map"].begin().key();
  const std::string shard = good["weight_map"][first];
  const std::string other = fs::path(nn::weight_files(dir).at(shard == fs::path(nn::weight_files(dir)[0]).filename() ? 1 : 0))
                                .filename()
                                .string();
  json escape = good;
  escape["weight_map"][first] = "../" + shard;
  with_index(escape);
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(dir), "not a file name in the model directory");
  json moved = good;
  moved["weight_map"][first] = other;
  with_index(moved);
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(dir), "is mapped to shard");
  json missing = good;
  missing["weight_map"]["lm_head.extra"] = "model-00009-of-00009.safetensors";
  with_index(missing);
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(dir), "shard 'model-00009-of-00009.safetensors' is not in");
  json ghost = good;
  ghost["weight_map"]["lm_head.ghost"] = shard;
  with_index(ghost);
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(dir), "tensor 'lm_head.ghost' is not in its shard");
  with_index(json{{"weight_map", json::array()}});
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(dir), "needs \"weight_map\"");
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// DistilBERT's config as transformers writes it, its mismatches refused by
// name, its fixed (sinusoidal) positions, and the typed from_pretrained.
TEST(EncoderFamilies, DistilBertConfigAndMismatches) {
  const Reference& ref = reference();
  const std::string clf = ref.dir + "/distilbert-small/ForSequenceClassification";
  EXPECT_EQ(nn::model_type_of(clf), "distilbert");
  EXPECT_EQ(nn::task_name_of(clf), "sequence-classification");
  // kiln writes back what it read: every field transformers wrote, unknown keys verbatim
  const json original = json::parse(std::ifstream(clf + "/config.json"));
  const ModelConfig mc = nn::load_model_config(clf);
  const json written = json::parse(mc.to_json_string());
  for (const auto& [k, v] : original.items()) EXPECT_EQ(written.at(k), v) << k;
  EXPECT_EQ(mc.facts().hidden_size, 64);
  EXPECT_EQ(mc.facts().type_vocab_size, 0);
  EXPECT_EQ(mc.id2label().size(), 3u);
  // transformers' attribute_map: hidden_size is dim when dim is absent
  json aliased = original;
  aliased.erase("dim");
  aliased["hidden_size"] = 64;
  EXPECT_EQ(ModelConfig::from_json_string(aliased.dump()).as<DistilBertConfig>().dim, 64);
  aliased["dim"] = 32;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(aliased.dump()), "'hidden_size' and 'dim' disagree");
  json odd = original;
  odd["n_heads"] = 5;
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump(), "odd.json"), "odd.json: dim = 64 is not divisible by n_heads = 5");
  odd = original;
  odd["activation"] = "swiglu";
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump()), "activation 'swiglu' is not supported");
  odd = original;
  odd.erase("n_layers");
  EXPECT_KILN_ERROR(ModelConfig::from_json_string(odd.dump()), "missing required field 'n_layers'");

  // the typed path: from_pretrained<M> builds M from its own config struct
  auto typed = nn::from_pretrained<nn::DistilBertForSequenceClassification>(clf, nullptr, int64_t{3});
  EXPECT_EQ(typed->distilbert->config.n_layers, 2);

  const std::string tmp = std::string(KILN_BINARY_DIR) + "/encoder_families_distil_" + std::to_string(::getpid());
  fs::remove_all(tmp);
  const auto variant = [&](const std::string& name, const std::string& weights_from,
                           const std::function<void(json&)>& edit) {
    return config_variant(tmp + "/" + name, clf, weights_from, edit);
  };
  const std::string deep = variant("deep", clf, [](json& c) { c["n_layers"] = 3; });
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(deep, 3),
                    "checkpoint lacks 'transformer.layer.2.attention.q_lin.weight', which " + deep +
                        "/config.json's n_layers = 3 implies");
  const std::string wide = variant("wide", clf, [](json& c) { c["hidden_dim"] = 512; });
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(wide, 3),
                    "/config.json implies [512");
  // RoBERTa's weights under a DistilBERT config, and the reverse
  const std::string mixed = variant("mixed", ref.dir + "/roberta-small/ForSequenceClassification", [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForSequenceClassification::from_pretrained(mixed, 3), "is named as a roberta model's");

  // sinusoidal_pos_embds: fixed positions, saved (as transformers saves them) but not trained
  DistilBertConfig sc = mc.as<DistilBertConfig>();
  sc.sinusoidal_pos_embds = true;
  nn::DistilBertModel fixed(sc);
  bool trains_positions = false;
  for (const auto& [name, p] : fixed.named_parameters()) trains_positions |= name.find("position_embeddings") != std::string::npos;
  EXPECT_FALSE(trains_positions);
  const Tensor w = fixed.embeddings->fixed_positions->weight;  // (P, C): sin(pos / 10000^(2 (j/2) / C)), cos at odd j
  const std::vector<double> v = w.to(DType::Float64).to_vector<double>();
  const int64_t C = w.size(1);
  EXPECT_NEAR(v[static_cast<size_t>(3 * C + 0)], std::sin(3.0), 1e-6);
  EXPECT_NEAR(v[static_cast<size_t>(3 * C + 1)], std::cos(3.0), 1e-6);
  EXPECT_NEAR(v[static_cast<size_t>(5 * C + 4)], std::sin(5.0 / std::pow(10000.0, 4.0 / static_cast<double>(C))), 1e-6);
  bool saved = false;
  for (const auto& [name, t] : fixed.state_dict()) saved |= name == "embeddings.position_embeddings.weight";
  EXPECT_TRUE(saved);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ModernBertConfig as transformers 4.48 writes it and its defaults, errors by
// field, and mismatched weights by tensor name.
TEST(EncoderFamilies, ModernBertConfigAndMismatches) {
  const Reference& ref = reference();
  const std::string tok = ref.dir + "/modernbert-small/ForTokenClassification";
  EXPECT_EQ(nn::model_type_of(tok), "modernbert");
  EXPECT_EQ(nn::task_name_of(tok), "token-classification");
  EXPECT_EQ(nn::task_name_of(ref.dir + "/modernbert-mini/ForMaskedLM"), "masked-lm");
  const json original = json::parse(std::ifstream(tok + "/config.json"));
  const ModelConfig mc = nn::load_model_config(tok);
  const json written = json::parse(mc.to_json_string());
  for (const auto& [k, v] : original.items()) EXPECT_EQ(written.at(k), v) << k;  // unknown keys verbatim
  EXPECT_EQ(mc.facts().hidden_size, 64);
  EXPECT_EQ(mc.facts().type_vocab_size, 0);
  const ModernBertConfig mini = nn::load_model_config(ref.dir + "/modernbert-mini/Model").as<ModernBertConfig>();
  EXPECT_FALSE(mini.local_rope_theta.has_value());
  EXPECT_EQ(mini.rope_theta_of_layer(1), 50000.0);
  EXPECT_TRUE(mini.is_global_layer(3));
  EXPECT_FALSE(mini.is_global_layer(2));

  // transformers' defaults (answerdotai/ModernBERT-base's)
  json plain = {{"model_type", "modernbert"},  {"vocab_size", 50368},      {"hidden_size", 64},
                {"intermediate_size", 96},     {"num_hidden_layers", 3},   {"num_attention_heads", 4}};
  const ModernBertConfig d = ModelConfig::from_json_string(plain.dump()).as<ModernBertConfig>();
  EXPECT_EQ(d.global_attn_every_n_layers, 3);
  EXPECT_EQ(d.local_attention, 128);
  EXPECT_EQ(d.pad_token_id, 50283);
  EXPECT_EQ(d.cls_token_id, 50281);
  EXPECT_EQ(d.global_rope_theta, 160000.0);
  EXPECT_EQ(d.rope_theta_of_layer(1), 10000.0);
  EXPECT_FALSE(d.norm_bias);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.architectures, std::vector<std::string>{"ModernBertModel"});
  const auto bad = [&](const std::function<void(json&)>& edit, const std::string& message) {
    json j = original;
    edit(j);
    EXPECT_KILN_ERROR(ModelConfig::from_json_string(j.dump(), "bad.json"), message);
  };
  bad([](json& j) { j["classifier_pooling"] = "max"; },
      "bad.json: classifier_pooling 'max' is not supported (transformers accepts cls, mean)");
  bad([](json& j) { j["hidden_activation"] = "swiglu"; }, "hidden_activation 'swiglu' is not supported");
  bad([](json& j) { j["hidden_size"] = 260; }, "head size hidden_size / num_attention_heads = 65 must be even");
  bad([](json& j) { j["cls_token_id"] = 1000; }, "cls_token_id = 1000 is outside [0, vocab_size = 1000)");
  bad([](json& j) { j["global_attn_every_n_layers"] = 0; }, "global_attn_every_n_layers = 0 must be");
  bad([](json& j) { j.erase("intermediate_size"); }, "missing required field 'intermediate_size'");

  const std::string tmp = std::string(KILN_BINARY_DIR) + "/encoder_families_modernbert_" + std::to_string(::getpid());
  fs::remove_all(tmp);
  const std::string mlm = ref.dir + "/modernbert-small/ForMaskedLM";
  const auto variant = [&](const std::string& name, const std::string& weights_from,
                           const std::function<void(json&)>& edit) {
    return config_variant(tmp + "/" + name, mlm, weights_from, edit);
  };
  const std::string deep = variant("deep", mlm, [](json& c) { c["num_hidden_layers"] = 3; });
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(deep),
                    "checkpoint lacks 'layers.2.attn.Wqkv.weight', which " + deep +
                        "/config.json's num_hidden_layers = 3 implies");
  const std::string biased = variant("biased", mlm, [](json& c) { c["norm_bias"] = true; });
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(biased), "checkpoint lacks 'embeddings.norm.bias'");
  const std::string wide = variant("wide", mlm, [](json& c) { c["intermediate_size"] = 128; });
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(wide),
                    "tensor 'model.layers.0.mlp.Wi.weight' has shape [192, 64] but " + wide +
                        "/config.json implies [256, 64]");
  const std::string roberta = variant("roberta", ref.dir + "/roberta-small/ForMaskedLM", [](json&) {});
  EXPECT_KILN_ERROR(nn::AutoModelForMaskedLM::from_pretrained(roberta), "is named as a roberta model's");
  // an untied decoder over a tied file starts fresh and is reported, as transformers does
  const std::string untied = variant("untied", mlm, [](json& c) { c["tie_word_embeddings"] = false; });
  nn::LoadReport report;
  (void)nn::AutoModelForMaskedLM::from_pretrained(untied, &report);
  EXPECT_EQ(report.new_heads, std::vector<std::string>{"decoder.weight"});
  // the local layers' window is applied: with every layer global the outputs differ
  const auto g = nn::load_safetensors(ref.dir + "/modernbert-small/Model.golden.safetensors");
  const std::string global = config_variant(tmp + "/global", ref.dir + "/modernbert-small/Model",
                                            ref.dir + "/modernbert-small/Model",
                                            [](json& c) { c["global_attn_every_n_layers"] = 1; });
  NoGradGuard no_grad;
  const Tensor h = nn::AutoModel::from_pretrained(global)->forward(g.at("input_ids"), g.at("attention_mask"))
                       .last_hidden_state;
  EXPECT_GT(max_abs_diff(at_tokens(h, g.at("attention_mask")), at_tokens(g.at("last_hidden_state"), g.at("attention_mask"))),
            1e-3);
  auto m = nn::AutoModel::from_pretrained(ref.dir + "/modernbert-small/Model");
  EXPECT_KILN_ERROR(m->forward(zeros({1, 41}, TensorOptions(DType::Int64))),
                    "sequence length 41 exceeds max_position_embeddings 40");
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
