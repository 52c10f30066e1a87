// HF tokenizers' pre-tokenizers and pre_tokenizer_from_json (pre_tokenizers.h).
#include "kiln/data/tokenizer/pre_tokenizers.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

#include "core/error.h"

namespace kiln::data::tok {
namespace {

int category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

std::vector<NormalizedString> keep_whole(NormalizedString&& n) {
  std::vector<NormalizedString> one;
  one.push_back(std::move(n));
  return one;
}

// Splits every split without tokens at the characters for which `pred` holds.
template <typename Pred>
void split_chars(PreTokenizedString& s, Pred pred, SplitBehavior behavior) {
  s.split_normalized([&](size_t, NormalizedString&& n) {
    return n.split(find_char_matches(n.get(), pred), behavior);
  });
}

// Rust's regex \w (UTS #18: Alphabetic, M, Nd, Pc, Join_Control) and \s
// (White_Space), spelled out for Oniguruma, whose own \w differs.
constexpr const char* kWhitespacePattern =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]+"
    "|[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}\\p{White_Space}]+";

const Regex& whitespace_regex() {
  static const Regex re(kWhitespacePattern);
  return re;
}

// ---- JSON -------------------------------------------------------------------

// A field with a serde default: absent gives nullptr; null is an error (HF:
// "invalid type: null").
const Json* defaulted(const Json& j, std::string_view key, const std::string& where) {
  json_object(j, where);
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  if (it->is_null()) json_fail(json_path(where, key), "expected a value, got null");
  return &*it;
}

// A Rust `char`: a string of exactly one code point.
char32_t json_char(const Json& v, const std::string& where) {
  const std::string s = json_as_string(v, where);
  size_t i = 0;
  const char32_t c = s.empty() ? 0 : decode_utf8(s, i);
  if (s.empty() || i != s.size())
    json_fail(where, "expected a single character, got \"" + s + "\"");
  return c;
}

MetaspacePreTokenizer::Prepend prepend_from_json(const Json& v, const std::string& where) {
  const std::string s = json_as_string(v, where);
  if (s == "always") return MetaspacePreTokenizer::Prepend::kAlways;
  if (s == "first") return MetaspacePreTokenizer::Prepend::kFirst;
  if (s == "never") return MetaspacePreTokenizer::Prepend::kNever;
  json_fail(where, "unknown prepend_scheme \"" + s + "\" (expected first, never or always)");
}

std::unique_ptr<PreTokenizer> metaspace_from_json(const Json& j, const std::string& where) {
  const char32_t replacement =
      json_char(json_required(j, "replacement", where), json_path(where, "replacement"));
  MetaspacePreTokenizer::Prepend prepend = MetaspacePreTokenizer::Prepend::kAlways;
  if (const Json* v = defaulted(j, "prepend_scheme", where))
    prepend = prepend_from_json(*v, json_path(where, "prepend_scheme"));
  // Legacy field: only `false` matters, and then prepend_scheme must be "never".
  if (const Json* v = json_find(j, "add_prefix_space", where)) {
    if (!json_as_bool(*v, json_path(where, "add_prefix_space")) &&
        prepend != MetaspacePreTokenizer::Prepend::kNever)
      json_fail(where, "add_prefix_space does not match declared prepend_scheme");
  }
  bool split = true;
  if (const Json* v = json_find(j, "split", where))
    split = json_as_bool(*v, json_path(where, "split"));
  return std::make_unique<MetaspacePreTokenizer>(replacement, prepend, split);
}

std::unique_ptr<PreTokenizer> split_from_json(const Json& j, const std::string& where) {
  const std::string pwhere = json_path(where, "pattern");
  const Json& p = json_object(json_required(j, "pattern", where), pwhere);
  if (p.size() != 1)
    json_fail(pwhere, "expected an object with the single key \"String\" or \"Regex\"");
  const std::string key = p.begin().key();
  std::string regex;
  if (key == "String")
    regex = regex_escape(json_as_string(p.begin().value(), json_path(pwhere, key)));
  else if (key == "Regex")
    regex = json_as_string(p.begin().value(), json_path(pwhere, key));
  else
    json_fail(pwhere, "unknown pattern kind \"" + key + "\" (expected String or Regex)");
  const SplitBehavior behavior =
      split_behavior_from_json(json_required(j, "behavior", where), json_path(where, "behavior"));
  const bool invert = json_bool(j, "invert", where);
  try {
    return std::make_unique<SplitPreTokenizer>(regex, behavior, invert);
  } catch (const kiln::Error& e) {
    json_fail(pwhere, e.what());
  }
}

}  // namespace

