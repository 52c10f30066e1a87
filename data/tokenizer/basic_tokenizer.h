// BasicTokenizer: HF's BertNormalizer followed by BertPreTokenizer, fused into
// one pass over UTF-8 bytes that yields normalized words for WordPiece.
//
// Per code point, in HF's order (tokenizers' normalizers/bert.rs, Rust):
//  1. clean: drop U+0000, U+FFFD and "other" characters (general category
//     Cc, Cf, Co, Cs) except \t \n \r; \t \n \r and Zs/Zl/Zp become spaces.
//  2. CJK: a code point in HF's CJK ideograph ranges becomes its own word.
//  3. lowercase mode only: NFD (canonical decomposition + canonical
//     ordering), drop nonspacing marks (Mn), then simple lowercase mapping.
//  4. split on spaces (removed) and on punctuation (kept, one word per char):
//     ASCII 33-47, 58-64, 91-96, 123-126 and general categories P*.
// Unicode data comes from utf8proc (see docs/tokenizer.md for where its
// Unicode version differs from the older tables inside HF tokenizers).
//
// Invalid UTF-8: each byte that does not start a well-formed sequence is
// dropped, which equals HF on the text decoded with U+FFFD replacement
// (Python's bytes.decode("utf-8", "replace")), since cleaning drops U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data {

// Normalized words stored back to back. Invariant: words[i] covers
// bytes[begin, begin + size), is non-empty, and holds num_chars code points.
struct WordList {
  struct Word {
    uint32_t begin = 0;
    uint32_t size = 0;
    uint32_t num_chars = 0;
  };
  std::string bytes;
  std::vector<Word> words;

  void clear() {
    bytes.clear();
    words.clear();
  }
  std::string_view word(size_t i) const { return {bytes.data() + words[i].begin, words[i].size}; }
};

class BasicTokenizer {
 public:
  explicit BasicTokenizer(bool lowercase = true) : lowercase_(lowercase) {}

  // Appends the words of `text` to `out` (existing contents are kept).
  void split(std::string_view text, WordList& out) const;

  bool lowercase() const { return lowercase_; }

  // HF's CJK ideograph ranges (tokenizers' BertNormalizer::is_chinese_char).
  static bool is_cjk(int32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
  }

 private:
  bool lowercase_;
};

}  // namespace kiln::data
