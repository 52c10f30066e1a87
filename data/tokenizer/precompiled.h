// SentencePiece's precompiled_charsmap normalizer (HF's Precompiled, from
// normalizers/precompiled.rs and the spm_precompiled crate).
//
// Note [Precompiled charsmap]: the "precompiled_charsmap" of tokenizer.json
// is base64 of
//     u32 trie_size (little-endian, in bytes)
//     trie_size / 4 little-endian u32 units: a Darts double-array trie whose
//                   keys are UTF-8 byte strings and whose values are byte
//                   offsets into the blob
//     blob:         the rest (any trie_size % 4 bytes included), valid UTF-8,
//                   replacement strings each ended by a NUL (or the blob's end)
// A unit u has: label = u & (2^31 | 0xFF), has_leaf = bit 8,
// offset = (u >> 10) << (bit 9 ? 8 : 0), value = u & (2^31 - 1). A lookup
// starts at node 0 (pos = offset(unit[0])), and for each key byte c (a NUL
// byte ends the key) moves to pos ^ c, requires that unit's label to be c,
// then pos ^= its offset; when it has a leaf, unit[pos]'s value is a match.
// `transform(chunk)` is the replacement of the *shortest* prefix of `chunk`
// that matches (so a grapheme whose first code point is in the map is
// replaced as a whole by that code point's replacement: HF drops the rest,
// e.g. "ﬁ" + U+0301 becomes "fi").
//
// normalize(): the text is cut into extended grapheme clusters; a cluster of
// fewer than 6 bytes with a transform is replaced as a whole, any other is
// looked up code point by code point. A replacement of n old code points by
// m new ones gives (new, 0) pairs, with the last m - n marked inserted (1)
// when m > n, or the last pair (possibly an earlier cluster's) given the
// -(n - m) removals when m < n (lost when nothing precedes: HF's quirk).
// The string is only transformed when something matched. Clusters come from
// utf8proc (Unicode 15.0), HF's from unicode-segmentation (newer tables): they
// differ around code points assigned since (Note [Unicode skew] in
// tests/test_tok_normalizers.cpp), which only matters for short clusters.
//
// Hostile charsmaps: malformed base64, a blob that is short, or not UTF-8 are
// kiln::Errors when parsed; a trie index outside the array, or a value
// outside the blob or inside a code point, is a kiln::Error when a lookup
// reaches it (where HF panics). A lookup touches at most 2 units per key
// byte, so work is bounded by the text length whatever the trie holds.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data::tok {

// RFC 4648 base64 with canonical padding (Rust base64's STANDARD engine),
// decoded by protobuf-lite: any other character, a bad length or padding,
// whitespace or non-zero trailing bits is a kiln::Error naming `where`.
std::string base64_decode(std::string_view text, const std::string& where);

class PrecompiledCharsMap {
 public:
  // `bytes` is the decoded charsmap; `where` names it in errors.
  PrecompiledCharsMap(std::string_view bytes, const std::string& where);

  // The replacement of the shortest matching prefix of `chunk`, or nullopt.
  std::optional<std::string_view> transform(std::string_view chunk) const;

  size_t trie_units() const { return trie_.size(); }
  const std::string& blob() const { return blob_; }

 private:
  std::vector<uint32_t> trie_;
  std::string blob_;
  std::string where_;
};

class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsMap map);
  void normalize(NormalizedString& s) const override;
  const PrecompiledCharsMap& charsmap() const { return map_; }

 private:
  PrecompiledCharsMap map_;
  // Whether the charsmap maps each ASCII character, and "\r\n": on ASCII
  // text every grapheme is one character (or CR LF), so when none of them
  // is mapped the text is left as it is without segmenting it.
  std::array<bool, 128> ascii_mapped_{};
  bool crlf_mapped_ = false;
};

// The "Precompiled" object of tokenizer.json.
std::unique_ptr<Normalizer> precompiled_from_json(const Json& j, const std::string& where);

// Extended grapheme clusters of valid UTF-8 (utf8proc's UAX #29 rules), as
// byte spans in order.
std::vector<Span> grapheme_clusters(std::string_view s);

}  // namespace kiln::data::tok
