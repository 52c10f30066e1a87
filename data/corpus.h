// Token corpora for pretraining: documents made of sentences made of token ids.
//
//   Corpus           the abstract interface packing and masking read
//   InMemoryCorpus   a Corpus held in vectors (tests, the synthetic corpus)
//   TokenCorpus      a prepared corpus on disk, memory-mapped (`kiln prepare`)
//   prepare_corpus   raw text -> token shards + index.json
//
// Corpus invariants (every implementation):
//  - documents are numbered [0, num_documents()), sentences [0, num_sentences());
//    document d holds the consecutive sentences document(d) = [first, first +
//    count), and documents 0, 1, ... cover the sentences in order;
//  - every document has >= 1 sentence and every sentence >= 1 token;
//  - every token id lies in [0, vocab_size());
//  - all methods are const and safe to call concurrently; spans stay valid as
//    long as the corpus lives. An index out of range is a kiln::Error.
//
// Note [Raw text format] (prepare_corpus input)
// One sentence per line, documents separated by blank lines (BERT's original
// pretraining format). In detail, per input file:
//  - a UTF-8 byte-order mark at the start of the file is skipped; "\r\n" line
//    ends are accepted (the '\r' is dropped);
//  - a line holding only ASCII whitespace is blank: it ends the current
//    document (several blank lines in a row end it once);
//  - any other line is one sentence, tokenized as a whole (WikiText headings
//    such as " = Title = " are ordinary sentences); a line that tokenizes to
//    no ids at all (e.g. only control characters) is dropped, counted in
//    PrepareStats::dropped_lines, and does not end the document;
//  - the end of a file ends the document: documents never span files.
// Plain text without blank lines is therefore one document per file, unless
// PrepareOptions::max_sentences_per_document > 0, which also ends a document
// after that many sentences (use it for line-per-sentence text with no
// document structure, so that packing and NSP see several documents).
//
// Note [Token shard format] (version 1, every integer little-endian)
//   offset  size  field
//        0     8  magic "KILNTOKS"
//        8     4  uint32 format version = 1
//       12     4  uint32 header size = 64
//       16     8  uint64 T: number of tokens
//       24     8  uint64 S: number of sentences
//       32     8  uint64 D: number of documents
//       40     8  uint64 V: vocab size (every token id is in [0, V))
//       48     8  uint64 checksum: FNV-1a 64 of every byte after the header
//       56     8  reserved, zero
//       64    4T  int32 token ids, sentence after sentence
//              p  zero padding to a multiple of 8 bytes (p = 4 if T is odd)
//          8(S+1) uint64 sentence_starts: token offset of each sentence in
//                 this shard; [0] = 0, strictly increasing, [S] = T
//          8(D+1) uint64 document_starts: sentence offset of each document in
//                 this shard; [0] = 0, strictly increasing, [D] = S
// The file size is exactly the sum; anything else is a truncated or corrupt
// shard. Documents never span shards.
//
// Note [Corpus index] index.json in the corpus folder:
//   {"format": "kiln-token-corpus", "version": 1,
//    "vocab_size", "vocab_fingerprint" (FNV-1a 64 hex of the vocab lines),
//    "lowercase", "special_ids": {"pad", "unk", "cls", "sep", "mask"},
//    "num_tokens", "num_sentences", "num_documents",
//    "shards": [{"file", "bytes", "crc32c", "num_tokens", "num_sentences", "num_documents",
//                "first_token", "first_sentence", "first_document", "checksum"}],
//    "sources": [{"path", "lines", "blank_lines", "dropped_lines",
//                 "first_document", "num_documents"}],
//    "options": {"shard_tokens", "max_sentences_per_document"}}
// Sentence and document boundaries live in the shards (mmapped, so a corpus
// of any size opens without parsing them); the index gives each shard's place
// in the global numbering. prepare_corpus removes any old index.json first,
// writes each shard to "<name>.tmp" and renames it, and writes the index last
// the same way: a folder with an index.json holds a complete corpus.
//
// Note [Corpus integrity]: each shard entry records the file's size ("bytes")
// and the CRC-32C of all its bytes, header included ("crc32c", 8 hex digits;
// data/integrity.h), besides the header's own FNV-1a of the data. Opening
// checks the size always and the CRC-32C with verify_data, naming the shard
// that is damaged (indexes written before these fields existed are read
// without them). The index records the special-token ids too; opening checks
// them against the vocabulary size and check_tokenizer() against the
// tokenizer's own ids, next to the vocabulary fingerprint and lowercase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::data {

class TextTokenizer;

// Ids of the special tokens of a corpus's vocabulary; -1 when absent.
struct SpecialTokenIds {
  int32_t pad = -1;
  int32_t unk = -1;
  int32_t cls = -1;
  int32_t sep = -1;
  int32_t mask = -1;
};

// Sentences [first, first + count) of one document.
struct SentenceRange {
  size_t first = 0;
  size_t count = 0;
};

