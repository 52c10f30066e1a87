// Pretraining examples from a Corpus: packing sentences into sequences,
// optional next-sentence (NSP) pairs, masked-LM masking, and a Dataset +
// collate for data/dataloader.h.
//
// Note [Packing]
// PackingPlan fixes, without randomness, which tokens each example holds:
//  - budget = max_seq_length - 2 (one sequence: [CLS] X [SEP]) or
//    max_seq_length - 3 with NSP ([CLS] A [SEP] B [SEP]);
//  - each sentence is cut into segments of at most `budget` tokens (only
//    sentences longer than the budget are cut);
//  - walking each document's segments in order, segments are added to the
//    current chunk while its token count stays <= budget; the next segment
//    starts a new chunk. Chunks never cross documents.
// Example i is chunk i: num_examples() = number of chunks, precomputed when
// the plan is built (O(sentences)). Without NSP, example i is [CLS] + the
// chunk's tokens in corpus order + [SEP], type ids all 0: every corpus token
// is in exactly one example, and the examples read the corpus in order.
//
// Note [Next-sentence pairs] (simplified from Google's create_pretraining_data.py)
// With NSP, example i draws from its generator:
//  - with probability 1/2 "actual next" (label 0, HF's convention): the chunk
//    is split in two at a uniformly drawn segment boundary (chunks of one
//    segment: at a uniformly drawn token boundary), A = the first part, B =
//    the rest, so B continues A in the corpus;
//  - otherwise "random next" (label 1): A = the same first part, B = the
//    segments of a uniformly drawn *other* document from a uniformly drawn
//    start segment on, until B has budget - |A| tokens or that document ends.
//    A chunk of a single one-token segment is always "random next".
//  - the pair is then cut to the budget: while |A| + |B| > budget, drop the
//    first token of A if |A| > |B|, else the last token of B (keeps the A|B
//    junction intact). Both stay non-empty.
// Unlike Google's script, the chunk's unused segments are not put back (they
// only appear in another epoch's draw), there are no random short sequences,
// and a random B never comes from the same document. NSP needs >= 2 documents.
//
// Note [Masking] (mask_tokens; Google's scheme, BERT paper section 3.1)
//  - candidates: positions whose id is not special in the MaskingVocab and not
//    flagged in `never_mask` ([CLS], [SEP], [PAD], [UNK], [MASK] are never masked);
//  - units: each candidate alone, or with whole_word a word start plus the
//    candidate "##" continuations that follow it (a continuation with no word
//    start before it is a unit of its own);
//  - n = max(1, round(mlm_probability * #candidates)) (0 when no candidates),
//    capped at max_predictions when that is > 0;
//  - units are visited in a uniformly random order and taken whole while the
//    total stays <= n (so whole words are never split; the total can fall
//    short of n when only large words are left);
//  - each chosen position independently becomes [MASK] with probability
//    mask_token_fraction, a uniformly drawn non-special token with
//    random_token_fraction, else keeps its id; its label is the original id.
//    Every other label is kIgnoreIndex (-100).
//
// Randomness: every function here draws from the Generator it is given (see
// Note [Loader randomness] in data/dataset.h), so an example is a pure
// function of (corpus, options, example index, generator state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/data/corpus.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

class TextTokenizer;

inline constexpr int32_t kIgnoreIndex = -100;

// ---- masking ---------------------------------------------------------------

// What masking needs to know about a vocabulary. Invariant: the vectors have
// vocab_size entries; random_candidates are the non-special ids, in order.
struct MaskingVocab {
  size_t vocab_size = 0;
  int32_t mask_id = -1;
  std::vector<uint8_t> is_special;       // never masked, never a random replacement
  std::vector<uint8_t> is_continuation;  // a "##" piece (whole-word masking)
  std::vector<int32_t> random_candidates;

  // Specials: the tokenizer's is_special_id; continuations: tokens starting
  // with its continuation_prefix() ("##"; none when it has no prefix).
  static MaskingVocab from_tokenizer(const TextTokenizer& tokenizer);
  // tokens[id] = token string; `special_ids` (ids >= 0) are special; mask_id must be one of them.
  static MaskingVocab from_tokens(const std::vector<std::string>& tokens, const std::vector<int32_t>& special_ids,
                                  int32_t mask_id, std::string_view continuation_prefix = "##");
};

struct MaskingOptions {
  double mlm_probability = 0.15;       // in [0, 1]
  double mask_token_fraction = 0.8;    // of the chosen positions: [MASK]
  double random_token_fraction = 0.1;  // random token; the rest keep their id (fractions sum <= 1)
  bool whole_word = false;
  size_t max_predictions = 0;  // cap on chosen positions per sequence; 0: none
};

struct MaskedExample {
  std::vector<int32_t> input_ids;  // [T]
  std::vector<int32_t> labels;     // [T]: original id where chosen, else kIgnoreIndex
  size_t num_predictions = 0;      // positions with a label
};

