// NormalizedString and PreTokenizedString: text that keeps track of where each
// byte came from, so that after normalizers rewrite it and pre-tokenizers cut
// it, every token still maps back to a span of the user's input.
//
// Note [Alignments]: the behaviour is that of HF tokenizers'
// tokenizer/normalizer.rs and tokenizer/pre_tokenizer.rs (Rust), re-derived,
// because offsets are part of what must equal HF's.
//  - `normalized` is the current text; alignments[i] is the byte range
//    [begin, end) of `original` that byte i of `normalized` comes from. A new
//    string aligns each byte to the whole code point it belongs to.
//  - transform(dest, initial_offset) rewrites a range from a list of
//    (code point, change) pairs, one per code point of the new text:
//      change == 0   replaces the next old code point,
//      change  > 0   inserts a code point (it takes the alignment of the old
//                    byte just before the insertion point, or (0, 0) at the
//                    very start),
//      change == -n  replaces the next old code point and removes the n after it.
//    `initial_offset` old code points are removed before the first pair.
//  - original_shift is the offset of `original` in the user's input, so
//    slices report offsets in the input's coordinates.
//  - Offsets are bytes here; the Tokenizer turns them into the character
//    offsets HF's Python API reports.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::data::tok {

struct Span {
  size_t begin = 0, end = 0;
  bool operator==(const Span&) const = default;
};

// A match of a pattern: the pieces of a string, in order, covering it
// entirely, each flagged as a match of the pattern or the text between
// matches (HF's Pattern::find_matches).
struct Match {
  Span span;
  bool is_match = false;
};
using Matches = std::vector<Match>;

// Matches of single code points for which `pred` holds (each one its own match).
Matches find_char_matches(std::string_view s, const std::function<bool(char32_t)>& pred);
// Non-overlapping left-to-right matches of a literal. An empty literal
// matches nothing and, as in HF, yields one piece whose end is the
// *character* count of `s`.
Matches find_literal_matches(std::string_view s, std::string_view literal);

// HF's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The pieces HF's NormalizedString::split makes of `matches` per `behavior`,
// in order: is_match flags a piece the behavior removes; empty pieces are
// included (NormalizedString::split and Pieces drop them).
std::vector<Match> split_pieces(Matches matches, SplitBehavior behavior);

// Whether byte i of `s` (valid UTF-8) begins a code point, or is its end.
inline bool is_boundary(std::string_view s, size_t i) {
  return i == s.size() || (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80);
}

// One new code point and its change (Note [Alignments]).
struct CharChange {
  char32_t c;
  int64_t change;
};

class NormalizedString {
 public:
  NormalizedString() = default;
  // `s` must be valid UTF-8 (the Tokenizer replaces ill-formed bytes first).
  explicit NormalizedString(std::string_view s);
  // `s` as a piece of a text that starts at `original_shift` in its input
  // (what slicing the whole text's NormalizedString there would give).
  NormalizedString(std::string_view s, size_t original_shift) : NormalizedString(s) {
    original_shift_ = original_shift;
  }

  const std::string& get() const { return normalized_; }
  const std::string& original() const { return original_; }
  size_t original_shift() const { return original_shift_; }
  const std::vector<Span>& alignments() const { return alignments_; }
  size_t size() const { return normalized_.size(); }
  bool empty() const { return normalized_.empty(); }
  // [original_shift, original_shift + original.size()).
  Span offsets_original() const { return {original_shift_, original_shift_ + original_.size()}; }

  // The original span (relative to `original`, add original_shift() for
  // input coordinates) of normalized bytes [begin, end); nullopt when the
  // range is out of bounds. An empty range maps to itself (HF).
  std::optional<Span> normalized_to_original(Span normalized) const;
  // The normalized span of original bytes [begin, end) (relative to `original`).
  std::optional<Span> original_to_normalized(Span original) const;

  // A sub-string by normalized bytes (must be code-point boundaries),
  // carrying its alignments; nullopt when the range is invalid.
  std::optional<NormalizedString> slice_normalized(Span normalized) const;
  std::optional<NormalizedString> slice_original(Span original) const;

