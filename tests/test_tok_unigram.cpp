// The Unigram model (data/tokenizer/unigram.h) against HF tokenizers.
//
// Hand-checked cases are HF's own Rust unit tests (models/unigram/model.rs).
// The differential test runs tests/reference/tok_unigram_reference.py
// (KILN_PYTHON) to write, for the real XLM-R model, Unigram models trained on
// WikiText-2 and random small models, the tokens tokenizers' Model.tokenize
// gives for thousands of pre-tokens, and compares every id, value and
// offset, after reading each model's scores as HF does (Note [HF float
// parsing] in unigram.h; the script lists the scores HF holds). The trie is
// checked against std::map, hostile tokenizer.json fields give kiln::Errors.
//
// SentencePiece .model files (data/tokenizer/sentencepiece_model.h): the
// real XLM-R model converted with no model_type must give the real
// tokenizer.json's model, normalizer, pre-tokenizer and decoder; that model
// and SentencePiece models trained by the script (unigram and BPE, with and
// without byte_fallback) converted for each supported model_type must give
// exactly the tokenizer.json transformers builds (KILN_HF_PYTHON, which needs
// the sentencepiece and protobuf packages), as tokenizers 0.23.3 rewrites it
// (keeping the exact float scores the conversion holds).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/tokenizer/sentencepiece_model.h"
#include "kiln/data/tokenizer/unigram.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using kiln::data::tok::apply_serde_json_floats;
using kiln::data::tok::DoubleArrayTrie;
using kiln::data::tok::Json;
using kiln::data::tok::parse_sentencepiece_model;
using kiln::data::tok::sentencepiece_to_tokenizer_json;
using kiln::data::tok::serde_json_f64;
using kiln::data::tok::Token;
using kiln::data::tok::Unigram;
using kiln::data::tok::unigram_from_json;
using kiln::testing::env_or;
using kiln::testing::quoted;

Unigram make(std::vector<std::pair<std::string, double>> pieces, std::optional<int32_t> unk,
             bool byte_fallback = false) {
  std::vector<Unigram::Piece> v;
  for (auto& [p, s] : pieces) v.push_back({p, s});
  return Unigram(std::move(v), unk, byte_fallback);
}

std::vector<std::string> values(const Unigram& m, std::string_view s) {
  std::vector<Token> out;
  m.tokenize(s, out);
  std::vector<std::string> v;
  for (const Token& t : out) v.push_back(t.value);
  return v;
}
using Strings = std::vector<std::string>;

// ---- hand-checked cases (HF's model.rs tests) -----------------------------

TEST(TokUnigram, DocExample) {
  const Unigram m = make({{"<unk>", 0}, {"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"cd", 1},
                          {"ab", 2}, {"abc", 5}, {"abcd", 10}},
                         0);
  EXPECT_EQ(values(m, "abcdacdxx"), (Strings{"abcd", "a", "cd", "xx"}));
  EXPECT_EQ(values(m, "abcd"), (Strings{"abcd"}));
}

TEST(TokUnigram, Encode2) {
  const Unigram m = make({{"<unk>", 0.0}, {"ab", 0.0}, {"cd", -0.1}, {"abc", -0.2}, {"a", -0.3},
                          {"b", -0.4}, {"c", -0.5}, {"ABC", -0.5}, {"abcdabcd", 20.0},
                          {"q", 20.5}, {"r", 20.5}, {"qr", -0.5}},
                         0);
  EXPECT_EQ(values(m, "abc"), (Strings{"abc"}));
  EXPECT_EQ(values(m, "AB"), (Strings{"AB"}));
  EXPECT_EQ(values(m, "abcd"), (Strings{"ab", "cd"}));
  EXPECT_EQ(values(m, "abcc"), (Strings{"abc", "c"}));
  EXPECT_EQ(values(m, "xabcabaabcdd"), (Strings{"x", "abc", "ab", "a", "ab", "cd", "d"}));
  EXPECT_EQ(values(m, "xyz東京"), (Strings{"xyz東京"}));
  EXPECT_EQ(values(m, "ABC"), (Strings{"ABC"}));
  EXPECT_EQ(values(m, "abABCcd"), (Strings{"ab", "ABC", "cd"}));
  EXPECT_EQ(values(m, "ababcdabcdcd"), (Strings{"ab", "abcdabcd", "cd"}));
  EXPECT_EQ(values(m, "abqrcd"), (Strings{"ab", "q", "r", "cd"}));
  // Ids and byte offsets of a fused unknown run.
  std::vector<Token> out;
  m.tokenize("ab東京c", out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].id, 0);
  EXPECT_EQ(out[1].value, "東京");
  EXPECT_EQ(out[1].offsets, (kiln::data::tok::Span{2, 8}));
  EXPECT_EQ(out[2].offsets, (kiln::data::tok::Span{8, 9}));
}

