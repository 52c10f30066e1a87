// Generation helpers (nn/generation.h): the KV cache (Note [KV cache]),
// logits processing against transformers' warpers, and generate() on a small
// causal decoder: the cached loop gives the tokens of the uncached one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "nn/generation.h"
#include "nn/hf_checkpoint.h"
#include "nn/layers.h"
#include "nn/safetensors.h"
#include "ops/fused.h"
#include "test_util.h"

namespace kiln {
namespace {
using testing::bitwise_equal;
using testing::env_or;

// ---- KVCache ----------------------------------------------------------------------------

TEST(KVCache, AppendReturnsEverythingCachedSoFar) {
  manual_seed(1);
  nn::KVCache cache;
  std::vector<Tensor> ks, vs;
  int64_t S = 0;
  for (int64_t T : {5, 1, 1, 12, 1, 30}) {  // grows past the first capacity (16) twice
    ks.push_back(randn({2, T, 8}));
    vs.push_back(randn({2, T, 8}));
    auto [k, v] = cache.append(0, ks.back(), vs.back());
    S += T;
    EXPECT_EQ(cache.length(), S);
    EXPECT_TRUE(bitwise_equal(k, cat(ks, 1)));
    EXPECT_TRUE(bitwise_equal(v, cat(vs, 1)));
  }
  EXPECT_EQ(cache.length(1), 0);
  (void)cache.append(1, ks[0], vs[0]);
  EXPECT_EQ(cache.num_layers(), 2);
  EXPECT_EQ(cache.length(1), 5);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
}

TEST(KVCache, RefusesMismatchedAppendsAndHistory) {
  nn::KVCache cache;
  (void)cache.append(0, zeros({2, 3, 8}), zeros({2, 3, 8}));
  EXPECT_KILN_ERROR(cache.append(0, zeros({3, 1, 8}), zeros({3, 1, 8})),
                    "KVCache::append: layer 0 holds (2, 3, 8) float32 keys; got [3, 1, 8] float32");
  EXPECT_KILN_ERROR(cache.append(0, zeros({2, 1, 8}), zeros({2, 2, 8})), "k and v must be (B, T, C) of one shape");
  EXPECT_KILN_ERROR(cache.append(0, zeros({2, 1, 8}, DType::Float64), zeros({2, 1, 8}, DType::Float64)),
                    "holds (2, 3, 8) float32 keys; got [2, 1, 8] float64");
  EXPECT_KILN_ERROR(cache.append(-1, zeros({2, 1, 8}), zeros({2, 1, 8})), "layer must be >= 0");
  Tensor k = zeros({2, 1, 8}).requires_grad_();
  EXPECT_KILN_ERROR(cache.append(0, k, zeros({2, 1, 8})), "run generation under NoGradGuard");
}

// ---- logits processing vs transformers ------------------------------------------------------

const std::map<std::string, Tensor>& warper_reference(nlohmann::json* cases) {
  static nlohmann::json c;
  static const std::map<std::string, Tensor> t = [] {
    const std::string out = std::string(KILN_BINARY_DIR) + "/logits_reference.safetensors";
    const std::string py = env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
    const std::string cmd = py + " " + KILN_SOURCE_DIR + "/tests/reference/logits_reference.py " + out;
    if (std::system(cmd.c_str()) != 0) throw Error("reference script failed: " + cmd);
    c = nlohmann::json::parse(SafeTensorsFile::open(out).metadata().at("cases"));
    return nn::load_safetensors(out);
  }();
  *cases = c;
  return t;
}

TEST(Generation, ProcessLogitsMatchesTransformersWarpers) {
  nlohmann::json cases;
  const auto& ref = warper_reference(&cases);
  const Tensor logits = ref.at("logits");
  ASSERT_GE(cases.size(), 8u);
  for (size_t n = 0; n < cases.size(); ++n) {
    nn::GenerationConfig g;
    g.do_sample = true;
    g.temperature = cases[n][0].get<double>();
    g.top_k = cases[n][1].get<int64_t>();
    g.top_p = cases[n][2].get<double>();
    SCOPED_TRACE("case " + std::to_string(n) + ": " + cases[n].dump());
    const std::vector<float> got = nn::process_logits(logits, g).to_vector<float>();
    const std::vector<float> want = ref.at("case_" + std::to_string(n)).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    int kept = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(want[i])) {
        EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "index " << i << ": kept " << got[i];
      } else {
        EXPECT_EQ(got[i], want[i]) << "index " << i;
        ++kept;
      }
    }
    EXPECT_GE(kept, 4);  // at least one token per row
  }
}

