// WordPieceModel: HF tokenizers' WordPiece model (models/wordpiece/mod.rs)
// behind the pipeline's Model interface, with byte offsets.
//
// A pre-token of more than max_input_chars_per_word code points is the unk
// token spanning it all. Otherwise it is cut greedily, longest match first:
// the first piece is looked up as is, every later one with the
// continuing_subword_prefix in front (a token's value is the vocabulary
// string, prefix included); when some position has no match the whole
// pre-token is the unk token. The unk token missing from the vocabulary is a
// kiln::Error when it is needed (HF's MissingUnkToken), not at construction.
// (data/tokenizer/wordpiece.h is the older BERT-only path, ids only.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/model_vocab.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/string_id_map.h"

namespace kiln::data::tok {

class WordPieceModel final : public Model {
 public:
  WordPieceModel(TokenVocab vocab, std::string unk_token, std::string continuing_subword_prefix,
                 size_t max_input_chars_per_word);

  void tokenize(std::string_view sequence, std::vector<Token>& out) const override;
  int32_t token_to_id(std::string_view token) const override { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t vocab_size() const override { return vocab_.size(); }

  const std::string& unk_token() const { return unk_; }
  const std::string& continuing_subword_prefix() const { return prefix_; }
  size_t max_input_chars_per_word() const { return max_chars_; }

 private:
  // The longest piece of w[start, ...) that is a key of `map` (lookup(key)
  // gives its id, -1 when absent); returns its end, or start when none.
  template <typename Lookup>
  static size_t longest_match(const Lookup& lookup, size_t max_len, std::string_view w,
                              size_t start, int32_t& id);
  void push_unk(std::string_view sequence, std::vector<Token>& out) const;

  TokenVocab vocab_;
  std::string unk_;
  std::string prefix_;
  size_t max_chars_ = 100;
  int32_t unk_id_ = -1;
  // Tokens that start with a non-empty prefix, keyed by the rest (so no
  // string is built per lookup).
  kiln::data::StringIdMap continuation_;
};

// The "model" object of a tokenizer.json with "type": "WordPiece": unk_token,
// continuing_subword_prefix, max_input_chars_per_word and vocab are all
// required and non-null (HF).
std::unique_ptr<Model> wordpiece_model_from_json(const Json& j, const std::string& where);

// HF's WordPiece.from_file: a vocab.txt, one token per line (Rust's lines(),
// then trim_end of Unicode White_Space); line i has id i and a repeated token
// keeps its last line. Bounded (Note [Bounded input]); invalid UTF-8 is a
// kiln::Error naming the line.
std::unique_ptr<WordPieceModel> wordpiece_model_from_vocab_file(
    const std::string& vocab_txt_path, std::string unk_token = "[UNK]",
    std::string continuing_subword_prefix = "##", size_t max_input_chars_per_word = 100);

}  // namespace kiln::data::tok
