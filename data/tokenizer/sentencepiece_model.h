// SentencePiece `.model` files (a protobuf ModelProto) turned into the
// tokenizer.json that transformers (4.36) builds from them when it makes a
// fast tokenizer from a slow one: convert_slow_tokenizer.py's SpmConverter and
// its per-model subclasses, plus what the fast tokenizer class adds (special
// added tokens, its post-processor), serialized as tokenizers 0.23 writes
// it. The Tokenizer then loads it like any tokenizer.json.
//
// Converters, picked by config.json's model_type:
//   ""            SpmConverter: the pieces as they are, unk_id from the
//                 trainer spec, Unigram (model_type UNIGRAM) or BPE with merges
//                 rebuilt from the vocabulary (BPE); normalizer
//                 Sequence[Precompiled(charsmap) if any, Replace(/ {2,}/, " ")],
//                 Metaspace("▁", prepend "always") pre-tokenizer and decoder;
//                 no post-processor, no added tokens.
//   "xlm-roberta" XLMRobertaConverter + XLMRobertaTokenizerFast: fairseq's
//                 <s> <pad> </s> <unk> first (unk_id 3), pieces[3:], <mask>;
//                 TemplateProcessing "<s> $A </s>" / "<s> $A </s> </s> $B </s>";
//                 those five as special added tokens (<mask> lstrip).
//   "llama"       LlamaConverter + LlamaTokenizerFast: <unk> <s> </s> first,
//                 byte_fallback on (Unigram, or BPE with merges ordered by
//                 score), Prepend("▁") + Replace(" ", "▁") normalizer, no
//                 pre-tokenizer, Replace/ByteFallback/Fuse/Strip decoder,
//                 "<s> $A" template (add_bos_token's default).
// Any other model_type is a kiln::Error naming the supported ones, since
// guessing would give a tokenizer that silently differs.
//
// Note [SentencePiece reading]: the file is read with a size limit
// (kMaxSentencePieceModelBytes) and parsed by libprotobuf (lite) from
// sentencepiece_model.proto; a file protobuf cannot parse, a piece that is
// not UTF-8, a non-finite score, an unk_id outside the vocabulary or a
// model type other than UNIGRAM/BPE is a kiln::Error naming the file.
// Duplicate pieces are kept as transformers keeps them (lookups then give a
// piece's last id).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"

namespace kiln::data::tok {

// A SentencePiece model file: 5.5 MB for XLM-R's 250k pieces; 64 MiB bounds
// a hostile file's memory (protobuf keeps a few times the file size).
inline constexpr uint64_t kMaxSentencePieceModelBytes = uint64_t{64} << 20;

// The ModelProto fields the converters read.
struct SentencePieceModel {
  enum class ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  struct Piece {
    std::string piece;
    float score = 0.0f;
    int32_t type = 1;  // SentencePiece's Type: 1 normal, 2 unknown, 3 control,
                       // 4 user defined, 5 unused, 6 byte
  };
  std::vector<Piece> pieces;
  // trainer_spec
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  // normalizer_spec
  std::string normalizer_name;
  std::string precompiled_charsmap;  // raw bytes; empty when there is none
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

// Parses a ModelProto; `what` names it in errors (Note [SentencePiece reading]).
SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& what);
// Reads and parses a `.model` file.
SentencePieceModel read_sentencepiece_model(const std::string& path);

// The tokenizer.json object for `m` as the converter for `model_type`
// builds it (see above); `what` names the model in errors.
Json sentencepiece_to_tokenizer_json(const SentencePieceModel& m, const std::string& model_type,
                                     const std::string& what);
// Same, from a `.model` file.
Json sentencepiece_to_tokenizer_json(const std::string& model_path, const std::string& model_type);

}  // namespace kiln::data::tok
