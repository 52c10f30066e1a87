// HF tokenizers' post-processors (tokenizers/src/processors/*.rs and the
// ByteLevel one in pre_tokenizers/byte_level.rs), and post_processor_from_json
// (pipeline.h) reading the "post_processor" object of tokenizer.json.
//
//  type                fields                          what it does
//  BertProcessing      sep, cls: [token, id]           [CLS] A [SEP] (B [SEP]); B's specials get
//                                                      type id 1, A's and B's keep theirs
//  RobertaProcessing   sep, cls, trim_offsets,         <s> A </s> (</s> B </s>), every type id 0;
//                      add_prefix_space                trim_offsets: as ByteLevel first
//  ByteLevel           add_prefix_space, trim_offsets, trim_offsets: each token's offsets lose its
//                      use_regex (true)                leading/trailing spaces ('Ġ' or White_Space;
//                                                      Note [Offset trimming]); adds nothing
//  TemplateProcessing  single, pair: [Piece...],       the pieces in order: a sequence ($A / $B)
//                      special_tokens: {name: {id,     with its type id, or a special token's
//                      ids: [..], tokens: [..]}}       ids/tokens (skipped without special tokens)
//  Sequence            processors                      each in turn, on the list of encodings
//
// Note [Sequence ranges]: HF's Encoding keeps, instead of a per-token
// sequence id, a map sequence id -> token range (sequence_ranges), and the
// sequence ids it reports come from that map: with the map empty every token
// is sequence 0; otherwise for k in 0..map.size() the range of k (or, when k
// is missing, the whole encoding) is marked k, later k winning. Merging two
// encodings shifts the other's ranges and overwrites ours with the same id,
// so a template naming $A twice reports sequence 0 only for its last
// occurrence, and a pair template without $A reports every token as 0. The
// processors here work on RangedEncoding, which carries that map, and turn
// it into Encoding::sequence_ids at the end, so every quirk is HF's. The
// encodings given to process() are taken as having empty maps (what a
// Model's encoding or a truncated one has in HF).
//
// Note [Processing flow]: process(a, b, add_special_tokens) is HF's
// PostProcessor::process: a gets sequence id 0 and b id 1 (their overflowing
// windows too), their top-level type ids become 0 and 1 (the windows keep
// theirs), then process_encodings runs on the list [a] or [a, b] and the
// resulting list is merged in order (Encoding::merge, offsets not shifted).
// Merging combines overflowing windows as HF's merge_with does (every window
// of one side with the other side and its windows), so e.g. a template wraps
// each window in its special tokens too. process_encodings returns a list,
// not one encoding: Bert and Roberta wrap each element (the first as A, every
// other as B), ByteLevel only trims, Template returns one encoding per piece
// and picks the pair template for a list of two, the single one for one
// (any other length is a kiln::Error, a panic in HF), so in a Sequence every
// processor sees what the previous one returned, exactly as in HF.
//
// Note [Post-processor JSON]: HF's PostProcessorWrapper is untagged: a JSON
// object becomes the first of Roberta (sep, cls, trim_offsets,
// add_prefix_space), Bert (sep, cls), ByteLevel (type "ByteLevel",
// add_prefix_space, trim_offsets), Template (single, pair, special_tokens),
// Sequence (type "Sequence", processors) whose fields all read; the "type" of
// Roberta, Bert and Template is not checked (a {"type": "RobertaProcessing"}
// without trim_offsets is a Bert). When none reads, the error is that of the
// kind the "type" names, or "unknown post-processor type". Unlike HF, which
// loads them and panics or builds broken encodings later, a template naming a
// special token missing from special_tokens, a special token whose ids and
// tokens differ in length, and ids or type ids above INT32_MAX are rejected
// here at load time. Sequences nest at most kMaxPostProcessorDepth deep.
//
// Note [Combination budget]: merging overflowing windows multiplies them (a
// template naming $A k times with w windows gives about (w+1)^k - 1 of them,
// nested), which HF builds however large. Here one process() call may build
// at most kMaxProcessedTokens tokens in all windows together, each encoding
// built counting kEncodingCost tokens more; beyond that it is a kiln::Error
// rather than an unbounded allocation. (A pair whose sides have 100 windows
// of 512 tokens each makes about 5M tokens.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data::tok {

inline constexpr size_t kMaxPostProcessorDepth = 64;
inline constexpr size_t kMaxProcessedTokens = size_t{1} << 23;
inline constexpr size_t kEncodingCost = 16;

// An Encoding with HF's sequence_ranges (Note [Sequence ranges]);
// enc.overflowing and enc.sequence_ids are unused here.
struct RangedEncoding {
  Encoding enc;
  std::map<size_t, Span> ranges;
  std::vector<RangedEncoding> overflowing;

  size_t size() const { return enc.size(); }
};

// Counts the tokens one process() call builds (Note [Combination budget]).
class TokenBudget {
 public:
  // `tokens` copied, into `encodings` new encodings.
  void charge(size_t tokens, size_t encodings = 1);

 private:
  size_t used_ = 0;
};

