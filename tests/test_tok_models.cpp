// The BPE, WordPiece and WordLevel models (data/tokenizer/bpe.h,
// wordpiece_model.h, wordlevel.h) and model_from_json against HF tokenizers.
//
// Hand-checked cases are HF's own Rust unit tests (models/bpe/model.rs,
// word.rs). The differential tests run tests/reference/tok_models_reference.py
// (KILN_PYTHON) once to write, for the real GPT-2 BPE (tokenizer.json and
// vocab.json + merges.txt), BPE / WordPiece / WordLevel models trained on
// WikiText-2 valid with every option and random small BPE models, the
// tokens tokenizers' Model.tokenize gives for thousands of pre-tokens and
// adversarial strings, and compares every id, value and byte offset; then
// model objects HF refuses must be refused here too.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/json_util.h"
#include "kiln/data/tokenizer/bpe.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/wordlevel.h"
#include "kiln/data/tokenizer/wordpiece_model.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln::data::tok;
using kiln::testing::env_or;
using kiln::testing::quoted;

using Strings = std::vector<std::string>;

std::vector<Token> run(const Model& m, std::string_view s) {
  std::vector<Token> out;
  m.tokenize(s, out);
  return out;
}

std::string render(const std::vector<Token>& tokens) {
  std::string s;
  for (const Token& t : tokens)
    s += kiln::detail::str_cat("[", t.id, " ", Json(t.value).dump(), " ", t.offsets.begin, "-", t.offsets.end, "]");
  return s;
}

// (id, value, begin, end) of HF's Rust tests.
struct T {
  int32_t id;
  std::string value;
  size_t begin, end;
};
std::string render(const std::vector<T>& tokens) {
  std::vector<Token> t;
  for (const T& x : tokens) t.push_back(Token{x.id, x.value, Span{x.begin, x.end}});
  return render(t);
}
#define EXPECT_TOKENS(model, text, ...) \
  EXPECT_EQ(render(run(model, text)), render(std::vector<T>{__VA_ARGS__})) << (text)

TokenVocab vocab_of(std::vector<std::pair<std::string, int32_t>> entries) {
  return TokenVocab::from_entries(std::move(entries), "test vocab");
}

std::unique_ptr<Bpe> bpe(std::vector<std::pair<std::string, int32_t>> vocab, Bpe::Merges merges,
                         BpeOptions o = {}) {
  return std::make_unique<Bpe>(vocab_of(std::move(vocab)), merges, std::move(o),
                               [](size_t i) { return "merges[" + std::to_string(i) + "]"; });
}

std::unique_ptr<Model> from_json_text(const std::string& text) {
  return model_from_json(Json::parse(text), "model");
}

// ---- hand-checked cases (HF's Rust tests) ------------------------------------

TEST(TokModels, BpeUnkNotFused) {
  BpeOptions o;
  o.unk_token = "<unk>";
  const auto m = bpe({{"<unk>", 0}, {"a", 1}, {"b", 2}}, {}, o);
  EXPECT_TOKENS(*m, "c", {0, "<unk>", 0, 1});
  EXPECT_TOKENS(*m, "cc", {0, "<unk>", 0, 1}, {0, "<unk>", 1, 2});
  EXPECT_TOKENS(*m, "accb", {1, "a", 0, 1}, {0, "<unk>", 1, 2}, {0, "<unk>", 2, 3}, {2, "b", 3, 4});
}

TEST(TokModels, BpeUnkFused) {
  BpeOptions o;
  o.unk_token = "<unk>";
  o.fuse_unk = true;
  const auto m = bpe({{"<unk>", 0}, {"a", 1}, {"b", 2}}, {}, o);
  EXPECT_TOKENS(*m, "c", {0, "<unk>", 0, 1});
  EXPECT_TOKENS(*m, "cc", {0, "<unk>", 0, 2});
  EXPECT_TOKENS(*m, "accb", {1, "a", 0, 1}, {0, "<unk>", 1, 3}, {2, "b", 3, 4});
  // Multi-byte unknowns span their bytes.
  EXPECT_TOKENS(*m, "a東京b", {1, "a", 0, 1}, {0, "<unk>", 1, 7}, {2, "b", 7, 8});
}