// transformers' RepetitionPenaltyLogitsProcessor, penalties above and below 1.
TEST(Generation, RepetitionPenaltyMatchesTransformers) {
  nlohmann::json cases;
  const auto& ref = warper_reference(&cases);
  const nlohmann::json penalties = nlohmann::json::parse(
      SafeTensorsFile::open(std::string(KILN_BINARY_DIR) + "/logits_reference.safetensors").metadata().at("penalties"));
  ASSERT_EQ(penalties.size(), 3u);
  for (size_t n = 0; n < penalties.size(); ++n) {
    SCOPED_TRACE("penalty " + penalties[n].dump());
    const Tensor got = nn::repetition_penalty(ref.at("logits"), ref.at("history"), penalties[n].get<double>());
    EXPECT_TRUE(bitwise_equal(got, ref.at("penalty_" + std::to_string(n))));
  }
  EXPECT_TRUE(bitwise_equal(nn::repetition_penalty(ref.at("logits"), ref.at("history"), 1.0), ref.at("logits")));
  EXPECT_KILN_ERROR(nn::repetition_penalty(ref.at("logits"), ref.at("history"), 0.0), "penalty must be positive");
  EXPECT_KILN_ERROR(nn::repetition_penalty(ref.at("logits"), zeros({3, 2}, DType::Int64), 1.2),
                    "ids must be (B, S) int64 for logits [4, 64]");
}

TEST(Generation, NextTokensGreedyAndSampled) {
  const Tensor logits = tensor({0.1, 2.0, 2.0, -1.0, 5.0, 0.0, 0.0, 4.9}, {2, 4});
  nn::GenerationConfig greedy;
  EXPECT_EQ(nn::next_tokens(logits, greedy).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));  // lowest index on ties

  nn::GenerationConfig top2;
  top2.do_sample = true;
  top2.top_k = 2;
  Generator gen(7);
  std::set<int64_t> row0, row1;
  for (int i = 0; i < 200; ++i) {
    const std::vector<int64_t> t = nn::next_tokens(logits, top2, &gen).to_vector<int64_t>();
    row0.insert(t[0]);
    row1.insert(t[1]);
  }
  EXPECT_EQ(row0, (std::set<int64_t>{1, 2}));
  EXPECT_EQ(row1, (std::set<int64_t>{0, 3}));
  Generator a(11), b(11);
  EXPECT_TRUE(bitwise_equal(nn::next_tokens(logits, top2, &a), nn::next_tokens(logits, top2, &b)));

  nn::GenerationConfig bad;
  bad.temperature = 0;
  EXPECT_KILN_ERROR(nn::next_tokens(logits, bad), "temperature must be positive and finite, got 0");
  bad = {};
  bad.top_p = 1.5;
  EXPECT_KILN_ERROR(nn::next_tokens(logits, bad), "top_p must be in (0, 1], got 1.5");
  EXPECT_KILN_ERROR(nn::next_tokens(zeros({4}), greedy), "logits must be (B, V) with V >= 1, got [4]");
}

// ---- generate() on a small causal decoder ------------------------------------------------------

// Attention of q (B, T, C) against k, v (B, S, C), causal aligned bottom-right
// (query t sees keys s <= t + S - T), composed from primitives.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), C = q.size(2), hs = C / heads;
  auto split = [&](const Tensor& x, int64_t L) { return reshape(x, {B, L, heads, hs}).transpose(1, 2); };
  Tensor scores = matmul(split(q, T), split(k, S).transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  const Tensor masked = logical_not(tril(ones({T, S}, DType::Bool), S - T));  // s > t + S - T
  scores = masked_fill(scores, masked, -std::numeric_limits<double>::infinity());
  return matmul(softmax(scores, -1), split(v, S)).transpose(1, 2).reshape({B, T, C});
}

