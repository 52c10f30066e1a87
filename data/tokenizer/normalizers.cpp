// HF tokenizers' normalizers and normalizer_from_json (normalizers.h).
#include "kiln/data/tokenizer/normalizers.h"

#include <algorithm>

#include <utf8proc.h>

#include "core/error.h"
#include "kiln/data/tokenizer/byte_level.h"
#include "kiln/data/tokenizer/precompiled.h"

namespace kiln::data::tok {

namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

// Rust's char::is_whitespace (the White_Space property).
bool is_white_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// bert.rs is_control: the unicode_categories crate's is_other, which is
// Cc, Cf, Co and Cs but not Cn (unassigned code points are kept).
bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

// bert.rs is_chinese_char: the CJK ideograph blocks, as HF lists them.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_combining_mark(char32_t c) {
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

}  // namespace

BertNormalizer::BertNormalizer(bool clean_text, bool handle_chinese_chars,
                               std::optional<bool> strip_accents, bool lowercase)
    : clean_text_(clean_text),
      handle_chinese_chars_(handle_chinese_chars),
      strip_accents_(strip_accents),
      lowercase_(lowercase) {
  for (char32_t c = 0; c < 128; ++c) {
    const int32_t d = char_map(c);
    ascii_[c] = d >= 0 && d < 0x80 ? static_cast<int8_t>(d) : int8_t{-1};
  }
}

// Note [Per-character normalization]: BertNormalizer's steps (clean_text's
// filter and map, the padding of Chinese characters, NFD and the removal of
// marks, lowercase) each change one code point at a time, but for NFD's
// canonical reordering, which only moves non-starters (combining class > 0)
// within a run of them. So when every code point c of a text decomposes to
// a starter first (no run crosses from one to the next) and the steps make
// one code point of c alone, the text becomes those code points, each with
// the alignment of its c: one map instead of six passes. char_map(c) is that
// code point (normalize_steps on c alone), or -1 (removed, padded, split, or
// starting with a non-starter); a text with any -1 takes the steps. An ASCII
// text whose characters all stay ASCII is mapped in place (ascii_).
int32_t BertNormalizer::char_map(char32_t c) const {
  std::string u;
  append_utf8(u, c);
  NormalizedString one(u);
  normalize_steps(one);
  size_t i = 0;
  if (one.empty()) return -1;
  const char32_t d = decode_utf8(one.get(), i);
  if (i != one.size()) return -1;
  for (const Span& a : one.alignments())
    if (a != Span{0, u.size()}) return -1;
  if (strip_accents_.value_or(lowercase_)) {
    NormalizedString n(u);
    apply_normal_form(n, NormalForm::kNFD);
    size_t k = 0;
    if (n.empty() ||
        utf8proc_get_property(static_cast<utf8proc_int32_t>(decode_utf8(n.get(), k)))
                ->combining_class != 0)
      return -1;
  }
  return static_cast<int32_t>(d);
}

const std::vector<int32_t>& BertNormalizer::common_map() const {
  std::call_once(common_once_, [&] {
    common_.resize(0x3000 - 0x80);
    for (char32_t c = 0x80; c < 0x3000; ++c) common_[c - 0x80] = char_map(c);
  });
  return common_;
}

void BertNormalizer::normalize(NormalizedString& s) const {
  if (s.map_ascii(ascii_)) return;  // Note [Per-character normalization]
  const std::string& t = s.get();
  thread_local std::vector<CharChange> dest;
  dest.clear();
  for (size_t i = 0; i < t.size();) {
    const auto b = static_cast<unsigned char>(t[i]);
    int32_t d;
    if (b < 0x80) {
      d = ascii_[b] >= 0 ? ascii_[b] : char_map(b);
      ++i;
    } else {
      const char32_t c = decode_utf8(t, i);
      d = c < 0x3000 ? common_map()[c - 0x80] : char_map(c);
    }
    if (d < 0) {
      normalize_steps(s);
      return;
    }
    dest.push_back({static_cast<char32_t>(d), 0});
  }
  s.transform(dest, 0);
}

void BertNormalizer::normalize_steps(NormalizedString& s) const {
  if (clean_text_) {
    s.filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || is_bert_control(c)); });
    s.map([](char32_t c) {
      return (c == '\t' || c == '\n' || c == '\r' || is_white_space(c)) ? U' ' : c;
    });
  }
  if (handle_chinese_chars_) {
    std::vector<CharChange> dest;
    const std::string& t = s.get();
    dest.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const char32_t c = decode_utf8(t, i);
      if (is_chinese_char(c)) {
        dest.push_back({U' ', 0});
        dest.push_back({c, 1});
        dest.push_back({U' ', 1});
      } else {
        dest.push_back({c, 0});
      }
    }
    s.transform(dest, 0);
  }
  if (strip_accents_.value_or(lowercase_)) {
    apply_normal_form(s, NormalForm::kNFD);
    s.filter([](char32_t c) { return category(c) != UTF8PROC_CATEGORY_MN; });
  }
  if (lowercase_) s.lowercase();
}

void StripAccentsNormalizer::normalize(NormalizedString& s) const {
  s.filter([](char32_t c) { return !is_combining_mark(c); });
}

