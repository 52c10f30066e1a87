// Causal-language-model examples from a Corpus: fixed-length blocks of the
// concatenated token stream, as transformers' run_clm.py groups texts.
//
// Note [Causal-LM blocks]
// run_clm tokenizes every line, concatenates all the ids and cuts them into
// blocks of block_size, dropping the tail shorter than a block; each block's
// labels are its ids (the model shifts them: position t predicts t + 1).
// CausalLmDataset does the same over a Corpus: the sentences of every
// document in corpus order, back to back (no separator: the GPT-2
// tokenizer adds none, and run_clm adds none), example i = tokens
// [i * block_size, (i + 1) * block_size). No randomness: every token but the
// tail is in exactly one example, and the examples read the corpus in order.
// Blocks are all block_size long, so a batch has no padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/data/corpus.h"
#include "kiln/data/pretraining.h"

namespace kiln::data {

// Examples are PretrainingExample so the pretraining collate and loader serve
// them: input_ids the block, labels the same ids, token types 0, no NSP label.
class CausalLmDataset final : public Dataset<PretrainingExample> {
 public:
  // block_size >= 2 (kiln::Error otherwise); a corpus shorter than one block gives no example.
  CausalLmDataset(std::shared_ptr<const Corpus> corpus, size_t block_size);
  size_t size() const override { return size_; }
  PretrainingExample get(size_t index, Generator& rng) const override;
  size_t block_size() const { return block_; }

 private:
  std::shared_ptr<const Corpus> corpus_;
  size_t block_ = 0, size_ = 0;
  std::vector<uint64_t> starts_;  // [S + 1]: the stream offset of each sentence's first token
};

}  // namespace kiln::data