TEST(TokModels, BpeNoUnkDropsUnknownCodePoints) {
  const auto m = bpe({{"a", 0}, {"b", 1}}, {});
  EXPECT_TOKENS(*m, "axb", {0, "a", 0, 1}, {1, "b", 1, 2});
  EXPECT_TRUE(run(*m, "xyz").empty());
}

TEST(TokModels, BpeUnrelated) {
  const auto m = bpe({{"u", 0},
                      {"n", 1},
                      {"r", 2},
                      {"e", 3},
                      {"l", 4},
                      {"a", 5},
                      {"t", 6},
                      {"d", 7},
                      {"re", 8},
                      {"at", 9},
                      {"ed", 10},
                      {"un", 11},
                      {"ated", 12},
                      {"rel", 13},
                      {"related", 14},
                      {"unrelated", 15}},
                     {{"r", "e"},
                      {"a", "t"},
                      {"e", "d"},
                      {"u", "n"},
                      {"at", "ed"},
                      {"re", "l"},
                      {"rel", "ated"},
                      {"un", "related"}});
  EXPECT_TOKENS(*m, "unrelated", {15, "unrelated", 0, 9});
  EXPECT_EQ(m->num_merges(), 8u);
}

TEST(TokModels, BpeContinuingSubwordPrefix) {
  BpeOptions o;
  o.unk_token = "[UNK]";
  o.continuing_subword_prefix = "##";
  const auto m = bpe({{"a", 0}, {"##b", 1}, {"##c", 2}, {"ab", 3}, {"abc", 4}},
                     {{"a", "##b"}, {"ab", "##c"}}, o);
  EXPECT_TOKENS(*m, "ab", {3, "ab", 0, 2});
  EXPECT_TOKENS(*m, "abc", {4, "abc", 0, 3});
  // "[UNK]" is not in the vocabulary: needing it is HF's UnkTokenOutOfVocabulary.
  EXPECT_KILN_ERROR(run(*m, "ax"), "unk token \"[UNK]\" is not in the vocabulary");
}

TEST(TokModels, BpeByteFallback) {
  BpeOptions o;
  o.unk_token = "<unk>";
  o.byte_fallback = true;
  const auto m = bpe({{"<unk>", 0}, {"<0x61>", 1}}, {}, o);
  EXPECT_TOKENS(*m, "c", {0, "<unk>", 0, 1});
  EXPECT_TOKENS(*m, "a", {1, "<0x61>", 0, 1});
  const auto nl = bpe({{"<unk>", 0}, {"<0x0A>", 1}}, {}, o);
  EXPECT_TOKENS(*nl, "\n", {1, "<0x0A>", 0, 1});
  // Every byte of a multi-byte code point, each one byte wide.
  const auto e = bpe({{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"x", 3}}, {}, o);
  EXPECT_TOKENS(*e, "xé", {3, "x", 0, 1}, {1, "<0xC3>", 1, 2}, {2, "<0xA9>", 2, 3});
}

TEST(TokModels, BpeByteFallbackQuirks) {
  // With a prefix, the prefix's bytes fall back too, so offsets run past the
  // code point; a pending unk comes after byte tokens (HF's merge_word).
  BpeOptions o;
  o.unk_token = "<unk>";
  o.byte_fallback = true;
  o.fuse_unk = true;
  o.continuing_subword_prefix = "#";
  const auto m = bpe({{"<unk>", 0}, {"<0x23>", 1}, {"<0x62>", 2}, {"a", 3}}, {}, o);
  EXPECT_TOKENS(*m, "ab", {3, "a", 0, 1}, {1, "<0x23>", 1, 2}, {2, "<0x62>", 2, 3});
  EXPECT_TOKENS(*m, "axbx", {3, "a", 0, 1}, {1, "<0x23>", 1, 2}, {2, "<0x62>", 2, 3},
                {0, "<unk>", 3, 5});
}

