// HF's Precompiled normalizer (Note [Precompiled charsmap] in precompiled.h).
#include "kiln/data/tokenizer/precompiled.h"

#include <google/protobuf/stubs/strutil.h>  // Base64Escape, Base64Unescape (Debian 12's protobuf 3.21)

#include <utf8proc.h>

#include "core/error.h"

namespace kiln::data::tok {

// ---- base64 -----------------------------------------------------------------

// protobuf-lite's codec (already linked for .model files). Its decoder is
// lenient (whitespace, missing padding, non-zero trailing bits), so the text
// must also be exactly the canonical encoding of what it decodes to, which
// is what Rust base64's STANDARD engine accepts.
std::string base64_decode(std::string_view text, const std::string& where) {
  std::string out;
  if (!google::protobuf::Base64Unescape(google::protobuf::StringPiece(text.data(), text.size()), &out))
    fail(where, ": invalid base64");
  std::string canonical;
  google::protobuf::Base64Escape(google::protobuf::StringPiece(out), &canonical);
  if (canonical != text)
    fail(where, ": invalid base64: not canonical RFC 4648 with padding (", text.size(), " characters)");
  return out;
}

// ---- the trie ---------------------------------------------------------------

namespace {
uint32_t read_le32(std::string_view b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}

// Darts unit fields (widened to 64 bits as spm_precompiled's usize).
uint64_t unit_offset(uint64_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint64_t unit_label(uint64_t u) { return u & ((1u << 31) | 0xFFu); }
bool unit_has_leaf(uint64_t u) { return ((u >> 8) & 1) == 1; }
uint64_t unit_value(uint64_t u) { return u & ((1u << 31) - 1); }
}  // namespace

PrecompiledCharsMap::PrecompiledCharsMap(std::string_view bytes, const std::string& where)
    : where_(where) {
  if (bytes.size() < 4)
    fail(where, ": truncated charsmap: ", bytes.size(), " bytes, need a 4-byte trie size");
  const uint32_t trie_bytes = read_le32(bytes, 0);
  const size_t units = trie_bytes / 4;
  if (units > (bytes.size() - 4) / 4)
    fail(where, ": truncated charsmap: the trie has ", trie_bytes, " bytes but only ",
         bytes.size() - 4, " follow");
  trie_.reserve(units);
  for (size_t k = 0; k < units; ++k) trie_.push_back(read_le32(bytes, 4 + 4 * k));
  blob_ = std::string(bytes.substr(4 + 4 * units));
  if (to_valid_utf8(blob_) != blob_)
    fail(where, ": the normalized strings (", blob_.size(), " bytes) are not valid UTF-8");
}

std::optional<std::string_view> PrecompiledCharsMap::transform(std::string_view chunk) const {
  auto unit = [&](uint64_t pos) -> uint64_t {
    if (pos >= trie_.size())
      fail(where_, ": corrupt charsmap: trie index ", pos, " outside its ", trie_.size(), " units");
    return trie_[pos];
  };
  // Every match is collected as HF does (an index error after the first
  // match is still an error); the first (shortest) one is the result.
  std::optional<uint64_t> first;
  uint64_t pos = unit_offset(unit(0));
  for (const char ch : chunk) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0) break;
    pos ^= c;
    const uint64_t u = unit(pos);
    if (unit_label(u) != c) break;
    pos ^= unit_offset(u);
    if (unit_has_leaf(u)) {
      const uint64_t v = unit_value(unit(pos));
      if (!first) first = v;
    }
  }
  if (!first) return std::nullopt;
  const uint64_t index = *first;
  if (index > blob_.size())
    fail(where_, ": corrupt charsmap: replacement offset ", index, " outside the ", blob_.size(),
         "-byte strings");
  if (index < blob_.size() && (static_cast<unsigned char>(blob_[index]) & 0xC0) == 0x80)
    fail(where_, ": corrupt charsmap: replacement offset ", index, " inside a code point");
  size_t end = static_cast<size_t>(index);
  while (end < blob_.size() && blob_[end] != '\0') ++end;
  return std::string_view(blob_).substr(static_cast<size_t>(index), end - static_cast<size_t>(index));
}

