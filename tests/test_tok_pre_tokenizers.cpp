// HF tokenizers' pre-tokenizers (data/tokenizer/pre_tokenizers.h,
// byte_level.h) and the Oniguruma wrapper (regex.h).
//
// The parity test runs tests/reference/tok_pre_tokenizers_reference.py
// (KILN_PYTHON) to write HF's pre_tokenize_str of every config on real data
// lines and adversarial strings into the build directory, then compares the
// pieces and their character offsets; configs HF rejects must be a
// kiln::Error here too, and so must inputs on which HF's search fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/tokenizer/byte_level.h"
#include "kiln/data/tokenizer/pre_tokenizers.h"
#include "kiln/data/tokenizer/regex.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln::data::tok;
using kiln::testing::env_or;
using kiln::testing::quoted;

struct Piece {
  std::string text;
  size_t begin, end;  // characters of the input
  bool operator==(const Piece&) const = default;
};

// chars[i]: the number of code points before byte i, for each code-point
// boundary i in [0, size].
std::vector<size_t> char_index(const std::string& s) {
  std::vector<size_t> out(s.size() + 1, 0);
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    out[i] = n;
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++n;
  }
  out[s.size()] = n;
  return out;
}

// HF's PreTokenizer.pre_tokenize_str: pieces with character offsets.
std::vector<Piece> pre_tokenize_str(const PreTokenizer& pt, const std::string& text) {
  PreTokenizedString s(text);
  pt.pre_tokenize(s);
  const std::vector<size_t> idx = char_index(text);
  std::vector<Piece> out;
  for (const Split& sp : s.splits()) {
    const Span o = sp.normalized.offsets_original();
    out.push_back({sp.normalized.get(), idx.at(o.begin), idx.at(o.end)});
  }
  return out;
}

// What the Tokenizer reads of each piece: its text, original_shift and the
// input span of every byte's alignment.
struct Aligned {
  std::string text;
  size_t shift;
  std::vector<Span> bytes;
  bool operator==(const Aligned&) const = default;
};

std::vector<Aligned> general_pieces(const PreTokenizer& pt, const std::string& text) {
  PreTokenizedString s(text);
  pt.pre_tokenize(s);
  std::vector<Aligned> out;
  for (const Split& sp : s.splits()) {
    const NormalizedString& n = sp.normalized;
    Aligned a{n.get(), n.original_shift(), {}};
    for (const Span& b : n.alignments())
      a.bytes.push_back({n.original_shift() + b.begin, n.original_shift() + b.end});
    out.push_back(std::move(a));
  }
  return out;
}

// The same through pre_tokenize_pieces (Note [Fast pre-tokenization]).
std::vector<Aligned> fast_pieces(const PreTokenizer& pt, const std::string& text) {
  const NormalizedString split(text);
  Pieces in, out;
  in.reset(split);
  pt.pre_tokenize_pieces(split, in, out);
  std::vector<Aligned> got;
  for (size_t k = 0; k < out.spans.size(); ++k) {
    const Span& p = out.spans[k];
    Aligned a{std::string(out.view(p)), out.shifts[k], {}};
    for (size_t b = p.begin; b < p.end; ++b)
      a.bytes.push_back({input_begin(split, out, b), input_end(split, out, b)});
    got.push_back(std::move(a));
  }
  return got;
}

std::unique_ptr<PreTokenizer> from_json(const std::string& j) {
  return pre_tokenizer_from_json(Json::parse(j), "pre_tokenizer");
}

std::string show(const std::vector<Piece>& v, size_t limit = 12) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i)
    s += kiln::detail::str_cat("(", Json(v[i].text).dump(), ", ", v[i].begin, ", ", v[i].end, ") ");
  if (v.size() > limit) s += "... (" + std::to_string(v.size()) + " pieces)";
  return s;
}

std::vector<std::pair<Span, bool>> flat(const Matches& m) {
  std::vector<std::pair<Span, bool>> out;
  for (const Match& x : m) out.push_back({x.span, x.is_match});
  return out;
}