TEST(TokModels, BpeIgnoreMerges) {
  std::vector<std::pair<std::string, int32_t>> vocab = {
      {".:.:", 0},    {"Ġbelirtilen", 1}, {".", 2},   {":", 3},          {"bel", 4},
      {"irtilen", 5}, {"Ġ", 6},           {".:", 7},  {"belirtilen", 8}, {".:.", 9},
      {"be", 10},     {"l", 11},          {"ir", 12}, {"ti", 13},        {"en", 14},
      {"irtil", 15},  {"irti", 16},       {"i", 17},  {"r", 18},         {"t", 19},
      {"b", 20},      {"e", 21},          {"n", 22}};
  const Bpe::Merges merges = {{".", ":"}, {"b", "e"},   {"be", "l"}, {"i", "r"},
                              {"t", "i"}, {"ir", "ti"}, {"e", "n"},  {"irti", "l"}};
  BpeOptions o;
  o.ignore_merges = true;
  const auto m = bpe(vocab, merges, o);
  EXPECT_TOKENS(*m, ".:.:", {0, ".:.:", 0, 4});
  EXPECT_TOKENS(*m, "Ġbelirtilen", {1, "Ġbelirtilen", 0, 12});
  const auto off = bpe(vocab, merges);
  EXPECT_TOKENS(*off, ".:.:", {7, ".:", 0, 2}, {7, ".:", 2, 4});
  EXPECT_TOKENS(*off, "Ġbelirtilen", {6, "Ġ", 0, 2}, {4, "bel", 2, 5}, {15, "irtil", 5, 10},
                {14, "en", 10, 12});
}

TEST(TokModels, BpeMergeOrder) {
  // Lowest rank first; equal ranks left to right ("aaa" -> "aa" "a").
  const auto m = bpe({{"a", 0}, {"aa", 1}, {"b", 2}, {"ab", 3}, {"ba", 4}},
                     {{"a", "a"}, {"b", "a"}, {"a", "b"}});
  EXPECT_TOKENS(*m, "aaa", {1, "aa", 0, 2}, {0, "a", 2, 3});
  EXPECT_TOKENS(*m, "aaaa", {1, "aa", 0, 2}, {1, "aa", 2, 4});
  EXPECT_TOKENS(*m, "aba", {0, "a", 0, 1}, {4, "ba", 1, 3});  // "b a" (rank 1) before "a b" (2)
}

TEST(TokModels, BpeRepeatedMergeKeepsLastRank) {
  // HF collects merges into a map: a repeated pair keeps its last rank.
  const auto m = bpe({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}},
                     {{"a", "b"}, {"b", "c"}, {"a", "b"}});
  EXPECT_TOKENS(*m, "abc", {0, "a", 0, 1}, {4, "bc", 1, 3});
}

TEST(TokModels, BpeSuffix) {
  BpeOptions o;
  o.end_of_word_suffix = "</w>";
  const auto m =
      bpe({{"a", 0}, {"b", 1}, {"b</w>", 2}, {"ab</w>", 3}, {"a</w>", 4}}, {{"a", "b</w>"}}, o);
  EXPECT_TOKENS(*m, "ab", {3, "ab</w>", 0, 2});
  EXPECT_TOKENS(*m, "ba", {1, "b", 0, 1}, {4, "a</w>", 1, 2});
  EXPECT_TOKENS(*m, "a", {4, "a</w>", 0, 1});
}

