// Generation helpers (nn/generation.h): the KV cache (Note [KV cache]), logits
// processing as transformers' warpers, and the generate() loop.
#include "nn/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"

namespace kiln::nn {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_config(const GenerationConfig& c) {
  KILN_CHECK(c.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", c.max_new_tokens);
  KILN_CHECK(c.temperature > 0 && std::isfinite(c.temperature), "generate: temperature must be positive and finite, got ",
             c.temperature);
  KILN_CHECK(c.top_k >= 0, "generate: top_k must be >= 0 (0: off), got ", c.top_k);
  KILN_CHECK(c.top_p > 0 && c.top_p <= 1, "generate: top_p must be in (0, 1], got ", c.top_p);
  KILN_CHECK(c.repetition_penalty > 0 && std::isfinite(c.repetition_penalty),
             "generate: repetition_penalty must be positive and finite, got ", c.repetition_penalty);
}

void check_logits(const Tensor& logits, const char* what) {
  KILN_CHECK(logits.defined() && logits.dim() == 2 && logits.size(1) >= 1, what,
             ": logits must be (B, V) with V >= 1, got ",
             logits.defined() ? shape_str(logits.sizes()) : std::string("an undefined tensor"));
  KILN_CHECK(is_floating(logits.dtype()), what, ": logits must be floating, got ", dtype_name(logits.dtype()));
}

// Grows a (B, capacity, C) buffer to hold `needed` positions, keeping the
// first `length`.
Tensor grown(const Tensor& buffer, int64_t length, int64_t needed) {
  const int64_t capacity = buffer.size(1);
  if (needed <= capacity) return buffer;
  const int64_t new_capacity = std::max(needed, 2 * capacity);
  Tensor bigger = empty({buffer.size(0), new_capacity, buffer.size(2)}, TensorOptions(buffer.dtype(), buffer.device()));
  if (length > 0) bigger.narrow(1, 0, length).copy_(buffer.narrow(1, 0, length));
  return bigger;
}

}  // namespace

// ---- KVCache -------------------------------------------------------------------------

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  KILN_CHECK(layer >= 0, "KVCache::append: layer must be >= 0, got ", layer);
  KILN_CHECK(k.defined() && v.defined() && k.dim() == 3 && k.sizes() == v.sizes(),
             "KVCache::append: k and v must be (B, T, C) of one shape, got ",
             k.defined() ? shape_str(k.sizes()) : "undefined", " and ", v.defined() ? shape_str(v.sizes()) : "undefined");
  KILN_CHECK(k.dtype() == v.dtype() && k.device() == v.device(), "KVCache::append: k and v differ in dtype or device");
  KILN_CHECK(!grad_enabled() || !(k.requires_grad() || v.requires_grad()),
             "KVCache::append: the cache holds values, not history; run generation under NoGradGuard");
  if (layer >= num_layers()) layers_.resize(static_cast<size_t>(layer) + 1);
  Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t B = k.size(0), T = k.size(1), C = k.size(2);
  if (!L.k.defined()) {
    const TensorOptions opts(k.dtype(), k.device());
    L.k = empty({B, std::max<int64_t>(T, 16), C}, opts);
    L.v = empty({B, std::max<int64_t>(T, 16), C}, opts);
  } else {
    KILN_CHECK(L.k.size(0) == B && L.k.size(2) == C && L.k.dtype() == k.dtype() && L.k.device() == k.device(),
               "KVCache::append: layer ", layer, " holds (", L.k.size(0), ", ", L.length, ", ", L.k.size(2), ") ",
               dtype_name(L.k.dtype()), " keys; got ", shape_str(k.sizes()), " ", dtype_name(k.dtype()));
  }
  NoGradGuard no_grad;
  L.k = grown(L.k, L.length, L.length + T);
  L.v = grown(L.v, L.length, L.length + T);
  if (T > 0) {
    L.k.narrow(1, L.length, T).copy_(k);
    L.v.narrow(1, L.length, T).copy_(v);
  }
  L.length += T;
  return {L.k.narrow(1, 0, L.length), L.v.narrow(1, 0, L.length)};
}

int64_t KVCache::length(int64_t layer) const {
  KILN_CHECK(layer >= 0, "KVCache::length: layer must be >= 0, got ", layer);
  return layer < num_layers() ? layers_[static_cast<size_t>(layer)].length : 0;
}

// ---- logits processing ------------------------------------------------------------------

