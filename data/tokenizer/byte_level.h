// GPT-2's byte-level alphabet and HF tokenizers' ByteLevel pre-tokenizer
// (pre_tokenizers/byte_level.rs).
//
// Note [Byte-level alphabet]: GPT-2 maps each of the 256 byte values to a
// printable code point (bytes_to_unicode): the bytes '!'..'~', 0xA1..0xAC
// and 0xAE..0xFF map to themselves; the other 68 bytes, in increasing order,
// map to U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
// A BPE vocabulary over this alphabet can spell any byte string.
//
// The pre-tokenizer, per split without tokens:
//  - add_prefix_space: prepends " " unless the text starts with a space (the
//    space is aligned to the first character, so it carries its offsets);
//  - use_regex: cuts it into the matches of GPT-2's pattern (below), each
//    match and each gap its own piece (Isolated);
//  - then rewrites every piece byte by byte into the alphabet: the first byte
//    of a code point replaces it, the following ones are insertions, so every
//    new character keeps the offsets of the code point it came from.
// trim_offsets is not used here; it belongs to the ByteLevel post-processor.
#pragma once

#include <cstdint>

#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/regex.h"

namespace kiln::data::tok {

// Note [Byte-level alphabet].
char32_t byte_level_char(uint8_t b);
// The byte whose character is c; -1 when c is not in the table.
int byte_level_byte(char32_t c);

// GPT-2's pre-tokenization pattern, compiled once.
inline constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const Regex& gpt2_regex();

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  // HF's defaults are (true, true, true).
  ByteLevelPreTokenizer(bool add_prefix_space, bool trim_offsets, bool use_regex)
      : add_prefix_space_(add_prefix_space), trim_offsets_(trim_offsets), use_regex_(use_regex) {}
  void pre_tokenize(PreTokenizedString& s) const override;
  bool has_pieces() const override { return true; }
  void pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                           Pieces& out) const override;

  bool add_prefix_space() const { return add_prefix_space_; }
  bool trim_offsets() const { return trim_offsets_; }
  bool use_regex() const { return use_regex_; }

 private:
  bool add_prefix_space_, trim_offsets_, use_regex_;
};

// Rewrites every byte of `n` into the alphabet (the last step above).
void byte_level_encode(NormalizedString& n);

}  // namespace kiln::data::tok
