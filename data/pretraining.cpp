// Packing, next-sentence pairs, masked-LM masking and the pretraining dataset
// (data/pretraining.h).
#include "data/pretraining.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "data/random_stream.h"
#include "data/tokenizer/text_tokenizer.h"

namespace kiln::data {

// ---- masking ---------------------------------------------------------------

MaskingVocab MaskingVocab::from_tokens(const std::vector<std::string>& tokens, const std::vector<int32_t>& special_ids,
                                       int32_t mask_id, std::string_view continuation_prefix) {
  const size_t n = tokens.size();
  KILN_CHECK(n > 0, "MaskingVocab: empty vocabulary");
  KILN_CHECK(mask_id >= 0 && static_cast<size_t>(mask_id) < n, "MaskingVocab: mask id ", mask_id,
             " outside the vocab [0, ", n, ")");
  MaskingVocab v;
  v.vocab_size = n;
  v.mask_id = mask_id;
  v.is_special.assign(n, 0);
  v.is_continuation.assign(n, 0);
  for (int32_t id : special_ids) {
    if (id < 0) continue;  // absent special token
    KILN_CHECK(static_cast<size_t>(id) < n, "MaskingVocab: special id ", id, " outside the vocab [0, ", n, ")");
    v.is_special[static_cast<size_t>(id)] = 1;
  }
  v.is_special[static_cast<size_t>(mask_id)] = 1;
  for (size_t i = 0; i < n; ++i) {
    v.is_continuation[i] = !continuation_prefix.empty() && tokens[i].size() > continuation_prefix.size() &&
                           std::string_view(tokens[i]).substr(0, continuation_prefix.size()) == continuation_prefix;
    if (!v.is_special[i]) v.random_candidates.push_back(static_cast<int32_t>(i));
  }
  KILN_CHECK(!v.random_candidates.empty(), "MaskingVocab: every token is special");
  return v;
}

MaskingVocab MaskingVocab::from_tokenizer(const TextTokenizer& tokenizer) {
  KILN_CHECK(tokenizer.mask_id() >= 0, "MaskingVocab: the tokenizer has no mask token ([MASK], <mask>, or "
                                       "tokenizer_config.json's mask_token)");
  std::vector<int32_t> specials;
  for (size_t i = 0; i < tokenizer.vocab_size(); ++i)
    if (tokenizer.is_special_id(static_cast<int32_t>(i))) specials.push_back(static_cast<int32_t>(i));
  return from_tokens(tokenizer.tokens(), specials, tokenizer.mask_id(), tokenizer.continuation_prefix());
}

namespace {

void check_masking(const MaskingVocab& vocab, const MaskingOptions& o) {
  KILN_CHECK(o.mlm_probability >= 0 && o.mlm_probability <= 1, "mask_tokens: mlm_probability ", o.mlm_probability,
             " outside [0, 1]");
  KILN_CHECK(o.mask_token_fraction >= 0 && o.random_token_fraction >= 0 &&
                 o.mask_token_fraction + o.random_token_fraction <= 1 + 1e-12,
             "mask_tokens: mask_token_fraction ", o.mask_token_fraction, " and random_token_fraction ",
             o.random_token_fraction, " must be >= 0 with a sum <= 1");
  KILN_CHECK(vocab.vocab_size > 0 && vocab.is_special.size() == vocab.vocab_size &&
                 vocab.is_continuation.size() == vocab.vocab_size && vocab.mask_id >= 0 &&
                 static_cast<size_t>(vocab.mask_id) < vocab.vocab_size && !vocab.random_candidates.empty(),
             "mask_tokens: inconsistent MaskingVocab (build it with from_tokenizer or from_tokens)");
}

}  // namespace

MaskedExample mask_tokens(std::span<const int32_t> ids, const MaskingVocab& vocab, const MaskingOptions& options,
                          Generator& rng, std::span<const uint8_t> never_mask) {
  check_masking(vocab, options);
  KILN_CHECK(never_mask.empty() || never_mask.size() == ids.size(), "mask_tokens: never_mask has ", never_mask.size(),
             " flags for ", ids.size(), " ids");
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i)
    KILN_CHECK(ids[i] >= 0 && static_cast<size_t>(ids[i]) < vocab.vocab_size, "mask_tokens: id ", ids[i],
               " at position ", i, " outside the vocab [0, ", vocab.vocab_size, ")");