// ---- character classes --------------------------------------------------------

bool is_rust_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const int cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_rust_numeric(char32_t c) {
  const int cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_hf_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  const int cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

SplitBehavior split_behavior_from_json(const Json& j, const std::string& where) {
  const std::string s = json_as_string(j, where);
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  json_fail(where, "unknown split behavior \"" + s +
                       "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                       "Contiguous)");
}

// ---- pre-tokenizers -----------------------------------------------------------

void BertPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_chars(s, is_rust_whitespace, SplitBehavior::kRemoved);
  split_chars(s, is_hf_punctuation, SplitBehavior::kIsolated);
}

MetaspacePreTokenizer::MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split)
    : replacement_(replacement), prepend_(prepend), split_(split) {
  append_utf8(str_rep_, replacement_);
}

void MetaspacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([this](size_t, NormalizedString&& n) {
    n.replace(find_char_matches(n.get(), [](char32_t c) { return c == U' '; }), str_rep_);
    const bool starts = n.get().compare(0, str_rep_.size(), str_rep_) == 0;
    // "first": only the split that begins the input.
    if (!starts && (prepend_ == Prepend::kAlways ||
                    (prepend_ == Prepend::kFirst && n.offsets_original().begin == 0)))
      n.prepend(str_rep_);
    if (!split_) return keep_whole(std::move(n));
    const char32_t r = replacement_;
    return n.split(find_char_matches(n.get(), [r](char32_t c) { return c == r; }),
                   SplitBehavior::kMergedWithNext);
  });
}

void WhitespacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([](size_t, NormalizedString&& n) {
    Matches m = find_regex_matches(whitespace_regex(), n.get());
    for (Match& x : m) x.is_match = !x.is_match;  // keep the words, remove the gaps
    return n.split(std::move(m), SplitBehavior::kRemoved);
  });
}

void WhitespaceSplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_chars(s, is_rust_whitespace, SplitBehavior::kRemoved);
}

void PunctuationPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_chars(s, is_hf_punctuation, behavior_);
}

void DigitsPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_chars(s, is_rust_numeric,
              individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
}

void SplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([this](size_t, NormalizedString&& n) {
    Matches m = find_regex_matches(regex_, n.get());
    if (invert_)
      for (Match& x : m) x.is_match = !x.is_match;
    return n.split(std::move(m), behavior_);
  });
}

void CharDelimiterSplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  const char32_t d = delimiter_;
  split_chars(
      s, [d](char32_t c) { return c == d; }, SplitBehavior::kRemoved);
}

FixedLengthPreTokenizer::FixedLengthPreTokenizer(size_t length) : length_(length) {
  KILN_CHECK(length >= 1, "FixedLength pre-tokenizer: length must be at least 1 (HF panics on 0)");
}

void FixedLengthPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([this](size_t, NormalizedString&& n) {
    std::vector<NormalizedString> out;
    const std::string& t = n.get();
    size_t begin = 0, chars = 0;
    for (size_t i = 0; i < t.size();) {
      decode_utf8(t, i);
      if (++chars == length_ || i >= t.size()) {
        std::optional<NormalizedString> piece = n.slice_normalized({begin, std::min(i, t.size())});
        KILN_CHECK(piece.has_value(), "FixedLength pre-tokenizer: bad slice [", begin, ", ", i,
                   ")");
        out.push_back(std::move(*piece));
        begin = i;
        chars = 0;
      }
    }
    return out;
  });
}

void SequencePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  for (const auto& step : steps_) step->pre_tokenize(s);
}

// ---- pieces (Note [Fast pre-tokenization]) --------------------------------------
// Each is pre_tokenize above, step for step, on Pieces.