TEST(TokModels, BpeCacheAndThreadsGiveTheSameTokens) {
  std::vector<std::pair<std::string, int32_t>> vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"abab", 3}};
  for (size_t capacity : {size_t{0}, size_t{1}, size_t{4096}}) {
    BpeOptions o;
    o.cache_capacity = capacity;
    const auto m = bpe(vocab, {{"a", "b"}, {"ab", "ab"}}, o);
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 2000; ++i) {
          const std::string w = std::string(static_cast<size_t>(1 + (i + t) % 7), 'a') + "bab";
          const auto got = run(*m, w);
          size_t end = 0;
          for (const Token& k : got) end = k.offsets.end;
          bad += end != w.size();
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0) << capacity;
    EXPECT_TOKENS(*m, "ababab", {3, "abab", 0, 4}, {2, "ab", 4, 6});
  }
}

TEST(TokModels, WordPieceAndWordLevel) {
  const auto wp = from_json_text(
      R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
          "max_input_chars_per_word":5,"vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"a":4,"é":5,"##é":6}})");
  EXPECT_TOKENS(*wp, "unaff", {1, "un", 0, 2}, {2, "##aff", 2, 5});
  EXPECT_TOKENS(*wp, "unaffable", {0, "[UNK]", 0, 9});  // 9 chars > 5
  EXPECT_TOKENS(*wp, "unx", {0, "[UNK]", 0, 3});
  EXPECT_TOKENS(*wp, "éé", {5, "é", 0, 2}, {6, "##é", 2, 4});
  EXPECT_EQ(wp->vocab_size(), 7u);
  EXPECT_EQ(*wp->id_to_token(2), "##aff");
  EXPECT_EQ(wp->id_to_token(7), nullptr);
  const auto wl =
      from_json_text(R"({"type":"WordLevel","unk_token":"<unk>","vocab":{"<unk>":0,"a":1,"b":2}})");
  EXPECT_TOKENS(*wl, "a", {1, "a", 0, 1});
  EXPECT_TOKENS(*wl, "ab", {0, "<unk>", 0, 2});
  const auto wl2 = from_json_text(R"({"type":"WordLevel","unk_token":"<nope>","vocab":{"a":1}})");
  EXPECT_KILN_ERROR(run(*wl2, "b"), "WordLevel", "unk token \"<nope>\" is not in the vocabulary");
}

TEST(TokModels, LongWords) {
  // One pre-token of 200k code points: every merge still by rank, in
  // O(n log n); offsets tile the input.
  const auto m = bpe({{"a", 0}, {"b", 1}, {"ab", 2}, {"abab", 3}, {"ba", 4}},
                     {{"a", "b"}, {"ab", "ab"}, {"b", "a"}});
  std::string w;
  for (int i = 0; i < 100000; ++i) w += "ab";
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = run(*m, w);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ASSERT_EQ(out.size(), 50000u);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].id, 3);
    ASSERT_EQ(out[i].offsets, (Span{4 * i, 4 * i + 4}));
  }
  const auto wp = from_json_text(
      R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
          "max_input_chars_per_word":1000000,"vocab":{"[UNK]":0,"a":1,"##a":2,"##aa":3}})");
  const auto pieces = run(*wp, std::string(200001, 'a'));
  ASSERT_EQ(pieces.size(), 100001u);
  EXPECT_EQ(pieces.back().id, 3);
}

TEST(TokModels, SparseIds) {
  const auto m =
      from_json_text(R"({"type":"BPE","vocab":{"a":0,"b":7,"ab":2147483646},"merges":["a b"]})");
  EXPECT_TOKENS(*m, "ab", {2147483646, "ab", 0, 2});
  EXPECT_EQ(*m->id_to_token(7), "b");
  EXPECT_EQ(m->id_to_token(1), nullptr);
  EXPECT_EQ(m->vocab_size(), 3u);
}

// ---- hostile model objects ----------------------------------------------------

