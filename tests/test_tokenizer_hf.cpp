// Parity of kiln's BertTokenizer with Hugging Face `tokenizers` on real data.
//
// Each test runs tests/reference/tokenize_reference.py (KILN_PYTHON, default
// the project venv) to write a golden file into the build directory, then
// compares kiln's output line by line and reports the mismatch count.
// Inputs come from KILN_DATA (default ../shared/data); a missing file fails.
#include <gtest/gtest.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer/basic_tokenizer.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using kiln::data::BertTokenizer;
using kiln::data::EncodeOptions;
using kiln::data::Encoding;

using kiln::testing::env_or;
using kiln::testing::quoted;

std::string data_file(const std::string& rel) {
  const std::string path = env_or("KILN_DATA", KILN_DEFAULT_DATA) + "/" + rel;
  EXPECT_TRUE(fs::exists(path)) << "missing data file " << path << " (set KILN_DATA)";
  return path;
}

std::string vocab_path() { return data_file("vocab/bert-base-uncased-vocab.txt"); }
std::string edge_cases_path() {
  return std::string(KILN_SOURCE_DIR) + "/tests/data/unicode_edge_cases.txt";
}

std::string golden_dir() {
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "tokenizer_golden";
  fs::create_directories(dir);
  return dir.string();
}

// Runs the reference script; returns the golden file's path.
std::string run_reference(const std::string& name, const std::string& args) {
  const std::string out = golden_dir() + "/" + name + "." + std::to_string(::getpid()) + ".txt";
  const std::string cmd =
      quoted(env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON)) + " " +
      quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/tokenize_reference.py") + " --vocab " +
      quoted(vocab_path()) + " --output " + quoted(out) + " " + args;
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "reference script failed: " << cmd;
  return out;
}

// Same splitting as the script: on '\n', a final newline ends the last line.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < data.size()) {
    size_t end = data.find('\n', begin);
    if (end == std::string::npos) end = data.size();
    lines.push_back(data.substr(begin, end - begin));
    begin = end + 1;
  }
  if (data.empty()) lines.push_back("");
  return lines;
}

std::vector<std::string> column(const std::vector<std::string>& lines, int k) {
  std::vector<std::string> out;
  for (const std::string& line : lines) {
    size_t begin = 0;
    for (int i = 0; i < k && begin != std::string::npos; ++i) {
      begin = line.find('\t', begin);
      if (begin != std::string::npos) ++begin;
    }
    if (begin == std::string::npos) {
      out.emplace_back();
      continue;
    }
    out.push_back(line.substr(begin, line.find('\t', begin) - begin));
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) (s += i ? " " : "") += std::to_string(ids[i]);
  return s;
}

// Compares kiln's encode(text).ids with the golden "lines" output; returns mismatches.
size_t compare_lines(const BertTokenizer& tok, const std::vector<std::string>& texts,
                     const std::string& golden_path, const std::string& what) {
  const auto golden = read_lines(golden_path);
  EXPECT_EQ(golden.size(), texts.size()) << what;
  const auto encodings = tok.encode_batch(texts);
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size() && i < golden.size(); ++i) {
    const std::string ours = join(encodings[i].ids);
    if (ours != golden[i]) {
      if (++mismatches <= 5)
        ADD_FAILURE() << what << " line " << i + 1 << ": " << texts[i] << "\n  hf:   " << golden[i]
                      << "\n  kiln: " << ours;
    }
  }
  std::cout << "[tokenizer parity] " << what << ": " << texts.size() << " lines, " << mismatches
            << " mismatches\n";
  return mismatches;
}

void expect_lines_match(const std::string& name, const std::string& input, int col, bool cased) {
  const auto tok = BertTokenizer::from_vocab_file(vocab_path(), !cased);
  std::string args = "--mode lines --input " + quoted(input);
  if (col >= 0) args += " --column " + std::to_string(col);
  if (cased) args += " --cased";
  const std::string golden = run_reference(name, args);
  auto texts = read_lines(input);
  if (col >= 0) texts = column(texts, col);
  EXPECT_EQ(compare_lines(tok, texts, golden, name), 0u);
  fs::remove(golden);
}

