// TextTokenizer (data/tokenizer/text_tokenizer.h) and open_text_tokenizer's
// choice (Note [Choosing a tokenizer], pipeline_tokenizer.h): what the
// training tasks see from a model directory, against transformers'
// AutoTokenizer on the same directory (tests/reference/
// text_tokenizer_reference.py) for BERT (MiniLM), XLM-R and GPT-2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/corpus.h"
#include "data/pretraining.h"
#include "data/token_data.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "data/tokenizer/pipeline_tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kiln::data::BertTokenizer;
using kiln::data::EncodeOptions;
using kiln::data::PipelineTokenizer;
using kiln::data::TextTokenizer;
using kiln::testing::quoted;

namespace {

std::string data_dir() { return kiln::testing::env_or("KILN_DATA", KILN_DEFAULT_DATA); }

fs::path work_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::path(KILN_BINARY_DIR) / ("text_tok." + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string hf_python() {
  return kiln::testing::env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
}

// transformers' view of model directory `dir` (text_tokenizer_reference.py),
// after `build` (its --from-* flag) has saved a tokenizer there.
nlohmann::json reference(const fs::path& dir, const std::string& build = "") {
  const fs::path out = work_dir() / (dir.filename().string() + ".ref.json");
  const std::string cmd = quoted(hf_python()) + " " +
                          quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/text_tokenizer_reference.py") +
                          " --model " + quoted(dir.string()) + " --data " + quoted(data_dir()) + " --output " +
                          quoted(out.string()) + build;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  return nlohmann::json::parse(in);
}

// XLM-R and GPT-2 directories as transformers saves them (save_pretrained of
// XLMRobertaTokenizerFast / GPT2TokenizerFast with add_prefix_space, built
// from the real files), with transformers' view of each.
struct Saved {
  fs::path dir;
  nlohmann::json ref;
};
const Saved& xlmr() {
  static const Saved s = [] {
    const fs::path d = work_dir() / "xlmr";
    nlohmann::json ref = reference(
        d, " --from-xlmr " + quoted(data_dir() + "/tokenizers/xlm-roberta/tokenizer.json"));
    return Saved{d, std::move(ref)};
  }();
  return s;
}
const Saved& gpt2() {
  static const Saved s = [] {
    const fs::path d = work_dir() / "gpt2";
    nlohmann::json ref = reference(d, " --from-gpt2 " + quoted(data_dir() + "/tokenizers/gpt2"));
    return Saved{d, std::move(ref)};
  }();
  return s;
}

// A model directory: `json` as tokenizer.json beside `config` as tokenizer_config.json.
fs::path model_dir(const std::string& name, const fs::path& json, const std::string& config) {
  const fs::path d = work_dir() / name;
  fs::create_directories(d);
  fs::copy_file(json, d / "tokenizer.json", fs::copy_options::overwrite_existing);
  if (!config.empty()) write(d / "tokenizer_config.json", config);
  return d;
}

// Every result of the reference against `tok`.
void expect_matches_transformers(const TextTokenizer& tok, const nlohmann::json& ref) {
  EXPECT_EQ(tok.unk_id(), ref["roles"]["unk"].get<int>());
  EXPECT_EQ(tok.cls_id(), ref["roles"]["cls"].get<int>());
  EXPECT_EQ(tok.sep_id(), ref["roles"]["sep"].get<int>());
  EXPECT_EQ(tok.pad_id(), ref["roles"]["pad"].get<int>());
  EXPECT_EQ(tok.mask_id(), ref["roles"]["mask"].get<int>());
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<size_t>());
  const auto lines = ref["lines"].get<std::vector<std::string>>();
  EncodeOptions options;
  options.max_length = 24;
  const std::vector<kiln::data::Encoding> single = tok.encode_batch(lines, options);
  ASSERT_EQ(single.size(), ref["single"].size());
  for (size_t i = 0; i < single.size(); ++i)
    EXPECT_EQ(nlohmann::json(single[i].ids), ref["single"][i]) << "line " << i << ": " << lines[i];
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i + 1 < lines.size(); ++i) pairs.emplace_back(lines[i], lines[i + 1]);
  const std::vector<kiln::data::Encoding> paired = tok.encode_batch(pairs, options);
  ASSERT_EQ(paired.size(), ref["pairs"].size());
  for (size_t i = 0; i < paired.size(); ++i)
    EXPECT_EQ(nlohmann::json(paired[i].ids), ref["pairs"][i]) << "pair " << i;
  // Word alignment (Note [Word alignment]): encode_words against is_split_into_words.
  const auto sentences = ref["sentences"].get<std::vector<std::vector<std::string>>>();
  for (size_t s = 0; s < sentences.size(); ++s) {
    const auto windows = kiln::data::encode_words(sentences[s], {}, tok, 0, false, {}, s);
    ASSERT_EQ(windows.size(), 1u);
    EXPECT_EQ(nlohmann::json(windows[0].encoding.ids), ref["words"][s]["ids"]) << "sentence " << s;
    EXPECT_EQ(nlohmann::json(windows[0].word_index), ref["words"][s]["first"]) << "sentence " << s;
  }
}

}  // namespace

