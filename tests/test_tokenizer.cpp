// Unit tests of the BERT WordPiece tokenizer on small in-memory vocabularies
// (parity with Hugging Face on real data: test_tokenizer_hf.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "data/tokenizer/tokenizer_config.h"
#include "hostile_util.h"
#include "test_util.h"

namespace {

using kiln::data::BertTokenizer;
using kiln::data::EncodeOptions;
using kiln::data::Encoding;
using kiln::data::Vocab;

const std::vector<std::string> kTokens = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff", "##able",
    "a",     "b",     "c",     ",",     ".",      "!",     "?",     "'",  "s",     "##s",
    "中",    "cafe",  "Hello", "he",    "##llo",  "=",     "x",     "y",  "##y",   "é",
    "##é",   "##a",   "[",     "]",     "mask",   "e",     "##e",   "$",  "`",     "##b"};

BertTokenizer small(bool lowercase = true) {
  return BertTokenizer(Vocab::from_tokens(kTokens), lowercase);
}

std::vector<std::string> toks(const BertTokenizer& t, std::string_view text) {
  return t.tokenize(text);
}
using Strings = std::vector<std::string>;

TEST(Tokenizer, GreedyLongestMatchFirst) {
  auto t = small();
  EXPECT_EQ(toks(t, "unaffable"), (Strings{"un", "##aff", "##able"}));
  EXPECT_EQ(toks(t, "hello world"), (Strings{"hello", "world"}));
  EXPECT_EQ(toks(t, "cs"), (Strings{"c", "##s"}));
}

TEST(Tokenizer, UnmatchableWordIsOneUnk) {
  auto t = small();
  EXPECT_EQ(toks(t, "unaffablez hello"), (Strings{"[UNK]", "hello"}));
  EXPECT_EQ(toks(t, "q"), (Strings{"[UNK]"}));
}