  // Note [Alignments]. `range` is in normalized bytes (code-point boundaries).
  void transform_range(Span range, const std::vector<CharChange>& dest, size_t initial_offset);
  // HF's transform: transform_range over the normalized span of the whole
  // original, which starts at the first byte with a non-empty alignment
  // (bytes inserted before it, aligned to nothing, stay in front).
  void transform(const std::vector<CharChange>& dest, size_t initial_offset);

  // The NormalizedString operations HF's normalizers are built from.
  void filter(const std::function<bool(char32_t)>& keep);
  void map(const std::function<char32_t(char32_t)>& f);
  void prepend(std::string_view s);  // no-op on an empty string (HF)
  void append(std::string_view s);
  void lowercase();  // full Unicode lowercase mapping (Rust's char::to_lowercase)
  // Each byte b of an all-ASCII text becomes table[b], one ASCII byte for
  // one (the alignments stay); false, and nothing changed, when some byte is
  // not ASCII or its entry is negative (no such one-for-one change).
  bool map_ascii(const std::array<int8_t, 128>& table);
  // Replaces every `is_match` piece of `matches` (computed on get()) with `content`.
  void replace(const Matches& matches, std::string_view content);
  // Strips Unicode White_Space (Rust's char::is_whitespace) from the left
  // and/or right.
  void strip(bool left, bool right);
  void clear();

  // Cuts the string at the pieces of `matches` (computed on get()) per
  // `behavior`; empty pieces are dropped (a Split pre-tokenizer with
  // invert flips is_match before calling).
  std::vector<NormalizedString> split(Matches matches, SplitBehavior behavior) const;

  // Builds a string directly (tests, and stages that rebuild text wholesale).
  NormalizedString(std::string original, std::string normalized, std::vector<Span> alignments,
                   size_t original_shift);

 private:
  std::string original_;
  std::string normalized_;
  std::vector<Span> alignments_;  // one per byte of normalized_
  size_t original_shift_ = 0;
};

// A token produced by a Model: its id, its string, and its byte span within
// the piece of text the model was given.
struct Token {
  int32_t id = 0;
  std::string value;
  Span offsets;
};

// A piece of a PreTokenizedString: its text, and once a model (or the
// added-tokens layer) has tokenized it, its tokens.
struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;
};

class PreTokenizedString {
 public:
  explicit PreTokenizedString(std::string_view s) : splits_{{NormalizedString(s), std::nullopt}} {}
  explicit PreTokenizedString(NormalizedString n) : splits_{{std::move(n), std::nullopt}} {}
  // These splits as they are (none empty).
  explicit PreTokenizedString(std::vector<Split> splits) : splits_(std::move(splits)) {}

  // For every split without tokens, f(index, piece) returns the pieces that
  // replace it (empty pieces are dropped); tokenized splits are kept as is.
  void split(const std::function<std::vector<Split>(size_t, NormalizedString&&)>& f);
  // Same, for the common case where f only cuts text.
  void split_normalized(
      const std::function<std::vector<NormalizedString>(size_t, NormalizedString&&)>& f);
  // Applies f to the text of every split without tokens.
  void normalize(const std::function<void(NormalizedString&)>& f);
  // Gives every split without tokens its tokens from f(piece).
  void tokenize(const std::function<std::vector<Token>(const NormalizedString&)>& f);

  std::vector<Split>& splits() { return splits_; }
  const std::vector<Split>& splits() const { return splits_; }

 private:
  std::vector<Split> splits_;
};

// UTF-8 helpers shared by the stages. decode_utf8 reads one code point of
// valid UTF-8 at s[i] and advances i.
char32_t decode_utf8(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t c);
size_t utf8_length(char32_t c);
// At s[i] (i < s.size()): the byte length of a well-formed code point
// (Unicode Table 3-7), or minus that of the maximal ill-formed subsequence
// there (at least 1 byte).
int utf8_step(std::string_view s, size_t i);
// Each maximal ill-formed subsequence becomes U+FFFD (as Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace")).
std::string to_valid_utf8(std::string_view s);
// Whether `s` is well-formed UTF-8 (Rust's str::from_utf8).
bool is_valid_utf8(std::string_view s);
// Code points of valid UTF-8.
std::vector<char32_t> to_code_points(std::string_view s);

}  // namespace kiln::data::tok
