// The stages of a Hugging Face tokenizer pipeline (HF tokenizers' design):
//
//   text -> added tokens split off -> Normalizer -> PreTokenizer -> Model
//        -> PostProcessor (special tokens, pairs, type ids) -> Encoding
//   ids  -> tokens -> Decoder -> text
//
// Each stage kind is an interface here; its implementations live in one
// file per kind (normalizers.cpp, pre_tokenizers.cpp, bpe.cpp, unigram.cpp,
// wordpiece_model.cpp, wordlevel.cpp, post_processors.cpp, decoders.cpp),
// each with a `*_from_json` that reads the tokenizer.json object HF writes
// for it (json_util.h for errors). Tokenizer (tokenizer.h) runs them.
// All stages are immutable after construction and safe to share between
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/normalized.h"
#include "kiln/data/tokenizer/pieces.h"

namespace kiln::data::tok {

// ---- Normalizer -------------------------------------------------------------
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
};
// `j` is the "normalizer" object (a Sequence holds more of them).
std::unique_ptr<Normalizer> normalizer_from_json(const Json& j, const std::string& where);

// ---- PreTokenizer -----------------------------------------------------------
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& s) const = 0;
  // Note [Fast pre-tokenization] (pieces.h): when has_pieces(),
  // pre_tokenize_pieces cuts the pieces `in` of the split `split` (a plain
  // one) into `out` exactly as pre_tokenize would cut them.
  virtual bool has_pieces() const { return false; }
  virtual void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                   Pieces& out) const;
};
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const Json& j, const std::string& where);

// ---- Model ------------------------------------------------------------------
class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of one pre-token (valid UTF-8, non-empty); offsets
  // are byte spans within `sequence`.
  virtual void tokenize(std::string_view sequence, std::vector<Token>& out) const = 0;
  // -1 when absent.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  // nullptr when the id is outside the vocabulary.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual size_t vocab_size() const = 0;
};
std::unique_ptr<Model> model_from_json(const Json& j, const std::string& where);

// ---- Encoding ---------------------------------------------------------------
// One encoded sequence (or pair); all per-token vectors have ids.size()
// entries. HF's tokenizers.Encoding, with offsets in bytes of the input
// (Tokenizer converts them to characters for the HF-Python-equal API).
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<std::string> tokens;
  std::vector<Span> offsets;
  std::vector<int32_t> special_tokens_mask;  // 1 for tokens a post-processor added
  std::vector<int32_t> attention_mask;       // 0 for padding
  std::vector<int32_t> word_ids;             // -1: none (special tokens, padding)
  std::vector<int32_t> sequence_ids;         // 0 or 1 per input sequence; -1: none
  // Windows cut off by truncation (HF's overflowing), each a full Encoding.
  std::vector<Encoding> overflowing;

  size_t size() const { return ids.size(); }
  // Appends `other`'s tokens (not its overflowing).
  void append(const Encoding& other);
};

// HF's Encoding methods (encoding.cpp; merging pairs and their overflowing
// windows is post_processors.h's RangedEncoding).
// Every token (and every overflowing window's) belongs to sequence `id`.
void set_sequence_id(Encoding& e, int32_t id);
enum class TruncateSide { kLeft, kRight };
// HF's Encoding::truncate: cuts windows of max_len tokens overlapping by
// `stride`, from the start (kRight: the end is truncated) or from the end
// (kLeft); the first window is kept, the rest go to overflowing. max_len 0
// moves everything to overflowing; stride >= max_len > 0 is a kiln::Error.
void truncate_encoding(Encoding& e, size_t max_len, size_t stride, TruncateSide side);
// Pads (and every overflowing window) to `length`.
void pad_encoding(Encoding& e, size_t length, int32_t pad_id, int32_t pad_type_id,
                  const std::string& pad_token, bool left);

// ---- PostProcessor ----------------------------------------------------------
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Number of special tokens process() adds for one sequence or a pair.
  virtual size_t added_tokens(bool is_pair) const = 0;
  // HF's PostProcessor::process: combines `a` and optional `b` (and their
  // overflowing windows), adding special tokens when add_special_tokens,
  // and setting type_ids, special_tokens_mask and sequence_ids.
  virtual Encoding process(Encoding a, std::optional<Encoding> b,
                           bool add_special_tokens) const = 0;
};
std::unique_ptr<PostProcessor> post_processor_from_json(const Json& j, const std::string& where);

// ---- Decoder ----------------------------------------------------------------
class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF's Decoder::decode_chain: rewrites the token strings; decode() is
  // their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  std::string decode(std::vector<std::string> tokens) const;
};
std::unique_ptr<Decoder> decoder_from_json(const Json& j, const std::string& where);

}  // namespace kiln::data::tok