TEST(Tokenizer, WordsOverHundredCharsAreUnk) {
  auto t = small(false);
  EXPECT_EQ(t.encode_ids(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(toks(t, std::string(101, 'a')), (Strings{"[UNK]"}));
  // Characters, not bytes: 100 two-byte characters still fit.
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "é";
  EXPECT_EQ(t.encode_ids(e100).size(), 100u);
  EXPECT_EQ(toks(t, e100 + "é"), (Strings{"[UNK]"}));
}

TEST(Tokenizer, LowercaseStripsAccentsCasedKeepsThem) {
  auto lower = small(true);
  auto cased = small(false);
  EXPECT_EQ(toks(lower, "HELLO Café"), (Strings{"hello", "cafe"}));
  EXPECT_EQ(toks(lower, "Cafe\xCC\x81"), (Strings{"cafe"}));  // decomposed e + U+0301
  EXPECT_EQ(toks(cased, "Hello"), (Strings{"Hello"}));
  EXPECT_EQ(toks(cased, "hello é"), (Strings{"hello", "é"}));
  EXPECT_EQ(toks(cased, "HELLO"), (Strings{"[UNK]"}));
}

// NFD orders kept combining marks by combining class, across controls that
// cleaning removed first: U+1D16D (ccc 226) \x01 U+1D165 (ccc 216) -> 1D165 1D16D.
TEST(Tokenizer, CanonicalOrderingOfKeptMarks) {
  const kiln::data::BasicTokenizer basic(true);
  kiln::data::WordList words;
  basic.split("a\xF0\x9D\x85\xAD\x01\xF0\x9D\x85\xA5 b\xF0\x9D\x85\xAD \xF0\x9D\x85\xA5", words);
  ASSERT_EQ(words.words.size(), 3u);
  EXPECT_EQ(words.word(0), "a\xF0\x9D\x85\xA5\xF0\x9D\x85\xAD");
  EXPECT_EQ(words.words[0].num_chars, 3u);
  EXPECT_EQ(words.word(1), "b\xF0\x9D\x85\xAD");
  EXPECT_EQ(words.word(2), "\xF0\x9D\x85\xA5");
}

TEST(Tokenizer, PunctuationIncludesAsciiSymbols) {
  auto t = small();
  EXPECT_EQ(toks(t, "hello,world!"), (Strings{"hello", ",", "world", "!"}));
  EXPECT_EQ(toks(t, "a$b`c"), (Strings{"a", "$", "b", "`", "c"}));
  // U+2260 (not equal) decomposes to '=' + U+0338: '=' is ASCII punctuation.
  EXPECT_EQ(toks(t, "x\xE2\x89\xA0y"), (Strings{"x", "=", "y"}));
  EXPECT_EQ(toks(small(false), "x\xE2\x89\xA0y"), (Strings{"[UNK]"}));
}

TEST(Tokenizer, CjkIdeographsAreSeparateWords) {
  auto t = small();
  EXPECT_EQ(toks(t, "a中b"), (Strings{"a", "中", "b"}));
  EXPECT_EQ(toks(t, "中中"), (Strings{"中", "中"}));
}

TEST(Tokenizer, CleaningDropsControlsAndMapsWhitespace) {
  auto t = small();
  EXPECT_EQ(toks(t, "hel\x01lo"), (Strings{"hello"}));
  EXPECT_EQ(toks(t, std::string("hel\0lo", 6)), (Strings{"hello"}));
  EXPECT_EQ(toks(t, "\xEF\xBB\xBFhello"), (Strings{"hello"}));  // BOM (Cf)
  EXPECT_EQ(toks(t, "hel\xE2\x80\x8Blo"), (Strings{"hello"}));  // U+200B (Cf)
  EXPECT_EQ(toks(t, "hel\xEF\xBF\xBDlo"), (Strings{"hello"}));  // U+FFFD
  EXPECT_EQ(toks(t,
                 "a\xC2\xA0"
                 "b\xE3\x80\x80"
                 "c\td\ne\rx"),  // U+00A0, U+3000
            (Strings{"a", "b", "c", "[UNK]", "e", "x"}));
  EXPECT_EQ(toks(t,
                 "a\x0b"
                 "b"),
            (Strings{"a", "##b"}));  // \v is Cc: dropped, not a space
}

TEST(Tokenizer, InvalidUtf8BytesAreDropped) {
  auto t = small();
  EXPECT_EQ(toks(t, "hel\xFFlo"), (Strings{"hello"}));
  EXPECT_EQ(toks(t, "hello\xE4\xB8"), (Strings{"hello"}));      // truncated at end
  EXPECT_EQ(toks(t, "hel\xED\xA0\x80lo"), (Strings{"hello"}));  // encoded surrogate
  EXPECT_EQ(toks(t, "hel\xC0\xAFlo"), (Strings{"hello"}));      // overlong '/'
  EXPECT_EQ(toks(t, "\x80\x80\xBF"), (Strings{}));
}

TEST(Tokenizer, SpecialTokensInRawTextAreMatchedVerbatim) {
  auto t = small();
  EXPECT_EQ(toks(t, "hello [MASK] world"), (Strings{"hello", "[MASK]", "world"}));
  EXPECT_EQ(toks(t, "a[MASK]b[CLS]c"), (Strings{"a", "[MASK]", "b", "[CLS]", "c"}));
  EXPECT_EQ(toks(t, "[[MASK]]"), (Strings{"[", "[MASK]", "]"}));
  EXPECT_EQ(toks(t, "[mask]"), (Strings{"[", "mask", "]"}));  // case-sensitive
  EXPECT_EQ(toks(t, "[MAS"), (Strings{"[", "[UNK]"}));
}

TEST(Tokenizer, EncodeAddsClsSepAndTypeIds) {
  auto t = small();
  Encoding e = t.encode("hello", std::string_view("world"));
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 5, 3, 6, 3}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(e.attention_mask, (std::vector<int32_t>{1, 1, 1, 1, 1}));
  EncodeOptions raw;
  raw.add_special_tokens = false;
  e = t.encode("hello", std::string_view("world c"), raw);
  EXPECT_EQ(e.ids, (std::vector<int32_t>{5, 6, 12}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 1, 1}));
}

