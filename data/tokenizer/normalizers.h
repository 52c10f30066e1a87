// HF tokenizers' normalizers (tokenizers/src/normalizers/*.rs): each rewrites
// a NormalizedString in place with HF's exact alignments (Note [Alignments]
// in normalized.h), and normalizer_from_json (pipeline.h) reads the
// "normalizer" object of tokenizer.json.
//
//   BertNormalizer  clean_text: drop NUL, U+FFFD and "other" code points
//                     (Cc Cf Co; Cn is kept), map whitespace to ' ';
//                   handle_chinese_chars: " c " around CJK ideographs;
//                   strip_accents (null: as lowercase): NFD then drop Mn;
//                   lowercase: Rust's char::to_lowercase.
//   NFD NFKD NFC NFKC  unicode_normalize.h.
//   Lowercase       Rust's char::to_lowercase (full mapping).
//   StripAccents    drops combining marks (Mn Mc Me).
//   Strip           strips White_Space on the left and/or right.
//   Nmt             drops ASCII controls, maps a few spaces/format chars to ' '.
//   Replace         every match of {"String": s} (literal) or {"Regex": r}
//                   (Oniguruma, as HF) becomes `content`.
//   Prepend         prepends a string to a non-empty text.
//   Precompiled     precompiled.h.
//   ByteLevel       GPT-2's byte-to-character map (byte_level.h).
//   Sequence        each of `normalizers` in turn.
//
// Note [Normalizer JSON]: as HF's NormalizerWrapper: the "type" tag picks the
// normalizer ("BertNormalizer" or "Bert" for Bert), other members are its
// fields, unknown members are ignored, and a wrong or missing field, an
// unknown type or a non-object is a kiln::Error naming it. An object without
// "type" is HF's legacy untagged form: the first of Bert (clean_text,
// handle_chinese_chars, lowercase), Strip (strip_left, strip_right),
// Sequence (normalizers), Precompiled (precompiled_charsmap), Replace
// (pattern, content), Prepend (prepend) whose fields are all present.
// Sequences nest at most kMaxNormalizerDepth deep (serde_json's recursion
// limit makes deeper files unreadable for HF too).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/regex.h"
#include "kiln/data/tokenizer/unicode_normalize.h"

namespace kiln::data::tok {

inline constexpr size_t kMaxNormalizerDepth = 64;

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, std::optional<bool> strip_accents,
                 bool lowercase);
  void normalize(NormalizedString& s) const override;

 private:
  // Each step in turn, over the whole text.
  void normalize_steps(NormalizedString& s) const;
  // The code point `c` becomes in any text, or -1 (Note [Per-character normalization]).
  int32_t char_map(char32_t c) const;
  // char_map of U+0080..U+2FFF, made on first use.
  const std::vector<int32_t>& common_map() const;
  bool clean_text_, handle_chinese_chars_;
  std::optional<bool> strip_accents_;
  bool lowercase_;
  std::array<int8_t, 128> ascii_{};  // char_map of ASCII, -1 where not ASCII
  mutable std::once_flag common_once_;
  mutable std::vector<int32_t> common_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(NormalizedString& s) const override { apply_normal_form(s, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedString& s) const override { s.strip(left_, right_); }

 private:
  bool left_, right_;
};

class NmtNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

class ReplaceNormalizer : public Normalizer {
 public:
  // is_regex: `pattern` is an Oniguruma regex; else a literal.
  ReplaceNormalizer(std::string_view pattern, bool is_regex, std::string content);
  void normalize(NormalizedString& s) const override;

 private:
  Regex regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(NormalizedString& s) const override { s.prepend(prepend_); }

 private:
  std::string prepend_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> normalizers)
      : normalizers_(std::move(normalizers)) {}
  void normalize(NormalizedString& s) const override {
    for (const auto& n : normalizers_) n->normalize(s);
  }
  size_t size() const { return normalizers_.size(); }

 private:
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
};

// HF's Normalizer::normalize_str: the normalized text of `s` (valid UTF-8).
std::string normalize_str(const Normalizer& n, std::string_view s);

}  // namespace kiln::data::tok