void PreTokenizer::pre_tokenize_pieces(const NormalizedString&, const Pieces&, Pieces&) const {
  fail("pre-tokenizer: no fast pre-tokenization (has_pieces() is false)");
}

namespace {
template <typename Pred>
auto chars_where(Pred pred) {
  return [pred](std::string_view v) { return find_char_matches(v, pred); };
}
}  // namespace

void BertPreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                           Pieces& out) const {
  // pre_tokenize's two steps in one pass: whitespace removed, each
  // punctuation character its own piece, each run of other characters one.
  // (ASCII characters are classified by a table of the same predicates.)
  enum Kind : uint8_t { kWord, kSpace, kPunct };
  static const std::array<uint8_t, 128> ascii = [] {
    std::array<uint8_t, 128> t{};
    for (char32_t c = 0; c < 128; ++c)
      t[c] = is_rust_whitespace(c) ? kSpace : is_hf_punctuation(c) ? kPunct : kWord;
    return t;
  }();
  out.clear();
  const std::string_view text = in.text;
  for (const Span& p : in.spans) {
    size_t word = p.begin;  // where the current run of word characters began
    auto close = [&](size_t end) {
      if (word < end) {
        const size_t begin = out.text.size();
        out.append(in, word, end);
        out.close(begin, input_begin(split, in, word));
      }
    };
    for (size_t i = p.begin; i < p.end;) {
      const size_t at = i;
      const auto b = static_cast<unsigned char>(text[i]);
      Kind kind;
      if (b < 0x80) {
        kind = static_cast<Kind>(ascii[b]);
        ++i;
      } else {
        const char32_t c = decode_utf8(text.substr(0, p.end), i);
        kind = is_rust_whitespace(c) ? kSpace : is_hf_punctuation(c) ? kPunct : kWord;
      }
      if (kind == kWord) continue;
      close(at);
      word = i;
      if (kind == kPunct) {
        const size_t begin = out.text.size();
        out.append(in, at, i);
        out.close(begin, input_begin(split, in, at));
      }
    }
    close(p.end);
  }
}

void MetaspacePreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                                Pieces& out) const {
  // pre_tokenize's three steps in one pass over each piece, into `out`:
  //  - replace(): each space becomes the replacement, with the space's alignment;
  //  - prepend(): when the piece does not start with the replacement (a space
  //    or the replacement itself), the replacement replaces its first code
  //    point, which is inserted again after it (aligned as its last byte);
  //  - split(MergedWithNext): a piece starts at each replacement but the first
  //    byte's (a code point of valid UTF-8, found by its bytes).
  out.clear();
  const std::string_view rep = str_rep_;
  const std::string_view text = in.text;
  auto is_rep = [&](size_t i, size_t end) {
    return text[i] == rep[0] && end - i >= rep.size() && text.compare(i, rep.size(), rep) == 0;
  };
  for (size_t k = 0; k < in.spans.size(); ++k) {
    const Span& p = in.spans[k];
    if (p.begin == p.end) continue;  // dropped, as pre_tokenize drops it
    size_t begin = out.text.size();  // the current piece's first byte in out
    // Ends the current piece (its shift: where its first byte's original starts).
    auto cut = [&] {
      if (split_ && out.text.size() > begin) {
        out.close(begin, input_begin(split, out, begin));
        begin = out.text.size();
      }
    };
    size_t i = p.begin;
    const bool starts = text[i] == ' ' || is_rep(i, p.end);
    if (!starts &&
        (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && in.shifts[k] == 0))) {
      size_t first = 0;
      decode_utf8(text.substr(i, p.end - i), first);
      out.append(rep, in.src[i]);
      out.append(text.substr(i, first), in.src[i + first - 1]);
      i += first;
    }
    while (i < p.end) {
      if (text[i] == ' ') {
        cut();
        out.append(rep, in.src[i]);
        ++i;
      } else if (is_rep(i, p.end)) {
        cut();
        out.append(in, i, i + rep.size());
        i += rep.size();
      } else {
        size_t j = i + 1;
        while (j < p.end && text[j] != ' ' && text[j] != rep[0]) ++j;
        out.append(in, i, j);
        i = j;
      }
    }
    if (!split_)  // the piece is not sliced: it keeps its shift
      out.close(begin, in.shifts[k]);
    else
      cut();
  }
}

void WhitespacePreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                                 Pieces& out) const {
  split_each(
      split, in, out,
      [](std::string_view v) {
        Matches m = find_regex_matches(whitespace_regex(), v);
        for (Match& x : m) x.is_match = !x.is_match;
        return m;
      },
      SplitBehavior::kRemoved);
}

void WhitespaceSplitPreTokenizer::pre_tokenize_pieces(const NormalizedString& split,
                                                      const Pieces& in, Pieces& out) const {
  split_each(split, in, out, chars_where(is_rust_whitespace), SplitBehavior::kRemoved);
}

void PunctuationPreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                                  Pieces& out) const {
  split_each(split, in, out, chars_where(is_hf_punctuation), behavior_);
}

void DigitsPreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                             Pieces& out) const {
  split_each(split, in, out, chars_where(is_rust_numeric),
             individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
}

void SplitPreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                            Pieces& out) const {
  split_each(
      split, in, out,
      [this](std::string_view v) {
        Matches m = find_regex_matches(regex_, v);
        if (invert_)
          for (Match& x : m) x.is_match = !x.is_match;
        return m;
      },
      behavior_);
}

void CharDelimiterSplitPreTokenizer::pre_tokenize_pieces(const NormalizedString& split,
                                                         const Pieces& in, Pieces& out) const {
  const char32_t d = delimiter_;
  split_each(split, in, out, chars_where([d](char32_t c) { return c == d; }),
             SplitBehavior::kRemoved);
}

SequencePreTokenizer::SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
    : steps_(std::move(steps)) {
  for (const auto& step : steps_) has_pieces_ = has_pieces_ && step->has_pieces();
}

void SequencePreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                               Pieces& out) const {
  if (steps_.empty()) {
    out = in;
    return;
  }
  Pieces a = in, b;
  for (const auto& step : steps_) {
    step->pre_tokenize_pieces(split, a, b);
    std::swap(a, b);
  }
  out = std::move(a);
}

// ---- pre_tokenizer_from_json ------------------------------------------------------

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const Json& j, const std::string& where) {
  const std::string type = json_type_tag(j, where);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "ByteLevel") {
    bool use_regex = true;
    if (const Json* v = defaulted(j, "use_regex", where))
      use_regex = json_as_bool(*v, json_path(where, "use_regex"));
    return std::make_unique<ByteLevelPreTokenizer>(json_bool(j, "add_prefix_space", where),
                                                   json_bool(j, "trim_offsets", where), use_regex);
  }
  if (type == "Metaspace") return metaspace_from_json(j, where);
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Punctuation") {
    SplitBehavior behavior = SplitBehavior::kIsolated;
    if (const Json* v = defaulted(j, "behavior", where))
      behavior = split_behavior_from_json(*v, json_path(where, "behavior"));
    return std::make_unique<PunctuationPreTokenizer>(behavior);
  }
  if (type == "Digits")
    return std::make_unique<DigitsPreTokenizer>(json_bool(j, "individual_digits", where));
  if (type == "Split") return split_from_json(j, where);
  if (type == "CharDelimiterSplit")
    return std::make_unique<CharDelimiterSplitPreTokenizer>(
        json_char(json_required(j, "delimiter", where), json_path(where, "delimiter")));
  if (type == "FixedLength") {
    int64_t length = 5;
    if (const Json* v = defaulted(j, "length", where))
      length = json_as_int(*v, json_path(where, "length"), 1);
    return std::make_unique<FixedLengthPreTokenizer>(static_cast<size_t>(length));
  }
  if (type == "Sequence") {
    const std::string swhere = json_path(where, "pretokenizers");
    const Json& arr = json_as_array(json_required(j, "pretokenizers", where), swhere);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < arr.size(); ++i)
      steps.push_back(pre_tokenizer_from_json(arr[i], swhere + "[" + std::to_string(i) + "]"));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "UnicodeScripts")
    json_fail(where,
              "pre-tokenizer type \"UnicodeScripts\" is not supported (HF splits by its own "
              "Unicode 9 script table)");
  json_fail(where, "unknown pre-tokenizer type \"" + type + "\"");
}

}  // namespace kiln::data::tok
