// prepare_corpus / TokenCorpus / InMemoryCorpus (data/corpus.h): the WikiText-2
// round trip against the tokenizer, thread-count invariance, the raw text
// format rules, hostile shards and indexes, and the sizes, CRC-32Cs and
// special-token ids the index records (Note [Corpus integrity]).
// Data from KILN_DATA (default ../shared/data); a missing file fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/integrity.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "test_util.h"

namespace kiln::data {
namespace {
namespace fs = std::filesystem;

using ::kiln::testing::data_file;  // KILN_DATA/rel, an error when missing

const BertTokenizer& bert() {
  static const BertTokenizer tok = BertTokenizer::from_vocab_file(data_file("vocab/bert-base-uncased-vocab.txt"));
  return tok;
}

// A fresh folder under the temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("kiln_corpus_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int32_t> sentence_vec(const Corpus& c, size_t s) {
  const auto span = c.sentence(s);
  return {span.begin(), span.end()};
}

// The documents of a corpus as nested vectors.
std::vector<std::vector<std::vector<int32_t>>> documents_of(const Corpus& c) {
  std::vector<std::vector<std::vector<int32_t>>> docs;
  for (size_t d = 0; d < c.num_documents(); ++d) {
    const SentenceRange r = c.document(d);
    docs.emplace_back();
    for (size_t s = r.first; s < r.first + r.count; ++s) docs.back().push_back(sentence_vec(c, s));
  }
  return docs;
}

// The expected documents per Note [Raw text format], computed line by line
// with the serial encode_ids.
std::vector<std::vector<std::vector<int32_t>>> expected_documents(const std::string& path, const BertTokenizer& tok) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::vector<std::vector<int32_t>>> docs(1);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    first = false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r\v\f") == std::string::npos) {
      if (!docs.back().empty()) docs.emplace_back();
      continue;
    }
    std::vector<int32_t> ids = tok.encode_ids(line);
    if (!ids.empty()) docs.back().push_back(std::move(ids));
  }
  if (docs.back().empty()) docs.pop_back();
  return docs;
}

TEST(Corpus, WikiTextRoundTripAcrossShards) {
  const std::string input = data_file("wikitext-2/valid.txt");
  TempDir dir("roundtrip");
  PrepareOptions opt;
  opt.shard_tokens = 40000;  // several shards
  const PrepareStats stats = prepare_corpus({input}, bert(), dir.path().string(), opt);
  const auto corpus = TokenCorpus::open(dir.path().string());
  const auto want = expected_documents(input, bert());

  EXPECT_GT(corpus->num_shards(), 3u);
  EXPECT_EQ(stats.shards, corpus->num_shards());
  EXPECT_EQ(stats.lines, 3760u);
  EXPECT_EQ(corpus->num_documents(), want.size());
  EXPECT_EQ(stats.documents, want.size());
  EXPECT_EQ(corpus->num_tokens(), stats.tokens);
  EXPECT_EQ(corpus->num_sentences(), stats.sentences);
  EXPECT_EQ(corpus->vocab_size(), bert().vocab_size());
  EXPECT_EQ(corpus->special_ids().cls, bert().cls_id());
  EXPECT_EQ(corpus->special_ids().mask, bert().mask_id());
  EXPECT_NO_THROW(corpus->check_tokenizer(bert()));
  ASSERT_EQ(documents_of(*corpus), want);  // every line's ids equal encode_ids(line)
  // WikiText's headings are ordinary one-line documents: " = Homarus gammarus = ".
  EXPECT_EQ(sentence_vec(*corpus, 0), bert().encode_ids(" = Homarus gammarus = "));
  EXPECT_EQ(corpus->document(0).count, 1u);
  EXPECT_KILN_ERROR(corpus->sentence(corpus->num_sentences()), "out of range");
  EXPECT_KILN_ERROR(corpus->document(corpus->num_documents()), "out of range");
}

