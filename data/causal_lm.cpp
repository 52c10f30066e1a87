// Note [Causal-LM blocks] (data/causal_lm.h).
#include "data/causal_lm.h"

#include <algorithm>

namespace kiln::data {

CausalLmDataset::CausalLmDataset(std::shared_ptr<const Corpus> corpus, size_t block_size)
    : corpus_(std::move(corpus)), block_(block_size) {
  KILN_CHECK(corpus_ != nullptr, "CausalLmDataset: no corpus");
  KILN_CHECK(block_ >= 2, "CausalLmDataset: block size must be >= 2 (a token and the one it predicts), got ", block_);
  const size_t S = corpus_->num_sentences();
  starts_.resize(S + 1, 0);
  for (size_t s = 0; s < S; ++s) starts_[s + 1] = starts_[s] + corpus_->sentence(s).size();
  size_ = static_cast<size_t>(starts_[S] / block_);
}

PretrainingExample CausalLmDataset::get(size_t index, Generator& /*rng*/) const {
  KILN_CHECK(index < size_, "CausalLmDataset: example ", index, " out of range (", size_, " examples)");
  PretrainingExample e;
  e.input_ids.reserve(block_);
  const uint64_t begin = static_cast<uint64_t>(index) * block_, end = begin + block_;
  // the sentence holding `begin`: the last start <= begin
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  for (uint64_t pos = begin; pos < end; ++s) {
    const std::span<const int32_t> tokens = corpus_->sentence(s);
    const uint64_t from = pos - starts_[s], to = std::min<uint64_t>(tokens.size(), end - starts_[s]);
    e.input_ids.insert(e.input_ids.end(), tokens.begin() + static_cast<std::ptrdiff_t>(from),
                       tokens.begin() + static_cast<std::ptrdiff_t>(to));
    pos = starts_[s] + to;
  }
  e.labels = e.input_ids;
  e.token_type_ids.assign(block_, 0);
  return e;
}

}  // namespace kiln::data
