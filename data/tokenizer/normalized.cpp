// NormalizedString / PreTokenizedString (Note [Alignments] in normalized.h).
#include "kiln/data/tokenizer/normalized.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/error.h"

namespace kiln::data::tok {

// ---- UTF-8 ------------------------------------------------------------------

size_t utf8_length(char32_t c) {
  if (c < 0x80) return 1;
  if (c < 0x800) return 2;
  if (c < 0x10000) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

char32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k)
    c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return c;
}

std::vector<char32_t> to_code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(decode_utf8(s, i));
  return out;
}

// Well-formed sequences per Unicode Table 3-7; each maximal ill-formed
// subsequence (a valid prefix cut short, or a lone byte) becomes one U+FFFD.
int utf8_step(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  size_t k = 1;
  for (; k <= need && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  return k == need + 1 ? static_cast<int>(k) : -static_cast<int>(k);
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n > 0)
      out.append(s.substr(i, static_cast<size_t>(n)));
    else
      out += "\xEF\xBF\xBD";
    i += static_cast<size_t>(n > 0 ? n : -n);
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t left = s.size();
  while (left > 0) {
    if (*p < 0x80) {  // ASCII fast path
      ++p;
      --left;
      continue;
    }
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, static_cast<utf8proc_ssize_t>(left), &c);
    if (n <= 0 || c < 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// ---- patterns ---------------------------------------------------------------

Matches find_char_matches(std::string_view s, const std::function<bool(char32_t)>& pred) {
  if (s.empty()) return {{{0, 0}, false}};
  Matches out;
  size_t last = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const char32_t c = decode_utf8(s, i);
    if (pred(c)) {
      if (last < b) out.push_back({{last, b}, false});
      out.push_back({{b, i}, true});
      last = i;
    }
  }
  if (s.size() > last) out.push_back({{last, s.size()}, false});
  return out;
}

Matches find_literal_matches(std::string_view s, std::string_view literal) {
  if (literal.empty()) {
    size_t chars = 0;
    for (size_t i = 0; i < s.size();) decode_utf8(s, i), ++chars;
    return {{{0, chars}, false}};
  }
  if (s.empty()) return {{{0, 0}, false}};
  Matches out;
  size_t prev = 0;
  for (size_t pos = s.find(literal); pos != std::string_view::npos;
       pos = s.find(literal, pos + literal.size())) {
    if (prev != pos) out.push_back({{prev, pos}, false});
    out.push_back({{pos, pos + literal.size()}, true});
    prev = pos + literal.size();
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, false});
  return out;
}

// ---- NormalizedString -------------------------------------------------------

NormalizedString::NormalizedString(std::string_view s) : original_(s), normalized_(s) {
  alignments_.resize(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const auto c = static_cast<unsigned char>(s[i]);
    // The code point's length from its lead byte (valid UTF-8).
    i = std::min(s.size(), b + (c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2));
    for (size_t k = b; k < i; ++k) alignments_[k] = {b, i};
  }
}

NormalizedString::NormalizedString(std::string original, std::string normalized,
                                   std::vector<Span> alignments, size_t original_shift)
    : original_(std::move(original)),
      normalized_(std::move(normalized)),
      alignments_(std::move(alignments)),
      original_shift_(original_shift) {
  KILN_CHECK(alignments_.size() == normalized_.size(), "NormalizedString: ", alignments_.size(),
             " alignments for ", normalized_.size(), " bytes");
}

std::optional<Span> NormalizedString::normalized_to_original(Span r) const {
  if (r.begin == r.end) return r;  // HF: an empty range is returned unchanged
  if (r.begin > r.end || r.end > alignments_.size()) return std::nullopt;
  return Span{alignments_[r.begin].begin, alignments_[r.end - 1].end};
}

std::optional<Span> NormalizedString::original_to_normalized(Span r) const {
  if (r.begin == r.end) return r;
  if (r.begin > r.end) return std::nullopt;
  std::optional<size_t> start, end;
  for (size_t i = 0; i < alignments_.size() && r.end >= alignments_[i].end; ++i) {
    const Span& a = alignments_[i];
    if (!start && r.begin <= a.begin && a.begin != a.end) start = i;
    end = i + 1;
  }
  if (start && end) return Span{*start, *end};
  if (start) return Span{*start, *start};
  if (end) return Span{*end, *end};
  return std::nullopt;
}

