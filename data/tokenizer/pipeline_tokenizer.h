// PipelineTokenizer: a Hugging Face Tokenizer (tokenizer.h, any family) as
// the TextTokenizer kiln's data pipeline and training tasks use, and
// open_text_tokenizer(), which picks the tokenizer of a model directory.
//
// Note [Choosing a tokenizer]: open_text_tokenizer(path, cased) follows
// transformers' AutoTokenizer, which loads a directory's tokenizer.json when
// it has one and converts the older files otherwise (Tokenizer::
// from_pretrained's order: tokenizer.json, vocab.json + merges.txt, a
// SentencePiece .model, vocab.txt):
//  - a vocab.txt alone (or a vocab.txt file) is BERT's WordPiece: a
//    BertTokenizer, do_lower_case from tokenizer_config.json (as today);
//  - a tokenizer.json that is exactly BERT's WordPiece pipeline (the one
//    transformers' BertConverter writes: BertNormalizer, BertPreTokenizer,
//    WordPiece "##" with [UNK], BERT's template or BertProcessing, the
//    [PAD]/[UNK]/[CLS]/[SEP]/[MASK] present in the vocab as its only added
//    tokens, the WordPiece decoder) is also a BertTokenizer over its vocab:
//    the same ids, an order of magnitude faster (docs/performance.md);
//  - anything else is a PipelineTokenizer running the full pipeline.
// `cased` is BERT's --cased (do_lower_case false); for any other tokenizer
// it is a kiln::Error: a tokenizer.json says its own case. The truncation
// and padding a tokenizer.json records are ignored, as transformers ignores
// them: each call's EncodeOptions decide (tokenizer(..., truncation=True,
// max_length=...)).
//
// Special-token roles (unk/cls/sep/pad/mask_token) are transformers': the
// directory's tokenizer_config.json, else its special_tokens_map.json (a
// string or an AddedToken object's "content"), else the first of BERT's,
// RoBERTa's and GPT-2's names the tokenizer has ([UNK]/<unk>/<|endoftext|>,
// [CLS]/<s>, [SEP]/</s>, [PAD]/<pad>, [MASK]/<mask>). A configured token the
// tokenizer does not have is a kiln::Error naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/tokenizer/text_tokenizer.h"
#include "kiln/data/tokenizer/tokenizer.h"

namespace kiln::data {

class PipelineTokenizer final : public TextTokenizer {
 public:
  // A model directory or a tokenizer file, as Tokenizer::from_pretrained
  // reads it (whatever the family), with the roles above.
  static PipelineTokenizer from_pretrained(const std::string& path);
  // Tokenizer::pretrained_json(path, &source)'s result `j`.
  static PipelineTokenizer from_pretrained_json(const tok::Json& j, const std::string& source,
                                                const std::string& path);

  using TextTokenizer::encode_ids;
  void encode_ids(std::string_view text, std::vector<int32_t>& ids) const override;
  std::vector<std::vector<int32_t>> encode_ids_batch(const std::vector<std::string>& texts) const override;
  Encoding encode(std::string_view a, std::optional<std::string_view> b = {},
                  const EncodeOptions& options = {}) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     const EncodeOptions& options = {}) const override;
  std::vector<Encoding> encode_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                     const EncodeOptions& options = {}) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const override;

  int32_t token_to_id(std::string_view token) const override { return tokenizer_.token_to_id(token); }
  std::vector<std::string> tokens() const override;
  size_t vocab_size() const override { return tokenizer_.vocab_size(true); }
  bool is_special_id(int32_t id) const override;
  int32_t unk_id() const override { return unk_; }
  int32_t cls_id() const override { return cls_; }
  int32_t sep_id() const override { return sep_; }
  int32_t pad_id() const override { return pad_; }
  int32_t mask_id() const override { return mask_; }
  SpecialAround special_around() const override { return around_; }
  std::string continuation_prefix() const override { return continuation_prefix_; }
  bool lowercase() const override { return false; }
  // tokenizer.json (the source file's bytes, or the converted JSON), and
  // the directory's tokenizer_config.json and special_tokens_map.json when
  // it has them (else a tokenizer_config.json naming the roles).
  std::map<std::string, std::string> files() const override;

  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  PipelineTokenizer(Tokenizer tokenizer, const tok::Json& json, const std::string& source_dir);
  // The encodings of `n` inputs (encode_one(t, i) with t the tokenizer set
  // up for `options`), padded as `options` say.
  template <typename F>
  std::vector<Encoding> encode_all(size_t n, const EncodeOptions& options, F encode_one) const;
  Tokenizer configured(const EncodeOptions& options) const;
  void pad(Encoding& e, size_t length) const;

  Tokenizer tokenizer_;  // without truncation and padding
  std::vector<uint8_t> special_;  // by id
  int32_t unk_ = -1, cls_ = -1, sep_ = -1, pad_ = -1, mask_ = -1;
  SpecialAround around_;
  std::string continuation_prefix_;
  std::map<std::string, std::string> files_;
};

// Note [Choosing a tokenizer]. kiln::Error for a path with no tokenizer.
std::unique_ptr<TextTokenizer> open_text_tokenizer(const std::string& path, bool cased = false);

}  // namespace kiln::data