class Corpus {
 public:
  virtual ~Corpus() = default;
  virtual size_t num_documents() const = 0;
  virtual size_t num_sentences() const = 0;
  virtual uint64_t num_tokens() const = 0;
  virtual SentenceRange document(size_t d) const = 0;
  virtual std::span<const int32_t> sentence(size_t s) const = 0;
  virtual size_t vocab_size() const = 0;
  virtual SpecialTokenIds special_ids() const = 0;
};

class InMemoryCorpus : public Corpus {
 public:
  // documents[d][k] = ids of sentence k of document d. Empty documents and
  // empty sentences are a kiln::Error, as is an id outside [0, vocab_size).
  InMemoryCorpus(const std::vector<std::vector<std::vector<int32_t>>>& documents, size_t vocab_size,
                 SpecialTokenIds special_ids);
  // The flat form: tokens of all sentences back to back; sentence_starts
  // (S + 1 entries, [0] = 0, strictly increasing, [S] = tokens.size()) and
  // document_starts (D + 1 entries over sentences, likewise). Checked.
  InMemoryCorpus(std::vector<int32_t> tokens, std::vector<uint64_t> sentence_starts,
                 std::vector<uint64_t> document_starts, size_t vocab_size, SpecialTokenIds special_ids);

  size_t num_documents() const override { return document_starts_.size() - 1; }
  size_t num_sentences() const override { return sentence_starts_.size() - 1; }
  uint64_t num_tokens() const override { return tokens_.size(); }
  SentenceRange document(size_t d) const override;
  std::span<const int32_t> sentence(size_t s) const override;
  size_t vocab_size() const override { return vocab_size_; }
  SpecialTokenIds special_ids() const override { return special_ids_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 protected:
  InMemoryCorpus() = default;
  // Checks the invariants of the flat form (kiln::Error naming `what`).
  void assign(std::vector<int32_t> tokens, std::vector<uint64_t> sentence_starts, std::vector<uint64_t> document_starts,
              size_t vocab_size, SpecialTokenIds special_ids, const char* what);

 private:
  std::vector<int32_t> tokens_;
  std::vector<uint64_t> sentence_starts_{0};
  std::vector<uint64_t> document_starts_{0};
  size_t vocab_size_ = 0;
  SpecialTokenIds special_ids_;
};

struct TokenCorpusOptions {
  // Recompute each shard's checksums (FNV-1a, CRC-32C) and check every token
  // id < vocab size (sequential passes over the data). Structure and sizes
  // are always checked.
  bool verify_data = true;
};

class TokenCorpus final : public Corpus {
 public:
  // Opens the corpus in `dir` (index.json + shards). A missing index or
  // shard, a bad magic/version, a truncated or oversized shard, a checksum
  // mismatch, inconsistent counts or offsets: kiln::Error naming the file.
  static std::shared_ptr<TokenCorpus> open(const std::string& dir, const TokenCorpusOptions& options = {});
  ~TokenCorpus() override;
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;

  size_t num_documents() const override;
  size_t num_sentences() const override;
  uint64_t num_tokens() const override;
  SentenceRange document(size_t d) const override;
  std::span<const int32_t> sentence(size_t s) const override;
  size_t vocab_size() const override;
  SpecialTokenIds special_ids() const override;

  const std::string& directory() const;
  size_t num_shards() const;
  bool lowercase() const;
  // kiln::Error unless `tokenizer` has the vocabulary (same lines), the
  // lowercase setting and the special-token ids the corpus was prepared with.
  void check_tokenizer(const TextTokenizer& tokenizer) const;

 private:
  struct Impl;
  explicit TokenCorpus(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct PrepareOptions {
  // A shard is closed at the first document end at or after this many tokens
  // (a single longer document makes a longer shard). >= 1.
  uint64_t shard_tokens = uint64_t{1} << 24;
  // > 0: a document also ends after this many sentences (Note [Raw text format]).
  size_t max_sentences_per_document = 0;
  // Lines tokenized together by TextTokenizer::encode_ids_batch; affects
  // memory and parallel granularity only, never the output. >= 1.
  size_t lines_per_batch = 16384;
};

struct PrepareStats {
  size_t files = 0;
  size_t lines = 0;          // all lines read
  size_t blank_lines = 0;    // whitespace-only lines
  size_t dropped_lines = 0;  // non-blank lines with no tokens
  size_t sentences = 0;
  size_t documents = 0;
  uint64_t tokens = 0;
  uint64_t unk_tokens = 0;
  size_t shards = 0;
};

// Tokenizes `inputs` (Note [Raw text format]) in order into shards in
// `output_dir` (created if missing; an existing corpus there is replaced).
// Tokenization runs on kiln's thread pool; the output is byte-identical for
// any thread count and lines_per_batch. Errors (kiln::Error): an input that
// is missing or unreadable (checked before anything is written), inputs with
// no tokens at all, write failures (naming the file), bad options.
PrepareStats prepare_corpus(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                            const std::string& output_dir, const PrepareOptions& options = {});

// FNV-1a 64 of the tokenizer's tokens by id, each followed by '\n', then of
// its tokenizer.json when it has one (TextTokenizer::files); index.json's
// vocab_fingerprint.
uint64_t vocab_fingerprint(const TextTokenizer& tokenizer);

}  // namespace kiln::data