void NmtNormalizer::normalize(NormalizedString& s) const {
  s.filter([](char32_t c) {
    return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
             c == 0x8F || c == 0x9F);
  });
  s.map([](char32_t c) -> char32_t {
    switch (c) {
      case 0x09: case 0x0A: case 0x0C: case 0x0D: case 0x1680: case 0x2028: case 0x2029:
      case 0x2581: case 0xFEFF: case 0xFFFD:
        return U' ';
      default:
        return (c >= 0x200B && c <= 0x200F) ? U' ' : c;
    }
  });
}

ReplaceNormalizer::ReplaceNormalizer(std::string_view pattern, bool is_regex, std::string content)
    : regex_(is_regex ? std::string(pattern) : regex_escape(pattern)), content_(std::move(content)) {}

void ReplaceNormalizer::normalize(NormalizedString& s) const {
  const Matches m = find_regex_matches(regex_, s.get());
  // Nothing matched: replace() would rebuild the same text and alignments.
  if (std::none_of(m.begin(), m.end(), [](const Match& x) { return x.is_match; })) return;
  s.replace(m, content_);
}

void ByteLevelNormalizer::normalize(NormalizedString& s) const {
  if (!s.empty()) byte_level_encode(s);
}

std::string normalize_str(const Normalizer& n, std::string_view s) {
  NormalizedString ns(s);
  n.normalize(ns);
  return ns.get();
}

// ---- tokenizer.json ---------------------------------------------------------

namespace {

bool has(const Json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// The type a legacy (untagged) object stands for (Note [Normalizer JSON]).
std::string legacy_type(const Json& j) {
  if (has(j, "clean_text") && has(j, "handle_chinese_chars") && has(j, "lowercase"))
    return "BertNormalizer";
  if (has(j, "strip_left") && has(j, "strip_right")) return "Strip";
  if (has(j, "normalizers")) return "Sequence";
  if (has(j, "precompiled_charsmap")) return "Precompiled";
  if (has(j, "pattern") && has(j, "content")) return "Replace";
  if (has(j, "prepend")) return "Prepend";
  return "";
}

std::unique_ptr<Normalizer> replace_from_json(const Json& j, const std::string& where) {
  const std::string pwhere = json_path(where, "pattern");
  const Json& p = json_object(json_required(j, "pattern", where), pwhere);
  if (p.size() != 1)
    json_fail(pwhere, "expected an object with the single key \"String\" or \"Regex\", got " +
                          std::to_string(p.size()) + " keys");
  const std::string key = p.begin().key();
  if (key != "String" && key != "Regex")
    json_fail(pwhere, "unknown pattern kind \"" + key + "\" (expected \"String\" or \"Regex\")");
  const std::string pattern = json_as_string(p.begin().value(), json_path(pwhere, key));
  const std::string content = json_string(j, "content", where);
  try {
    return std::make_unique<ReplaceNormalizer>(pattern, key == "Regex", content);
  } catch (const kiln::Error& e) {
    json_fail(json_path(pwhere, key), e.what());
  }
}

std::unique_ptr<Normalizer> from_json(const Json& j, const std::string& where, size_t depth) {
  json_object(j, where);
  if (depth > kMaxNormalizerDepth)
    json_fail(where, "normalizers nested more than " + std::to_string(kMaxNormalizerDepth) +
                         " deep");
  std::string type;
  if (j.contains("type")) {
    type = json_type_tag(j, where);
  } else {
    type = legacy_type(j);
    if (type.empty()) json_fail(where, "no \"type\", and the fields match no normalizer");
  }
  if (type == "BertNormalizer" || type == "Bert") {
    // Read in declaration order, so the first bad field is the one named.
    const bool clean_text = json_bool(j, "clean_text", where);
    const bool handle_chinese_chars = json_bool(j, "handle_chinese_chars", where);
    std::optional<bool> strip_accents;
    if (const Json* v = json_find(j, "strip_accents", where))
      strip_accents = json_as_bool(*v, json_path(where, "strip_accents"));
    const bool lowercase = json_bool(j, "lowercase", where);
    return std::make_unique<BertNormalizer>(clean_text, handle_chinese_chars, strip_accents,
                                            lowercase);
  }
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip") {
    const bool left = json_bool(j, "strip_left", where);
    return std::make_unique<StripNormalizer>(left, json_bool(j, "strip_right", where));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json_string(j, "prepend", where));
  if (type == "Replace") return replace_from_json(j, where);
  if (type == "Precompiled") return precompiled_from_json(j, where);
  if (type == "Sequence") {
    const std::string lwhere = json_path(where, "normalizers");
    const Json& list = json_as_array(json_required(j, "normalizers", where), lwhere);
    std::vector<std::unique_ptr<Normalizer>> parts;
    parts.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i)
      parts.push_back(from_json(list[i], lwhere + "[" + std::to_string(i) + "]", depth + 1));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  json_fail(json_path(where, "type"), "unknown normalizer type \"" + type + "\"");
}

}  // namespace

std::unique_ptr<Normalizer> normalizer_from_json(const Json& j, const std::string& where) {
  return from_json(j, where, 0);
}

}  // namespace kiln::data::tok