TEST(TextTokenizer, BertTokenizerJsonTakesTheWordPieceFastPathAndMatchesTransformers) {
  const std::string dir = kiln::testing::minilm_dir();
  const auto tok = kiln::data::open_text_tokenizer(dir);
  const auto* bert = dynamic_cast<const BertTokenizer*>(tok.get());
  ASSERT_NE(bert, nullptr) << "MiniLM's tokenizer.json is BERT's WordPiece pipeline";
  EXPECT_TRUE(bert->lowercase());
  const nlohmann::json ref = reference(dir);
  expect_matches_transformers(*tok, ref);
  // The fast path gives the general pipeline's ids.
  const PipelineTokenizer general = PipelineTokenizer::from_pretrained(dir);
  const auto lines = ref["lines"].get<std::vector<std::string>>();
  EXPECT_EQ(tok->encode_ids_batch(lines), general.encode_ids_batch(lines));
  EXPECT_EQ(tok->special_around().before, general.special_around().before);
  EXPECT_EQ(tok->special_around().after, general.special_around().after);
  // --cased keeps the fast path, without lower-casing.
  const auto cased = kiln::data::open_text_tokenizer(dir, /*cased=*/true);
  EXPECT_FALSE(cased->lowercase());
  EXPECT_EQ(cased->encode_ids("Hello"), (std::vector<int32_t>{cased->token_to_id("[UNK]")}));
}

TEST(TextTokenizer, AlmostBertTokenizerJsonRunsTheFullPipeline) {
  const std::string dir = kiln::testing::minilm_dir();
  std::ifstream in(dir + "/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["added_tokens"].push_back({{"id", 30522}, {"content", "<new>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", true}, {"special", false}});
  const fs::path d = work_dir() / "almost_bert";
  fs::create_directories(d);
  write(d / "tokenizer.json", j.dump());
  const auto tok = kiln::data::open_text_tokenizer(d.string());
  ASSERT_NE(dynamic_cast<const PipelineTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->vocab_size(), 30523u);
  EXPECT_EQ(tok->encode_ids("a <new> b"), (std::vector<int32_t>{1037, 30522, 1038}));
  EXPECT_EQ(tok->continuation_prefix(), "##");
  // Its case is its own: --cased is refused.
  try {
    kiln::data::open_text_tokenizer(d.string(), /*cased=*/true);
    FAIL() << "--cased accepted for a tokenizer.json that is not BERT's";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cased is for BERT's WordPiece"), std::string::npos) << e.what();
  }
}

TEST(TextTokenizer, XlmRobertaMatchesTransformers) {
  const fs::path dir = xlmr().dir;
  const auto tok = kiln::data::open_text_tokenizer(dir.string());
  ASSERT_NE(dynamic_cast<const PipelineTokenizer*>(tok.get()), nullptr);
  expect_matches_transformers(*tok, xlmr().ref);
  EXPECT_EQ(tok->special_around().before, std::vector<int32_t>{0});
  EXPECT_EQ(tok->special_around().after, std::vector<int32_t>{2});
  EXPECT_EQ(tok->continuation_prefix(), "");
  EXPECT_TRUE(tok->is_special_id(0) && tok->is_special_id(250001) && !tok->is_special_id(5));
  // Padding uses <pad>; the tokenizer.json's own truncation/padding never apply.
  EncodeOptions pad;
  pad.pad_to = 8;
  const kiln::data::Encoding e = tok->encode("Hello", std::nullopt, pad);
  ASSERT_EQ(e.size(), 8u);
  EXPECT_EQ(e.ids.back(), 1);
  EXPECT_EQ(e.attention_mask.back(), 0);
  // The saved files: the tokenizer.json's own bytes and its tokenizer_config.json.
  const auto files = tok->files();
  EXPECT_EQ(files.at("tokenizer.json"), kiln::testing::read_bytes(dir / "tokenizer.json"));
  EXPECT_EQ(nlohmann::json::parse(files.at("tokenizer_config.json")),
            nlohmann::json::parse(kiln::testing::read_bytes(dir / "tokenizer_config.json")));
  EXPECT_EQ(files.count("special_tokens_map.json"), 1u);
}

TEST(TextTokenizer, Gpt2MatchesTransformersAndHasNoPadToken) {
  const auto tok = kiln::data::open_text_tokenizer(gpt2().dir.string());
  expect_matches_transformers(*tok, gpt2().ref);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->mask_id(), -1);
  EXPECT_TRUE(tok->special_around().before.empty() && tok->special_around().after.empty());
  EncodeOptions pad;
  pad.pad_to = 64;
  try {
    tok->encode("Hello", std::nullopt, pad);
    FAIL() << "padded without a pad token";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad token"), std::string::npos) << e.what();
  }
}

