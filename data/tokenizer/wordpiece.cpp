#include "data/tokenizer/wordpiece.h"

#include "core/error.h"

namespace kiln::data {

WordPiece::WordPiece(const Vocab& vocab, int32_t unk_id, std::string continuation_prefix,
                     size_t max_input_chars_per_word)
    : unk_id_(unk_id),
      prefix_(std::move(continuation_prefix)),
      max_chars_(max_input_chars_per_word) {
  KILN_CHECK(unk_id >= 0 && static_cast<size_t>(unk_id) < vocab.size(), "WordPiece: unk id ",
             unk_id, " out of range [0, ", vocab.size(), ")");
  KILN_CHECK(!prefix_.empty(), "WordPiece: empty continuation prefix");
  const auto& tokens = vocab.tokens();
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Insert through the vocab's own map so duplicate lines resolve as in Vocab::find.
    const std::string_view t = tokens[i];
    const int32_t id = vocab.find(t);
    first_.insert(t, id);
    if (t.size() > prefix_.size() && t.substr(0, prefix_.size()) == prefix_)
      continuation_.insert(t.substr(prefix_.size()), id);
  }
}

size_t WordPiece::longest_match(const StringIdMap& map, std::string_view word, size_t start,
                                int32_t& id) {
  size_t end = word.size();
  if (end - start > map.max_key_length()) {
    end = start + map.max_key_length();
    // Back up to a code point boundary (never past start: word[start] is a lead byte).
    while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80) --end;
  }
  while (end > start) {
    id = map.find(word.substr(start, end - start));
    if (id != StringIdMap::kNotFound) return end;
    --end;
    while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80) --end;
  }
  return start;
}

void WordPiece::encode_word(std::string_view word, size_t num_chars,
                            std::vector<int32_t>& ids) const {
  if (num_chars > max_chars_) {
    ids.push_back(unk_id_);
    return;
  }
  int32_t id = first_.find(word);  // most words are a single piece
  if (id != StringIdMap::kNotFound) {
    ids.push_back(id);
    return;
  }
  const size_t mark = ids.size();
  size_t start = 0;
  while (start < word.size()) {
    const size_t end = longest_match(start == 0 ? first_ : continuation_, word, start, id);
    if (end == start) {
      ids.resize(mark);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(id);
    start = end;
  }
}

}  // namespace kiln::data