TEST(TokUnigram, ByteFallback) {
  const Unigram m = make({{"<unk>", 0.0}, {"<0xC3>", -0.01}, {"<0xA9>", -0.03}}, 0, true);
  std::vector<Token> out;
  m.tokenize("é", out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 1);
  EXPECT_EQ(out[0].value, "<0xC3>");
  EXPECT_EQ(out[0].offsets, (kiln::data::tok::Span{0, 2}));
  EXPECT_EQ(out[1].id, 2);
  EXPECT_EQ(out[1].value, "<0xA9>");
  EXPECT_EQ(out[1].offsets, (kiln::data::tok::Span{0, 2}));
  out.clear();
  m.tokenize("?é", out);  // '?' has no byte piece: the fused run is one unk
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, 0);
  EXPECT_EQ(out[0].value, "?é");
}

TEST(TokUnigram, ConcurrentCallsShareNothing) {
  // Each thread has its own lattice; results are the same on every thread.
  const Unigram m = make({{"<unk>", 0}, {"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"cd", 1},
                          {"ab", 2}, {"abc", 5}, {"abcd", 10}},
                         0);
  const std::string long_text = std::string(5000, 'a') + "abcdxx" + std::string(3000, 'c');
  const Strings want = values(m, long_text);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        bad[t] += values(m, i % 2 ? long_text : "abcdacdxx") !=
                  (i % 2 ? want : Strings{"abcd", "a", "cd", "xx"});
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(TokUnigram, MissingUnk) {
  const Unigram m = make({{"a", -1}, {"ab", -1}, {"c", -1}}, std::nullopt);
  EXPECT_KILN_ERROR(values(m, "xa"), "unknown token but unk_id is missing");
  // 'b' has no piece, but the path through "ab" is already better than an
  // unknown node there, so HF asks for no unk_id.
  EXPECT_EQ(values(m, "abc"), (Strings{"ab", "c"}));
}

TEST(TokUnigram, DuplicatesAndLookups) {
  // The last id of a piece wins (its score too); id_to_token keeps every id.
  const Unigram m = make({{"<unk>", 0}, {"ab", -5}, {"a", -1}, {"b", -1}, {"ab", -1.5}}, 0);
  EXPECT_EQ(m.vocab_size(), 5u);
  EXPECT_EQ(m.token_to_id("ab"), 4);
  EXPECT_EQ(*m.id_to_token(1), "ab");
  EXPECT_EQ(m.id_to_token(5), nullptr);
  EXPECT_EQ(m.id_to_token(-1), nullptr);
  EXPECT_EQ(m.token_to_id("abc"), -1);
  EXPECT_EQ(m.token_to_id(""), -1);
  std::vector<Token> out;
  m.tokenize("ab", out);
  ASSERT_EQ(out.size(), 1u);  // -1.5 (id 4) beats a + b = -2
  EXPECT_EQ(out[0].id, 4);
}

TEST(TokUnigram, Trie) {
  std::mt19937 rng(5);
  std::map<std::string, int32_t> keys;
  const std::string alphabet = std::string("ab\xc3\xa9\x00\xff z", 8);
  for (int i = 0; i < 3000; ++i) {
    std::string k;
    const int len = static_cast<int>(rng() % 9);
    for (int c = 0; c < len; ++c) k += alphabet[rng() % alphabet.size()];
    keys.emplace(k, i);
  }
  keys.emplace(std::string(5000, 'q'), 99999);  // deep chain
  std::vector<std::pair<std::string_view, int32_t>> in(keys.begin(), keys.end());
  std::shuffle(in.begin(), in.end(), rng);
  DoubleArrayTrie t;
  t.build(in);
  for (auto& [k, id] : keys) EXPECT_EQ(t.find(k), id) << k;
  for (int i = 0; i < 3000; ++i) {
    std::string k;
    for (int c = 0, len = static_cast<int>(rng() % 11); c < len; ++c)
      k += alphabet[rng() % alphabet.size()];
    auto it = keys.find(k);
    EXPECT_EQ(t.find(k), it == keys.end() ? -1 : it->second);
    // Prefix walk: exactly the keys that are prefixes of k.
    int32_t unit = DoubleArrayTrie::kRoot;
    for (size_t j = 0; j < k.size(); ++j) {
      unit = t.step(unit, static_cast<unsigned char>(k[j]));
      auto p = keys.find(k.substr(0, j + 1));
      if (unit < 0) {
        // No key has this prefix.
        auto lb = keys.lower_bound(k.substr(0, j + 1));
        EXPECT_TRUE(lb == keys.end() || lb->first.compare(0, j + 1, k, 0, j + 1) != 0);
        break;
      }
      EXPECT_EQ(t.value(unit), p == keys.end() ? -1 : p->second);
    }
  }
  EXPECT_EQ(t.find(std::string(5000, 'q')), 99999);
  EXPECT_EQ(t.find(std::string(4999, 'q')), -1);
  EXPECT_KILN_ERROR(t.build({{"a", 1}, {"a", 2}}), "duplicate key");
}

TEST(TokUnigram, SerdeJsonFloats) {
  // Values tokenizers 0.23.3 holds after reading these literals (checked in Python).
  EXPECT_EQ(serde_json_f64(-7.4715776443481445), -7.471577644348144);
  EXPECT_EQ(serde_json_f64(-1.4207595586776733), -1.4207595586776731);
  EXPECT_EQ(serde_json_f64(-3.4635426998138428), -3.4635426998138428);  // unchanged
  for (double d : {0.0, -0.0, 25.0, -3.25, 0.1, 1e-7, 1e22, 123456789.0})
    EXPECT_EQ(serde_json_f64(d), d) << d;
  EXPECT_TRUE(std::signbit(serde_json_f64(-0.0)));
  Json j = Json::parse(R"({"a":[-7.4715776443481445,3,{"b":-1.4207595586776733}],"c":"x"})");
  apply_serde_json_floats(j);
  EXPECT_EQ(j["a"][0].get<double>(), -7.471577644348144);
  EXPECT_EQ(j["a"][1], 3);
  EXPECT_EQ(j["a"][2]["b"].get<double>(), -1.4207595586776731);
}

// ---- hostile tokenizer.json -------------------------------------------------

TEST(TokUnigram, HostileJson) {
  auto load = [](const std::string& text) { return unigram_from_json(Json::parse(text), "model"); };
  EXPECT_KILN_ERROR(load(R"({"type":"Unigram"})"), "model", "missing field \"vocab\"");
  EXPECT_KILN_ERROR(load(R"({"vocab":{}})"), "model.vocab", "expected an array");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a"]]})"), "model.vocab[0]", "[piece, score] pair");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a",1,2]]})"), "model.vocab[0]", "pair");
  EXPECT_KILN_ERROR(load(R"({"vocab":["a"]})"), "model.vocab[0]", "pair");
  EXPECT_KILN_ERROR(load(R"({"vocab":[[1,1]]})"), "model.vocab[0][0]", "expected a string");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a","x"]]})"), "model.vocab[0][1]", "expected a number");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a",1]],"unk_id":1})"), "model.unk_id", "not in the vocabulary");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a",1]],"unk_id":-1})"), "model.unk_id", "outside");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a",1]],"unk_id":0.5})"), "model.unk_id", "expected an integer");
  EXPECT_KILN_ERROR(load(R"({"vocab":[],"unk_id":0})"), "model.unk_id", "vocabulary is empty");
  EXPECT_KILN_ERROR(load(R"({"vocab":[["a",1]],"byte_fallback":1})"), "model.byte_fallback", "boolean");
  EXPECT_KILN_ERROR(load(R"({"type":"BPE","vocab":[]})"), "model.type", "expected \"Unigram\"");
  EXPECT_KILN_ERROR(load(R"([])"), "model", "expected an object");
  // Non-finite scores can only come from a Json built in memory.
  auto one = [](Json piece, double score) {
    Json j = Json::object();
    j["vocab"] = Json::array({Json::array({std::move(piece), score})});
    return j;
  };
  Json j = one("a", std::numeric_limits<double>::infinity());
  EXPECT_KILN_ERROR(unigram_from_json(j, "model"), "model.vocab[0][1]", "not finite");
  j = one("a", std::nan(""));
  EXPECT_KILN_ERROR(unigram_from_json(j, "model"), "not finite");
  j = one(std::string("\xff"), 1.0);
  EXPECT_KILN_ERROR(unigram_from_json(j, "model"), "model.vocab[0][0]", "UTF-8");
  // Accepted as HF does: no unk, an empty vocabulary, duplicates, "" pieces.
  EXPECT_EQ(load(R"({"vocab":[],"unk_id":null})")->vocab_size(), 0u);
  auto m = load(R"({"vocab":[["",0],["a",-1],["a",-2]],"unk_id":0})");
  EXPECT_EQ(m->token_to_id(""), 0);
  EXPECT_EQ(m->token_to_id("a"), 2);
  std::vector<Token> out;
  m->tokenize("ab", out);  // b is unknown (min score -2, unk -12)
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 2);
  EXPECT_EQ(out[1].id, 0);
  EXPECT_EQ(out[1].value, "b");
}

