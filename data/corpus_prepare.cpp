// prepare_corpus: raw text -> token shards + index.json (data/corpus.h).
//
// Lines are read in batches of lines_per_batch, the batch's non-blank lines are
// tokenized in parallel (TextTokenizer::encode_ids_batch, deterministic), and
// the results are appended in line order to the current shard, which streams
// its tokens to disk. So the output depends only on the inputs and on
// shard_tokens / max_sentences_per_document.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "data/corpus.h"
#include "data/corpus_format.h"
#include "data/integrity.h"
#include "data/tokenizer/text_tokenizer.h"

namespace kiln::data {
namespace fs = std::filesystem;
namespace cf = corpus_format;

namespace {

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; });
}

// Writes one shard: tokens stream to "<path>.tmp" as sentences arrive; finish()
// appends the offset tables, writes the header and renames to <path>.
class ShardWriter {
 public:
  ShardWriter(std::string path, uint64_t vocab_size) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    header_.vocab_size = vocab_size;
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out_.good(), "prepare_corpus: cannot create '", tmp_, "'");
    unsigned char zeros[cf::kHeaderBytes] = {};
    out_.write(reinterpret_cast<const char*>(zeros), cf::kHeaderBytes);
    check_stream();
  }
  ~ShardWriter() {
    if (out_.is_open()) {  // not finished: an error unwound past us
      out_.close();
      std::error_code ec;
      fs::remove(tmp_, ec);
    }
  }

  void add_sentence(const std::vector<int32_t>& ids) {
    write(ids.data(), ids.size() * sizeof(int32_t));
    header_.num_tokens += ids.size();
    sentence_starts_.push_back(header_.num_tokens);
  }
  // Closes the document made of the sentences added since the last call (if any).
  void end_document() {
    const uint64_t sentences = sentence_starts_.size() - 1;
    if (sentences > document_starts_.back()) document_starts_.push_back(sentences);
  }
  bool has_open_document() const { return sentence_starts_.size() - 1 > document_starts_.back(); }
  uint64_t num_tokens() const { return header_.num_tokens; }
  uint64_t num_sentences() const { return sentence_starts_.size() - 1; }
  uint64_t num_documents() const { return document_starts_.size() - 1; }

  // Finishes the file (all documents must be closed) and renames it into place.
  cf::ShardHeader finish() {
    KILN_CHECK(!has_open_document(), "prepare_corpus: internal error: shard finished inside a document");
    if (header_.num_tokens % 2) {
      const uint32_t pad = 0;
      write(&pad, 4);
    }
    write(sentence_starts_.data(), sentence_starts_.size() * 8);
    write(document_starts_.data(), document_starts_.size() * 8);
    header_.num_sentences = num_sentences();
    header_.num_documents = num_documents();
    header_.checksum = hash_.value();
    unsigned char bytes[cf::kHeaderBytes];
    cf::encode_header(header_, bytes);
    out_.seekp(0);
    out_.write(reinterpret_cast<const char*>(bytes), cf::kHeaderBytes);
    out_.flush();
    check_stream();
    out_.close();
    KILN_CHECK(!out_.fail(), "prepare_corpus: error closing '", tmp_, "'");
    std::error_code ec;
    fs::rename(tmp_, path_, ec);
    KILN_CHECK(!ec, "prepare_corpus: cannot rename '", tmp_, "' to '", path_, "': ", ec.message());
    return header_;
  }

 private:
  void write(const void* data, size_t n) {
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    hash_.update(data, n);
    check_stream();
  }
  void check_stream() { KILN_CHECK(out_.good(), "prepare_corpus: error writing '", tmp_, "' (disk full?)"); }

  std::string path_, tmp_;
  std::ofstream out_;
  cf::ShardHeader header_;
  cf::Fnv1a hash_;
  std::vector<uint64_t> sentence_starts_{0};
  std::vector<uint64_t> document_starts_{0};
};

// Shard files of an earlier run that the new index does not name: names
// "shard-<digits>.bin" (or ".bin.tmp") other than shards 0 .. num_shards - 1.
void remove_stale_shards(const fs::path& dir, size_t num_shards) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::string_view rest = name;
    if (!rest.starts_with("shard-")) continue;
    rest.remove_prefix(6);
    const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
    const std::string_view suffix = rest.substr(digits);
    if (digits == 0 || (suffix != ".bin" && suffix != ".bin.tmp")) continue;
    uint64_t index = 0;
    const auto [end, err] = std::from_chars(rest.data(), rest.data() + digits, index);
    // Stale: a temporary, a number past the new shards (or past 64 bits), a non-canonical name.
    if (suffix != ".bin" || err != std::errc() || index >= num_shards ||
        name != cf::shard_file_name(static_cast<size_t>(index)))
      fs::remove(entry.path(), ec);
  }
}

}  // namespace

