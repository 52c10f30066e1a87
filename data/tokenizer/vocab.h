// Vocab: the token strings of a WordPiece vocabulary and their ids.
//
// Invariants: id i is the i-th token (the i-th line of a vocab file, counted
// from 0), so ids are dense in [0, size()). Token strings are the lines with
// trailing whitespace removed, as HF's WordPiece::read_file does. When a
// string appears on several lines, find() returns the last of their ids
// (HF's map semantics) while token(id) still returns each line's string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/string_id_map.h"

namespace kiln::data {

inline constexpr uint64_t kMaxVocabFileBytes = uint64_t{1} << 30;  // 1 GiB

class Vocab {
 public:
  Vocab() = default;
  // One token per line. A missing, unreadable or empty file, one that is not
  // a regular file (a FIFO, a directory) or one over kMaxVocabFileBytes is a
  // kiln::Error naming the file (Note [Bounded input], core/file_util.h).
  static Vocab from_file(const std::string& path);
  // tokens[i] gets id i (used by tests and the fuzz target; no file needed).
  static Vocab from_tokens(std::vector<std::string> tokens);

  size_t size() const { return tokens_.size(); }
  bool empty() const { return tokens_.empty(); }
  // The id of `token`, or StringIdMap::kNotFound (-1).
  int32_t find(std::string_view token) const { return ids_.find(token); }
  bool contains(std::string_view token) const { return find(token) >= 0; }
  // The string of `id`; an id outside [0, size()) is a kiln::Error.
  const std::string& token(int32_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> tokens_;
  StringIdMap ids_;
};

}  // namespace kiln::data