TEST(TokModels, HostileJsonErrors) {
  const std::string bpe_ok = R"("vocab":{"a":0,"b":1,"ab":2},"merges":["a b"])";
  auto b = [&](const std::string& extra) {
    return from_json_text("{\"type\":\"BPE\"," + extra + "}");
  };
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"dropout":0.5)"), "model.dropout", "not supported");
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"dropout":1.5)"), "model.dropout", "between 0 and 1");
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"dropout":"x")"), "model.dropout", "expected a number");
  EXPECT_NO_THROW(b(bpe_ok + R"(,"dropout":0.0)"));
  EXPECT_NO_THROW(b(bpe_ok + R"(,"dropout":null)"));
  EXPECT_KILN_ERROR(b(R"("merges":[])"), "model", "missing field \"vocab\"");
  EXPECT_KILN_ERROR(b(R"("vocab":{})"), "model", "missing field \"merges\"");
  EXPECT_KILN_ERROR(b(R"("vocab":null,"merges":[])"), "model.vocab",
                    "expected an object, got null");
  EXPECT_KILN_ERROR(b(R"("vocab":{},"merges":null)"), "model.merges", "expected an array");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":1},"merges":["a b",["a","b"]])"), "model.merges[1]",
                    "every merge");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":1},"merges":[["a","b","c"]])"), "model.merges[0]");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":1},"merges":["a b c"])"), "model.merges[0]",
                    "two tokens separated by one space");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":1,"ab":2},"merges":["#version 1","a x"])"),
                    "model.merges[1]", "token \"x\" is not in the vocabulary");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":1},"merges":[["a","b"]])"), "model.merges[0]",
                    "merged token \"ab\" is not in the vocabulary");
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"continuing_subword_prefix":"##")"), "model.merges[0]",
                    "shorter than continuing_subword_prefix");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0.5},"merges":[])"), "model.vocab[\"a\"]",
                    "expected an integer");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":-1},"merges":[])"), "model.vocab[\"a\"]", "outside");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":4294967296},"merges":[])"), "model.vocab[\"a\"]", "outside");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":1e300},"merges":[])"), "model.vocab[\"a\"]");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":99999999999999999999999},"merges":[])"),
                    "model.vocab[\"a\"]");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":0,"b":0},"merges":[])"), "model.vocab",
                    "tokens \"a\" and \"b\" both have id 0");
  EXPECT_KILN_ERROR(b(R"("vocab":{"a":5,"b":5,"c":2000000000},"merges":[])"), "both have id 5");
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"unk_token":5)"), "model.unk_token", "expected a string");
  EXPECT_KILN_ERROR(b(bpe_ok + R"(,"fuse_unk":"yes")"), "model.fuse_unk", "expected a boolean");
  EXPECT_KILN_ERROR(from_json_text(R"({"type":"Foo"})"), "model.type",
                    "unknown model type \"Foo\"");
  EXPECT_KILN_ERROR(from_json_text(R"({"type":7})"), "model.type", "expected a string");
  EXPECT_KILN_ERROR(from_json_text("{\"type\":null," + bpe_ok + "}"), "model.type", "got null");
  // "Unigram" goes to unigram_from_json (data/tokenizer/unigram.h).
  EXPECT_EQ(from_json_text(R"({"type":"Unigram","vocab":[["a",0.0],["b",-1.0]],"unk_id":null})")
                ->vocab_size(),
            2u);
  EXPECT_KILN_ERROR(from_json_text(R"([])"), "model", "expected an object");
  EXPECT_KILN_ERROR(from_json_text(R"({})"), "model", "no \"type\"", "not BPE", "not WordPiece",
                    "not WordLevel", "not Unigram");
  auto wp = [&](const std::string& fields) {
    return from_json_text("{\"type\":\"WordPiece\"," + fields + "}");
  };
  const std::string wp_rest =
      R"("continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":{})";
  EXPECT_KILN_ERROR(wp(wp_rest), "model", "missing field \"unk_token\"");
  EXPECT_KILN_ERROR(wp(R"("unk_token":null,)" + wp_rest), "model.unk_token",
                    "expected a string, got null");
  EXPECT_KILN_ERROR(
      wp(R"("unk_token":"u","continuing_subword_prefix":"##","max_input_chars_per_word":-1,"vocab":{})"),
      "model.max_input_chars_per_word", "outside");
  EXPECT_KILN_ERROR(
      wp(R"("unk_token":"u","continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":[])"),
      "model.vocab", "expected an object");
  EXPECT_KILN_ERROR(from_json_text(R"({"type":"WordLevel","vocab":{}})"), "model",
                    "missing field \"unk_token\"");
  EXPECT_KILN_ERROR(from_json_text(R"({"type":"WordLevel","unk_token":"u","vocab":{"a":-3}})"),
                    "model.vocab[\"a\"]", "outside");
  // Untagged (pre-"type") files: the first model kind that reads wins.
  EXPECT_NE(dynamic_cast<const Bpe*>(from_json_text("{" + bpe_ok + "}").get()), nullptr);
  EXPECT_NE(dynamic_cast<const WordPieceModel*>(
                from_json_text(R"({"unk_token":"u",)" + wp_rest + "}").get()),
            nullptr);
  EXPECT_NE(dynamic_cast<const WordLevel*>(from_json_text(R"({"unk_token":"u","vocab":{}})").get()),
            nullptr);
}