// ---- against HF tokenizers --------------------------------------------------

Json read_json(const std::string& path) {
  const std::string text = kiln::testing::read_bytes(path);
  EXPECT_FALSE(text.empty()) << "cannot read " << path;
  return Json::parse(text);
}

std::string golden_dir() {
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "tokenizer_golden";
  fs::create_directories(dir);
  return dir.string();
}

std::string reference_script() {
  return quoted(kiln::detail::str_cat(KILN_SOURCE_DIR, "/tests/reference/tok_unigram_reference.py"));
}

std::string render(const std::vector<Token>& tokens) {
  std::string s;
  for (const Token& t : tokens)
    s += kiln::detail::str_cat("[", t.id, " ", Json(t.value).dump(), " ", t.offsets.begin, "-", t.offsets.end, "]");
  return s;
}

std::string render(const Json& tokens) {
  if (tokens.is_null()) return "(error)";
  std::string s;
  for (const Json& t : tokens)
    s += kiln::detail::str_cat("[", t[0].get<int>(), " ", t[1].dump(), " ", t[2].get<size_t>(), "-",
                                 t[3].get<size_t>(), "]");
  return s;
}

TEST(TokUnigram, MatchesHfTokenizers) {
  const std::string data = env_or("KILN_DATA", KILN_DEFAULT_DATA);
  const std::string golden = golden_dir() + "/unigram." + std::to_string(::getpid()) + ".json";
  const std::string cmd =
      quoted(kiln::testing::python()) + " " + reference_script() + " tokens --data " +
      quoted(data) + " --edge-cases " +
      quoted(std::string(KILN_SOURCE_DIR) + "/tests/data/unicode_edge_cases.txt") + " --output " +
      quoted(golden);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
  const Json j = read_json(golden);
  fs::remove(golden);
  ASSERT_TRUE(j.contains("models"));
  size_t total_cases = 0;
  for (const Json& m : j["models"]) {
    const std::string name = m["name"].get<std::string>();
    Json model_json = m["model"].is_string()
                          ? read_json(m["model"].get<std::string>().substr(5))["model"]  // "file:"
                          : m["model"];
    // HF read this model from JSON text: its scores are serde_json's
    // readings of it (Note [HF float parsing]), which scores_changed lists
    // where they differ from the exact values.
    std::vector<double> want_scores;
    for (const Json& p : model_json["vocab"]) want_scores.push_back(p[1].get<double>());
    for (const Json& c : m["scores_changed"]) want_scores[c[0].get<size_t>()] = c[1].get<double>();
    apply_serde_json_floats(model_json);
    size_t score_mismatches = 0;
    for (size_t i = 0; i < want_scores.size(); ++i)
      score_mismatches += model_json["vocab"][i][1].get<double>() != want_scores[i];
    EXPECT_EQ(score_mismatches, 0u) << name << ": scores differ from those HF holds";
    const auto model = unigram_from_json(model_json, "model");
    size_t mismatches = 0, errors = 0, tokens = 0;
    std::vector<Token> out;
    for (const Json& c : m["cases"]) {
      const std::string text = c[0].get<std::string>();
      const Json& want = c[1];
      out.clear();
      std::string got;
      try {
        model->tokenize(text, out);
        got = render(out);
      } catch (const kiln::Error&) {
        got = "(error)";
      }
      errors += want.is_null();
      tokens += out.size();
      if (got != render(want) && ++mismatches <= 5)
        ADD_FAILURE() << name << ": " << Json(text).dump() << "\n  hf:   " << render(want)
                      << "\n  kiln: " << got;
    }
    total_cases += m["cases"].size();
    if (name.rfind("random-", 0) != 0 || mismatches)
      std::cout << "[unigram parity] " << name << ": " << m["scores_changed"].size() << " of "
                << want_scores.size() << " scores read as serde_json does, " << m["cases"].size()
                << " pre-tokens (" << errors << " raising), " << tokens << " tokens, " << mismatches
                << " mismatches\n";
    EXPECT_EQ(mismatches, 0u) << name;
  }
  EXPECT_GT(total_cases, 50000u);
}