  // Units: [begin, begin + length) runs of candidate positions.
  struct Unit {
    size_t begin, length;
  };
  std::vector<Unit> units;
  size_t num_candidates = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<size_t>(ids[i]);
    if (vocab.is_special[id] || (!never_mask.empty() && never_mask[i])) continue;
    ++num_candidates;
    if (options.whole_word && vocab.is_continuation[id] && !units.empty() &&
        units.back().begin + units.back().length == i)
      ++units.back().length;
    else
      units.push_back({i, 1});
  }
  size_t target = 0;
  if (num_candidates > 0 && options.mlm_probability > 0)
    target = std::max<size_t>(
        1, static_cast<size_t>(std::llround(options.mlm_probability * static_cast<double>(num_candidates))));
  if (options.max_predictions > 0) target = std::min(target, options.max_predictions);

  PhiloxStream stream(rng);
  std::vector<size_t> order(units.size());
  for (size_t u = 0; u < order.size(); ++u) order[u] = u;
  for (size_t u = order.size(); u > 1; --u) std::swap(order[u - 1], order[stream.below(u)]);

  std::vector<uint8_t> chosen(n, 0);
  size_t num_chosen = 0;
  for (size_t u : order) {
    if (num_chosen == target) break;
    if (num_chosen + units[u].length > target) continue;
    for (size_t k = 0; k < units[u].length; ++k) chosen[units[u].begin + k] = 1;
    num_chosen += units[u].length;
  }

  MaskedExample out;
  out.input_ids.assign(ids.begin(), ids.end());
  out.labels.assign(n, kIgnoreIndex);
  out.num_predictions = num_chosen;
  const double mask_below = options.mask_token_fraction;
  const double random_below = options.mask_token_fraction + options.random_token_fraction;
  for (size_t i = 0; i < n; ++i) {
    if (!chosen[i]) continue;
    out.labels[i] = ids[i];
    const double u = stream.uniform();
    if (u < mask_below)
      out.input_ids[i] = vocab.mask_id;
    else if (u < random_below)
      out.input_ids[i] = vocab.random_candidates[stream.below(vocab.random_candidates.size())];
  }
  return out;
}

// ---- packing ---------------------------------------------------------------

PackingPlan::PackingPlan(const Corpus& corpus, const PackingOptions& options) : options_(options) {
  const size_t min_length = options.next_sentence ? 5 : 3;
  KILN_CHECK(options.max_seq_length >= min_length, "PackingPlan: max_seq_length ", options.max_seq_length,
             " is below the minimum ", min_length, options.next_sentence ? " for next-sentence pairs" : "");
  KILN_CHECK(options.max_seq_length <= std::numeric_limits<uint32_t>::max(), "PackingPlan: max_seq_length ",
             options.max_seq_length, " is too large");
  budget_ = options.max_seq_length - (options.next_sentence ? 3 : 2);
  const SpecialTokenIds special = corpus.special_ids();
  const auto valid = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < corpus.vocab_size(); };
  KILN_CHECK(valid(special.cls) && valid(special.sep), "PackingPlan: the corpus vocab lacks [CLS] or [SEP] (ids ",
             special.cls, ", ", special.sep, ")");
  KILN_CHECK(!options.next_sentence || corpus.num_documents() >= 2,
             "PackingPlan: next-sentence pairs need at least 2 documents, the corpus has ", corpus.num_documents());
  corpus_documents_ = corpus.num_documents();
  corpus_sentences_ = corpus.num_sentences();
  corpus_tokens_ = corpus.num_tokens();

  const auto budget = static_cast<uint32_t>(budget_);
  segments_.reserve(corpus_sentences_);
  document_segments_.reserve(corpus_documents_ + 1);
  for (size_t d = 0; d < corpus_documents_; ++d) {
    document_segments_.push_back(segments_.size());
    const SentenceRange range = corpus.document(d);
    Chunk chunk{d, segments_.size(), 0, 0};
    for (size_t s = range.first; s < range.first + range.count; ++s) {
      const size_t length = corpus.sentence(s).size();
      KILN_CHECK(length <= std::numeric_limits<uint32_t>::max(), "PackingPlan: sentence ", s, " has ", length,
                 " tokens, more than 2^32 - 1");
      for (size_t begin = 0; begin < length; begin += budget) {
        const auto piece = static_cast<uint32_t>(std::min<size_t>(budget, length - begin));
        if (chunk.num_segments > 0 && chunk.num_tokens + piece > budget) {
          chunks_.push_back(chunk);
          chunk = Chunk{d, segments_.size(), 0, 0};
        }
        segments_.push_back({s, static_cast<uint32_t>(begin), static_cast<uint32_t>(begin + piece)});
        ++chunk.num_segments;
        chunk.num_tokens += piece;
      }
    }
    if (chunk.num_segments > 0) chunks_.push_back(chunk);
  }
  document_segments_.push_back(segments_.size());
}

