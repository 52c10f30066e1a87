// The added-tokens layer of a Tokenizer (HF's AddedVocabulary): tokens that
// are matched in the text before the model sees it, so "[MASK]" or
// "<|endoftext|>" become one id whatever the model would make of them.
//
//  - Non-normalized tokens are matched in the raw text, normalized ones in
//    the text after the normalizer (against their own normalized form).
//  - Matching is leftmost-longest over all tokens of a kind, scanning on
//    after each match (as HF's Aho-Corasick automaton); a match refused by
//    single_word is skipped and scanning resumes after it.
//  - single_word: the match must not touch a word character (\w) on
//    either side. lstrip / rstrip: the match swallows the whitespace (\s)
//    before / after it (not reaching back into a previous match).
//  - Ids: a token the model already knows keeps the model's id; others get
//    fresh ids from the model's vocab size (or the largest id + 1) on, in
//    order, as HF's add_tokens does (the "id" written in tokenizer.json is
//    not consulted, as in HF).
// \w is Unicode's word class: letters, marks, Nd, Nl, Pc and the joiners
// ZWNJ/ZWJ (utf8proc categories; Rust's regex uses the Alphabetic property,
// which also holds a few So symbols such as circled letters U+24B6..U+24E9).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/data/tokenizer/normalized.h"
#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data {

// An entry of tokenizer.json's "added_tokens" (HF's AddedToken).
struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

namespace tok {

class AddedVocabulary {
 public:
  // HF's add_tokens (special tokens go through the same path).
  void add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                  const Normalizer* normalizer);

  // HF's extract_and_normalize: splits off raw-text matches, normalizes the
  // rest, splits off normalized matches.
  PreTokenizedString extract_and_normalize(const Normalizer* normalizer,
                                           std::string_view sequence) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when not added
  // The string decode() uses for an added id (its normalized form when the
  // normalizer changed it), or nullopt.
  const std::string* id_to_token(int32_t id) const;
  bool is_special(std::string_view token) const { return special_.count(std::string(token)) > 0; }
  size_t size() const { return by_content_.size(); }
  const std::map<int32_t, AddedToken>& by_id() const { return by_id_; }

 private:
  struct Matcher {
    // Patterns grouped by first byte, longest first.
    std::vector<std::vector<std::pair<std::string, int32_t>>> by_first_byte;
    bool empty = true;
    void build(const std::vector<std::pair<std::string, int32_t>>& patterns);
  };
  // (id or -1, byte span) pieces covering `s`.
  std::vector<std::pair<int32_t, Span>> find_matches(std::string_view s, const Matcher& m) const;
  void split_with(PreTokenizedString& p, const Matcher& m) const;
  // Appends the non-empty splits of `n` at m's matches (a match's split with its token).
  void cut(NormalizedString&& n, const Matcher& m, std::vector<Split>& out) const;
  void refresh(const Normalizer* normalizer);

  std::unordered_map<std::string, int32_t> by_content_;
  std::map<int32_t, AddedToken> by_id_;
  std::unordered_set<std::string> special_;
  std::unordered_map<int32_t, std::string> normalized_cache_;
  Matcher raw_, normalized_;
};

}  // namespace tok
}  // namespace kiln::data
