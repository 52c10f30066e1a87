// bench_generate: per-token cost of generation with and without the KV cache
// (Note [KV cache], nn/generation.h), greedy, one sequence, on the small GPT
// of examples/gpt/ (gpt_model.h, GPT-2's architecture; --family gpt, the
// default) or a model family kiln loads from Hugging Face directories, built
// from a config of the same shape (--family gpt2: GPT2LMHeadModel; llama:
// LlamaForCausalLM with --kv-heads key/value heads and --inner MLP width).
//
// usage: bench_generate [--family gpt|gpt2|llama] [--layers 4] [--embd 256] [--heads 4]
//                       [--kv-heads H] [--inner 4*embd] [--vocab 256]
//                       [--context 256] [--new 32] [--rounds 5] [--threads N]
//
// A prompt of (context - new) random tokens is extended by `new` tokens, so
// the last token sees `context` positions. Per-token time = (time for `new`
// tokens - time for 1 token) / (new - 1): the prompt's own pass cancels out.
// Rounds alternate cached and uncached; the medians are printed:
//   "kiln cache=on ms_per_token=X" / "kiln cache=off ms_per_token=Y" / "speedup=Y/X".
// bench/generate_torch.py measures transformers' generate() on the same shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <memory>
#include <nlohmann/json.hpp>

#include "gpt_model.h"
#include "kiln/nn/auto.h"

namespace {

double seconds_for(const kiln::nn::DecoderStep& step, const kiln::Tensor& prompt, int64_t n, bool cache) {
  kiln::nn::GenerationConfig g;
  g.max_new_tokens = n;
  g.use_cache = cache;
  const auto t0 = std::chrono::steady_clock::now();
  const kiln::Tensor ids = kiln::nn::generate(step, prompt, g);
  const auto t1 = std::chrono::steady_clock::now();
  KILN_CHECK(ids.size(1) == prompt.size(1) + n, "bench_generate: generated ", ids.size(1) - prompt.size(1), " tokens");
  return std::chrono::duration<double>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  gpt::Config cfg;
  cfg.n_embd = 256;
  cfg.n_positions = 512;
  int64_t context = 256, fresh = 32, rounds = 5, kv_heads = 0, inner = 0;
  std::string family = "gpt";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    KILN_CHECK(i + 1 < argc, "bench_generate: ", a, " needs a value");
    if (a == "--family") {
      family = argv[++i];
      KILN_CHECK(family == "gpt" || family == "gpt2" || family == "llama", "bench_generate: --family gpt, gpt2 or llama");
      continue;
    }
    const int64_t v = std::atoll(argv[++i]);
    if (a == "--layers") cfg.n_layer = v;
    else if (a == "--kv-heads") kv_heads = v;
    else if (a == "--inner") inner = v;
    else if (a == "--embd") cfg.n_embd = v;
    else if (a == "--heads") cfg.n_head = v;
    else if (a == "--vocab") cfg.vocab_size = v;
    else if (a == "--context") context = v;
    else if (a == "--new") fresh = v;
    else if (a == "--rounds") rounds = v;
    else if (a == "--threads") kiln::set_num_threads(static_cast<int>(v));
    else throw kiln::Error("bench_generate: unknown flag " + a);
  }
  KILN_CHECK(fresh >= 2 && context > fresh && context <= cfg.n_positions && rounds >= 1,
             "bench_generate: need 2 <= --new < --context <= n_positions, --rounds >= 1");
  kiln::manual_seed(0);
  std::shared_ptr<gpt::GPT> own;
  std::shared_ptr<kiln::nn::CausalLanguageModel> loaded;
  kiln::nn::DecoderStep step;
  if (family == "gpt") {
    own = std::make_shared<gpt::GPT>(cfg);
    own->eval();
    step = [&](const kiln::Tensor& ids, kiln::nn::KVCache* cache) { return (*own)(ids, cache); };
  } else {
    nlohmann::json c = {{"model_type", family}, {"vocab_size", cfg.vocab_size}, {"bos_token_id", nullptr},
                        {"eos_token_id", nullptr}};
    if (family == "gpt2")
      c.update({{"n_positions", cfg.n_positions}, {"n_embd", cfg.n_embd}, {"n_layer", cfg.n_layer},
                {"n_head", cfg.n_head}, {"n_inner", inner > 0 ? nlohmann::json(inner) : nlohmann::json(nullptr)},
                {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}});
    else
      c.update({{"max_position_embeddings", cfg.n_positions}, {"hidden_size", cfg.n_embd},
                {"num_hidden_layers", cfg.n_layer}, {"num_attention_heads", cfg.n_head},
                {"num_key_value_heads", kv_heads > 0 ? kv_heads : cfg.n_head},
                {"intermediate_size", inner > 0 ? inner : 4 * cfg.n_embd}});
    loaded = kiln::nn::AutoModelForCausalLM::from_config(kiln::ModelConfig::from_json_string(c.dump()));
    loaded->eval();
    step = [&](const kiln::Tensor& ids, kiln::nn::KVCache* cache) {
      return loaded->forward(ids, kiln::Tensor(), kiln::Tensor(), cache).logits;
    };
  }
  const kiln::Tensor prompt = kiln::randint(0, cfg.vocab_size, {1, context - fresh});
  std::vector<double> on, off;
  for (int64_t r = 0; r < rounds; ++r)
    for (const bool cache : {true, false}) {
      const double per_token =
          (seconds_for(step, prompt, fresh, cache) - seconds_for(step, prompt, 1, cache)) / static_cast<double>(fresh - 1);
      (cache ? on : off).push_back(per_token * 1e3);
    }
  std::printf("family=%s shape layers=%lld embd=%lld heads=%lld vocab=%lld context=%lld new=%lld threads=%d\n",
              family.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
              static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.vocab_size),
              static_cast<long long>(context), static_cast<long long>(fresh), kiln::get_num_threads());
  std::printf("kiln cache=on ms_per_token=%.3f\nkiln cache=off ms_per_token=%.3f\nspeedup=%.2f\n", median(on),
              median(off), median(off) / median(on));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