// Expected lengths follow HF's truncate_encodings (longest_first), checked
// against tokenizers 0.23 on the same lengths (3 and 6 ids).
TEST(Tokenizer, TruncationLongestFirst) {
  auto t = small();
  const std::string a = "a a a", b = "b b b b b b";
  auto lengths = [&](size_t max_length) {
    EncodeOptions o;
    o.max_length = max_length;
    Encoding e = t.encode(a, std::string_view(b), o);
    const auto na = static_cast<size_t>(std::count(e.ids.begin(), e.ids.end(), 10));
    const auto nb = static_cast<size_t>(std::count(e.ids.begin(), e.ids.end(), 11));
    return std::pair<size_t, size_t>(na, nb);
  };
  EXPECT_EQ(lengths(3), (std::pair<size_t, size_t>(0, 0)));
  EXPECT_EQ(lengths(4), (std::pair<size_t, size_t>(0, 1)));
  EXPECT_EQ(lengths(5), (std::pair<size_t, size_t>(1, 1)));
  EXPECT_EQ(lengths(8), (std::pair<size_t, size_t>(2, 3)));
  EXPECT_EQ(lengths(10), (std::pair<size_t, size_t>(3, 4)));
  EXPECT_EQ(lengths(12), (std::pair<size_t, size_t>(3, 6)));
  EXPECT_EQ(lengths(100), (std::pair<size_t, size_t>(3, 6)));
  EncodeOptions o;
  o.max_length = 3;
  EXPECT_EQ(t.encode("a b c").ids, (std::vector<int32_t>{2, 10, 11, 12, 3}));
  EXPECT_EQ(t.encode("a b c", {}, o).ids, (std::vector<int32_t>{2, 10, 3}));
  o.max_length = 2;
  EXPECT_EQ(t.encode("a b c", {}, o).ids, (std::vector<int32_t>{2, 3}));
  EXPECT_THROW(t.encode("a", std::string_view("b"), o), kiln::Error);  // no room for 3 specials
  o.add_special_tokens = false;
  EXPECT_EQ(t.encode("a b c", {}, o).ids, (std::vector<int32_t>{10, 11}));
}

TEST(Tokenizer, PaddingAndBatch) {
  auto t = small();
  EncodeOptions o;
  o.pad_to = 6;
  Encoding e = t.encode("hello", {}, o);
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 5, 3, 0, 0, 0}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(e.attention_mask, (std::vector<int32_t>{1, 1, 1, 0, 0, 0}));
  o.pad_to = 2;  // longer encodings are left alone
  EXPECT_EQ(t.encode("hello", {}, o).ids.size(), 3u);

  std::vector<std::string> texts;
  for (int i = 0; i < 1000; ++i)
    texts.push_back(std::string(static_cast<size_t>(i % 7), 'a') + " hello");
  EncodeOptions longest;
  longest.pad_to_longest = true;
  const int threads = kiln::get_num_threads();
  for (int n : {1, 2, 3}) {
    kiln::set_num_threads(n);
    auto batch = t.encode_batch(texts, longest);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      Encoding one = t.encode(texts[i]);
      ASSERT_EQ(batch[i].size(), 9u);  // longest: "aaaaaa hello" = 6 pieces + 1 + 2 specials
      EXPECT_TRUE(std::equal(one.ids.begin(), one.ids.end(), batch[i].ids.begin())) << i;
    }
    auto ids = t.encode_ids_batch(texts);
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(ids[i], t.encode_ids(texts[i]));
  }
  kiln::set_num_threads(threads);
}

TEST(Tokenizer, DecodeJoinsPiecesAndCleansUp) {
  auto t = small();
  auto ids = t.encode("hello, world! unaffable cs ? '").ids;
  EXPECT_EQ(t.decode(ids), "hello, world! unaffable cs? '");
  EXPECT_EQ(t.decode(ids, false), "[CLS] hello, world! unaffable cs? ' [SEP]");
  EXPECT_EQ(t.decode({19, 5}), "##s hello");  // a leading "##" piece keeps its prefix
  EXPECT_EQ(t.decode({}), "");
  EXPECT_THROW(t.decode({5, 999}), kiln::Error);
  EXPECT_THROW(t.decode({-1}), kiln::Error);
}

TEST(Tokenizer, SpecialIdsAndLookups) {
  auto t = small();
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 1);
  EXPECT_EQ(t.cls_id(), 2);
  EXPECT_EQ(t.sep_id(), 3);
  EXPECT_EQ(t.mask_id(), 4);
  EXPECT_EQ(t.vocab_size(), kTokens.size());
  EXPECT_EQ(t.token_to_id("hello"), 5);
  EXPECT_EQ(t.token_to_id("nope"), -1);
  EXPECT_EQ(t.id_to_token(6), "world");
  EXPECT_TRUE(t.is_special_id(4));
  EXPECT_FALSE(t.is_special_id(5));
}