TEST(Corpus, SameBytesForAnyThreadCountAndBatchSize) {
  const std::string input = data_file("wikitext-2/valid.txt");
  kiln::testing::ThreadCountGuard guard;
  TempDir one("threads1"), two("threads2");
  PrepareOptions opt;
  opt.shard_tokens = 100000;
  set_num_threads(1);
  prepare_corpus({input}, bert(), one.path().string(), opt);
  set_num_threads(2);
  opt.lines_per_batch = 333;
  prepare_corpus({input}, bert(), two.path().string(), opt);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(one.path())) names.push_back(e.path().filename().string());
  EXPECT_GE(names.size(), 3u);  // index + >= 2 shards
  for (const std::string& name : names) {
    ASSERT_TRUE(fs::exists(two.path() / name)) << name;
    EXPECT_TRUE(read_bytes(one.file(name)) == read_bytes(two.file(name))) << name << " differs";
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(two.path()), fs::directory_iterator()),
            static_cast<std::ptrdiff_t>(names.size()));
}

TEST(Corpus, RawTextFormatRules) {
  TempDir dir("format");
  const std::string a = dir.write("a.txt",
                                  "\xEF\xBB\xBF"
                                  "Hello world.\r\nSecond sentence.\r\n \r\n\t\r\n\r\n = Title = \r\n"
                                  "\x01\x02\r\n"  // no tokens: dropped, does not end the document
                                  "After control.\r\n");
  const std::string empty = dir.write("empty.txt", "");
  const std::string blank_only = dir.write("blank.txt", "\n \n\n");
  const std::string plain = dir.write("plain.txt", "one\ntwo\nthree\nfour\nfive");  // no final newline
  const std::string out = dir.file("corpus");
  const PrepareStats stats = prepare_corpus({a, empty, blank_only, plain}, bert(), out);
  const auto c = TokenCorpus::open(out);
  const auto ids = [](const char* s) { return bert().encode_ids(s); };
  const std::vector<std::vector<std::vector<int32_t>>> want = {
      {ids("Hello world."), ids("Second sentence.")},
      {ids(" = Title = "), ids("After control.")},
      {ids("one"), ids("two"), ids("three"), ids("four"), ids("five")},  // plain text: one document per file
  };
  EXPECT_EQ(documents_of(*c), want);
  EXPECT_EQ(stats.files, 4u);
  EXPECT_EQ(stats.dropped_lines, 1u);
  EXPECT_EQ(stats.blank_lines, 3u + 3u);
  EXPECT_EQ(stats.lines, 8u + 0u + 3u + 5u);

  // max_sentences_per_document splits plain text; documents never span files.
  PrepareOptions opt;
  opt.max_sentences_per_document = 2;
  prepare_corpus({plain, a}, bert(), out, opt);
  const auto split = TokenCorpus::open(out);
  const std::vector<std::vector<std::vector<int32_t>>> want_split = {{ids("one"), ids("two")},
                                                                     {ids("three"), ids("four")},
                                                                     {ids("five")},
                                                                     {ids("Hello world."), ids("Second sentence.")},
                                                                     {ids(" = Title = "), ids("After control.")}};
  EXPECT_EQ(documents_of(*split), want_split);
}

TEST(Corpus, ReplacingACorpusRemovesStaleShards) {
  const std::string input = data_file("wikitext-2/valid.txt");
  TempDir dir("replace");
  PrepareOptions many;
  many.shard_tokens = 20000;
  const size_t shards_before = prepare_corpus({input}, bert(), dir.path().string(), many).shards;
  ASSERT_GT(shards_before, 2u);
  const std::string small = dir.write("small.txt", "just one line\n");
  // Stale too: a temporary, a non-canonical number, one past 64 bits; kept: other names.
  for (const char* stale : {"shard-00002.bin.tmp", "shard-7.bin", "shard-99999999999999999999999.bin"})
    dir.write(stale, "x");
  for (const char* kept : {"shard-x.bin", "shard-.bin", "shard-00001.bin.bak", "notes.txt"})
    dir.write(kept, "x");
  const PrepareStats stats = prepare_corpus({small}, bert(), dir.file("."), {});
  EXPECT_EQ(stats.shards, 1u);
  EXPECT_FALSE(fs::exists(dir.file("shard-00001.bin")));
  for (const char* stale : {"shard-00002.bin.tmp", "shard-7.bin", "shard-99999999999999999999999.bin"})
    EXPECT_FALSE(fs::exists(dir.file(stale))) << stale;
  for (const char* kept : {"shard-x.bin", "shard-.bin", "shard-00001.bin.bak", "notes.txt"})
    EXPECT_TRUE(fs::exists(dir.file(kept))) << kept;
  EXPECT_FALSE(fs::exists(dir.file("index.json.tmp")));
  const auto c = TokenCorpus::open(dir.path().string());
  EXPECT_EQ(c->num_documents(), 1u);
  EXPECT_EQ(sentence_vec(*c, 0), bert().encode_ids("just one line"));
}

