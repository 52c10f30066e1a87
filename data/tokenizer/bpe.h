// BPE: HF tokenizers' byte-pair-encoding model (models/bpe/model.rs and
// word.rs), as GPT-2, RoBERTa, Llama-style SentencePiece BPE and the models
// tokenizers' BpeTrainer writes use it.
//
// One pre-token becomes tokens in two steps (Note [BPE merge order]):
//  1. Each code point c is looked up as prefix + c + suffix, where the
//     continuing_subword_prefix is added to every code point but the first
//     and the end_of_word_suffix to the last. Found: its id is a symbol.
//     Not found: with byte_fallback, when every byte of that string has a
//     "<0xHH>" token, one symbol per byte (each spanning ONE byte of the
//     input, even the prefix's and suffix's bytes, so offsets then run past
//     the code point: HF's behaviour, kept); else with an unk_token, an unk
//     symbol (consecutive ones fused into one with fuse_unk; an unk waits
//     until the next found code point or the end, so byte-fallback symbols
//     may precede it); else the code point is dropped.
//  2. Merges are applied by rank (Note [BPE merge order]).
// With ignore_merges a pre-token that is itself a vocabulary token is that
// token, before step 1. Dropout other than 0 is refused (kiln is
// deterministic). A bounded cache of merged words (Note [BPE cache]) makes
// repeated words cheap; results never depend on it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/model_vocab.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/word_cache.h"

namespace kiln::data::tok {

// An open-addressed uint64 -> uint32 hash table (linear probing, capacity a
// power of two at least twice the size; the key ~0 marks an empty slot and
// is never stored). Built once, then only read.
class FlatU64Map {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  void reserve(size_t n);
  // Inserts or overwrites. `key` must not be ~0.
  void put(uint64_t key, uint32_t value);
  uint32_t get(uint64_t key) const {
    if (slots_.empty()) return kNone;
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == kEmpty) return kNone;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t value = 0;
  };
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
  }
  void rehash(size_t capacity);
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

inline constexpr size_t kDefaultBpeCacheCapacity = 16384;  // words per cache generation

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // "" as HF's None
  std::string end_of_word_suffix;         // "" as HF's None
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  // Words (of fewer than 256 bytes) per generation of each cache slot
  // (Note [BPE cache]); 0: no cache.
  size_t cache_capacity = kDefaultBpeCacheCapacity;
};

class Bpe final : public Model {
 public:
  using Merges = std::vector<std::pair<std::string, std::string>>;
  // HF's BpeBuilder::build: merge i (rank i; a repeated pair keeps its last
  // rank) joins merges[i].first and merges[i].second with the prefix's
  // length cut off the front of .second. kiln::Error, naming the merge as
  // describe_merge(i) says, when either side or the joined token is not in
  // the vocabulary (or .second is shorter than the prefix, where HF panics).
  Bpe(TokenVocab vocab, const Merges& merges, BpeOptions options,
      const std::function<std::string(size_t)>& describe_merge);
  ~Bpe() override;

  // kiln::Error when a code point needs the unk token and the unk token is
  // not in the vocabulary (HF's UnkTokenOutOfVocabulary).
  void tokenize(std::string_view sequence, std::vector<Token>& out) const override;
  int32_t token_to_id(std::string_view token) const override { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t vocab_size() const override { return vocab_.size(); }

  const BpeOptions& options() const { return options_; }
  size_t num_merges() const { return pairs_.size(); }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1: none
    uint32_t len;        // bytes of the input; 0 once merged into its left neighbour
  };
  struct Scratch;

  // Id of code point `cp` at a position of the given kind (bit 0: not the
  // first, bit 1: the last), -1 when absent.
  int32_t char_id(char32_t cp, unsigned kind) const;
  // Steps 1 and 2 into `symbols` (only symbols with len > 0 remain).
  void merge_word(std::string_view w, Scratch& scratch) const;
  void merge_all(Scratch& scratch) const;
  static uint64_t pair_key(int32_t left, int32_t right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }
  uint32_t rank_of(int32_t left, int32_t right) const { return pairs_.get(pair_key(left, right)); }
  void emit(const Symbol* symbols, size_t n, std::vector<Token>& out) const;

  TokenVocab vocab_;
  BpeOptions options_;
  FlatU64Map pairs_;                // (left id, right id) -> rank
  std::vector<int32_t> merged_id_;  // rank -> id of the merged token
  int32_t unk_id_ = -1;             // -1: no unk_token, or it is not in the vocabulary
  unsigned kind_mask_ = 0;          // the kind bits that change the looked-up string
  static constexpr char32_t kDenseChars = 0x180;     // Latin-1 and the ByteLevel alphabet
  std::array<std::vector<int32_t>, 4> dense_chars_;  // [kind][cp] for cp < kDenseChars
  FlatU64Map sparse_chars_;                          // kind << 21 | cp -> id, for the others
  std::array<int32_t, 256> byte_ids_{};              // "<0xHH>" ids (-1: absent)
  std::unique_ptr<WordCache<uint64_t>> cache_;  // Note [BPE cache]
};

// The "model" object of a tokenizer.json with "type": "BPE" (or no type):
// {dropout, unk_token, continuing_subword_prefix, end_of_word_suffix,
// fuse_unk, byte_fallback, ignore_merges, vocab: {token: id}, merges:
// ["a b", ...] or [["a", "b"], ...]}. Optional fields may be null.
std::unique_ptr<Model> bpe_from_json(const Json& j, const std::string& where);

// HF's BPE.from_file: GPT-2's vocab.json ({token: id}) and merges.txt (one
// "a b" per line; lines starting with "#version" are skipped anywhere, a
// blank line or one without exactly one space is an error, as in HF). Both
// files are bounded (Note [Bounded input]); errors name the file and line.
std::unique_ptr<Bpe> bpe_from_vocab_merges(const std::string& vocab_json_path,
                                           const std::string& merges_txt_path,
                                           BpeOptions options = {});

// The merges of a merges.txt text (HF's convert_merges_to_hashmap over Rust's
// BufRead::lines); line_numbers (optional) gets each merge's 1-based line.
Bpe::Merges parse_merges_txt(std::string_view text, const std::string& what,
                             std::vector<size_t>* line_numbers = nullptr);

}  // namespace kiln::data::tok
