// BertTokenizer: Hugging Face-exact BERT WordPiece tokenization (the
// `tokenizers` library's BertWordPieceTokenizer / transformers'
// BertTokenizerFast with a vocab.txt): special-token matching, BasicTokenizer
// (clean, CJK, lowercase + accent strip, whitespace/punctuation split), then
// WordPiece; [CLS]/[SEP] templates, longest_first truncation, padding, decode.
//
// Invariants:
//  - The vocab holds [UNK]; [CLS], [SEP], [PAD], [MASK] are optional, but
//    encode() with add_special_tokens needs [CLS] and [SEP], padding needs
//    [PAD] (kiln::Error otherwise).
//  - The special tokens present in the vocab are matched verbatim in the raw
//    text (before normalization, case-sensitive, leftmost-longest), as HF's
//    added-token splitting does: "a [MASK] b" encodes [MASK] as its id.
//  - Invalid UTF-8 never fails: ill-formed bytes are dropped (see
//    basic_tokenizer.h), matching HF on text decoded with U+FFFD replacement;
//    like that U+FFFD, a dropped byte still prevents a special-token match
//    ("[CL\xFFS]" is "[", "cls", "]").
//  - Thread-safe: all methods are const and use per-call or thread-local scratch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/basic_tokenizer.h"
#include "kiln/data/tokenizer/text_tokenizer.h"
#include "kiln/data/tokenizer/vocab.h"
#include "kiln/data/tokenizer/wordpiece.h"

namespace kiln::data {

class BertTokenizer final : public TextTokenizer {
 public:
  // Loads a vocab.txt; a missing/empty file or one without [UNK] is a
  // kiln::Error naming the file.
  static BertTokenizer from_vocab_file(const std::string& path, bool lowercase = true);
  explicit BertTokenizer(Vocab vocab, bool lowercase = true);

  // WordPiece token strings of `text`, without special tokens.
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids of `text` without special tokens (appended to `ids` in the second form).
  using TextTokenizer::encode_ids;
  void encode_ids(std::string_view text, std::vector<int32_t>& ids) const override;

  Encoding encode(std::string_view a, std::optional<std::string_view> b = {},
                  const EncodeOptions& options = {}) const override;
  // Encodes every text (or pair) in parallel on kiln's thread pool; element i
  // is encode(texts[i], ...). Deterministic whatever the thread count.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     const EncodeOptions& options = {}) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                     const EncodeOptions& options = {}) const override;
  // Ids only, no special tokens, in parallel: result[i] = encode_ids(texts[i]).
  std::vector<std::vector<int32_t>> encode_ids_batch(const std::vector<std::string>& texts) const override;

  // HF's WordPiece decoder: pieces joined with spaces, "##" pieces glued to
  // the previous one, " ." " ?" " !" " ," tightened; special tokens dropped
  // when skip_special_tokens. An id outside the vocab is a kiln::Error.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const override;

  // The id of a token, or -1 when it is not in the vocab.
  int32_t token_to_id(std::string_view token) const override { return vocab_.find(token); }
  const std::string& id_to_token(int32_t id) const { return vocab_.token(id); }
  std::vector<std::string> tokens() const override { return vocab_.tokens(); }
  bool is_special_id(int32_t id) const override;
  int32_t unk_id() const override { return unk_id_; }
  int32_t cls_id() const override { return cls_id_; }  // -1 when absent
  int32_t sep_id() const override { return sep_id_; }
  int32_t pad_id() const override { return pad_id_; }
  int32_t mask_id() const override { return mask_id_; }
  // {[CLS]}, {[SEP]} (encode() needs both to add special tokens).
  SpecialAround special_around() const override;
  std::string continuation_prefix() const override { return wordpiece_.continuation_prefix(); }
  size_t vocab_size() const override { return vocab_.size(); }
  bool lowercase() const override { return basic_.lowercase(); }
  // vocab.txt (one token per line) and tokenizer_config.json (do_lower_case,
  // tokenizer_class BertTokenizer).
  std::map<std::string, std::string> files() const override;
  const Vocab& vocab() const { return vocab_; }

 private:
  Encoding assemble(std::vector<int32_t> a, std::optional<std::vector<int32_t>> b,
                    const EncodeOptions& options) const;
  void pad(Encoding& e, size_t length) const;

  Vocab vocab_;
  BasicTokenizer basic_;
  WordPiece wordpiece_;
  int32_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, mask_id_ = -1;
  // Special tokens present in the vocab, as (text, id), matched in raw text.
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace kiln::data