// ---- graphemes --------------------------------------------------------------

std::vector<Span> grapheme_clusters(std::string_view s) {
  std::vector<Span> out;
  utf8proc_int32_t state = 0;
  size_t begin = 0;
  char32_t prev = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = decode_utf8(s, i);
    if (at > 0 &&
        utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                         static_cast<utf8proc_int32_t>(c), &state)) {
      out.push_back({begin, at});
      begin = at;
    }
    prev = c;
  }
  if (begin < s.size()) out.push_back({begin, s.size()});
  return out;
}

// ---- the normalizer ---------------------------------------------------------

namespace {
// HF's precompiled.rs `replace`: appends the pairs for `old_part` -> `new_part`.
void push_replacement(std::vector<CharChange>& out, std::string_view old_part,
                      std::string_view new_part) {
  int64_t old_count = 0;
  for (size_t i = 0; i < old_part.size();) decode_utf8(old_part, i), ++old_count;
  int64_t new_count = 0;
  for (size_t i = 0; i < new_part.size(); ++new_count) out.push_back({decode_utf8(new_part, i), 0});
  const int64_t diff = new_count - old_count;
  if (diff > 0) {
    for (int64_t k = 0; k < diff; ++k) out[out.size() - 1 - static_cast<size_t>(k)].change = 1;
  } else if (diff < 0 && !out.empty()) {
    out.back().change += diff;
  }
}
}  // namespace

PrecompiledNormalizer::PrecompiledNormalizer(PrecompiledCharsMap map) : map_(std::move(map)) {
  for (size_t c = 0; c < ascii_mapped_.size(); ++c) {
    const char ch = static_cast<char>(c);
    ascii_mapped_[c] = map_.transform(std::string_view(&ch, 1)).has_value();
  }
  crlf_mapped_ = map_.transform("\r\n").has_value();
}

void PrecompiledNormalizer::normalize(NormalizedString& s) const {
  const std::string& text = s.get();
  // ASCII text: graphemes are its characters, except CR LF (UAX #29 GB3-GB5;
  // no ASCII character extends, prepends or joins).
  bool unchanged = true;
  for (size_t i = 0; i < text.size() && unchanged; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    unchanged = c < 0x80 && !ascii_mapped_[c] &&
                !(crlf_mapped_ && c == '\r' && i + 1 < text.size() && text[i + 1] == '\n');
  }
  if (unchanged) return;
  std::vector<CharChange> changes;
  changes.reserve(text.size());
  bool modified = false;
  for (const Span& g : grapheme_clusters(text)) {
    const std::string_view grapheme = std::string_view(text).substr(g.begin, g.end - g.begin);
    if (grapheme.size() < 6) {
      if (const auto norm = map_.transform(grapheme)) {
        modified = true;
        push_replacement(changes, grapheme, *norm);
        continue;
      }
    }
    for (size_t i = 0; i < grapheme.size();) {
      const size_t at = i;
      const char32_t c = decode_utf8(grapheme, i);
      const std::string_view part = grapheme.substr(at, i - at);
      if (const auto norm = map_.transform(part)) {
        modified = true;
        push_replacement(changes, part, *norm);
      } else {
        changes.push_back({c, 0});
      }
    }
  }
  if (modified) s.transform(changes, 0);
}

std::unique_ptr<Normalizer> precompiled_from_json(const Json& j, const std::string& where) {
  const std::string field = "tokenizer.json: " + json_path(where, "precompiled_charsmap");
  const std::string bytes = base64_decode(json_string(j, "precompiled_charsmap", where), field);
  return std::make_unique<PrecompiledNormalizer>(PrecompiledCharsMap(bytes, field));
}

}  // namespace kiln::data::tok
