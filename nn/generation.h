// Autoregressive generation for any decoder: a key/value cache that attention
// appends to, the logits processing of Hugging Face's generate() (temperature,
// top-k, top-p), and the greedy / sampling loop.
//
//   // In the model: layer i of a step on ids (B, T) at positions
//   // [start, start + T), start = cache ? cache->length() : 0 read before
//   // the first layer appends:
//   if (cache) std::tie(k, v) = cache->append(i, k, v);   // (B, S, C), S = start + T
//   Tensor y = multi_head_attention(q, k, v, heads, {}, 0.0, false, nullptr, /*causal=*/true);
//
//   nn::GenerationConfig g{.max_new_tokens = 40, .do_sample = true, .temperature = 0.8, .top_k = 50};
//   Tensor ids = nn::generate([&](const Tensor& ids, nn::KVCache* cache) { return model(ids, cache); },
//                             prompt, g);   // prompt (B, T0) int64 -> (B, T0 + n)
//
// Note [KV cache]: without a cache each new token reruns the whole context
// through every layer: O(S) work per layer for the token's own row, and O(S^2)
// for attention, per token. With the cache a step runs only the new tokens:
// their q, k, v, attention of T new queries against the S cached keys
// (causal, aligned bottom-right: query t sees keys s <= t + S - T), and the
// MLP on T rows. The cache keeps one (B, capacity, C) key and value buffer per
// layer, grown by doubling, and append() copies the new (B, T, C) rows in and
// returns the (B, S, C) views, so a step copies only its new rows (amortised).
// It holds values, not history: use it under NoGradGuard (generate() does).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/ops/ops.h"

namespace kiln::nn {

class KVCache {
 public:
  KVCache() = default;
  // Appends the new keys and values (B, T, C) of `layer` (0, 1, ... in any
  // order, each once per step) and returns all of that layer's keys and values
  // (B, S, C), S = length(layer) after the append. Every append of a layer
  // must have the batch size, width, dtype and device of its first.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // Positions cached for `layer` (0 when it has none yet).
  int64_t length(int64_t layer = 0) const;
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  void clear() { layers_.clear(); }

 private:
  struct Layer {
    Tensor k, v;  // (B, capacity, C)
    int64_t length = 0;
  };
  std::vector<Layer> layers_;
};

struct GenerationConfig {
  int64_t max_new_tokens = 20;
  bool do_sample = false;    // false: greedy (argmax; temperature, top_k, top_p unused)
  double temperature = 1.0;  // > 0; logits are divided by it
  int64_t top_k = 0;         // keep the k most likely tokens (ties with the k-th kept); 0: all
  double top_p = 1.0;        // keep the smallest set whose probability reaches top_p; 1: all
  double repetition_penalty = 1.0;  // > 0; 1: off. Greedy and sampled alike (repetition_penalty() below)
  std::optional<int64_t> eos_token_id;  // a row that produced it is finished
  int64_t pad_token_id = 0;  // what finished rows get for the remaining steps
  bool use_cache = true;     // false: every step reruns the whole sequence (for tests and benchmarks)
};

// The processed logits (B, V) a sample is drawn from, as transformers'
// TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper in that order
// (removed tokens get -inf; at least one token is always kept). float32 or
// float64 logits; the result has their dtype.
Tensor process_logits(const Tensor& logits, const GenerationConfig& config);

// transformers' RepetitionPenaltyLogitsProcessor: the logits (B, V) of every
// token in ids (B, S) (the prompt and what was generated) divided by
// `penalty` where positive, multiplied where negative (penalty > 1 makes
// repeats less likely). generate() applies it before the warpers above.
Tensor repetition_penalty(const Tensor& logits, const Tensor& ids, double penalty);

// The next token of each row (B) int64: argmax of logits (B, V) (the lowest
// index on ties) when !do_sample, else a draw from softmax(process_logits(.))
// with multinomial (Philox-seeded: `gen`, or the default generator).
Tensor next_tokens(const Tensor& logits, const GenerationConfig& config, Generator* gen = nullptr);

// One decoder step: logits (B, T, V) for ids (B, T). With a cache, ids are the
// new tokens at positions [cache->length(), ...) and each layer appends to the
// cache; with nullptr, ids is the whole sequence from position 0.
using DecoderStep = std::function<Tensor(const Tensor& ids, KVCache* cache)>;

// prompt (B, T0) int64, T0 >= 1 -> (B, T0 + n) int64, n <= max_new_tokens
// (fewer when every row has produced eos_token_id). Runs under NoGradGuard.
Tensor generate(const DecoderStep& step, const Tensor& prompt, const GenerationConfig& config,
                Generator* gen = nullptr);

}  // namespace kiln::nn
