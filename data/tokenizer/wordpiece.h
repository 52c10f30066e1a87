// WordPiece: greedy longest-match-first splitting of one normalized word into
// vocabulary pieces, exactly as HF tokenizers' WordPiece model.
//
// A word of more than max_input_chars_per_word code points, or one with a
// position where no piece matches, becomes the single unk id. Pieces after
// the first are looked up with the continuation prefix ("##") prepended; the
// lookup uses a second map keyed by the text after the prefix, so no string
// is built per lookup.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/string_id_map.h"
#include "kiln/data/tokenizer/vocab.h"

namespace kiln::data {

class WordPiece {
 public:
  WordPiece() = default;
  // unk_id must be a valid id of `vocab`.
  WordPiece(const Vocab& vocab, int32_t unk_id, std::string continuation_prefix = "##",
            size_t max_input_chars_per_word = 100);

  // Appends the ids of `word` (non-empty, valid UTF-8, num_chars code points).
  void encode_word(std::string_view word, size_t num_chars, std::vector<int32_t>& ids) const;

  int32_t unk_id() const { return unk_id_; }
  const std::string& continuation_prefix() const { return prefix_; }

 private:
  // The longest piece of word[start, ...) found in `map`; its end, or start if none.
  static size_t longest_match(const StringIdMap& map, std::string_view word, size_t start,
                              int32_t& id);

  StringIdMap first_;         // every token
  StringIdMap continuation_;  // tokens that start with prefix_, keyed without it
  int32_t unk_id_ = 0;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
};

}  // namespace kiln::data