TEST(Corpus, PrepareErrors) {
  TempDir dir("prepare_errors");
  EXPECT_KILN_ERROR(prepare_corpus({dir.file("missing.txt")}, bert(), dir.file("out")), "missing.txt",
                    "does not exist");
  const std::string blank = dir.write("blank.txt", "\n\n  \n");
  EXPECT_KILN_ERROR(prepare_corpus({blank}, bert(), dir.file("out")), "no text");
  EXPECT_KILN_ERROR(prepare_corpus({}, bert(), dir.file("out")), "no input");
  PrepareOptions bad;
  bad.shard_tokens = 0;
  EXPECT_KILN_ERROR(prepare_corpus({blank}, bert(), dir.file("out"), bad), "shard_tokens");
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("out")), "index.json", "missing");
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("nowhere")), "nowhere", "does not exist");
}

// A one-shard corpus to damage; returns the shard path.
std::string prepare_small(const TempDir& dir) {
  const std::string text = dir.write("text.txt", "The quick brown fox.\nJumps over.\n\nThe lazy dog.\n");
  prepare_corpus({text}, bert(), dir.file("c"));
  return dir.file("c/shard-00000.bin");
}

void overwrite(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Corpus, HostileShardsAreErrorsNamingTheFile) {
  TempDir dir("hostile");
  const std::string shard = prepare_small(dir);
  const std::string good = read_bytes(shard);
  const std::string corpus_dir = dir.file("c");
  ASSERT_NO_THROW(TokenCorpus::open(corpus_dir));
  const auto restore = [&] { std::ofstream(shard, std::ios::binary | std::ios::trunc) << good; };

  fs::resize_file(shard, good.size() - 5);
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "truncated");
  fs::resize_file(shard, 10);
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "truncated");
  fs::resize_file(shard, 0);
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "truncated");
  restore();
  { std::ofstream(shard, std::ios::binary | std::ios::app) << "extra"; }
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "corrupt");
  restore();
  overwrite(shard, 0, "NOTKILN!");
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "bad magic");
  restore();
  overwrite(shard, 8, std::string("\x07\0\0\0", 4));
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "version 7");
  restore();
  overwrite(shard, 16, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));  // absurd token count
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "exceed the file size");
  restore();
  overwrite(shard, 64, std::string("\x05\0\0\0", 4));  // a token changed: checksum
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "checksum");
  TokenCorpusOptions trusting;
  trusting.verify_data = false;
  EXPECT_NO_THROW(TokenCorpus::open(corpus_dir, trusting));
  restore();
  // Offsets not increasing (checked even without verify_data): sentence_starts[1] = 0.
  uint64_t num_tokens = 0;
  std::memcpy(&num_tokens, good.data() + 16, 8);
  const size_t starts = 64 + (num_tokens * 4 + 7) / 8 * 8;
  overwrite(shard, starts + 8, std::string(8, '\0'));
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir, trusting), "shard-00000.bin", "not strictly increasing");
  restore();
  fs::remove(shard);
  EXPECT_KILN_ERROR(TokenCorpus::open(corpus_dir), "shard-00000.bin", "cannot open");
  restore();
  ASSERT_NO_THROW(TokenCorpus::open(corpus_dir));
}

TEST(Corpus, HostileIndexIsAnError) {
  TempDir dir("hostile_index");
  prepare_small(dir);
  const std::string index = dir.file("c/index.json");
  const std::string good = read_bytes(index);
  std::ofstream(index, std::ios::trunc) << "{not json";
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "index.json", "not valid JSON");
  std::ofstream(index, std::ios::trunc) << R"({"format": "something else"})";
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "index.json", "not a kiln token corpus");
  std::string wrong_count = good;
  const size_t at = wrong_count.find("\"num_sentences\": 3");
  ASSERT_NE(at, std::string::npos) << good;
  wrong_count.replace(at, 18, "\"num_sentences\": 4");
  std::ofstream(index, std::ios::trunc) << wrong_count;
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "index.json", "totals differ");
  std::string escape = good;
  escape.replace(escape.find("shard-00000.bin"), 15, "../../etc/passw");
  std::ofstream(index, std::ios::trunc) << escape;
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "invalid shard file");
}