TEST(TokenizerHf, Sst2DevIdsMatch) {
  expect_lines_match("sst2_dev", data_file("sst2/dev.tsv"), 1, false);
}
TEST(TokenizerHf, Sst2TrainIdsMatch) {
  expect_lines_match("sst2_train", data_file("sst2/train.tsv"), 1, false);
}
TEST(TokenizerHf, WikitextValidIdsMatch) {
  expect_lines_match("wikitext_valid", data_file("wikitext-2/valid.txt"), -1, false);
}
TEST(TokenizerHf, WikitextValidCasedIdsMatch) {
  expect_lines_match("wikitext_valid_cased", data_file("wikitext-2/valid.txt"), -1, true);
}
TEST(TokenizerHf, EdgeCasesIdsMatch) { expect_lines_match("edge", edge_cases_path(), -1, false); }
TEST(TokenizerHf, EdgeCasesCasedIdsMatch) {
  expect_lines_match("edge_cased", edge_cases_path(), -1, true);
}

// Random byte strings, ill-formed UTF-8 included: HF sees them decoded with
// U+FFFD replacement, kiln drops the ill-formed bytes.
TEST(TokenizerHf, RandomBytesMatch) {
  std::mt19937 rng(1234);
  const char* pieces[] = {"a",
                          "B",
                          " ",
                          ",",
                          "é",
                          "中",
                          "\xF0\x9F\x98\x80",
                          "\xCC\x81",
                          "[MASK]",
                          "[",
                          "\xE2\x80\x8B",
                          "the",
                          "##",
                          "\t",
                          "\xC2\xA0",
                          "\xE3\x80\x80",
                          "\xEF\xBB\xBF",
                          "\xEF\xBF\xBD"};
  std::string data;
  for (int line = 0; line < 3000; ++line) {
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const unsigned r = rng() % 3;
      if (r == 0) {
        char c = static_cast<char>(rng() % 256);
        data += c == '\n' ? 'x' : c;
      } else {
        data += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
      }
    }
    data += '\n';
  }
  const std::string input =
      golden_dir() + "/random_bytes_input." + std::to_string(::getpid()) + ".txt";
  std::ofstream(input, std::ios::binary) << data;
  expect_lines_match("random_bytes", input, -1, false);
  fs::remove(input);
}

void expect_pairs_match(size_t max_length, size_t pad_to) {
  const auto tok = BertTokenizer::from_vocab_file(vocab_path());
  const std::string input = data_file("sst2/dev.tsv");
  const size_t count = 300;
  const std::string name = "pairs_" + std::to_string(max_length) + "_" + std::to_string(pad_to);
  const std::string golden =
      run_reference(name, "--mode pairs --column 1 --input " + quoted(input) + " --count " +
                              std::to_string(count) + " --max-length " +
                              std::to_string(max_length) + " --pad-to " + std::to_string(pad_to));
  const auto texts = column(read_lines(input), 1);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < count; ++i) pairs.emplace_back(texts[i], texts[i + 1]);
  EncodeOptions o;
  o.max_length = max_length;
  o.pad_to = pad_to;
  const auto encodings = tok.encode_batch(pairs, o);
  const auto lines = read_lines(golden);
  ASSERT_EQ(lines.size(), count);
  size_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    const Encoding& e = encodings[i];
    const std::string ours = join(e.ids) + "|" + join(e.type_ids) + "|" + join(e.attention_mask);
    if (ours != lines[i] && ++mismatches <= 5)
      ADD_FAILURE() << name << " pair " << i << "\n  hf:   " << lines[i] << "\n  kiln: " << ours;
  }
  std::cout << "[tokenizer parity] " << name << ": " << count << " pairs, " << mismatches
            << " mismatches\n";
  EXPECT_EQ(mismatches, 0u);
  fs::remove(golden);
}

TEST(TokenizerHf, PairsMatch) { expect_pairs_match(0, 0); }
TEST(TokenizerHf, PairsTruncatedMatch) {
  for (size_t max_length : {3, 4, 5, 8, 16, 33}) expect_pairs_match(max_length, 0);
}
TEST(TokenizerHf, PairsTruncatedPaddedMatch) {
  expect_pairs_match(32, 40);
  expect_pairs_match(64, 64);
  expect_pairs_match(0, 128);
}