// ---- SentencePiece .model files ---------------------------------------------

// The path of the first difference between two JSON values ("" when equal).
std::string first_difference(const Json& a, const Json& b, const std::string& path = "") {
  if (a == b) return "";
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return path + "." + it.key() + " (only in kiln's)";
      const std::string d = first_difference(it.value(), b[it.key()], path + "." + it.key());
      if (!d.empty()) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) return path + "." + it.key() + " (only in the reference)";
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const std::string d = first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return path + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " items";
  }
  return path + ": " + a.dump().substr(0, 200) + " vs " + b.dump().substr(0, 200);
}

TEST(TokSentencePiece, XlmrMatchesRealTokenizerJson) {
  const std::string dir = kiln::testing::data_file("tokenizers/xlm-roberta/tokenizer.json");
  const Json real = read_json(dir);
  const Json ours = sentencepiece_to_tokenizer_json(
      kiln::testing::data_file("tokenizers/xlm-roberta/sentencepiece.bpe.model"), "");
  for (const char* key : {"model", "normalizer", "pre_tokenizer", "decoder"})
    EXPECT_EQ(first_difference(ours[key], real[key], key), "");
  EXPECT_EQ(ours["model"]["vocab"].size(), 250002u);
  // The model loads, and tokenizes as the real one.
  const auto a = unigram_from_json(ours["model"], "model");
  const auto b = unigram_from_json(real["model"], "model");
  std::vector<Token> ta, tb;
  a->tokenize("\xe2\x96\x81Homarus\xe2\x96\x81gammarus", ta);
  b->tokenize("\xe2\x96\x81Homarus\xe2\x96\x81gammarus", tb);
  EXPECT_EQ(render(ta), render(tb));
  EXPECT_GT(ta.size(), 2u);
}

