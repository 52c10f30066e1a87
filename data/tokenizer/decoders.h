// HF tokenizers' decoders (tokenizers/src/decoders/*.rs, and the ByteLevel,
// Metaspace and Replace ones in pre_tokenizers/ and normalizers/), and
// decoder_from_json (pipeline.h) reading the "decoder" object of
// tokenizer.json. Each rewrites the list of token strings (decode_chain);
// Decoder::decode joins the result.
//
//  type          fields                     decode_chain
//  ByteLevel     add_prefix_space,          every token whose characters are all in GPT-2's
//                trim_offsets, use_regex    alphabet becomes its bytes, any other token its own
//                (true)                     UTF-8; the bytes of all tokens are then one string,
//                                           each ill-formed subsequence U+FFFD (from_utf8_lossy)
//  Metaspace     replacement (one char),    each replacement character becomes ' ', except in
//                prepend_scheme ("always"), the first token, where (unless the scheme is never)
//                split, add_prefix_space    every one of them is dropped
//  WordPiece     prefix, cleanup            tokens after the first lose `prefix` or else get a
//                                           leading ' '; cleanup: Note [WordPiece cleanup]
//  BPEDecoder    suffix                     every `suffix` becomes ' ' ('' in the last token)
//  ByteFallback  -                          runs of "<0xHH>" tokens become their bytes as one
//                                           token when valid UTF-8, else one U+FFFD per byte
//  Fuse          -                          one token: the concatenation
//  Strip         content (char), start,     drops up to `start` leading and `stop` trailing
//                stop                       `content` characters of each token
//  Replace       pattern {String|Regex},    every match becomes `content` (Oniguruma, as the
//                content                    Replace normalizer; a String is escaped first)
//  CTC           pad_token,                 consecutive duplicates collapse; pad_token removed;
//                word_delimiter_token,      cleanup: Note [WordPiece cleanup], then the
//                cleanup                    delimiter becomes ' '; empty tokens dropped
//  Sequence      decoders                   each in turn
//
// Exact HF details reproduced: "replace" is Rust's str::replace (an empty
// pattern matches at every character boundary: "ab" -> "-a-b-"); "<0xHH>" is
// a 6-byte token whose HH Rust's u8::from_str_radix(_, 16) reads, so "<0x+A>"
// is byte 0x0A; Strip where HF panics (`stop` beyond a token made only of
// `content`, or the two cuts crossing) is a kiln::Error.
//
// Note [WordPiece cleanup]: HF's wordpiece::cleanup, these replacements in
// order: " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",", " ' " -> "'",
// " n't" -> "n't", " 'm" -> "'m", " do not" -> " don't", " 's" -> "'s",
// " 've" -> "'ve", " 're" -> "'re".
//
// Note [Decoder JSON]: as HF's DecoderWrapper: a "type" naming a decoder
// (BPEDecoder, ByteLevel, WordPiece, Metaspace, CTC, Sequence, Replace, Fuse,
// Strip, ByteFallback) reads that decoder, its errors naming the field;
// unknown members are ignored. Without such a "type", HF's legacy untagged
// form: the first of BPEDecoder (suffix), WordPiece (prefix, cleanup), CTC
// (pad_token, word_delimiter_token, cleanup), Replace (pattern, content),
// Strip (content, start, stop) whose fields all read; when none does it is
// "unknown decoder type". Sequences nest at most kMaxDecoderDepth deep.
//
// Token strings are UTF-8 in HF (Rust Strings). A token holding ill-formed
// UTF-8 (only a C++ caller can make one) is read by Metaspace, Strip and
// Replace as if each ill-formed subsequence were U+FFFD.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/regex.h"

namespace kiln::data::tok {

inline constexpr size_t kMaxDecoderDepth = 64;

// Rust's str::replace (Note above on the empty pattern).
std::string rust_replace(std::string_view s, std::string_view from, std::string_view to);
// Note [WordPiece cleanup].
std::string wordpiece_cleanup(std::string_view s);

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend_never)
      : replacement_(replacement), prepend_never_(prepend_never) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t replacement_;
  bool prepend_never_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string suffix_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  // `pattern` is a regex (a String pattern is passed escaped).
  ReplaceDecoder(std::string_view pattern, std::string content)
      : regex_(pattern), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  Regex regex_;
  std::string content_;
};

class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad_token, std::string word_delimiter_token, bool cleanup)
      : pad_(std::move(pad_token)), delimiter_(std::move(word_delimiter_token)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace kiln::data::tok
