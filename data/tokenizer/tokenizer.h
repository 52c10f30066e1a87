// Tokenizer: a Hugging Face tokenizer pipeline loaded from tokenizer.json (or
// from the older files a model directory may hold instead), with HF
// tokenizers' exact behaviour (docs/tokenizer.md lists the supported stages).
//
//   encode: added tokens split off (non-normalized ones on the raw text),
//           normalizer, normalized added tokens split off, pre-tokenizer,
//           model, truncation, post-processor (special tokens, pairs), padding
//   decode: ids -> token strings (special ones dropped when asked) -> decoder
//
// Offsets are character spans of the input, as HF's Python API reports them
// (OffsetUnit::kByte gives bytes, as its Rust encode()). Input that is not
// valid UTF-8 is read as Python's bytes.decode("utf-8", "replace") would:
// each ill-formed sequence becomes U+FFFD, and offsets refer to that text.
//
// Thread-safe: every method is const; stages are immutable and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/added_vocabulary.h"
#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data {

struct TruncationParams {
  enum class Strategy { kLongestFirst, kOnlyFirst, kOnlySecond };
  enum class Direction { kLeft, kRight };
  size_t max_length = 512;
  size_t stride = 0;
  Strategy strategy = Strategy::kLongestFirst;
  Direction direction = Direction::kRight;
};

struct PaddingParams {
  enum class Direction { kLeft, kRight };
  std::optional<size_t> fixed_length;  // nullopt: BatchLongest
  Direction direction = Direction::kRight;
  size_t pad_to_multiple_of = 0;  // 0: off
  int32_t pad_id = 0;
  int32_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

enum class OffsetUnit { kChar, kByte };

class Tokenizer {
 public:
  // A tokenizer.json file (bounded read; every malformed field is a
  // kiln::Error naming it and the file).
  static Tokenizer from_file(const std::string& tokenizer_json);
  // The parsed content of a tokenizer.json; `source` names it in errors.
  static Tokenizer from_json(const tok::Json& j, const std::string& source = "tokenizer.json");
  // A model directory or a file: tokenizer.json when the directory has one;
  // otherwise GPT-2's vocab.json + merges.txt, a SentencePiece *.model, or
  // BERT's vocab.txt, converted as transformers' converters do (using
  // tokenizer_config.json / config.json where they decide an option).
  static Tokenizer from_pretrained(const std::string& path);
  // The tokenizer.json from_pretrained(path) loads: the file itself, or the
  // one the converters build from the older formats. `source` receives the
  // file it was read from (tokenizer.json, vocab.json, the .model, vocab.txt).
  static tok::Json pretrained_json(const std::string& path, std::string* source = nullptr);
  // A tokenizer.json's content (bounded read, floats as HF parses them).
  static tok::Json read_tokenizer_json(const std::string& path);

  tok::Encoding encode(std::string_view a, std::optional<std::string_view> b = std::nullopt,
                       bool add_special_tokens = true, OffsetUnit unit = OffsetUnit::kChar) const;
  // encode() of every input on kiln's thread pool, then padded together
  // (BatchLongest padding pads to the batch's longest). Deterministic
  // whatever the thread count.
  std::vector<tok::Encoding> encode_batch(const std::vector<std::string>& texts,
                                          bool add_special_tokens = true,
                                          OffsetUnit unit = OffsetUnit::kChar) const;
  std::vector<tok::Encoding> encode_batch(
      const std::vector<std::pair<std::string, std::string>>& pairs, bool add_special_tokens = true,
      OffsetUnit unit = OffsetUnit::kChar) const;

  // HF's Tokenizer.decode: an id outside the vocabulary is skipped (as HF).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;
  std::vector<std::string> decode_batch(const std::vector<std::vector<int32_t>>& ids,
                                        bool skip_special_tokens = true) const;

  // Added tokens first, then the model's vocabulary; -1 / nullopt when absent.
  int32_t token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // HF's get_vocab_size(with_added_tokens).
  size_t vocab_size(bool with_added_tokens = true) const;
  bool is_special_token(std::string_view token) const;
  // The added tokens with their ids, by id.
  std::vector<std::pair<int32_t, AddedToken>> added_tokens() const;

  const std::optional<TruncationParams>& truncation() const { return truncation_; }
  const std::optional<PaddingParams>& padding() const { return padding_; }
  void set_truncation(std::optional<TruncationParams> t) { truncation_ = std::move(t); }
  void set_padding(std::optional<PaddingParams> p) { padding_ = std::move(p); }

  // Note [Fast pre-tokenization] (pieces.h): on by default; off runs every
  // split through PreTokenizedString (the equivalence tests compare both).
  void set_fast_pre_tokenization(bool on) { fast_pre_tokenization_ = on; }

  const tok::Model& model() const { return *model_; }
  // Number of special tokens the post-processor adds (0 without one).
  size_t num_special_tokens_to_add(bool is_pair) const;
  // The ids the post-processor puts before and after one sequence when it
  // adds special tokens (both empty without a post-processor).
  std::pair<std::vector<int32_t>, std::vector<int32_t>> special_tokens_around() const;

 private:
  Tokenizer() = default;

  // `room`: capacity kept for the special tokens the post-processor adds.
  tok::Encoding encode_sequence(std::string_view text, int32_t type_id, OffsetUnit unit,
                                size_t room = 0) const;
  tok::Encoding post_process(tok::Encoding a, std::optional<tok::Encoding> b,
                             bool add_special_tokens) const;

  std::shared_ptr<const tok::Normalizer> normalizer_;
  std::shared_ptr<const tok::PreTokenizer> pre_tokenizer_;
  std::shared_ptr<const tok::Model> model_;
  std::shared_ptr<const tok::PostProcessor> post_processor_;
  std::shared_ptr<const tok::Decoder> decoder_;
  std::shared_ptr<const tok::AddedVocabulary> added_;
  std::optional<TruncationParams> truncation_;
  std::optional<PaddingParams> padding_;
  bool fast_pre_tokenization_ = true;
};

}  // namespace kiln::data
