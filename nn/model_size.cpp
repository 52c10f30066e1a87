// Model size estimate and limit (Note [Model size limit], nn/model_size.h).
#include "nn/model_size.h"

#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <mutex>

#include "core/error.h"

namespace kiln {
namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}
// A size field as uint64_t; validate() keeps them in [1, 2^31 - 1], but a
// hand-made config may hold anything, and a negative size counts as huge.
uint64_t dim(int64_t v) { return v < 0 ? kSaturated : static_cast<uint64_t>(v); }

std::mutex g_limit_mutex;
std::optional<uint64_t> g_limit_override;

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kSaturated;
  return sat_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
}

// KILN_MAX_MODEL_BYTES: a positive decimal integer.
std::optional<uint64_t> env_limit() {
  const char* text = std::getenv("KILN_MAX_MODEL_BYTES");
  if (text == nullptr || *text == '\0') return std::nullopt;
  const auto refuse = [&] {
    fail("KILN_MAX_MODEL_BYTES='", text, "' must be a byte count (a positive decimal integer)");
  };
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') refuse();
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, uint64_t(*p - '0'), &v)) refuse();
  }
  if (v == 0) refuse();
  return v;
}

}  // namespace

ModelSizeEstimate estimate_model_size(const BertConfig& c) {
  const uint64_t V = dim(c.vocab_size), H = dim(c.hidden_size), I = dim(c.intermediate_size);
  const uint64_t P = dim(c.max_position_embeddings), T = dim(c.type_vocab_size);
  const uint64_t L = dim(c.num_hidden_layers);
  const uint64_t HH = sat_mul(H, H);
  // embeddings: word, position, token type, LayerNorm; the position_ids buffer (P)
  uint64_t params = sat_add(sat_mul(sat_add(sat_add(V, P), T), H), sat_add(sat_mul(2, H), P));
  // one encoder layer: query, key, value, attention output (H x H + H each),
  // two LayerNorms (2H each), intermediate (I x H + I), output (H x I + H)
  const uint64_t layer = sat_add(sat_add(sat_mul(4, HH), sat_mul(2, sat_mul(H, I))),
                                 sat_add(sat_mul(9, H), I));
  params = sat_add(params, sat_mul(L, layer));
  // pooler (H x H + H); MLM transform (H x H + H, LayerNorm 2H) and decoder bias (V); NSP (2H + 2)
  params = sat_add(params, sat_add(sat_mul(2, HH), sat_add(sat_mul(6, H), sat_add(V, 2))));
  const uint64_t tensors = sat_add(6 + 2 + 5 + 2, sat_mul(16, L));
  ModelSizeEstimate e;
  e.parameters = params;
  e.tensors = tensors;
  e.bytes = sat_add(sat_mul(4, params), sat_mul(kTensorOverheadBytes, tensors));
  return e;
}

uint64_t max_model_bytes(std::string* origin) {
  {
    std::lock_guard<std::mutex> lock(g_limit_mutex);
    if (g_limit_override) {
      if (origin) *origin = "set by kiln::set_max_model_bytes";
      return *g_limit_override;
    }
  }
  if (const std::optional<uint64_t> v = env_limit()) {
    if (origin) *origin = "KILN_MAX_MODEL_BYTES";
    return *v;
  }
  if (origin) *origin = "the machine's physical memory; set KILN_MAX_MODEL_BYTES to change it";
  return physical_memory_bytes();
}

void set_max_model_bytes(std::optional<uint64_t> bytes) {
  std::lock_guard<std::mutex> lock(g_limit_mutex);
  g_limit_override = bytes;
}

void check_model_size(const BertConfig& c, const std::string& source) {
  std::string origin;
  const uint64_t limit = max_model_bytes(&origin);
  const ModelSizeEstimate e = estimate_model_size(c);
  if (e.bytes <= limit) return;
  const auto shown = [](uint64_t v) {
    return v == kSaturated ? std::string("more than 2^64") : std::to_string(v);
  };
  fail(source, ": the model this config describes (vocab_size ", c.vocab_size, ", hidden_size ",
       c.hidden_size, ", num_hidden_layers ", c.num_hidden_layers, ", intermediate_size ",
       c.intermediate_size, ", max_position_embeddings ", c.max_position_embeddings,
       ") has about ", shown(e.parameters), " parameters and needs about ", shown(e.bytes),
       " bytes, over the limit of ", limit, " bytes (", origin, ")");
}

void check_vocab_matches(const ModelConfig& config, size_t tokenizer_vocab_size, const std::string& source) {
  const int64_t vocab = config.facts().vocab_size;
  KILN_CHECK(static_cast<uint64_t>(tokenizer_vocab_size) <= dim(vocab), source,
             ": the tokenizer's vocabulary has ", tokenizer_vocab_size,
             " tokens but the model's vocab_size is ", vocab, ": token ids ",
             vocab, " to ", tokenizer_vocab_size - 1,
             " have no row in the word embeddings (is the vocabulary the model's own?)");
}

void check_vocab_matches(const BertConfig& config, size_t tokenizer_vocab_size, const std::string& source) {
  check_vocab_matches(ModelConfig(config), tokenizer_vocab_size, source);
}

}  // namespace kiln