using M = std::vector<std::pair<Span, bool>>;

// ---- byte-level alphabet ---------------------------------------------------------

TEST(TokByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_level_char(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_level_char(0), U'\u0100');
  EXPECT_EQ(byte_level_char(0x7F), U'\u0121');
  EXPECT_EQ(byte_level_char(0xAD), U'\u0143');
  EXPECT_EQ(byte_level_char('!'), U'!');
  EXPECT_EQ(byte_level_char(0xFF), U'\u00FF');
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_level_char(static_cast<uint8_t>(b));
    ASSERT_LT(c, 0x144u);
    EXPECT_FALSE(seen[c]) << b;
    seen[c] = true;
    EXPECT_EQ(byte_level_byte(c), b);
  }
  EXPECT_EQ(byte_level_byte(U' '), -1);
  EXPECT_EQ(byte_level_byte(0x7F), -1);
  EXPECT_EQ(byte_level_byte(0xAD), -1);
  EXPECT_EQ(byte_level_byte(0x144), -1);
  EXPECT_EQ(byte_level_byte(U'中'), -1);
}

// HF's own test (byte_level.rs, pre_tokenization), byte offsets -> characters.
TEST(TokByteLevel, HfUnitCase) {
  const ByteLevelPreTokenizer bl(false, true, true);
  const std::vector<Piece> want = {
      {"Hello", 0, 5},         {"\u0120my", 5, 8},   {"\u0120friend", 8, 15}, {",", 15, 16},
      {"\u0120how", 16, 20},   {"\u0120is", 20, 23}, {"\u0120your", 23, 28},  {"\u0120day", 28, 32},
      {"\u0120going", 32, 38}, {"?", 38, 39}};
  EXPECT_EQ(pre_tokenize_str(bl, "Hello my friend, how is your day going?"), want);
  // The prefix space takes the offsets of the first character.
  const ByteLevelPreTokenizer apz(true, true, false);
  EXPECT_EQ(pre_tokenize_str(apz, "h\xC3\xA9"),
            (std::vector<Piece>{{"\u0120h\u00C3\u00A9", 0, 2}}));
}

// ---- Oniguruma wrapper ----------------------------------------------------------------

TEST(TokRegex, FindMatchesAsHf) {
  const Regex ws("\\s+");
  EXPECT_EQ(flat(find_regex_matches(ws, "a   b")),
            (M{{{0, 1}, false}, {{1, 4}, true}, {{4, 5}, false}}));
  EXPECT_EQ(flat(find_regex_matches(ws, "   a   b   ")),
            (M{{{0, 3}, true}, {{3, 4}, false}, {{4, 7}, true}, {{7, 8}, false}, {{8, 11}, true}}));
  EXPECT_EQ(flat(find_regex_matches(ws, "")), (M{{{0, 0}, false}}));
  EXPECT_EQ(flat(find_regex_matches(ws, "aaa")), (M{{{0, 3}, false}}));
  EXPECT_EQ(flat(find_regex_matches(ws, "\xF0\x9D\x94\xBE\xF0\x9D\x95\xA0 x")),
            (M{{{0, 8}, false}, {{8, 9}, true}, {{9, 10}, false}}));
  // Empty matches: kept, and never twice at the end of the previous match.
  EXPECT_EQ(flat(find_regex_matches(Regex(""), "ab")),
            (M{{{0, 0}, true}, {{0, 1}, false}, {{1, 1}, true}, {{1, 2}, false}, {{2, 2}, true}}));
  EXPECT_EQ(flat(find_regex_matches(Regex("a*"), "baaac")),
            (M{{{0, 0}, true}, {{0, 1}, false}, {{1, 4}, true}, {{4, 5}, false}, {{5, 5}, true}}));
  // Stepping over an empty match moves one code point, not one byte.
  EXPECT_EQ(flat(find_regex_matches(Regex(""), "\xC3\xA9")),
            (M{{{0, 0}, true}, {{0, 2}, false}, {{2, 2}, true}}));
  // Look-behind sees the text before the search start.
  EXPECT_EQ(flat(find_regex_matches(Regex("(?<=a)b"), "abab")),
            (M{{{0, 1}, false}, {{1, 2}, true}, {{2, 3}, false}, {{3, 4}, true}}));
}