TEST(TextTokenizer, ConfiguredRolesWinAndMustExist) {
  const fs::path gpt2 = data_dir() + "/tokenizers/gpt2/tokenizer.json";
  const auto tok = kiln::data::open_text_tokenizer(
      model_dir("gpt2_pad", gpt2, R"({"pad_token": {"content": "<|endoftext|>"}})").string());
  EXPECT_EQ(tok->pad_id(), 50256);
  EXPECT_NE(tok->files().at("tokenizer_config.json").find("pad_token"), std::string::npos);
  const fs::path bad = model_dir("gpt2_bad", gpt2, R"({"mask_token": "<nope>"})");
  try {
    kiln::data::open_text_tokenizer(bad.string());
    FAIL() << "a mask_token the tokenizer lacks was accepted";
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer_config.json: mask_token \"<nope>\" is not a token"), std::string::npos) << what;
  }
  const fs::path wrong = model_dir("gpt2_wrong", gpt2, R"({"pad_token": 3})");
  EXPECT_THROW(kiln::data::open_text_tokenizer(wrong.string()), kiln::Error);
}

TEST(TextTokenizer, CorpusRecordsThePipelineAndRefusesAnother) {
  const fs::path text = work_dir() / "corpus.txt";
  write(text, "The quick brown fox .\nJumps over the lazy dog .\n\nA second document .\n");
  const auto xlmr = kiln::data::open_text_tokenizer(::xlmr().dir.string());
  const fs::path out = work_dir() / "corpus_xlmr";
  const kiln::data::PrepareStats s = kiln::data::prepare_corpus({text.string()}, *xlmr, out.string());
  EXPECT_EQ(s.documents, 2u);
  const auto corpus = kiln::data::TokenCorpus::open(out.string());
  EXPECT_NO_THROW(corpus->check_tokenizer(*xlmr));
  EXPECT_EQ(corpus->special_ids().mask, 250001);
  EXPECT_EQ(corpus->sentence(0)[0], xlmr->encode_ids("The quick brown fox .")[0]);
  // Same tokens, another pipeline (a different tokenizer.json): refused.
  std::ifstream in(::xlmr().dir / "tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["normalizer"] = nullptr;
  const fs::path other = work_dir() / "xlmr_other";
  fs::create_directories(other);
  write(other / "tokenizer.json", j.dump());
  const auto changed = kiln::data::open_text_tokenizer(other.string());
  EXPECT_THROW(corpus->check_tokenizer(*changed), kiln::Error);
  // Masking: <s>, </s>, <pad>, <unk>, <mask> never masked; no "##" continuations.
  const kiln::data::MaskingVocab m = kiln::data::MaskingVocab::from_tokenizer(*xlmr);
  EXPECT_EQ(m.mask_id, 250001);
  for (int32_t id : {0, 1, 2, 3, 250001}) EXPECT_TRUE(m.is_special[static_cast<size_t>(id)]) << id;
  EXPECT_FALSE(m.is_special[100]);
  for (uint8_t c : m.is_continuation) ASSERT_EQ(c, 0);
}