TEST(TokSentencePiece, MatchesTransformers) {
  const std::string work = golden_dir() + "/spm." + std::to_string(::getpid());
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string data = env_or("KILN_DATA", KILN_DEFAULT_DATA);
  const std::string hf_python =
      env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
  const std::string convert = quoted(hf_python) + " " + reference_script() +
                              " spm-convert --data " + quoted(data) + " --workdir " +
                              quoted(work) + " 2>/dev/null";
  ASSERT_EQ(std::system(convert.c_str()), 0)
      << "transformers' conversion failed (KILN_HF_PYTHON needs transformers, sentencepiece and "
         "protobuf): "
      << convert;
  const std::string canon = quoted(kiln::testing::python()) + " " + reference_script() +
                            " canonical --workdir " + quoted(work);
  ASSERT_EQ(std::system(canon.c_str()), 0) << canon;
  const Json manifest = read_json(work + "/manifest.json");
  ASSERT_GE(manifest.size(), 7u);
  for (const Json& job : manifest) {
    const std::string model = job["model"].get<std::string>();
    const std::string type = job["model_type"].get<std::string>();
    const Json want = read_json(job["json"].get<std::string>() + ".canonical.json");
    const Json got = sentencepiece_to_tokenizer_json(model, type);
    EXPECT_EQ(first_difference(got, want), "")
        << fs::path(model).filename() << " as \"" << type << "\"";
    std::cout << "[sentencepiece] " << fs::path(model).filename().string() << " as \"" << type
              << "\": " << got["model"]["type"].get<std::string>() << ", "
              << got["model"]["vocab"].size() << " pieces"
              << (got["model"].contains("merges")
                      ? ", " + std::to_string(got["model"]["merges"].size()) + " merges"
                      : std::string())
              << (got == want ? ", identical to transformers'" : ", DIFFERENT") << "\n";
    // What kiln builds loads as a model (BPE is another file's).
    if (got["model"]["type"] == "Unigram") {
      EXPECT_NO_THROW(unigram_from_json(got["model"], "model"));
    }
  }
  fs::remove_all(work);
}