TEST(TokRegex, Escape) {
  EXPECT_EQ(regex_escape("a.b*(c)~ #&-|[]{}^$+?\\"),
            "a\\.b\\*\\(c\\)\\~ \\#\\&\\-\\|\\[\\]\\{\\}\\^\\$\\+\\?\\\\");
  EXPECT_EQ(flat(find_regex_matches(Regex(regex_escape("a.b")), "axb a.b")),
            (M{{{0, 4}, false}, {{4, 7}, true}}));
}

TEST(TokRegex, BadPatternIsOnigurumasError) {
  EXPECT_KILN_ERROR(Regex("("), "regex /(/", "end pattern with unmatched parenthesis");
  EXPECT_KILN_ERROR(Regex("\\p{Foo}"), "invalid character property name {Foo}");
}

// Oniguruma's per-match retry limit, which HF hits too (it panics).
TEST(TokRegex, CatastrophicPatternFailsFast) {
  const auto t0 = std::chrono::steady_clock::now();
  const Regex re("(a+)+$");
  EXPECT_KILN_ERROR(re.find_all(kiln::detail::str_cat(std::string(30, 'a'), "b")), "retry-limit-in-match over");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
}

// A pattern costing up to ~2^18 steps at every position (~27000 per byte):
// HF takes about 115 us per byte on it (25 s here, 2 minutes per MB); the
// budget stops it within about a second (Note [Regex budget]).
TEST(TokRegex, SearchBudgetBoundsTime) {
  std::string text;
  while (text.size() < 200'000) text += std::string(18, 'x') + " ";
  const Regex re("(?:x+x+)+y|x");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_KILN_ERROR(re.find_all(text), "backtracking budget", "200013-byte input");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 60.0);
  // The same pattern on a short input is fine.
  EXPECT_EQ(re.find_all("xx x").size(), 3u);
}

TEST(TokRegex, ConcurrentSearchesAgree) {
  std::ifstream in(kiln::testing::data_file("wikitext-2/valid.txt"), std::ios::binary);
  std::string text(200'000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  text = to_valid_utf8(text.substr(0, text.size() - 4));  // the cut may split a code point
  const std::vector<Span> want = gpt2_regex().find_all(text);
  ASSERT_GT(want.size(), 10000u);
  std::vector<std::vector<Span>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = gpt2_regex().find_all(text); });
  // Compiling concurrently with searching is safe too.
  std::vector<Regex> compiled;
  for (int i = 0; i < 20; ++i) compiled.emplace_back("\\p{L}+|\\s+(?!\\S)");
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_TRUE(g == want);
}