// token + position embeddings, layers of (LN, causal attention, LN, MLP), LN, tied head.
struct TinyDecoder : nn::Module {
  TinyDecoder(int64_t V, int64_t C, int64_t layers, int64_t heads) : heads(heads) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(V, C));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(64, C));
    for (int64_t i = 0; i < layers; ++i) {
      auto& b = blocks.emplace_back();
      const std::string p = std::to_string(i);
      b.ln1 = register_module("ln1_" + p, std::make_shared<nn::LayerNorm>(C));
      b.qkv = register_module("qkv_" + p, std::make_shared<nn::Linear>(C, 3 * C));
      b.proj = register_module("proj_" + p, std::make_shared<nn::Linear>(C, C));
      b.ln2 = register_module("ln2_" + p, std::make_shared<nn::LayerNorm>(C));
      b.fc = register_module("fc_" + p, std::make_shared<nn::Linear>(C, 4 * C));
      b.out = register_module("out_" + p, std::make_shared<nn::Linear>(4 * C, C));
    }
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(C));
  }
  // ids (B, T) -> logits (B, T, V)
  Tensor forward(const Tensor& ids, nn::KVCache* cache) const {
    const int64_t T = ids.size(1), start = cache ? cache->length() : 0, C = wte->weight.size(1);
    Tensor x = wte->forward(ids) + wpe->forward(arange(start, start + T, 1.0, DType::Int64).reshape({1, T}));
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Block& b = blocks[i];
      const std::vector<Tensor> qkv = split(b.qkv->forward(b.ln1->forward(x)), C, 2);
      Tensor k = qkv[1], v = qkv[2];
      if (cache) std::tie(k, v) = cache->append(static_cast<int64_t>(i), k, v);
      x = x + b.proj->forward(causal_attention(qkv[0], k, v, heads));
      x = x + b.out->forward(gelu(b.fc->forward(b.ln2->forward(x))));
    }
    return matmul(ln_f->forward(x), wte->weight.transpose(0, 1));
  }
  struct Block {
    std::shared_ptr<nn::LayerNorm> ln1, ln2;
    std::shared_ptr<nn::Linear> qkv, proj, fc, out;
  };
  std::vector<Block> blocks;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::LayerNorm> ln_f;
  int64_t heads;
};

// The composite above is the fused op's causal case with keys of their own
// length (ops/fused.h): the decoder below could use either.
TEST(Generation, CompositeCausalAttentionIsTheFusedOne) {
  manual_seed(2);
  const Tensor q = randn({2, 3, 8}, DType::Float64), k = randn({2, 7, 8}, DType::Float64),
               v = randn({2, 7, 8}, DType::Float64);
  const Tensor fused = multi_head_attention(q, k, v, 2, Tensor(), 0.0, false, nullptr, /*causal=*/true);
  EXPECT_LE(amax(abs(fused - causal_attention(q, k, v, 2))).item<double>(), 1e-12);
}

TEST(Generation, CachedGenerationGivesTheUncachedTokens) {
  manual_seed(21);
  TinyDecoder model(50, 16, 2, 2);
  model.to(DType::Float64);  // so that sampling cannot flip on rounding between the two paths
  model.eval();
  const nn::DecoderStep step = [&](const Tensor& ids, nn::KVCache* cache) { return model.forward(ids, cache); };
  const Tensor prompt = tensor_from({3, 7, 1, 9, 4, 4, 2, 8}, {2, 4});
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "sampled" : "greedy");
    nn::GenerationConfig g;
    g.max_new_tokens = 12;
    g.do_sample = sample;
    g.temperature = 0.9;
    g.top_k = 20;
    g.top_p = 0.95;
    Generator a(5), b(5);
    const Tensor cached = nn::generate(step, prompt, g, &a);
    g.use_cache = false;
    const Tensor uncached = nn::generate(step, prompt, g, &b);
    EXPECT_EQ(cached.sizes(), (Shape{2, 16}));
    EXPECT_EQ(cached.to_vector<int64_t>(), uncached.to_vector<int64_t>());
    EXPECT_TRUE(bitwise_equal(cached.narrow(1, 0, 4), prompt));
  }
}

TEST(Generation, EosFinishesRowsAndStopsEarly) {
  // A "model" that emits token (last id + 1) mod 10: row 0 reaches eos 5 after
  // two steps, row 1 after four; finished rows get the pad id; the loop stops
  // when both are done.
  const nn::DecoderStep step = [](const Tensor& ids, nn::KVCache*) {
    const int64_t B = ids.size(0), T = ids.size(1);
    Tensor logits = zeros({B, T, 10});
    const std::vector<int64_t> v = ids.to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) logits.select(0, b).select(0, t).select(0, (v[b * T + t] + 1) % 10).fill_(1.0);
    return logits;
  };
  nn::GenerationConfig g;
  g.max_new_tokens = 10;
  g.eos_token_id = 5;
  g.pad_token_id = 0;
  const Tensor ids = nn::generate(step, tensor_from({3, 1}, {2, 1}), g);
  EXPECT_EQ(ids.sizes(), (Shape{2, 5}));
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5, 0, 0, 1, 2, 3, 4, 5}));
  EXPECT_KILN_ERROR(nn::generate(step, zeros({2, 3}), g), "prompt must be (B, T0) int64 ids");
  const nn::DecoderStep wrong = [](const Tensor& ids, nn::KVCache*) { return zeros({ids.size(0), 10}); };
  EXPECT_KILN_ERROR(nn::generate(wrong, tensor_from({3, 1}, {2, 1}), g),
                    "the decoder step must return logits (B, T, V) for its (B, T) ids, got [2, 10] for [2, 1]");
}

}  // namespace
}  // namespace kiln
