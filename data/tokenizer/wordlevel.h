// WordLevel: HF tokenizers' WordLevel model (models/wordlevel/mod.rs). A
// pre-token is one token: its vocabulary id, else the unk token (value
// unk_token) spanning it; the unk token missing from the vocabulary is then a
// kiln::Error (HF's MissingUnkToken).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/model_vocab.h"
#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data::tok {

class WordLevel final : public Model {
 public:
  WordLevel(TokenVocab vocab, std::string unk_token);

  void tokenize(std::string_view sequence, std::vector<Token>& out) const override;
  int32_t token_to_id(std::string_view token) const override { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t vocab_size() const override { return vocab_.size(); }
  const std::string& unk_token() const { return unk_; }

 private:
  TokenVocab vocab_;
  std::string unk_;
  int32_t unk_id_ = -1;
};

// The "model" object with "type": "WordLevel": vocab and unk_token required
// and non-null (HF).
std::unique_ptr<Model> wordlevel_from_json(const Json& j, const std::string& where);

}  // namespace kiln::data::tok