// Note [PCRE2 accelerator]: the PCRE2 spelling of each accelerated pattern
// (GPT-2's, runs of spaces) finds exactly Oniguruma's matches: every code
// point in contexts that tell its classes apart (after and before a letter,
// a digit, a space or spaces, punctuation, an apostrophe; doubled; before a
// newline), then real text.
TEST(TokRegex, AcceleratedPatternsMatchOnigurumaOnEveryCodePoint) {
  EXPECT_TRUE(gpt2_regex().accelerated());
  std::vector<std::string> texts;
  std::string chunk;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string u;
    append_utf8(u, c);
    for (const char* context : {"a", "a1", "1 ", " !", "!'", "", "\n ", "\n  "}) {
      chunk += context;
      chunk += u;
    }
    chunk += "   ";
    if (chunk.size() > 8192) {
      texts.emplace_back().swap(chunk);  // (not push_back(move): a GCC 12 false -Warray-bounds)
      chunk.clear();
    }
  }
  texts.emplace_back().swap(chunk);
  std::ifstream in(kiln::testing::data_file("wikitext-2/valid.txt"), std::ios::binary);
  for (std::string line; std::getline(in, line);) texts.push_back(to_valid_utf8(line));
  ASSERT_GT(texts.size(), 5000u);
  const std::vector<std::string_view> patterns = accelerated_patterns();
  ASSERT_GE(patterns.size(), 2u);
  for (const std::string_view pattern : patterns) {
    const Regex fast(pattern), onig(pattern, /*accelerate=*/false);
    ASSERT_TRUE(fast.accelerated()) << pattern;
    ASSERT_FALSE(onig.accelerated());
    size_t differ = 0;
    for (const std::string& t : texts)
      if (fast.find_all(t) != onig.find_all(t) && ++differ <= 3)
        ADD_FAILURE() << "/" << pattern << "/: PCRE2 and Oniguruma differ on "
                      << Json(t.substr(0, 200)).dump();
    EXPECT_EQ(differ, 0u) << "/" << pattern << "/ on " << texts.size() << " texts";
  }
}

// ---- pre-tokenizers, hand-checked -----------------------------------------------------

TEST(TokPreTokenizers, MetaspaceFirstOnlyPrependsAtTheInputStart) {
  const auto seq =
      from_json(R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},)"
                R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}]})");
  EXPECT_EQ(pre_tokenize_str(*seq, "Hey friend"),
            (std::vector<Piece>{{"\u2581Hey", 0, 3}, {"friend", 4, 10}}));
  const auto always = from_json(R"({"type":"Metaspace","replacement":"▁"})");
  EXPECT_EQ(pre_tokenize_str(*always, "Hey  friend"),
            (std::vector<Piece>{{"\u2581Hey", 0, 3}, {"\u2581", 3, 4}, {"\u2581friend", 4, 11}}));
}

TEST(TokPreTokenizers, JsonErrorsNameTheField) {
  EXPECT_KILN_ERROR(from_json(R"({"type":"Foo"})"), "pre_tokenizer",
                    "unknown pre-tokenizer type \"Foo\"");
  EXPECT_KILN_ERROR(
      from_json(R"({"type":"Sequence","pretokenizers":[{"type":"Whitespace"},{"type":"Bar"}]})"),
      "pre_tokenizer.pretokenizers[1]", "\"Bar\"");
  EXPECT_KILN_ERROR(from_json(R"({"type":"Metaspace","replacement":"▁","add_prefix_space":false})"),
                    "add_prefix_space does not match declared prepend_scheme");
  EXPECT_KILN_ERROR(from_json(R"({"type":"Metaspace","replacement":"ab"})"),
                    "pre_tokenizer.replacement", "single character");
  EXPECT_KILN_ERROR(
      from_json(R"({"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated","invert":false})"),
      "pre_tokenizer.pattern", "unmatched parenthesis");
  EXPECT_KILN_ERROR(from_json(R"({"type":"Punctuation","behavior":"Sideways"})"),
                    "pre_tokenizer.behavior", "Sideways");
  EXPECT_KILN_ERROR(from_json(R"({"type":"ByteLevel","add_prefix_space":true})"), "trim_offsets");
  EXPECT_KILN_ERROR(from_json(R"({"type":"UnicodeScripts"})"), "UnicodeScripts", "not supported");
  EXPECT_KILN_ERROR(from_json(R"({"type":"FixedLength","length":0})"), "pre_tokenizer.length");
  EXPECT_KILN_ERROR(from_json(R"([1])"), "pre_tokenizer", "expected an object");
}

// ---- parity with HF -----------------------------------------------------------------------

