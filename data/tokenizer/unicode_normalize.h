// Unicode normal forms (NFD, NFKD, NFC, NFKC) that also say, per output code
// point, how it lines up with the input: the (code point, change) pairs that
// NormalizedString::transform takes (Note [Alignments] in normalized.h).
//
// Note [Normal form changes]: HF tokenizers gets these pairs from the crate
// unicode-normalization-alignments; this reproduces its rules with utf8proc's
// Unicode data:
//  - Decomposition: each input code point becomes its full (canonical, or
//    compatibility for the K forms) decomposition; the first code point of
//    it gets change 0, the others change 1 (inserted). Hangul syllables
//    decompose the same way (L 0, V 1, T 1).
//  - Canonical ordering: every run of non-starters is stably sorted by
//    combining class, and each change travels with its code point (so a
//    reordered mark takes the *position* of the mark it swapped with: the
//    alignment goes by position, not by identity).
//  - Composition (C forms): the standard algorithm (a starter absorbs each
//    following unblocked mark or starter it composes with); the composite's
//    change is starter change + absorbed change - 1, so "e" + U+0301
//    (0, 0) becomes "é" with change -1: it aligns with "e" alone and removes
//    the accent. Blocked marks come out after their starter, in order.
// Unicode versions differ (utf8proc is Debian 12's, Unicode 15.0; the crate's
// tables are older, about Unicode 12): the code points decomposed, composed
// or classed differently are listed in Note [Unicode skew] in
// tests/test_tok_normalizers.cpp.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/normalized.h"

namespace kiln::data::tok {

enum class NormalForm { kNFD, kNFKD, kNFC, kNFKC };

// The (code point, change) pairs of the normal form of `s` (valid UTF-8).
std::vector<CharChange> normal_form_changes(std::string_view s, NormalForm form);

// HF's NormalizedString::nfd / nfkd / nfc / nfkc.
void apply_normal_form(NormalizedString& s, NormalForm form);

// The text of the normal form alone.
std::string normal_form(std::string_view s, NormalForm form);

}  // namespace kiln::data::tok