PrepareStats prepare_corpus(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                            const std::string& output_dir, const PrepareOptions& options) {
  KILN_CHECK(!inputs.empty(), "prepare_corpus: no input files");
  KILN_CHECK(options.shard_tokens >= 1, "prepare_corpus: shard_tokens must be >= 1");
  KILN_CHECK(options.lines_per_batch >= 1, "prepare_corpus: lines_per_batch must be >= 1");
  for (const std::string& path : inputs) {
    std::error_code ec;
    KILN_CHECK(fs::is_regular_file(path, ec), "prepare_corpus: input file '", path, "' does not exist");
    std::ifstream probe(path, std::ios::binary);
    KILN_CHECK(probe.good(), "prepare_corpus: cannot read input file '", path, "'");
  }
  const fs::path dir(output_dir);
  {
    std::error_code ec;
    fs::create_directories(dir, ec);
    KILN_CHECK(fs::is_directory(dir), "prepare_corpus: cannot create output folder '", output_dir, "'",
               ec ? ": " + ec.message() : std::string());
    fs::remove(dir / cf::kIndexFile, ec);  // the folder holds no valid corpus until the new index lands
    KILN_CHECK(!ec, "prepare_corpus: cannot remove the old '", (dir / cf::kIndexFile).string(), "': ", ec.message());
  }

  const uint64_t vocab_size = tokenizer.vocab_size();
  const int32_t unk = tokenizer.unk_id();
  PrepareStats stats;
  nlohmann::json shard_entries = nlohmann::json::array(), sources = nlohmann::json::array();
  std::unique_ptr<ShardWriter> shard;
  uint64_t shard_first_token = 0, shard_first_sentence = 0, shard_first_document = 0;

  const auto close_shard = [&] {
    const cf::ShardHeader h = shard->finish();
    const std::string file = cf::shard_file_name(stats.shards);
    const FileDigest digest = file_digest((dir / file).string());  // Note [Corpus integrity]
    shard_entries.push_back({{"file", file},
                             {"bytes", digest.bytes},
                             {"crc32c", crc32c_hex(digest.crc32c)},
                             {"num_tokens", h.num_tokens},
                             {"num_sentences", h.num_sentences},
                             {"num_documents", h.num_documents},
                             {"first_token", shard_first_token},
                             {"first_sentence", shard_first_sentence},
                             {"first_document", shard_first_document},
                             {"checksum", cf::hex64(h.checksum)}});
    shard_first_token += h.num_tokens;
    shard_first_sentence += h.num_sentences;
    shard_first_document += h.num_documents;
    ++stats.shards;
    shard.reset();
  };
  size_t sentences_in_document = 0;
  const auto end_document = [&] {
    sentences_in_document = 0;
    if (!shard || !shard->has_open_document()) return;
    shard->end_document();
    ++stats.documents;
    if (shard->num_tokens() >= options.shard_tokens) close_shard();
  };
  const auto add_sentence = [&](const std::vector<int32_t>& ids) {
    if (!shard) shard = std::make_unique<ShardWriter>((dir / cf::shard_file_name(stats.shards)).string(), vocab_size);
    shard->add_sentence(ids);
    ++stats.sentences;
    stats.tokens += ids.size();
    stats.unk_tokens += static_cast<uint64_t>(std::count(ids.begin(), ids.end(), unk));
    if (options.max_sentences_per_document > 0 && ++sentences_in_document >= options.max_sentences_per_document)
      end_document();
  };

  std::vector<std::string> texts;
  std::vector<int64_t> line_text;  // per line of the batch: index in texts, or -1 when blank
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    KILN_CHECK(in.good(), "prepare_corpus: cannot read input file '", path, "'");
    const size_t first_document = stats.documents;
    size_t lines = 0, blank = 0, dropped = 0;
    bool at_file_start = true, eof = false;
    while (!eof) {
      texts.clear();
      line_text.clear();
      std::string line;
      while (line_text.size() < options.lines_per_batch && std::getline(in, line)) {
        if (at_file_start && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
        at_file_start = false;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        ++lines;
        if (is_blank(line)) {
          ++blank;
          line_text.push_back(-1);
        } else {
          line_text.push_back(static_cast<int64_t>(texts.size()));
          texts.push_back(std::move(line));
        }
      }
      KILN_CHECK(!in.bad(), "prepare_corpus: error reading input file '", path, "'");
      eof = line_text.size() < options.lines_per_batch;
      const std::vector<std::vector<int32_t>> ids = tokenizer.encode_ids_batch(texts);
      for (int64_t t : line_text) {
        if (t < 0) {
          end_document();
        } else if (ids[static_cast<size_t>(t)].empty()) {
          ++dropped;
        } else {
          add_sentence(ids[static_cast<size_t>(t)]);
        }
      }
    }
    end_document();
    stats.lines += lines;
    stats.blank_lines += blank;
    stats.dropped_lines += dropped;
    ++stats.files;
    sources.push_back({{"path", path},
                       {"lines", lines},
                       {"blank_lines", blank},
                       {"dropped_lines", dropped},
                       {"first_document", first_document},
                       {"num_documents", stats.documents - first_document}});
  }
  if (shard) close_shard();
  KILN_CHECK(stats.tokens > 0, "prepare_corpus: the inputs hold no text (", stats.lines, " lines, all blank",
             " or without tokens), first input '", inputs.front(), "'");

  const SpecialTokenIds special{tokenizer.pad_id(), tokenizer.unk_id(), tokenizer.cls_id(), tokenizer.sep_id(),
                                tokenizer.mask_id()};
  const nlohmann::json index = {
      {"format", cf::kIndexFormat},
      {"version", cf::kVersion},
      {"vocab_size", vocab_size},
      {"vocab_fingerprint", cf::hex64(vocab_fingerprint(tokenizer))},
      {"lowercase", tokenizer.lowercase()},
      {"special_ids",
       {{"pad", special.pad},
        {"unk", special.unk},
        {"cls", special.cls},
        {"sep", special.sep},
        {"mask", special.mask}}},
      {"num_tokens", stats.tokens},
      {"num_sentences", stats.sentences},
      {"num_documents", stats.documents},
      {"shards", shard_entries},
      {"sources", sources},
      {"options",
       {{"shard_tokens", options.shard_tokens}, {"max_sentences_per_document", options.max_sentences_per_document}}}};
  remove_stale_shards(dir, stats.shards);
  write_file_atomic((dir / cf::kIndexFile).string(),
                        index.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return stats;
}

}  // namespace kiln::data
