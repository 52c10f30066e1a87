// TextTokenizer: what kiln's data pipeline and training tasks ask of a
// tokenizer (corpus preparation, fine-tuning encodings, masking, the files
// saved beside a checkpoint), whatever the family. Two implementations:
//   BertTokenizer      (bert_tokenizer.h)  BERT WordPiece, ids-only fast path
//   PipelineTokenizer  (pipeline_tokenizer.h) any Hugging Face tokenizer.json
// open_text_tokenizer() (pipeline_tokenizer.h) picks one for a model
// directory, as transformers' AutoTokenizer picks its fast tokenizer.
//
// Invariants (both implementations):
//  - encode_ids* never add special tokens, truncate or pad.
//  - encode*/encode_batch* add the tokenizer's special tokens (BERT's
//    [CLS] A [SEP] B [SEP]; a tokenizer.json's post-processor) when
//    options.add_special_tokens, truncate with HF's longest_first strategy
//    and pad with pad_id(), as transformers' tokenizer(..., truncation=True,
//    max_length=..., padding=...) does.
//  - Thread-safe: every method is const.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::data {

// One encoded sequence or pair; the three vectors have equal length.
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;        // 0 for the first sequence, 1 for the second
  std::vector<int32_t> attention_mask;  // 1 for tokens, 0 for padding
  size_t size() const { return ids.size(); }
};

struct EncodeOptions {
  bool add_special_tokens = true;  // [CLS] A [SEP] (B [SEP]), or the post-processor's
  // Truncate to at most max_length ids including special tokens, HF's
  // longest_first strategy (0: no truncation). Must leave room for the
  // special tokens (kiln::Error otherwise).
  size_t max_length = 0;
  size_t pad_to = 0;            // right-pad with pad_id() up to this length (0: none)
  bool pad_to_longest = false;  // encode_batch only: pad to the batch's longest
};

// The ids a tokenizer puts around one sequence (BERT: {[CLS]}, {[SEP]};
// RoBERTa: {<s>}, {</s>}; GPT-2: none).
struct SpecialAround {
  std::vector<int32_t> before, after;
  size_t size() const { return before.size() + after.size(); }
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // Ids of `text` without special tokens, appended to `ids`.
  virtual void encode_ids(std::string_view text, std::vector<int32_t>& ids) const = 0;
  std::vector<int32_t> encode_ids(std::string_view text) const {
    std::vector<int32_t> ids;
    encode_ids(text, ids);
    return ids;
  }
  // In parallel on kiln's thread pool: result[i] = encode_ids(texts[i]).
  virtual std::vector<std::vector<int32_t>> encode_ids_batch(const std::vector<std::string>& texts) const = 0;

  virtual Encoding encode(std::string_view a, std::optional<std::string_view> b = {},
                          const EncodeOptions& options = {}) const = 0;
  // Every text (or pair) in parallel; element i is encode(texts[i], ...).
  // Deterministic whatever the thread count.
  virtual std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                             const EncodeOptions& options = {}) const = 0;
  virtual std::vector<Encoding> encode_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                             const EncodeOptions& options = {}) const = 0;

  // HF's decode (the tokenizer's decoder; special tokens dropped when asked).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const = 0;

  // The id of a token, or -1 when it is not in the vocabulary.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  // Every id's token string, by id ("" for an id no token has).
  virtual std::vector<std::string> tokens() const = 0;
  // Ids [0, vocab_size()) are the model's embedding rows (HF's len(tokenizer)).
  virtual size_t vocab_size() const = 0;
  virtual bool is_special_id(int32_t id) const = 0;

  // The special tokens' roles (transformers' unk/cls/sep/pad/mask_token);
  // -1 when the tokenizer has none.
  virtual int32_t unk_id() const = 0;
  virtual int32_t cls_id() const = 0;
  virtual int32_t sep_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int32_t mask_id() const = 0;
  // What encode() adds around one sequence when add_special_tokens.
  virtual SpecialAround special_around() const = 0;
  // The prefix that marks a word's continuation pieces ("##" for
  // WordPiece; "" when the vocabulary has no such marker).
  virtual std::string continuation_prefix() const = 0;
  // BERT's lower-casing; false for a tokenizer.json (whose normalizer is in
  // its files(), part of data/corpus.h's vocab_fingerprint).
  virtual bool lowercase() const = 0;
  // The files that describe this tokenizer to transformers, saved beside a
  // checkpoint so the directory is a complete model (name -> content):
  // BERT's vocab.txt + tokenizer_config.json; a tokenizer.json (and the
  // source directory's tokenizer_config.json / special_tokens_map.json).
  virtual std::map<std::string, std::string> files() const = 0;
};

}  // namespace kiln::data