std::optional<NormalizedString> NormalizedString::slice_normalized(Span n) const {
  if (n.begin > n.end || n.end > normalized_.size() || !is_boundary(normalized_, n.begin) ||
      !is_boundary(normalized_, n.end))
    return std::nullopt;
  const std::optional<Span> o = normalized_to_original(n);
  if (!o || o->begin > o->end || o->end > original_.size()) return std::nullopt;
  NormalizedString out;
  out.original_ = original_.substr(o->begin, o->end - o->begin);
  out.normalized_ = normalized_.substr(n.begin, n.end - n.begin);
  out.alignments_.reserve(n.end - n.begin);
  for (size_t i = n.begin; i < n.end; ++i) {
    const Span& a = alignments_[i];
    out.alignments_.push_back({a.begin - o->begin, a.end - o->begin});
  }
  out.original_shift_ = original_shift_ + o->begin;
  return out;
}

std::optional<NormalizedString> NormalizedString::slice_original(Span o) const {
  if (o.begin > o.end || o.end > original_.size() || !is_boundary(original_, o.begin) ||
      !is_boundary(original_, o.end))
    return std::nullopt;
  const std::optional<Span> n = original_to_normalized(o);
  if (!n || n->end > normalized_.size()) return std::nullopt;
  NormalizedString out;
  out.original_ = original_.substr(o.begin, o.end - o.begin);
  out.normalized_ = normalized_.substr(n->begin, n->end - n->begin);
  for (size_t i = n->begin; i < n->end; ++i) {
    const Span& a = alignments_[i];
    out.alignments_.push_back({a.begin - o.begin, a.end - o.begin});
  }
  out.original_shift_ = original_shift_ + o.begin;
  return out;
}

void NormalizedString::transform_range(Span range, const std::vector<CharChange>& dest,
                                       size_t initial_offset) {
  KILN_CHECK(range.begin <= range.end && range.end <= normalized_.size(),
             "NormalizedString::transform_range: range [", range.begin, ", ", range.end,
             ") outside ", normalized_.size(), " bytes");
  // The old code points of the range are consumed left to right.
  size_t cursor = range.begin;  // next old byte to consume
  auto consume = [&]() -> size_t {  // bytes of the next old code point (0 at the end)
    if (cursor >= range.end) return 0;
    size_t i = cursor;
    decode_utf8(normalized_, i);
    const size_t n = std::min(i, range.end) - cursor;
    cursor += n;
    return n;
  };
  for (size_t k = 0; k < initial_offset; ++k)
    if (consume() == 0) break;
  size_t offset = cursor;
  std::string text;
  std::vector<Span> aligns;
  text.reserve(range.end - range.begin);
  aligns.reserve(range.end - range.begin);
  for (const CharChange& d : dest) {
    Span align{0, 0};
    if (d.change > 0) {
      if (offset >= 1) {
        KILN_CHECK(offset - 1 < alignments_.size(), "NormalizedString::transform_range: insertion at byte ",
                   offset, " outside ", alignments_.size());
        align = alignments_[offset - 1];
      }
    } else {
      KILN_CHECK(offset < alignments_.size(), "NormalizedString::transform_range: replacement at byte ",
                 offset, " outside ", alignments_.size());
      align = alignments_[offset];
      offset += consume();
      for (int64_t r = 0; r < -d.change; ++r) offset += consume();
    }
    const size_t before = text.size();
    append_utf8(text, d.c);
    for (size_t b = before; b < text.size(); ++b) aligns.push_back(align);
  }
  normalized_.replace(range.begin, range.end - range.begin, text);
  alignments_.erase(alignments_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                    alignments_.begin() + static_cast<std::ptrdiff_t>(range.end));
  alignments_.insert(alignments_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                     aligns.begin(), aligns.end());
}

void NormalizedString::transform(const std::vector<CharChange>& dest, size_t initial_offset) {
  const std::optional<Span> range = original_to_normalized({0, original_.size()});
  if (!range) return;
  transform_range(*range, dest, initial_offset);
}