// ---- vocab.json + merges.txt, vocab.txt ------------------------------------------

class TokModelsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiln::testing::fresh_dir("tok_models", "files");
    fs::create_directories(dir_);
    write("vocab.json", R"({"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4})");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::unique_ptr<Bpe> load(const std::string& merges_text) {
    return bpe_from_vocab_merges(path("vocab.json"), write("merges.txt", merges_text));
  }
  fs::path dir_;
};

TEST_F(TokModelsFiles, MergesTxt) {
  EXPECT_TOKENS(*load("#version: 0.2\na b\nab c\n"), "abc", {4, "abc", 0, 3});
  EXPECT_TOKENS(*load("#version: 0.2\r\na b\r\nab c\r\n"), "abc", {4, "abc", 0, 3});
  EXPECT_TOKENS(*load("a b\n#version again\nab c"), "abc", {4, "abc", 0, 3});  // skipped anywhere
  EXPECT_TOKENS(*load(""), "abc", {0, "a", 0, 1}, {1, "b", 1, 2}, {2, "c", 2, 3});
  // As HF: a blank line, a double space or a trailing space is a bad line.
  EXPECT_KILN_ERROR(load("#version: 0.2\na b\n\nab c\n"), "merges.txt", "line 3", "one space");
  EXPECT_KILN_ERROR(load("a  b\n"), "line 1", "one space");
  EXPECT_KILN_ERROR(load("a b \n"), "line 1", "one space");
  EXPECT_KILN_ERROR(load("#version: 0.2\na b\na d\n"), "merges.txt", "line 3",
                    "token \"d\" is not in the vocabulary");
  EXPECT_KILN_ERROR(load("a b\r"), "line 1", "token \"b\r\"");  // a lone final \r stays
  EXPECT_KILN_ERROR(load("a \xff\n"), "line 1", "not valid UTF-8");
}

TEST_F(TokModelsFiles, VocabJsonAndBoundedInput) {
  const std::string merges = write("merges.txt", "a b\n");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(write("v1.json", "[1, 2]"), merges), "vocab.json",
                    "expected an object");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(write("v2.json", R"({"a": "0"})"), merges), "vocab.json",
                    "token \"a\"", "expected an id");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(write("v3.json", R"({"a": 0, "b": 0})"), merges),
                    "both have id 0");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(write("v4.json", "{\"a\": 0,"), merges), "vocab.json",
                    "not valid JSON");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(path("missing.json"), merges), "vocab.json",
                    "cannot open");
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(path("vocab.json"), dir_.string()), "merges.txt",
                    "not a regular file");
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_KILN_ERROR(bpe_from_vocab_merges(path("vocab.json"), fifo), "merges.txt",
                    "not a regular file");
  EXPECT_KILN_ERROR(wordpiece_model_from_vocab_file(fifo), "vocab.txt", "not a regular file");
}