Tensor process_logits(const Tensor& logits, const GenerationConfig& config) {
  check_config(config);
  check_logits(logits, "process_logits");
  const int64_t V = logits.size(1);
  Tensor s = logits;
  if (config.temperature != 1.0) s = s / config.temperature;  // TemperatureLogitsWarper
  if (config.top_k > 0 && config.top_k < V) {                  // TopKLogitsWarper: below the k-th value goes
    const Tensor kth = topk(s, config.top_k).values.narrow(1, config.top_k - 1, 1);  // (B, 1)
    s = masked_fill(s, lt(s, kth), kNegInf);
  }
  if (config.top_p < 1.0) {  // TopPLogitsWarper: ascending sort, drop the head whose mass <= 1 - top_p
    const ValuesIndices sorted = sort(s, 1, /*descending=*/false);
    const Tensor cumulative = cumsum(softmax(sorted.values, 1), 1);
    Tensor remove_sorted = le(cumulative, 1.0 - config.top_p).to(DType::Int64);
    remove_sorted.narrow(1, V - 1, 1).fill_(0);  // the most likely token always stays
    const Tensor remove = scatter(remove_sorted, 1, sorted.indices, remove_sorted);
    s = masked_fill(s, eq(remove, 1.0), kNegInf);
  }
  return s;
}

Tensor repetition_penalty(const Tensor& logits, const Tensor& ids, double penalty) {
  check_logits(logits, "repetition_penalty");
  KILN_CHECK(penalty > 0 && std::isfinite(penalty), "repetition_penalty: penalty must be positive and finite, got ",
             penalty);
  KILN_CHECK(ids.defined() && ids.dim() == 2 && ids.size(0) == logits.size(0) && ids.dtype() == DType::Int64,
             "repetition_penalty: ids must be (B, S) int64 for logits ", shape_str(logits.sizes()), ", got ",
             ids.defined() ? shape_str(ids.sizes()) + " " + dtype_name(ids.dtype()) : std::string("undefined"));
  if (penalty == 1.0 || ids.size(1) == 0) return logits;
  const Tensor score = gather(logits, 1, ids);  // (B, S); a repeated id gathers and writes the same value
  return scatter(logits, 1, ids, where(lt(score, 0.0), score * penalty, score / penalty));
}

Tensor next_tokens(const Tensor& logits, const GenerationConfig& config, Generator* gen) {
  check_config(config);
  check_logits(logits, "next_tokens");
  if (!config.do_sample) return argmax(logits, 1);
  const Tensor probs = softmax(process_logits(logits, config), 1);
  return multinomial(probs, 1, false, gen).reshape({logits.size(0)});
}

// ---- the loop -----------------------------------------------------------------------

Tensor generate(const DecoderStep& step, const Tensor& prompt, const GenerationConfig& config, Generator* gen) {
  check_config(config);
  KILN_CHECK(prompt.defined() && prompt.dim() == 2 && prompt.size(0) >= 1 && prompt.size(1) >= 1 &&
                 (prompt.dtype() == DType::Int64 || prompt.dtype() == DType::Int32),
             "generate: prompt must be (B, T0) int64 ids with B, T0 >= 1, got ",
             prompt.defined() ? shape_str(prompt.sizes()) + " " + dtype_name(prompt.dtype()) : "an undefined tensor");
  NoGradGuard no_grad;
  const int64_t B = prompt.size(0);
  const TensorOptions ids_opts(DType::Int64, prompt.device());
  Tensor ids = prompt.to(DType::Int64);
  Tensor input = ids;  // what the next step runs: the prompt, then one token per row
  Tensor finished = zeros({B}, ids_opts);
  KVCache cache;
  for (int64_t i = 0; i < config.max_new_tokens; ++i) {
    const Tensor& run = config.use_cache ? input : ids;
    const Tensor logits = step(run, config.use_cache ? &cache : nullptr);
    KILN_CHECK(logits.defined() && logits.dim() == 3 && logits.size(0) == B && logits.size(1) == run.size(1),
               "generate: the decoder step must return logits (B, T, V) for its (B, T) ids, got ",
               logits.defined() ? shape_str(logits.sizes()) : "an undefined tensor", " for ", shape_str(run.sizes()));
    const Tensor last = repetition_penalty(logits.select(1, logits.size(1) - 1), ids, config.repetition_penalty);
    Tensor next = next_tokens(last, config, gen);  // (B)
    if (config.eos_token_id) {
      next = where(eq(finished, 1.0), full({B}, static_cast<double>(config.pad_token_id), ids_opts), next);
      finished = maximum(finished, eq(next, static_cast<double>(*config.eos_token_id)).to(DType::Int64));
    }
    input = next.reshape({B, 1});
    ids = cat({ids, input}, 1);
    if (config.eos_token_id && sum(finished).item<int64_t>() == B) break;
  }
  return ids;
}

}  // namespace kiln::nn
