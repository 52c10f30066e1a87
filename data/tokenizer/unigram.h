// Unigram: HF tokenizers' Unigram model (models/unigram/model.rs), the
// SentencePiece unigram language model. A pre-token is cut into the
// sequence of vocabulary pieces with the highest total score (a Viterbi best
// path over every piece that occurs in it), exactly as HF's encode_optimized:
//  - pieces are matched on bytes; at each code-point boundary every piece
//    starting there is a candidate, in order of length;
//  - a candidate replaces the best path ending where it ends only when its
//    total score is strictly higher (the first one found wins ties);
//  - where no piece of exactly one code point starts, the code point may be
//    taken as the unknown piece, scored min(score) - 10 (needs unk_id: a
//    kiln::Error when such a node is taken without one, as HF);
//  - consecutive unknown nodes (any node whose id is unk_id, a matched
//    "<unk>" piece included) fuse into one token; its text is looked up in
//    the vocabulary again, then with byte_fallback split into "<0xHH>"
//    tokens when every byte has one (all spanning the fused text), else it
//    is the unk id.
// Duplicate pieces are allowed, as in HF: lookups give the last id of a
// piece (its score is that id's), id_to_token every id's own piece.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/word_cache.h"

namespace kiln::data::tok {

// Note [Double array]: a trie over bytes stored as a double array (Aoe's
// base/check arrays, as SentencePiece's Darts). Unit 0 is the root; the
// child of unit s by byte c is t = base[s] + c when check[t] == s. Every
// unit holds the id of the key ending there (-1: none). Free units have
// check -1 and the root -2, so no lookup lands on them; the array is padded
// so that base + 255 is always inside it, and a transition is two loads and
// a compare with no bounds check.
class DoubleArrayTrie {
 public:
  DoubleArrayTrie() { build({}); }
  // Keys must be distinct; any bytes (the empty key lives at the root).
  // Ids are non-negative.
  void build(std::vector<std::pair<std::string_view, int32_t>> keys);

  static constexpr int32_t kNone = -1;
  static constexpr int32_t kRoot = 0;
  // The unit reached from `unit` by byte c, or kNone.
  int32_t step(int32_t unit, unsigned char c) const {
    const int32_t t = units_[unit].base + c;
    return units_[t].check == unit ? t : kNone;
  }
  // The id of the key ending at `unit`, or kNone.
  int32_t value(int32_t unit) const { return units_[unit].value; }
  // The id of `key`, or kNone.
  int32_t find(std::string_view key) const;
  size_t num_units() const { return units_.size(); }

 private:
  struct Unit {
    int32_t base = 0;
    int32_t check = -1;
    int32_t value = kNone;
  };
  std::vector<Unit> units_;
};

class Unigram final : public Model {
 public:
  struct Piece {
    std::string piece;
    double score = 0.0;
  };
  // HF's Unigram::from. kiln::Error when unk_id is given but outside the
  // vocabulary (or the vocabulary is empty), a piece is not valid UTF-8 or a
  // score is not finite, or there are 2^31 pieces or more.
  Unigram(std::vector<Piece> vocab, std::optional<int32_t> unk_id, bool byte_fallback);

  void tokenize(std::string_view sequence, std::vector<Token>& out) const override;
  int32_t token_to_id(std::string_view token) const override { return trie_.find(token); }
  const std::string* id_to_token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < pieces_.size() ? &pieces_[id] : nullptr;
  }
  size_t vocab_size() const override { return pieces_.size(); }

  const std::vector<std::string>& pieces() const { return pieces_; }
  const std::vector<double>& scores() const { return scores_; }
  std::optional<int32_t> unk_id() const {
    return unk_id_ >= 0 ? std::optional<int32_t>(unk_id_) : std::nullopt;
  }
  bool byte_fallback() const { return byte_fallback_; }
  double min_score() const { return min_score_; }

 private:
  // Appends the token(s) of a run of fused unknown nodes, text [begin, end).
  void emit_unknown(std::string_view sequence, size_t begin, size_t end,
                    std::vector<Token>& out) const;
  // Viterbi and the emission of its path (tokenize without the cache).
  void tokenize_uncached(std::string_view sequence, std::vector<Token>& out) const;

  // A cached token (Note [Word cache]): its id and span; its value is the
  // span's text, or (vocab_value) the piece of its id (byte fallback).
  // (Cached words are under 256 bytes: a span fits two bytes, a token 8.)
  struct CachedToken {
    int32_t id;
    uint8_t begin, end;
    bool vocab_value;
  };
  static_assert(WordCache<CachedToken>::kMaxWordBytes <= 256 && sizeof(CachedToken) == 8);

  std::vector<std::string> pieces_;  // by id
  std::vector<double> scores_;       // by id
  DoubleArrayTrie trie_;             // piece -> its last id
  int32_t unk_id_ = -1;              // -1: none
  bool byte_fallback_ = false;
  double min_score_ = 0.0;           // +inf for an empty vocabulary (HF)
  // byte_fallback: the id of "<0xHH>" for each byte (-1: absent).
  std::array<int32_t, 256> byte_ids_{};
  // Shared by copies (a cache never changes results).
  std::shared_ptr<WordCache<CachedToken>> cache_;
};

// Note [HF float parsing]: HF tokenizers reads tokenizer.json with
// serde_json built without its float_roundtrip feature, which computes a
// float literal as (double)significand * or / 10^|exponent| (two roundings)
// instead of rounding the decimal value once. A quarter of XLM-R's 250,002
// scores end up one ulp away from the value the text denotes (which is what
// nlohmann::json parses), and Viterbi's comparisons of score sums see it.
// serde_json_f64(d) is the value HF reads from the text serde_json or
// Python writes for d (its shortest round-trip digits; an integral d is
// written "N.0"); apply_serde_json_floats rewrites every floating-point
// number of a parsed tokenizer.json so. Only for JSON read from text: a
// model built in memory (a converted SentencePiece model, like transformers'
// conversion) keeps its exact scores.
double serde_json_f64(double d);
void apply_serde_json_floats(Json& j);

// The "model" object of a tokenizer.json with "type": "Unigram"
// ({"type", "unk_id", "vocab": [[piece, score], ...], "byte_fallback"}).
std::unique_ptr<Model> unigram_from_json(const Json& j, const std::string& where);

}  // namespace kiln::data::tok