TEST_F(TokModelsFiles, VocabTxt) {
  // Lines trimmed at the end (Unicode White_Space), a repeated token keeps
  // its last line, leaving a hole at the first.
  const auto m =
      wordpiece_model_from_vocab_file(write("vocab.txt", "[UNK]\nab \t\n##c\u3000\r\nab\n##d"));
  EXPECT_EQ(m->vocab_size(), 4u);
  EXPECT_EQ(m->token_to_id("ab"), 3);
  EXPECT_EQ(m->id_to_token(1), nullptr);
  EXPECT_EQ(*m->id_to_token(2), "##c");
  EXPECT_TOKENS(*m, "abcd", {3, "ab", 0, 2}, {2, "##c", 2, 3}, {4, "##d", 3, 4});
  EXPECT_KILN_ERROR(wordpiece_model_from_vocab_file(write("bad.txt", "a\n\xc3\n")), "vocab.txt",
                    "line 2", "UTF-8");
}

// ---- against HF tokenizers -------------------------------------------------------

Json read_json(const std::string& path) {
  kiln::JsonLimits limits;
  limits.max_bytes = uint64_t{1} << 30;
  return kiln::read_json_file(path, path, limits);
}

// Runs the reference script once per process; the golden JSON.
const Json& golden() {
  static const Json j = [] {
    const fs::path dir =
        fs::path(KILN_BINARY_DIR) / "tokenizer_golden" / ("models." + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "golden.json").string();
    const std::string cmd =
        quoted(kiln::testing::python()) + " " +
        quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/tok_models_reference.py") +
        " --data " + quoted(env_or("KILN_DATA", KILN_DEFAULT_DATA)) + " --workdir " +
        quoted(dir.string()) + " --output " + quoted(out);
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "reference script failed: " << cmd;
      return Json();
    }
    Json g = read_json(out);
    // The trained tokenizer.json files are read back by name: keep them until exit.
    static const std::string cleanup = dir.string();
    std::atexit([] { fs::remove_all(cleanup); });
    return g;
  }();
  return j;
}

std::unique_ptr<Model> load_source(const Json& src, const BpeOptions* options = nullptr) {
  if (src.contains("json"))
    return model_from_json(read_json(src["json"].get<std::string>())["model"], "model");
  if (src.contains("model")) return model_from_json(src["model"], "model");
  if (src.contains("merges"))
    return bpe_from_vocab_merges(src["vocab"].get<std::string>(), src["merges"].get<std::string>(),
                                 options ? *options : BpeOptions{});
  return wordpiece_model_from_vocab_file(src["vocab_txt"].get<std::string>());
}

std::string render_golden(const Json& tokens) {
  if (tokens.is_null()) return "(error)";
  std::string s;
  for (const Json& t : tokens)
    s += kiln::detail::str_cat("[", t[0].get<int64_t>(), " ", t[1].dump(), " ", t[2].get<size_t>(), "-",
                                 t[3].get<size_t>(), "]");
  return s;
}

// Compares one model with HF on every case; returns the mismatch count.
size_t compare(const Json& m, const Model& model, const std::string& label) {
  size_t mismatches = 0, tokens = 0;
  std::vector<Token> out;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Json& c : m["cases"]) {
    const std::string& text = c[0].get_ref<const std::string&>();
    out.clear();
    std::string got;
    try {
      model.tokenize(text, out);
      got = render(out);
    } catch (const kiln::Error&) {
      got = "(error)";
    }
    tokens += out.size();
    const std::string want = render_golden(c[1]);
    if (got != want && ++mismatches <= 5)
      ADD_FAILURE() << label << ": " << Json(text).dump() << "\n  hf:   " << want
                    << "\n  kiln: " << got;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(model.vocab_size(), m["vocab_size"].get<size_t>()) << label;
  size_t id_mismatches = 0;
  for (const Json& p : m["ids"]) {
    const int64_t id = p[0].get<int64_t>();
    const std::string* s = id <= INT32_MAX ? model.id_to_token(static_cast<int32_t>(id)) : nullptr;
    const std::string got = s ? Json(*s).dump() : "null";
    if (got != p[1].dump() && ++id_mismatches <= 3)
      ADD_FAILURE() << label << ": id_to_token(" << id << ") hf " << p[1].dump() << " kiln " << got;
  }
  if (label.rfind("random-", 0) != 0 || mismatches)
    std::cout << "[model parity] " << label << ": " << m["cases"].size() << " pre-tokens, "
              << tokens << " tokens in " << secs * 1e3 << " ms, " << mismatches << " mismatches\n";
  return mismatches + id_mismatches;
}

