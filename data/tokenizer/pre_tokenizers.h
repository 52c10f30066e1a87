// HF tokenizers' pre-tokenizers (tokenizers/src/pre_tokenizers/*.rs), and
// pre_tokenizer_from_json (pipeline.h) reading the "pre_tokenizer" object of
// tokenizer.json with HF's field names, defaults and errors.
//
// Every pre-tokenizer cuts each split without tokens of a PreTokenizedString
// into pieces (empty pieces are dropped), optionally rewriting their text;
// offsets follow through NormalizedString (normalized.h). The character
// classes are Rust's, which HF uses: char::is_whitespace (White_Space),
// char::is_numeric (Nd, Nl, No), and HF's punctuation (ASCII punctuation or
// a P* general category), from utf8proc's Unicode data.
//
// Note [Unicode versions]: utf8proc 2.8 has Unicode 15.0; HF's Rust std has
// 16.0 (is_numeric: the Unicode 16 digits, e.g. Garay U+10D40.., are numeric
// there, not here) and its punctuation test comes from the unicode_categories
// crate, about Unicode 9 (so the ~129 P* characters added since, e.g.
// U+061D, U+09FD, U+0A76, U+1E95E, are punctuation here, not in HF).
// Regex-based stages follow Note [Oniguruma version] in regex.h.
//
//  type                 fields (HF default)              what it does
//  BertPreTokenizer     -                                 removes whitespace, isolates punctuation
//  ByteLevel            add_prefix_space, trim_offsets,   byte_level.h
//                       use_regex (true)
//  Metaspace            replacement (one char),           ' ' -> replacement; prepends it
//                       prepend_scheme ("always"),        (always / first: only to the split that
//                       split (true), add_prefix_space    starts the input / never) unless the
//                       (legacy: false needs "never")     text starts with it; split: cut before
//                                                         each replacement (MergedWithNext)
//  Whitespace           -                                 the matches of \w+|[^\w\s]+ (Rust regex
//                                                         classes, below), the rest removed
//  WhitespaceSplit      -                                 removes whitespace
//  Punctuation          behavior ("Isolated")             splits at each punctuation character
//  Digits               individual_digits                 numerals isolated (true) or in runs
//  Split                pattern {"String"|"Regex": s},    the Oniguruma matches of the regex (a
//                       behavior, invert                  String is escaped first, as HF);
//                                                         invert flips match and gap
//  CharDelimiterSplit   delimiter (one char)              removes the delimiter
//  FixedLength          length (5)                        chunks of `length` characters
//  Sequence             pretokenizers                     each in turn
// UnicodeScripts is rejected with a kiln::Error: HF splits by a Unicode 9
// script table of its own that no library here reproduces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/data/tokenizer/byte_level.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/regex.h"

namespace kiln::data::tok {

// HF's SplitDelimiterBehavior from its JSON name ("Removed", "Isolated",
// "MergedWithPrevious", "MergedWithNext", "Contiguous").
SplitBehavior split_behavior_from_json(const Json& j, const std::string& where);

// Rust's char::is_whitespace, char::is_numeric, and HF's is_punc.
bool is_rust_whitespace(char32_t c);
bool is_rust_numeric(char32_t c);
bool is_hf_punctuation(char32_t c);

class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split);
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;
  char32_t replacement() const { return replacement_; }
  Prepend prepend_scheme() const { return prepend_; }
  bool split() const { return split_; }

 private:
  char32_t replacement_;
  std::string str_rep_;  // replacement_ in UTF-8
  Prepend prepend_;
  bool split_;
};

class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

 private:
  SplitBehavior behavior_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual_digits) : individual_(individual_digits) {}
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

 private:
  bool individual_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  // `regex` is an Oniguruma pattern (regex_escape a literal first).
  SplitPreTokenizer(std::string_view regex, SplitBehavior behavior, bool invert)
      : regex_(regex), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class CharDelimiterSplitPreTokenizer : public PreTokenizer {
 public:
  explicit CharDelimiterSplitPreTokenizer(char32_t delimiter) : delimiter_(delimiter) {}
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

 private:
  char32_t delimiter_;
};

class FixedLengthPreTokenizer : public PreTokenizer {
 public:
  explicit FixedLengthPreTokenizer(size_t length);  // length >= 1
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  size_t length_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps);
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return has_pieces_; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
  bool has_pieces_ = true;  // every step has pieces
};

}  // namespace kiln::data::tok
