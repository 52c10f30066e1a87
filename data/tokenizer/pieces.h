// Pieces: the pre-tokenizer's output for one split as spans of one buffer,
// the fast form of PreTokenizedString (pre-tokenizers' pre_tokenize_pieces).
//
// Note [Fast pre-tokenization]: PreTokenizedString gives every piece its own
// NormalizedString (original and normalized text, one alignment per byte),
// which is what HF does and what costs the time: a GPT-2 line of 100 pieces
// is some 600 allocations. Pieces keeps all the pieces of one split in one
// string, and for each byte only `src`, the byte of the split's normalized
// text whose alignment HF's NormalizedString operations would give it:
//  - a byte cut out of the split keeps its own (src = its index);
//  - a code point that replaces another (transform's change 0, replace())
//    takes the alignment of the replaced one's first byte (replace(): last);
//  - an insertion (change > 0) takes that of the byte just before it.
// A token [b, e) of a piece then maps to the original span
// [alignment(src[b]).begin, alignment(src[e - 1]).end), as
// NormalizedString::normalized_to_original would on the piece.
//
// That equality needs the split's alignments to be plain: each non-empty,
// begin and end non-decreasing (then every piece's transform covers the
// whole piece, with no bytes aligned to nothing kept in front; Note
// [Alignments]). plain_alignments() tests it; the Tokenizer uses the general
// path for any split that is not plain, and for any pre-tokenizer without
// pre_tokenize_pieces. tests/test_tok_hf.cpp checks that both paths give
// the same encodings (and HF's) for every test tokenizer and corpus.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/normalized.h"

namespace kiln::data::tok {

struct Pieces {
  std::string text;           // the pieces' text, concatenated
  std::vector<uint32_t> src;  // per byte of text (Note [Fast pre-tokenization])
  // Each piece's [begin, end) in text; only reset() makes an empty one (and
  // every step drops it, as pre_tokenize drops empty pieces).
  std::vector<Span> spans;
  // Each piece's original_shift (its NormalizedString's: where its original
  // starts in the input).
  std::vector<size_t> shifts;

  void clear() {
    text.clear();
    src.clear();
    spans.clear();
    shifts.clear();
  }
  // One piece: all of `split`'s text (even empty), each byte its own source.
  void reset(const NormalizedString& split);
  std::string_view view(const Span& p) const { return {text.data() + p.begin, p.end - p.begin}; }
  // Appends bytes [b, e) of `from`'s text with their sources.
  void append(const Pieces& from, size_t b, size_t e) {
    text.append(from.text, b, e - b);
    src.insert(src.end(), from.src.begin() + static_cast<std::ptrdiff_t>(b),
               from.src.begin() + static_cast<std::ptrdiff_t>(e));
  }
  // Appends `s` with every byte's source `source`.
  void append(std::string_view s, uint32_t source) {
    text.append(s);
    src.insert(src.end(), s.size(), source);
  }
  // Ends the piece that began at text byte `begin`, with original_shift
  // `shift` (dropped when empty, as PreTokenizedString drops empty pieces).
  void close(size_t begin, size_t shift) {
    if (text.size() <= begin) return;
    spans.push_back({begin, text.size()});
    shifts.push_back(shift);
  }
};

// Where the original of text byte `b` of `p` begins in the input: the
// original_shift of a piece sliced from there.
inline size_t input_begin(const NormalizedString& split, const Pieces& p, size_t b) {
  return split.original_shift() + split.alignments()[p.src[b]].begin;
}
inline size_t input_end(const NormalizedString& split, const Pieces& p, size_t b) {
  return split.original_shift() + split.alignments()[p.src[b]].end;
}

// Whether `s`'s alignments allow the fast path (Note [Fast pre-tokenization]).
bool plain_alignments(const NormalizedString& s);

// Each piece of `in` cut at its `find(view)` matches per `behavior`, into `out`.
template <typename Find>
void split_each(const NormalizedString& split, const Pieces& in, Pieces& out, Find&& find,
                SplitBehavior behavior) {
  out.clear();
  for (const Span& p : in.spans) {
    for (const Match& q : split_pieces(find(in.view(p)), behavior)) {
      if (q.is_match || q.span.begin == q.span.end) continue;  // removed or empty
      const size_t b = p.begin + q.span.begin;
      const size_t begin = out.text.size();
      out.append(in, b, p.begin + q.span.end);
      out.close(begin, input_begin(split, in, b));
    }
  }
}

}  // namespace kiln::data::tok