TEST(Corpus, CheckTokenizerRejectsAnotherVocab) {
  TempDir dir("vocab");
  prepare_small(dir);
  const auto c = TokenCorpus::open(dir.file("c"));
  const BertTokenizer other(Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"}));
  EXPECT_KILN_ERROR(c->check_tokenizer(other), "different vocabulary");
  const BertTokenizer cased = BertTokenizer::from_vocab_file(data_file("vocab/bert-base-uncased-vocab.txt"), false);
  EXPECT_KILN_ERROR(c->check_tokenizer(cased), "lowercase");
}

// Note [Corpus integrity]: a byte the structural checks and the data's FNV-1a
// do not cover (the header's reserved field) is caught by the CRC-32C.
TEST(Corpus, IndexRecordsSizeAndCrc32cOfEveryShard) {
  TempDir dir("integrity");
  const std::string shard = prepare_small(dir);
  const std::string index_path = dir.file("c/index.json");
  const nlohmann::json index = nlohmann::json::parse(read_bytes(index_path));
  const nlohmann::json& entry = index.at("shards").at(0);
  const FileDigest digest = file_digest(shard);
  EXPECT_EQ(entry.value("bytes", uint64_t{0}), digest.bytes);
  EXPECT_EQ(entry.value("crc32c", std::string()), crc32c_hex(digest.crc32c));
  const std::string good = read_bytes(shard);
  overwrite(shard, 60, "\x01");  // reserved header bytes
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "shard-00000.bin", "damaged", "CRC-32C");
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << good;
  ASSERT_NO_THROW(TokenCorpus::open(dir.file("c")));
  nlohmann::json wrong = index;
  wrong["shards"][0]["bytes"] = digest.bytes + 8;
  std::ofstream(index_path, std::ios::trunc) << wrong.dump();
  TokenCorpusOptions trusting;
  trusting.verify_data = false;
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c"), trusting), "shard-00000.bin", "damaged");
}

TEST(Corpus, SpecialTokenIdsAreCheckedOnLoad) {
  TempDir dir("special");
  prepare_small(dir);
  const std::string index_path = dir.file("c/index.json");
  const nlohmann::json index = nlohmann::json::parse(read_bytes(index_path));
  EXPECT_EQ(index["special_ids"]["mask"], bert().mask_id());
  nlohmann::json swapped = index;
  swapped["special_ids"]["pad"] = bert().mask_id();
  std::ofstream(index_path, std::ios::trunc) << swapped.dump();
  const auto c = TokenCorpus::open(dir.file("c"));
  EXPECT_KILN_ERROR(c->check_tokenizer(bert()), "index.json", "special token id", "[PAD]");
  nlohmann::json outside = index;
  outside["special_ids"]["cls"] = 1 << 30;
  std::ofstream(index_path, std::ios::trunc) << outside.dump();
  EXPECT_KILN_ERROR(TokenCorpus::open(dir.file("c")), "index.json", "outside the vocab");
}

TEST(Corpus, InMemoryCorpusChecksItsInvariants) {
  const SpecialTokenIds sp{0, 1, 2, 3, 4};
  const InMemoryCorpus c({{{5, 6}, {7}}, {{8, 9, 5}}}, 10, sp);
  EXPECT_EQ(c.num_documents(), 2u);
  EXPECT_EQ(c.num_sentences(), 3u);
  EXPECT_EQ(c.num_tokens(), 6u);
  EXPECT_EQ(c.document(1).first, 2u);
  EXPECT_EQ(sentence_vec(c, 2), (std::vector<int32_t>{8, 9, 5}));
  EXPECT_KILN_ERROR(InMemoryCorpus({{{5}}, {}}, 10, sp), "document 1 has no sentences");
  EXPECT_KILN_ERROR(InMemoryCorpus({{{5}, {}}}, 10, sp), "sentence 1 of document 0 is empty");
  EXPECT_KILN_ERROR(InMemoryCorpus({{{5, 10}}}, 10, sp), "id 10 outside the vocab");
  EXPECT_KILN_ERROR(InMemoryCorpus(std::vector<int32_t>{5, 6}, {0, 2, 2}, {0, 2}, 10, sp), "not strictly increasing");
  EXPECT_KILN_ERROR(InMemoryCorpus(std::vector<int32_t>{5, 6}, {0, 2}, {0, 2}, 10, sp), "document_starts ends at 2");
}

}  // namespace
}  // namespace kiln::data