std::string run_reference() {
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "tokenizer_golden";
  fs::create_directories(dir);
  const std::string out =
      (dir / ("pre_tokenizers." + std::to_string(::getpid()) + ".jsonl")).string();
  const std::string cmd =
      quoted(env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON)) + " " +
      quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/tok_pre_tokenizers_reference.py") +
      " --data " + quoted(env_or("KILN_DATA", KILN_DEFAULT_DATA)) + " --output " + quoted(out);
  // (HF prints the two expected Rust panics of the retry-limit cases on stderr.)
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
  return out;
}

TEST(TokPreTokenizers, MatchHfOnRealAndAdversarialText) {
  const std::string golden = run_reference();
  std::ifstream in(golden, std::ios::binary);
  ASSERT_TRUE(in.good()) << golden;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const std::vector<std::string> texts =
      Json::parse(line).at("texts").get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), 400u);
  size_t configs = 0, compared = 0, compared_fast = 0, load_errors = 0, run_errors = 0,
         failed_configs = 0;
  while (std::getline(in, line)) {
    const Json rec = Json::parse(line);
    const Json& cfg = rec.at("config");
    ++configs;
    if (rec.contains("load_error")) {
      ++load_errors;
      EXPECT_TRUE(
          kiln::testing::throws_error([&] { pre_tokenizer_from_json(cfg, "pre_tokenizer"); }, {}))
          << "HF rejects " << cfg.dump() << " (" << rec["load_error"].get<std::string>() << ")";
      continue;
    }
    std::unique_ptr<PreTokenizer> pt;
    try {
      pt = pre_tokenizer_from_json(cfg, "pre_tokenizer");
    } catch (const std::exception& e) {
      ADD_FAILURE() << cfg.dump() << ": " << e.what();
      continue;
    }
    size_t mismatches = 0;
    const Json& idx = rec.at("texts");
    const Json& results = rec.at("results");
    for (size_t k = 0; k < idx.size(); ++k) {
      const std::string& text = texts.at(idx[k].get<size_t>());
      const Json& r = results[k];
      if (r.is_object()) {  // HF failed
        ++run_errors;
        EXPECT_TRUE(kiln::testing::throws_error([&] { pre_tokenize_str(*pt, text); }, {}))
            << cfg.dump() << ": HF failed with " << r["error"].get<std::string>();
        continue;
      }
      std::vector<Piece> want;
      for (const Json& p : r)
        want.push_back({p[0].get<std::string>(), p[1].get<size_t>(), p[2].get<size_t>()});
      std::vector<Piece> got;
      try {
        got = pre_tokenize_str(*pt, text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << cfg.dump() << " on " << Json(text.substr(0, 200)).dump() << ": "
                      << e.what();
        ++mismatches;
        continue;
      }
      ++compared;
      if (pt->has_pieces()) {
        ++compared_fast;
        const std::vector<Aligned> general = general_pieces(*pt, text);
        if (fast_pieces(*pt, text) != general && ++mismatches <= 3)
          ADD_FAILURE() << cfg.dump() << " on " << Json(text.substr(0, 200)).dump()
                        << ": pre_tokenize_pieces differs from pre_tokenize";
      }
      if (got != want && ++mismatches <= 3)
        ADD_FAILURE() << cfg.dump() << " on " << Json(text.substr(0, 200)).dump() << " ("
                      << text.size() << " bytes)\n  hf:   " << show(want)
                      << "\n  kiln: " << show(got);
    }
    if (mismatches) {
      ++failed_configs;
      std::cout << "[pre-tokenizer parity] " << cfg.dump() << ": " << mismatches << " of "
                << idx.size() << " texts differ\n";
    }
  }
  std::cout << "[pre-tokenizer parity] " << configs << " configs, " << compared
            << " texts compared (" << compared_fast << " also on the fast path), " << load_errors << " rejected configs, " << run_errors
            << " HF search failures, " << failed_configs << " configs with mismatches\n";
  EXPECT_GT(compared, 20000u);
  EXPECT_GT(compared_fast, 15000u);
  EXPECT_GT(load_errors, 20u);
  EXPECT_EQ(run_errors, 2u);
  in.close();
  fs::remove(golden);
}

}  // namespace
