// TokenVocab: the token <-> id tables shared by the BPE, WordPiece and
// WordLevel models (HF tokenizers' `vocab: AHashMap<String, u32>` and its
// reverse `vocab_r`).
//
// Invariants:
//  - every entry is a distinct string with an id in [0, kMaxTokenId];
//  - from_json refuses two strings sharing one id (HF keeps an arbitrary
//    one of them in vocab_r, so id_to_token and the token values BPE
//    returns would depend on hash order); from_lines (WordPiece's vocab.txt)
//    lets a repeated line take the later id, as HF, which leaves the earlier
//    id without a string (id_to_token gives nullptr there, as HF's None);
//  - ids need not be dense: id -> string is a dense table when the largest
//    id is below 2 * size() + 4096, else a sorted table searched by id, so a
//    hostile id such as 2^31 - 1 never sizes an allocation.
// size() is the number of distinct strings (HF's get_vocab_size).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/string_id_map.h"

namespace kiln::data::tok {


// HF ids are u32; kiln's Model interface uses int32.
inline constexpr int64_t kMaxTokenId = INT32_MAX - 1;

class TokenVocab {
 public:
  TokenVocab() = default;
  // A tokenizer.json "vocab" object {token: id}. kiln::Error naming `where`
  // for a non-object, a non-integer id, one outside [0, kMaxTokenId], or an
  // id given to two tokens.
  static TokenVocab from_json(const Json& j, const std::string& where);
  // (token, id) entries; a repeated token keeps the later id. Two distinct
  // tokens with one id are a kiln::Error naming `what`.
  static TokenVocab from_entries(std::vector<std::pair<std::string, int32_t>> entries,
                                 const std::string& what);

  size_t size() const { return strings_.size(); }
  // -1 when absent.
  int32_t find(std::string_view token) const { return map_.find(token); }
  // nullptr when no token has `id`.
  const std::string* token(int32_t id) const {
    if (id < 0) return nullptr;
    if (dense_) {
      if (static_cast<size_t>(id) >= by_id_.size()) return nullptr;
      const int32_t k = by_id_[static_cast<size_t>(id)];
      return k < 0 ? nullptr : &strings_[static_cast<size_t>(k)];
    }
    return sparse_token(id);
  }
  // Every (token, id), in no particular order.
  const std::vector<std::string>& strings() const { return strings_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  size_t max_token_length() const { return map_.max_key_length(); }

 private:
  const std::string* sparse_token(int32_t id) const;
  [[noreturn]] void fail_shared_id(const std::string& what, size_t a, size_t b) const;

  std::vector<std::string> strings_;  // entry k
  std::vector<int32_t> ids_;          // entry k's id
  kiln::data::StringIdMap map_;       // string -> id
  bool dense_ = true;
  std::vector<int32_t> by_id_;                       // dense: id -> entry, -1 for holes
  std::vector<std::pair<int32_t, int32_t>> sorted_;  // sparse: (id, entry) by id
};

}  // namespace kiln::data::tok