std::string write_temp(const std::string& name, const std::string& content) {
  auto path =
      std::filesystem::temp_directory_path() / ("kiln_tok_" + std::to_string(::getpid()) + name);
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

void expect_error_naming(const std::string& path, const std::string& fragment) {
  try {
    BertTokenizer::from_vocab_file(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Tokenizer, BadVocabFilesAreErrorsNamingTheFile) {
  expect_error_naming("/nonexistent/dir/vocab.txt", "cannot open");
  const std::string empty = write_temp("empty.txt", "");
  expect_error_naming(empty, "empty");
  const std::string no_unk = write_temp("nounk.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n");
  expect_error_naming(no_unk, "[UNK]");
  const std::string dir = std::filesystem::temp_directory_path().string();
  expect_error_naming(dir, "directory");
  const std::string crlf = write_temp("crlf.txt", "[PAD]\r\n[UNK]  \r\nhello\r\n");
  auto t = BertTokenizer::from_vocab_file(crlf);
  EXPECT_EQ(t.vocab_size(), 3u);
  EXPECT_EQ(t.token_to_id("[UNK]"), 1);
  EXPECT_EQ(t.encode_ids("hello"), (std::vector<int32_t>{2}));
  EXPECT_THROW(t.encode("hello"), kiln::Error);  // no [CLS]/[SEP]
  for (const auto& p : {empty, no_unk, crlf}) std::remove(p.c_str());
}

// Note [Bounded input]: a FIFO blocked from_file in open() until some writer came.
TEST(Tokenizer, VocabMustBeARegularFile) {
  kiln::testing::ScratchPath dir("tokenizer");
  const std::string fifo = dir.fifo("vocab.txt");
  EXPECT_FIFO_REFUSED(BertTokenizer::from_vocab_file(fifo));
  EXPECT_KILN_ERROR(Vocab::from_file("/dev/null"), "Vocab: vocab file '/dev/null': is not a regular file");
  // Lines are split as std::getline split them: no token after a final '\n', an empty line is a token.
  const Vocab v = Vocab::from_file(dir.write("v.txt", "[UNK]\n\n a \t\nlast"));
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"[UNK]", "", " a", "last"}));
  EXPECT_EQ(Vocab::from_file(dir.write("nl.txt", "\n")).tokens(), (std::vector<std::string>{""}));
}

TEST(Tokenizer, TokenizerConfigJson) {
  using kiln::data::model_dir_lowercase;
  using kiln::data::read_tokenizer_config;
  kiln::testing::ScratchPath dir("tokenizer");
  const std::string path = dir / "tokenizer_config.json";
  EXPECT_TRUE(model_dir_lowercase(dir.path().string()));  // no file
  EXPECT_TRUE(model_dir_lowercase(""));
  dir.write("tokenizer_config.json", R"({"do_lower_case": false, "tokenizer_class": "BertTokenizer"})");
  EXPECT_EQ(read_tokenizer_config(path).do_lower_case, false);
  EXPECT_FALSE(model_dir_lowercase(dir.path().string()));
  dir.write("tokenizer_config.json", R"({"model_max_length": 512})");
  EXPECT_EQ(read_tokenizer_config(path).do_lower_case, std::nullopt);
  EXPECT_TRUE(model_dir_lowercase(dir.path().string()));
  dir.write("tokenizer_config.json", R"({"do_lower_case": "yes"})");
  EXPECT_KILN_ERROR(read_tokenizer_config(path), path + ": do_lower_case must be true or false, got string");
  dir.write("tokenizer_config.json", R"({"do_lower_case": true, "do_lower_case": false})");
  EXPECT_KILN_ERROR(read_tokenizer_config(path), "duplicate key 'do_lower_case'");
  dir.write("tokenizer_config.json", "[true]");
  EXPECT_KILN_ERROR(model_dir_lowercase(dir.path().string()), "tokenizer config must be a JSON object, got array");
  dir.write("tokenizer_config.json", "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}");
  EXPECT_KILN_ERROR(read_tokenizer_config(path), "JSON nested deeper than 64 levels");
  std::filesystem::remove(path);
  dir.fifo("tokenizer_config.json");
  EXPECT_FIFO_REFUSED(model_dir_lowercase(dir.path().string()));
}

}  // namespace