// Note [Masking]. never_mask: empty, or one flag per id (non-zero: never
// masked). Ids outside the vocab or bad options: kiln::Error.
MaskedExample mask_tokens(std::span<const int32_t> ids, const MaskingVocab& vocab, const MaskingOptions& options,
                          Generator& rng, std::span<const uint8_t> never_mask = {});

// ---- packing ---------------------------------------------------------------

struct PackingOptions {
  size_t max_seq_length = 128;  // >= 3, or >= 5 with next_sentence
  bool next_sentence = false;   // NSP pairs (Note [Next-sentence pairs])
};

class PackingPlan {
 public:
  // A piece of one sentence: its tokens [begin, end).
  struct Segment {
    uint64_t sentence = 0;
    uint32_t begin = 0, end = 0;
  };
  // Example i: segments [first_segment, first_segment + num_segments) of `document`.
  struct Chunk {
    uint64_t document = 0;
    uint64_t first_segment = 0;
    uint32_t num_segments = 0;
    uint32_t num_tokens = 0;
  };

  // Note [Packing]. The corpus needs [CLS] and [SEP] ids; NSP needs >= 2
  // documents (kiln::Error otherwise).
  PackingPlan(const Corpus& corpus, const PackingOptions& options);

  size_t num_examples() const { return chunks_.size(); }
  const PackingOptions& options() const { return options_; }
  size_t budget() const { return budget_; }  // content tokens per example
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::vector<Segment>& segments() const { return segments_; }
  // Segments of document d: [document_segments()[d], document_segments()[d + 1]).
  const std::vector<uint64_t>& document_segments() const { return document_segments_; }
  // kiln::Error unless `corpus` has the shape the plan was built from.
  void check_corpus(const Corpus& corpus) const;

 private:
  PackingOptions options_;
  size_t budget_ = 0;
  size_t corpus_documents_ = 0, corpus_sentences_ = 0;
  uint64_t corpus_tokens_ = 0;
  std::vector<Segment> segments_;
  std::vector<uint64_t> document_segments_;
  std::vector<Chunk> chunks_;
};

// One packed sequence before masking: [CLS] ... [SEP] (... [SEP]).
struct PackedSequence {
  std::vector<int32_t> ids;          // [T], T <= max_seq_length
  std::vector<int32_t> type_ids;     // [T]: 0 up to and including the first [SEP], then 1
  std::vector<uint8_t> special;      // [T]: 1 at [CLS] / [SEP]
  int32_t next_sentence_label = -1;  // NSP: 0 = B continues A, 1 = random B; -1 without NSP
};

// Example `example_index` of `plan` (Notes [Packing], [Next-sentence pairs]).
// Draws from rng only with NSP. kiln::Error for an index out of range.
PackedSequence make_packed_example(const Corpus& corpus, const PackingPlan& plan, size_t example_index, Generator& rng);

// ---- dataset and batches ---------------------------------------------------

struct PretrainingExample {
  std::vector<int32_t> input_ids;       // [T], masked
  std::vector<int32_t> token_type_ids;  // [T]
  std::vector<int32_t> labels;          // [T], kIgnoreIndex where not predicted
  int32_t next_sentence_label = -1;     // -1 without NSP
};

// get(i, rng) = make_packed_example(i) then mask_tokens (specials never masked).
class PretrainingDataset final : public Dataset<PretrainingExample> {
 public:
  // The masking vocab must have the corpus's vocab size (kiln::Error otherwise).
  PretrainingDataset(std::shared_ptr<const Corpus> corpus, MaskingVocab vocab, PackingOptions packing = {},
                     MaskingOptions masking = {});
  size_t size() const override { return plan_.num_examples(); }
  PretrainingExample get(size_t index, Generator& rng) const override;
  const PackingPlan& plan() const { return plan_; }
  const Corpus& corpus() const { return *corpus_; }
  const MaskingVocab& vocab() const { return vocab_; }

 private:
  std::shared_ptr<const Corpus> corpus_;
  MaskingVocab vocab_;
  PackingPlan plan_;
  MaskingOptions masking_;
};

// int64 tensors on the CPU; B examples padded to T.
struct PretrainingBatch {
  Tensor input_ids;             // (B, T), pad_id in padding
  Tensor attention_mask;        // (B, T), 1 for tokens, 0 for padding
  Tensor token_type_ids;        // (B, T), 0 in padding
  Tensor labels;                // (B, T), kIgnoreIndex where not predicted and in padding
  Tensor next_sentence_labels;  // (B); undefined when the examples have no NSP label
};

// Calls f on every tensor of the batch (Note [Batch staging], data/device_staging.h).
template <typename F>
void for_each_tensor(PretrainingBatch& b, F&& f) {
  for (Tensor* t : {&b.input_ids, &b.attention_mask, &b.token_type_ids, &b.labels, &b.next_sentence_labels}) f(*t);
}

// Pads to the longest example, or to pad_to when that is > 0 (an example
// longer than pad_to is a kiln::Error). Empty input, examples with unequal
// field lengths, or NSP labels on some examples only: kiln::Error.
PretrainingBatch collate_pretraining(const std::vector<PretrainingExample>& examples, int32_t pad_id,
                                     size_t pad_to = 0);

}  // namespace kiln::data