// Protobuf wire format, to write hostile ModelProtos.
std::string varint(uint64_t v) {
  std::string s;
  do {
    s += static_cast<char>((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return s;
}
std::string field_bytes(int number, const std::string& payload) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(payload.size()) + payload;
}
std::string field_varint(int number, uint64_t v) {
  return varint(static_cast<uint64_t>(number) << 3) + varint(v);
}
std::string field_float(int number, float f) {
  std::string s = varint(static_cast<uint64_t>(number) << 3 | 5);
  s.append(reinterpret_cast<const char*>(&f), 4);
  return s;
}
std::string piece(const std::string& text, float score) {
  return field_bytes(1, field_bytes(1, text) + field_float(2, score));
}

TEST(TokSentencePiece, Hostile) {
  auto convert = [](const std::string& bytes, const std::string& type = "") {
    return sentencepiece_to_tokenizer_json(parse_sentencepiece_model(bytes, "x.model"), type,
                                           "x.model");
  };
  const std::string ok = piece("<unk>", 0) + piece("a", -1) + piece("b", -2) + piece("ab", -1.5);
  const Json j = convert(ok);
  EXPECT_EQ(j["model"]["vocab"].size(), 4u);
  EXPECT_EQ(j["model"]["unk_id"], 0);
  EXPECT_EQ(j["normalizer"]["normalizers"].size(), 1u);  // no charsmap: Replace only
  // BPE: merges rebuilt from the pieces ("ab" = "a" + "b").
  const Json bpe = convert(ok + field_bytes(2, field_varint(3, 2)));
  EXPECT_EQ(bpe["model"]["type"], "BPE");
  EXPECT_EQ(bpe["model"]["merges"], Json::parse(R"([["a","b"]])"));
  EXPECT_EQ(bpe["model"]["vocab"]["ab"], 3);

  EXPECT_KILN_ERROR(convert("\xff\xff\xff"), "x.model", "not a SentencePiece model");
  EXPECT_KILN_ERROR(convert(field_bytes(1, "abc").substr(0, 3)), "not a SentencePiece model");
  EXPECT_KILN_ERROR(convert(""), "x.model", "unk_id 0 is outside the vocabulary of 0");
  EXPECT_KILN_ERROR(convert(piece("\xc3", 0)), "x.model", "piece 0 is not valid UTF-8");
  EXPECT_KILN_ERROR(convert(ok + piece("n", std::nanf(""))), "piece 4", "non-finite score");
  EXPECT_KILN_ERROR(convert(ok + piece("i", std::numeric_limits<float>::infinity())),
                    "non-finite");
  EXPECT_KILN_ERROR(convert(ok + field_bytes(2, field_varint(40, 9))), "unk_id 9 is outside");
  EXPECT_KILN_ERROR(convert(ok + field_bytes(2, field_varint(40, uint64_t(-1)))), "unk_id -1");
  EXPECT_KILN_ERROR(convert(ok + field_bytes(2, field_varint(3, 3))), "WORD or CHAR");
  EXPECT_KILN_ERROR(convert(ok + field_bytes(2, field_bytes(45, "\xff"))), "unk_piece");
  EXPECT_KILN_ERROR(convert(ok, "bert"), "no SentencePiece converter for model_type \"bert\"");

  const fs::path dir = kiln::testing::fresh_dir("tok_spm", "hostile");
  fs::create_directories(dir);
  EXPECT_KILN_ERROR(sentencepiece_to_tokenizer_json((dir / "none.model").string(), ""),
                    "none.model", "cannot open");
  EXPECT_KILN_ERROR(sentencepiece_to_tokenizer_json(dir.string(), ""), "not a regular file");
  const fs::path big = dir / "big.model";
  { std::ofstream(big.string()) << "x"; }
  fs::resize_file(big, kiln::data::tok::kMaxSentencePieceModelBytes + 1);  // sparse
  EXPECT_KILN_ERROR(sentencepiece_to_tokenizer_json(big.string(), ""), "over the limit");
  fs::remove_all(dir);
}

}  // namespace