void NormalizedString::filter(const std::function<bool(char32_t)>& keep) {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  int64_t removed = 0;
  size_t removed_start = 0;
  std::optional<char32_t> last;
  for (size_t i = 0; i < normalized_.size();) {
    const char32_t c = decode_utf8(normalized_, i);
    if (keep(c)) {
      if (last)
        dest.push_back({*last, -removed});
      else
        removed_start = static_cast<size_t>(removed);
      last = c;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (last) dest.push_back({*last, -removed});
  transform(dest, removed_start);  // nothing kept: no pairs, the string empties
}

void NormalizedString::map(const std::function<char32_t(char32_t)>& f) {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  for (size_t i = 0; i < normalized_.size();) dest.push_back({f(decode_utf8(normalized_, i)), 0});
  transform(dest, 0);
}

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty()) return;
  size_t i = 0;
  const char32_t next = decode_utf8(normalized_, i);
  std::vector<CharChange> dest;
  bool first = true;
  for (size_t k = 0; k < s.size();) {
    dest.push_back({decode_utf8(s, k), first ? 0 : 1});
    first = false;
  }
  dest.push_back({next, 1});
  transform_range({0, i}, dest, 0);
}

void NormalizedString::append(std::string_view s) {
  std::vector<CharChange> dest;
  size_t b = 0;
  if (!normalized_.empty()) {
    b = normalized_.size() - 1;
    while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
    size_t i = b;
    dest.push_back({decode_utf8(normalized_, i), 0});
  }
  for (size_t k = 0; k < s.size();) dest.push_back({decode_utf8(s, k), 1});
  transform_range({b, normalized_.size()}, dest, 0);
}

bool NormalizedString::map_ascii(const std::array<int8_t, 128>& table) {
  for (const char c : normalized_) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x80 || table[b] < 0) return false;
  }
  for (char& c : normalized_) c = static_cast<char>(table[static_cast<unsigned char>(c)]);
  return true;
}

void NormalizedString::lowercase() {
  std::vector<CharChange> dest;
  dest.reserve(normalized_.size());
  for (size_t i = 0; i < normalized_.size();) {
    const char32_t c = decode_utf8(normalized_, i);
    // Rust's char::to_lowercase is the full mapping: the simple one
    // (utf8proc) plus SpecialCasing's one unconditional multi-character
    // lowercase, U+0130 -> U+0069 U+0307.
    if (c == 0x130) {
      dest.push_back({0x69, 0});
      dest.push_back({0x307, 1});
    } else {
      dest.push_back({static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), 0});
    }
  }
  transform(dest, 0);
}

void NormalizedString::replace(const Matches& matches, std::string_view content) {
  std::string text;
  std::vector<Span> aligns;
  text.reserve(normalized_.size());
  aligns.reserve(alignments_.size());
  size_t last_end = 0;
  for (const Match& m : matches) {
    if (!m.is_match) continue;
    KILN_CHECK(m.span.begin >= last_end && m.span.end <= normalized_.size() &&
                   m.span.begin <= m.span.end,
               "NormalizedString::replace: match [", m.span.begin, ", ", m.span.end,
               ") out of order or bounds");
    text.append(normalized_, last_end, m.span.begin - last_end);
    aligns.insert(aligns.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end),
                  alignments_.begin() + static_cast<std::ptrdiff_t>(m.span.begin));
    // Every inserted code point takes the alignment of the match's last byte
    // (HF removes the matched code points, then inserts the content after them).
    const Span align = m.span.end >= 1 ? alignments_[m.span.end - 1] : Span{0, 0};
    const size_t before = text.size();
    text.append(content);
    aligns.insert(aligns.end(), text.size() - before, align);
    last_end = m.span.end;
  }
  text.append(normalized_, last_end, std::string::npos);
  aligns.insert(aligns.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end),
                alignments_.end());
  normalized_ = std::move(text);
  alignments_ = std::move(aligns);
}

namespace {
// Rust's char::is_whitespace: the White_Space property, which is exactly
// \t..\r, U+0085 and the general categories Zs, Zl, Zp.
bool is_white_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}
}  // namespace