void expect_decode_match(bool skip_special) {
  const auto tok = BertTokenizer::from_vocab_file(vocab_path());
  std::vector<std::string> texts = column(read_lines(data_file("sst2/dev.tsv")), 1);
  for (const auto& line : read_lines(edge_cases_path())) texts.push_back(line);
  std::string ids_text;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& t : texts) {
    auto e = tok.encode(t, std::string_view("a [MASK] b"));
    ids.push_back(e.ids);
    ids_text += join(e.ids) + "\n";
  }
  const std::string input = golden_dir() + "/decode_ids." + std::to_string(::getpid()) + ".txt";
  std::ofstream(input, std::ios::binary) << ids_text;
  const std::string golden =
      run_reference("decode", "--mode decode --input " + quoted(input) + " --skip-special " +
                                  (skip_special ? "1" : "0"));
  const auto lines = read_lines(golden);
  ASSERT_EQ(lines.size(), ids.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string ours = tok.decode(ids[i], skip_special);
    if (ours != lines[i] && ++mismatches <= 5)
      ADD_FAILURE() << "decode line " << i << "\n  hf:   " << lines[i] << "\n  kiln: " << ours;
  }
  std::cout << "[tokenizer parity] decode(skip_special=" << skip_special << "): " << ids.size()
            << " lines, " << mismatches << " mismatches\n";
  EXPECT_EQ(mismatches, 0u);
  fs::remove(input);
  fs::remove(golden);
}

TEST(TokenizerHf, DecodeMatches) { expect_decode_match(true); }
TEST(TokenizerHf, DecodeKeepingSpecialsMatches) { expect_decode_match(false); }

// Normalization + pre-tokenization of every Unicode scalar value, as
// "x{c}y" words. utf8proc (Unicode 15) and HF's mix of older tables (general
// categories of Unicode 8 for control / punctuation / Mn, an older NFD,
// Rust's newer lowercase) disagree on characters added or re-categorised
// since Unicode 8; docs/tokenizer.md lists the kinds. This test pins their
// number so that any new divergence (or a regression elsewhere) fails.
void expect_sweep_divergences_at_most(bool cased, size_t ceiling) {
  const kiln::data::BasicTokenizer basic(!cased);
  const std::string golden = run_reference(cased ? "sweep_cased" : "sweep",
                                           std::string("--mode sweep") + (cased ? " --cased" : ""));
  const auto lines = read_lines(golden);
  static const char* kHex = "0123456789abcdef";
  auto hex = [](std::string_view s) {
    std::string h;
    for (unsigned char ch : s) (h += kHex[ch >> 4]) += kHex[ch & 15];
    return h;
  };
  // Words of one block, grouped by code point: a group starts at each word
  // beginning with 'x' (78 in hex); no other word of "x{c}y" can.
  auto groups_of = [](const std::vector<std::string>& words) {
    std::vector<std::string> groups;
    for (const auto& w : words) {
      if (w.rfind("78", 0) == 0 || groups.empty()) groups.emplace_back();
      groups.back() += w + " ";
    }
    return groups;
  };
  size_t line = 0, divergent = 0;
  std::vector<int32_t> examples;
  for (int32_t start = 0; start < 0x110000; start += 256) {
    std::vector<int32_t> cps;
    std::string text;
    for (int32_t c = start; c < start + 256; ++c) {
      if (c >= 0xD800 && c < 0xE000) continue;
      uint8_t buf[4];
      const auto n = utf8proc_encode_char(c, buf);
      text += cps.empty() ? "x" : " x";
      text.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
      text += "y";
      cps.push_back(c);
    }
    if (cps.empty()) continue;
    ASSERT_LT(line, lines.size());
    std::vector<std::string> hf_words, kiln_words;
    std::istringstream in(lines[line++]);
    for (std::string w; in >> w;) hf_words.push_back(w);
    kiln::data::WordList words;
    basic.split(text, words);
    for (size_t i = 0; i < words.words.size(); ++i) kiln_words.push_back(hex(words.word(i)));
    const auto hf = groups_of(hf_words), ours = groups_of(kiln_words);
    ASSERT_EQ(hf.size(), cps.size()) << "block U+" << std::hex << start;
    ASSERT_EQ(ours.size(), cps.size()) << "block U+" << std::hex << start;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (hf[i] == ours[i]) continue;
      ++divergent;
      if (examples.size() < 40) examples.push_back(cps[i]);
    }
  }
  std::ostringstream ex;
  for (int32_t c : examples)
    ex << " U+" << std::hex << std::uppercase << c << "(" << utf8proc_category_string(c) << ")";
  std::cout << "[tokenizer parity] unicode sweep" << (cased ? " (cased)" : "") << ": " << divergent
            << " of 1112064 code points diverge from HF (ceiling " << ceiling
            << "); first:" << ex.str() << "\n";
  EXPECT_LE(divergent, ceiling);
  fs::remove(golden);
}

TEST(TokenizerHf, UnicodeSweepDivergesOnlyOnNewerCharacters) {
  expect_sweep_divergences_at_most(false, 624);
}
TEST(TokenizerHf, UnicodeSweepCasedDivergesOnlyOnNewerCharacters) {
  expect_sweep_divergences_at_most(true, 149);
}

}  // namespace