void PackingPlan::check_corpus(const Corpus& corpus) const {
  KILN_CHECK(corpus.num_documents() == corpus_documents_ && corpus.num_sentences() == corpus_sentences_ &&
                 corpus.num_tokens() == corpus_tokens_,
             "PackingPlan: built for a corpus of ", corpus_documents_, " documents, ", corpus_sentences_,
             " sentences, ", corpus_tokens_, " tokens, used with one of ", corpus.num_documents(), ", ",
             corpus.num_sentences(), ", ", corpus.num_tokens());
}

namespace {

void append_segment(const Corpus& corpus, const PackingPlan::Segment& seg, std::vector<int32_t>& out) {
  const std::span<const int32_t> sentence = corpus.sentence(seg.sentence);
  out.insert(out.end(), sentence.begin() + seg.begin, sentence.begin() + seg.end);
}

}  // namespace

PackedSequence make_packed_example(const Corpus& corpus, const PackingPlan& plan, size_t example_index,
                                   Generator& rng) {
  plan.check_corpus(corpus);
  KILN_CHECK(example_index < plan.num_examples(), "make_packed_example: example ", example_index, " out of range [0, ",
             plan.num_examples(), ")");
  const PackingPlan::Chunk& chunk = plan.chunks()[example_index];
  const SpecialTokenIds special = corpus.special_ids();
  const auto& segments = plan.segments();

  std::vector<int32_t> a, b;
  std::vector<size_t> boundaries;  // token offsets in `a` where segments 1.. of the chunk start
  for (uint64_t k = chunk.first_segment; k < chunk.first_segment + chunk.num_segments; ++k) {
    if (k > chunk.first_segment) boundaries.push_back(a.size());
    append_segment(corpus, segments[k], a);
  }

  PackedSequence out;
  if (!plan.options().next_sentence) {
    out.ids.reserve(a.size() + 2);
    out.ids.push_back(special.cls);
    out.ids.insert(out.ids.end(), a.begin(), a.end());
    out.ids.push_back(special.sep);
    out.type_ids.assign(out.ids.size(), 0);
    out.special.assign(out.ids.size(), 0);
    out.special.front() = out.special.back() = 1;
    return out;
  }

  PhiloxStream stream(rng);
  const bool coin_random = stream.bernoulli(0.5);
  size_t split;
  bool forced_random = false;
  if (!boundaries.empty()) {
    split = boundaries[stream.below(boundaries.size())];
  } else if (a.size() >= 2) {
    split = 1 + stream.below(a.size() - 1);
  } else {
    split = a.size();
    forced_random = true;
  }
  const bool random_next = coin_random || forced_random;
  if (!random_next) {
    b.assign(a.begin() + static_cast<std::ptrdiff_t>(split), a.end());
  } else {
    const size_t budget = plan.budget();
    const size_t target_b = budget > split ? budget - split : 1;
    const size_t num_documents = plan.document_segments().size() - 1;
    uint64_t other = stream.below(num_documents - 1);
    if (other >= chunk.document) ++other;
    const uint64_t seg_begin = plan.document_segments()[other], seg_end = plan.document_segments()[other + 1];
    for (uint64_t k = seg_begin + stream.below(seg_end - seg_begin); k < seg_end && b.size() < target_b; ++k)
      append_segment(corpus, segments[k], b);
  }
  a.resize(split);

  // Cut to the budget: drop A's first tokens or B's last ones, longer side first.
  size_t a_len = a.size(), b_len = b.size();
  while (a_len + b_len > plan.budget()) {
    if (a_len > b_len)
      --a_len;
    else
      --b_len;
  }
  const size_t a_drop = a.size() - a_len;

  out.ids.reserve(a_len + b_len + 3);
  out.ids.push_back(special.cls);
  out.ids.insert(out.ids.end(), a.begin() + static_cast<std::ptrdiff_t>(a_drop), a.end());
  out.ids.push_back(special.sep);
  const size_t first_b = out.ids.size();
  out.ids.insert(out.ids.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b_len));
  out.ids.push_back(special.sep);
  out.type_ids.assign(out.ids.size(), 0);
  std::fill(out.type_ids.begin() + static_cast<std::ptrdiff_t>(first_b), out.type_ids.end(), 1);
  out.special.assign(out.ids.size(), 0);
  out.special[0] = out.special[first_b - 1] = out.special.back() = 1;
  out.next_sentence_label = random_next ? 1 : 0;
  return out;
}

