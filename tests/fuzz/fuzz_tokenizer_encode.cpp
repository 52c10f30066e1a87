// Fuzz target: each tokenizer model's encode on hostile text — BPE
// (byte-level, and with byte fallback), Unigram (with byte fallback and a
// SentencePiece-style normalizer), WordPiece, WordLevel — through the whole
// pipeline (added tokens, normalizers, pre-tokenizers, post-processor,
// decoder).
//
// Input: the first byte picks the tokenizer (mod 5); the rest is the text,
// any bytes (invalid UTF-8 included); a 0xFF byte in it, when present,
// splits it into a pair.
//
// Properties: encode never throws or crashes; every id is in the
// vocabulary; offsets are ordered spans inside the (U+FFFD-repaired) text;
// decode of the ids never throws; encode_batch equals encode.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "data/tokenizer/normalized.h"
#include "data/tokenizer/tokenizer.h"
#include "scratch.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_tokenizer_encode", what); }

constexpr const char* kTokenizers[] = {
    // Byte-level BPE (GPT-2 style) with an added special token.
    R"({"version":"1.0","added_tokens":[{"id":9,"content":"<|e|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
        "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
        "post_processor":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
        "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
        "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
                 "vocab":{"a":0,"b":1,"Ġ":2,"Ġa":3,"ab":4,"Ã":5,"©":6,"Ġab":7,"c":8},"merges":["Ġ a","a b","Ġa b"]}})",
    // SentencePiece-style BPE with byte fallback.
    R"({"version":"1.0","normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
        "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
        "model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false,
                 "vocab":{"<unk>":0,"<0x41>":1,"<0xC3>":2,"<0xA9>":3,"▁":4,"a":5,"▁a":6},"merges":["▁ a"]}})",
    // Unigram with byte fallback, NFKC and Metaspace.
    R"({"version":"1.0","normalizer":{"type":"NFKC"},
        "pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},
        "decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},
        "model":{"type":"Unigram","unk_id":0,"byte_fallback":true,"vocab":[["<unk>",0.0],["▁",-1.0],["a",-2.0],["▁a",-1.5],["b",-3.0],["ab",-2.5],["<0xC3>",-9.0],["<0xA9>",-9.0]]}})",
    // BERT WordPiece.
    R"({"version":"1.0","normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
        "pre_tokenizer":{"type":"BertPreTokenizer"},
        "post_processor":{"type":"BertProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]},
        "decoder":{"type":"WordPiece","prefix":"##","cleanup":true},
        "added_tokens":[{"id":4,"content":"[MASK]","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true}],
        "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
                 "vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"[MASK]":4,"a":5,"##b":6,"hello":7,",":8}}})",
    // WordLevel with Split and Punctuation, truncation and padding.
    R"({"version":"1.0","truncation":{"direction":"Left","max_length":6,"strategy":"LongestFirst","stride":0},
        "padding":{"strategy":{"Fixed":8},"direction":"Right","pad_to_multiple_of":null,"pad_id":1,"pad_type_id":0,"pad_token":"<pad>"},
        "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Punctuation","behavior":"Isolated"},{"type":"Digits","individual_digits":true}]},
        "model":{"type":"WordLevel","unk_token":"<unk>","vocab":{"<unk>":0,"<pad>":1,"a":2,"b":3,",":4}}})",
};

const kiln::data::Tokenizer& tokenizer(size_t i) {
  static const std::vector<kiln::data::Tokenizer> all = [] {
    std::vector<kiln::data::Tokenizer> v;
    for (const char* j : kTokenizers) v.push_back(kiln::data::Tokenizer::from_json(kiln::parse_json_bounded(j, "fuzz")));
    return v;
  }();
  return all[i % all.size()];
}

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) kiln::data::tok::decode_utf8(s, i), ++n;
  return n;
}

void check(const kiln::data::Tokenizer& tok, const kiln::data::tok::Encoding& e, size_t chars) {
  for (size_t i = 0; i < e.size(); ++i) {
    require(tok.id_to_token(e.ids[i]).has_value() || e.attention_mask[i] == 0, "every id is in the vocabulary");
    require(e.offsets[i].begin <= e.offsets[i].end && e.offsets[i].end <= chars, "offsets inside the text");
  }
  (void)tok.decode(e.ids, true);
  (void)tok.decode(e.ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const kiln::data::Tokenizer& tok = tokenizer(data[0]);
  const std::string_view bytes = kiln_fuzz::as_text(data + 1, size - 1);
  const size_t cut = bytes.find('\xFF');
  try {
    if (cut == std::string_view::npos) {
      const kiln::data::tok::Encoding e = tok.encode(bytes);
      check(tok, e, char_count(kiln::data::tok::to_valid_utf8(bytes)));
      const auto batch = tok.encode_batch(std::vector<std::string>{std::string(bytes)});
      require(batch.size() == 1 && batch[0].ids == e.ids && batch[0].offsets == e.offsets,
              "encode_batch equals encode");
    } else {
      const std::string_view a = bytes.substr(0, cut), b = bytes.substr(cut + 1);
      const kiln::data::tok::Encoding e = tok.encode(a, b);
      const size_t chars = std::max(char_count(kiln::data::tok::to_valid_utf8(a)),
                                    char_count(kiln::data::tok::to_valid_utf8(b)));
      check(tok, e, chars);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "encode never throws on any text");
  }
  return 0;
}