void NormalizedString::strip(bool left, bool right) {
  const std::vector<char32_t> cps = to_code_points(normalized_);
  size_t lead = 0, trail = 0;
  if (left)
    while (lead < cps.size() && is_white_space(cps[lead])) ++lead;
  if (right)
    while (trail < cps.size() && is_white_space(cps[cps.size() - 1 - trail])) ++trail;
  if (lead == 0 && trail == 0) return;
  std::vector<CharChange> dest;
  const size_t count = cps.size();
  for (size_t i = 0; i < count; ++i) {
    if (i < lead || i + trail >= count) continue;
    // HF compares the code-point index with the *byte* length here; on
    // non-ASCII text the trailing removal count is never attached, which
    // changes no alignment (the trailing code points are dropped either way).
    const bool last_kept = i + trail + 1 == normalized_.size();
    dest.push_back({cps[i], last_kept ? -static_cast<int64_t>(trail) : 0});
  }
  transform(dest, lead);
}

void NormalizedString::clear() { transform({}, normalized_.size()); }

std::vector<Match> split_pieces(Matches matches, SplitBehavior behavior) {
  // (span, removed) pieces per behavior, as HF's NormalizedString::split.
  std::vector<Match> pieces;
  pieces.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::kRemoved:
      pieces = std::move(matches);
      break;
    case SplitBehavior::kIsolated:
      for (const Match& m : matches) pieces.push_back({m.span, false});
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (const Match& m : matches) {
        if (m.is_match == prev && !pieces.empty())
          pieces.back().span.end = m.span.end;
        else
          pieces.push_back({m.span, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (const Match& m : matches) {
        if (m.is_match && !prev && !pieces.empty())
          pieces.back().span.end = m.span.end;
        else
          pieces.push_back({m.span, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !prev && !pieces.empty())
          pieces.back().span.begin = it->span.begin;
        else
          pieces.push_back({it->span, false});
        prev = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  return pieces;
}

std::vector<NormalizedString> NormalizedString::split(Matches matches,
                                                      SplitBehavior behavior) const {
  const std::vector<Match> pieces = split_pieces(std::move(matches), behavior);
  std::vector<NormalizedString> out;
  out.reserve(pieces.size());
  for (const Match& p : pieces) {
    if (p.is_match) continue;  // removed
    std::optional<NormalizedString> s = slice_normalized(p.span);
    KILN_CHECK(s.has_value(), "NormalizedString::split: bad piece [", p.span.begin, ", ",
               p.span.end, ") of ", normalized_.size(), " bytes");
    out.push_back(std::move(*s));
  }
  return out;
}

// ---- PreTokenizedString -----------------------------------------------------

void PreTokenizedString::split(
    const std::function<std::vector<Split>(size_t, NormalizedString&&)>& f) {
  std::vector<Split> next;
  next.reserve(splits_.size());
  for (size_t i = 0; i < splits_.size(); ++i) {
    if (splits_[i].tokens) {
      next.push_back(std::move(splits_[i]));
      continue;
    }
    for (Split& s : f(i, std::move(splits_[i].normalized)))
      if (!s.normalized.empty()) next.push_back(std::move(s));
  }
  splits_ = std::move(next);
}

void PreTokenizedString::split_normalized(
    const std::function<std::vector<NormalizedString>(size_t, NormalizedString&&)>& f) {
  std::vector<Split> next;
  next.reserve(splits_.size());
  for (size_t i = 0; i < splits_.size(); ++i) {
    if (splits_[i].tokens) {
      next.push_back(std::move(splits_[i]));
      continue;
    }
    for (NormalizedString& s : f(i, std::move(splits_[i].normalized)))
      if (!s.empty()) next.push_back({std::move(s), std::nullopt});
  }
  splits_ = std::move(next);
}

void PreTokenizedString::normalize(const std::function<void(NormalizedString&)>& f) {
  for (Split& s : splits_)
    if (!s.tokens) f(s.normalized);
}

void PreTokenizedString::tokenize(
    const std::function<std::vector<Token>(const NormalizedString&)>& f) {
  for (Split& s : splits_)
    if (!s.tokens) s.tokens = f(s.normalized);
}

}  // namespace kiln::data::tok