// ---- dataset and batches ---------------------------------------------------

PretrainingDataset::PretrainingDataset(std::shared_ptr<const Corpus> corpus, MaskingVocab vocab, PackingOptions packing,
                                       MaskingOptions masking)
    : corpus_(corpus ? std::move(corpus) : throw Error("PretrainingDataset: corpus is null")),
      vocab_(std::move(vocab)),
      plan_(*corpus_, packing),
      masking_(masking) {
  KILN_CHECK(vocab_.vocab_size == corpus_->vocab_size(), "PretrainingDataset: the masking vocab has ",
             vocab_.vocab_size, " tokens, the corpus ", corpus_->vocab_size());
  check_masking(vocab_, masking_);
}

PretrainingExample PretrainingDataset::get(size_t index, Generator& rng) const {
  PackedSequence packed = make_packed_example(*corpus_, plan_, index, rng);
  MaskedExample masked = mask_tokens(packed.ids, vocab_, masking_, rng, packed.special);
  return {std::move(masked.input_ids), std::move(packed.type_ids), std::move(masked.labels),
          packed.next_sentence_label};
}

PretrainingBatch collate_pretraining(const std::vector<PretrainingExample>& examples, int32_t pad_id, size_t pad_to) {
  KILN_CHECK(!examples.empty(), "collate_pretraining: empty batch");
  size_t longest = 0;
  const bool nsp = examples.front().next_sentence_label >= 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const PretrainingExample& e = examples[i];
    KILN_CHECK(e.token_type_ids.size() == e.input_ids.size() && e.labels.size() == e.input_ids.size(),
               "collate_pretraining: example ", i, " has fields of unequal length (", e.input_ids.size(), ", ",
               e.token_type_ids.size(), ", ", e.labels.size(), ")");
    KILN_CHECK((e.next_sentence_label >= 0) == nsp, "collate_pretraining: example ", i, nsp ? " lacks" : " has",
               " a next-sentence label, example 0", nsp ? " has one" : " does not");
    longest = std::max(longest, e.input_ids.size());
  }
  KILN_CHECK(pad_to == 0 || longest <= pad_to, "collate_pretraining: an example has ", longest,
             " tokens, more than pad_to = ", pad_to);
  const size_t t = pad_to > 0 ? pad_to : longest;
  const auto bsz = static_cast<int64_t>(examples.size());
  PretrainingBatch batch;
  batch.input_ids = empty_tensor({bsz, static_cast<int64_t>(t)}, DType::Int64, kCPU);
  batch.attention_mask = empty_tensor({bsz, static_cast<int64_t>(t)}, DType::Int64, kCPU);
  batch.token_type_ids = empty_tensor({bsz, static_cast<int64_t>(t)}, DType::Int64, kCPU);
  batch.labels = empty_tensor({bsz, static_cast<int64_t>(t)}, DType::Int64, kCPU);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* mask = batch.attention_mask.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (size_t i = 0; i < examples.size(); ++i) {
    const PretrainingExample& e = examples[i];
    for (size_t j = 0; j < t; ++j) {
      const size_t k = i * t + j;
      const bool real = j < e.input_ids.size();
      ids[k] = real ? e.input_ids[j] : pad_id;
      mask[k] = real ? 1 : 0;
      types[k] = real ? e.token_type_ids[j] : 0;
      labels[k] = real ? e.labels[j] : kIgnoreIndex;
    }
  }
  if (nsp) {
    batch.next_sentence_labels = empty_tensor({bsz}, DType::Int64, kCPU);
    int64_t* nsp_labels = batch.next_sentence_labels.data_ptr<int64_t>();
    for (size_t i = 0; i < examples.size(); ++i) nsp_labels[i] = examples[i].next_sentence_label;
  }
  return batch;
}

}  // namespace kiln::data