// Every golden model whose name starts with `prefix`.
void expect_models_match(const std::string& prefix, size_t expected_models) {
  const Json& g = golden();
  ASSERT_TRUE(g.contains("models"));
  size_t n = 0;
  for (const Json& m : g["models"]) {
    const std::string name = m["name"].get<std::string>();
    if (name.rfind(prefix, 0) != 0) continue;
    ++n;
    std::unique_ptr<Model> model;
    try {
      model = load_source(m["source"]);
    } catch (const kiln::Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    EXPECT_EQ(compare(m, *model, name), 0u) << name;
  }
  EXPECT_EQ(n, expected_models) << prefix;
}

TEST(TokModelsHf, Gpt2TokenizerJson) { expect_models_match("gpt2-json", 1); }
TEST(TokModelsHf, Gpt2VocabMerges) { expect_models_match("gpt2-files", 1); }
TEST(TokModelsHf, TrainedBpe) { expect_models_match("bpe-", 11); }
TEST(TokModelsHf, RandomBpe) { expect_models_match("random-bpe-", 60); }
TEST(TokModelsHf, WordPiece) { expect_models_match("wordpiece-", 5); }
TEST(TokModelsHf, WordLevel) { expect_models_match("wordlevel-", 2); }

// GPT-2 with no cache, a tiny one (emptied constantly) and the default, from
// 8 threads at once: always HF's tokens.
TEST(TokModelsHf, Gpt2CacheAndThreads) {
  const Json& g = golden();
  ASSERT_TRUE(g.contains("models"));
  const Json* gpt2 = nullptr;
  for (const Json& m : g["models"])
    if (m["name"] == "gpt2-files") gpt2 = &m;
  ASSERT_NE(gpt2, nullptr);
  std::vector<std::string> wants;
  for (const Json& c : (*gpt2)["cases"]) wants.push_back(render_golden(c[1]));
  for (size_t capacity : {size_t{0}, size_t{3}, kDefaultBpeCacheCapacity}) {
    BpeOptions o;
    o.cache_capacity = capacity;
    const auto model = load_source((*gpt2)["source"], &o);
    std::atomic<size_t> bad{0};
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        std::vector<Token> out;
        const Json& cases = (*gpt2)["cases"];
        for (size_t round = 0; round < 2; ++round)
          for (size_t i = t; i < cases.size(); i += 2) {  // threads overlap
            out.clear();
            model->tokenize(cases[i][0].get_ref<const std::string&>(), out);
            bad += render(out) != wants[i];
          }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0u) << "cache capacity " << capacity;
  }
}

TEST(TokModelsHf, HostileModelsRefusedAsHf) {
  const Json& g = golden();
  ASSERT_TRUE(g.contains("hostile"));
  for (const Json& h : g["hostile"]) {
    const std::string name = h["name"].get<std::string>();
    const bool hf_ok = h["hf_ok"].get<bool>();
    const bool kiln_rejects = h["kiln_rejects"].get<bool>();
    std::string error;
    try {
      (void)model_from_json(h["model"], "model");
    } catch (const kiln::Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": a non-kiln exception: " << e.what();
      continue;
    }
    if (!hf_ok || kiln_rejects)
      EXPECT_FALSE(error.empty()) << name << ": HF: "
                                  << (hf_ok ? "accepts (kiln refuses on purpose)"
                                            : h["hf_error"].get<std::string>());
    else
      EXPECT_TRUE(error.empty()) << name << ": HF accepts, kiln: " << error;
  }
}

}  // namespace
