#include "kiln/data/tokenizer/wordlevel.h"

#include "core/error.h"

namespace kiln::data::tok {

WordLevel::WordLevel(TokenVocab vocab, std::string unk_token)
    : vocab_(std::move(vocab)), unk_(std::move(unk_token)) {
  unk_id_ = vocab_.find(unk_);
}

void WordLevel::tokenize(std::string_view sequence, std::vector<Token>& out) const {
  const int32_t id = vocab_.find(sequence);
  if (id >= 0) {
    out.push_back(Token{id, std::string(sequence), Span{0, sequence.size()}});
    return;
  }
  if (unk_id_ < 0) fail("WordLevel: unk token \"", unk_, "\" is not in the vocabulary");
  out.push_back(Token{unk_id_, unk_, Span{0, sequence.size()}});
}

std::unique_ptr<Model> wordlevel_from_json(const Json& j, const std::string& where) {
  json_object(j, where);
  if (const Json* t = json_find(j, "type", where)) {
    const std::string type = json_as_string(*t, json_path(where, "type"));
    if (type != "WordLevel")
      json_fail(json_path(where, "type"), "expected \"WordLevel\", got \"" + type + "\"");
  }
  auto field = [&](const char* key) -> const Json& {
    const auto it = j.find(key);
    if (it == j.end()) json_fail(where, std::string("missing field \"") + key + "\"");
    return *it;
  };
  std::string unk = json_as_string(field("unk_token"), json_path(where, "unk_token"));
  TokenVocab vocab = TokenVocab::from_json(field("vocab"), json_path(where, "vocab"));
  return std::make_unique<WordLevel>(std::move(vocab), std::move(unk));
}

}  // namespace kiln::data::tok