// The HF post-processors: process() is Note [Processing flow] over
// process_encodings.
//
// Note [Single-sequence fast path]: for one encoding without overflowing
// windows (what encode() of one text gives) and a processor that is not a
// Sequence, the general flow reduces to: trim the offsets (Roberta,
// ByteLevel), set the type ids, put fixed special tokens before and after
// the sequence, and mark the sequence's own tokens sequence 0 (every other
// token -1). A processor describes that as a SingleLayout, built once when
// it is constructed, and process() applies it in place: no RangedEncoding,
// no list, no merge, and (when the encoding has room, which encode()
// reserves) no allocation. A template naming $A other than exactly once, or
// $B, has no layout and takes the general flow, as does a Sequence.
// tests/test_tok_post_decoders.cpp checks that both paths give the same.
struct SingleLayout {
  // The special tokens before and after the sequence (added only with
  // add_special_tokens): ids, strings and type ids, one per token.
  std::vector<int32_t> head_ids, head_types, tail_ids, tail_types;
  std::vector<std::string> head_tokens, tail_tokens;
  int32_t sequence_type = 0;      // the sequence's type id
  // With the specials, the sequence's special-token mask becomes 0 and its
  // attention mask 1 (Bert, Roberta).
  bool plain_masks = false;
  bool trim_offsets = false;      // trim_byte_level_offsets first (Roberta, ByteLevel)
  bool add_prefix_space = false;  // its argument
};

class HfPostProcessor : public PostProcessor {
 public:
  Encoding process(Encoding a, std::optional<Encoding> b, bool add_special_tokens) const final;
  virtual std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                        bool add_special_tokens,
                                                        TokenBudget& budget) const = 0;
  // Note [Single-sequence fast path]; nullptr: always the general flow.
  const SingleLayout* single_layout() const { return layout_ ? &*layout_ : nullptr; }

 protected:
  std::optional<SingleLayout> layout_;
};

// A special token: its string and id.
struct SpecialPair {
  std::string token;
  int32_t id = 0;
};

class BertProcessing : public HfPostProcessor {
 public:
  BertProcessing(SpecialPair sep, SpecialPair cls);
  size_t added_tokens(bool is_pair) const override { return is_pair ? 3 : 2; }
  std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                bool add_special_tokens,
                                                TokenBudget& budget) const override;

 private:
  SpecialPair sep_, cls_;
};

class RobertaProcessing : public HfPostProcessor {
 public:
  RobertaProcessing(SpecialPair sep, SpecialPair cls, bool trim_offsets, bool add_prefix_space);
  size_t added_tokens(bool is_pair) const override { return is_pair ? 4 : 2; }
  std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                bool add_special_tokens,
                                                TokenBudget& budget) const override;

 private:
  SpecialPair sep_, cls_;
  bool trim_offsets_, add_prefix_space_;
};

// Note [Offset trimming] (HF's process_offsets): for each token, with `lead`
// and `trail` its numbers of leading and trailing characters that are 'Ġ'
// (U+0120) or White_Space: unless the token is first (index 0, or its offsets
// start at 0) with add_prefix_space and lead == 1 (a space the pre-tokenizer
// added), begin = min(begin + lead, end); when trail <= end,
// end = max(end - trail, begin). The offsets may be bytes or characters (a
// space is one of each).
void trim_byte_level_offsets(Encoding& e, bool add_prefix_space);

class ByteLevelProcessing : public HfPostProcessor {
 public:
  ByteLevelProcessing(bool trim_offsets, bool add_prefix_space);
  size_t added_tokens(bool) const override { return 0; }
  std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                bool add_special_tokens,
                                                TokenBudget& budget) const override;

 private:
  bool trim_offsets_, add_prefix_space_;
};

class TemplateProcessing : public HfPostProcessor {
 public:
  // One piece of a template: sequence A (0) or B (1), or a special token.
  struct Piece {
    bool is_sequence = true;
    int sequence = 0;     // 0: $A, 1: $B
    std::string special;  // the special token's name
    int32_t type_id = 0;
  };
  // A special token's expansion (ids.size() == tokens.size()).
  struct Special {
    std::vector<int32_t> ids;
    std::vector<std::string> tokens;
  };
  // Every special piece must name an entry of `specials` (kiln::Error).
  TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair,
                     std::map<std::string, Special> specials);
  size_t added_tokens(bool is_pair) const override { return is_pair ? added_pair_ : added_single_; }
  std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                bool add_special_tokens,
                                                TokenBudget& budget) const override;

 private:
  std::vector<Piece> single_, pair_;
  std::map<std::string, Special> specials_;
  size_t added_single_ = 0, added_pair_ = 0;
};

class SequenceProcessing : public HfPostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<HfPostProcessor>> steps)
      : steps_(std::move(steps)) {}
  size_t added_tokens(bool is_pair) const override;
  std::vector<RangedEncoding> process_encodings(std::vector<RangedEncoding> encodings,
                                                bool add_special_tokens,
                                                TokenBudget& budget) const override;

 private:
  std::vector<std::unique_ptr<HfPostProcessor>> steps_;
};

// What HF's TokenizerImpl::post_process does without a post-processor
// (PostProcessor::default_process): a single encoding is returned as it is,
// so every token of it and of its windows is sequence 0; a pair gets sequence
// ids 0 and 1 on its two top-level encodings only, then is merged. So in a
// merged window of a pair every token is sequence 0, as in HF
// (Note [Sequence ranges]). kiln::Error past the combination budget.
Encoding default_post_process(Encoding a, std::optional<Encoding> b);

// HF's Encoding::merge_with on RangedEncodings (no offset shift).
void merge_ranged(RangedEncoding& self, const RangedEncoding& other, TokenBudget& budget);
// Encoding::sequence_ids from the ranges (Note [Sequence ranges]), recursively.
Encoding to_encoding(RangedEncoding r);
RangedEncoding to_ranged(Encoding e);

}  // namespace kiln::data::tok
