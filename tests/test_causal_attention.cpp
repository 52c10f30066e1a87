// Causal attention, keys of their own length and full masks on the fused
// attention (ops/fused.h, core/cpu/attention.cpp) against attention composed
// from primitives here, forward and gradients: causal with S == T (lengths
// across several of the kernel's row blocks, Note [Causal attention
// blocks]), KV-cache lengths (T = 1 and T = 3 against S = 7, and T = 40
// against S = 100), full (1, 1, T, S) and (B, heads, T, S) masks, with and
// without dropout (seeded, drawn like dropout()); which keys a causal query
// sees (bottom-right aligned, not top-left); rows whose attended scores are
// all -inf (NaN as in the composite); float16, which runs the op's own
// composite; the same bits on 1 and 2 threads; the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/fused.h"
#include "tests/grad_compare.h"
#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::Fn;
using testing::rnd;
using testing::expect_close;
using testing::expect_bitwise;
using testing::GradResult;
using testing::run_with_grads;
using testing::all_close;
using testing::bitwise_equal;

// (T, S) bool, true where the bottom-right aligned causal mask hides the key: s > t + S - T.
Tensor hidden_keys(int64_t T, int64_t S) {
  std::vector<double> m;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) m.push_back(s > t + S - T ? 1.0 : 0.0);
  return gt(tensor(m, {T, S}, DType::Float64), 0.5);
}

// The oracle, written out: scores * scale + mask, masked_fill(-inf) above the
// diagonal, softmax, dropout, the context product. q (B, T, C), k, v (B, S, C).
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask, double p,
                bool training, Generator* gen, bool causal) {
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), C = q.size(2);
  auto split = [&](const Tensor& x, int64_t L) { return x.reshape({B, L, heads, C / heads}).transpose(1, 2); };
  Tensor s = mul(matmul(split(q, T), split(k, S).transpose(-1, -2)), 1.0 / std::sqrt(static_cast<double>(C / heads)));
  if (mask.defined()) s = add(s, mask);
  if (causal) s = masked_fill(s, hidden_keys(T, S), -std::numeric_limits<double>::infinity());
  return matmul(dropout(softmax(s, -1), p, training, gen), split(v, S)).transpose(1, 2).reshape({B, T, C});
}

// A (B, 1, 1, S) key bias hiding the last b keys of batch b (float lowest), as BertModel builds it.
Tensor key_bias(int64_t B, int64_t S, DType dt) {
  std::vector<double> m(static_cast<size_t>(B * S), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = S - b; s < S; ++s) m[static_cast<size_t>(b * S + s)] = std::numeric_limits<float>::lowest();
  return tensor(m, {B, 1, 1, S}, dt);
}

// A full additive mask of `shape` (.., T, S): values in [-2, 2), about 15% -inf
// (never key 0, so no causal row is all -inf).
Tensor full_mask(const Shape& shape, uint64_t seed, DType dt) {
  Generator g(seed);
  std::vector<double> m = rand(shape, TensorOptions(DType::Float64), &g).to_vector<double>();
  const std::vector<double> u = rand(shape, TensorOptions(DType::Float64), &g).to_vector<double>();
  const auto S = static_cast<size_t>(shape.back());
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = u[i] > 0.85 && i % S != 0 ? -std::numeric_limits<double>::infinity() : (m[i] - 0.5) * 4.0;
  return tensor(m, shape, dt);
}

struct Case {
  int64_t T, S;
  std::string mask;  // "", "key", "full-1", "full-bh"
  bool causal;
};

std::string describe(const Case& c, DType dt, double p) {
  return std::string(dtype_name(dt)) + " T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) + " mask=" +
         (c.mask.empty() ? "none" : c.mask) + (c.causal ? " causal" : "") + " p=" + std::to_string(p);
}

Tensor mask_for(const Case& c, int64_t B, int64_t H, DType dt) {
  if (c.mask == "key") return key_bias(B, c.S, dt);
  if (c.mask == "full-1") return full_mask({1, 1, c.T, c.S}, 90, dt);
  if (c.mask == "full-bh") return full_mask({B, H, c.T, c.S}, 91, dt);
  return Tensor();
}

// Fused against the composite over every case, float32 and float64, with and without dropout.
void check_cases(const std::vector<Case>& cases) {
  const int64_t B = 2, C = 12, H = 3;
  for (DType dt : {DType::Float32, DType::Float64})
    for (double p : {0.0, 0.25})
      for (const Case& c : cases) {
        SCOPED_TRACE(describe(c, dt, p));
        const Tensor mask = mask_for(c, B, H, dt);
        const TensorList in = {rnd({B, c.T, C}, 1, dt), rnd({B, c.S, C}, 2, dt), rnd({B, c.S, C}, 3, dt)};
        const double tol = dt == DType::Float64 ? 1e-12 : 2e-5;
        const GradResult fused = run_with_grads([&](const TensorList& x) {
          Generator g(42);
          return multi_head_attention(x[0], x[1], x[2], H, mask, p, true, &g, c.causal);
        }, in);
        const GradResult want = run_with_grads([&](const TensorList& x) {
          Generator g(42);
          return composed(x[0], x[1], x[2], H, mask, p, true, &g, c.causal);
        }, in);
        expect_close(fused, want, tol);
        if (c.T == c.S) {  // packed: one (B, T, 3C) input
          const GradResult packed = run_with_grads([&](const TensorList& x) {
            Generator g(42);
            return multi_head_attention_qkv(x[0], H, mask, p, true, &g, c.causal);
          }, {cat(in, 2)});
          EXPECT_TRUE(all_close(packed.out, fused.out, tol, tol)) << "packed forward";
          EXPECT_TRUE(all_close(packed.grads[0], cat(fused.grads, 2), tol, tol)) << "packed gradient";
        }
      }
}

TEST(CausalAttention, SelfAttentionMatchesComposition) {
  // T = 70: three of the kernel's row blocks, the last one partial.
  std::vector<Case> cases;
  for (int64_t T : {7, 70})
    for (const char* m : {"", "key", "full-1", "full-bh"}) cases.push_back({T, T, m, true});
  check_cases(cases);
}

TEST(CausalAttention, KvCacheLengthsMatchComposition) {
  // T new queries against S >= T keys; T = 40, S = 100: a prefix key block and two row blocks.
  std::vector<Case> cases;
  for (const auto& [T, S] : {std::pair<int64_t, int64_t>{1, 7}, {3, 7}, {40, 100}})
    for (bool causal : {true, false})
      for (const char* m : {"", "key", "full-1", "full-bh"}) cases.push_back({T, S, m, causal});
  cases.push_back({7, 3, "full-bh", false});  // more queries than keys (cross attention)
  check_cases(cases);
}

TEST(CausalAttention, QueriesSeeKeysUpToTheBottomRightDiagonal) {
  // Changing key/value s changes exactly the queries t with s <= t + S - T.
  const int64_t B = 1, T = 3, S = 7, C = 4;
  const Tensor q = rnd({B, T, C}, 5, DType::Float64), k = rnd({B, S, C}, 6, DType::Float64);
  const Tensor v = rnd({B, S, C}, 7, DType::Float64);
  const Tensor base = multi_head_attention(q, k, v, 2, Tensor(), 0.0, false, nullptr, true);
  for (int64_t s = 0; s < S; ++s) {
    Tensor k2 = k.clone(), v2 = v.clone();
    k2.narrow(1, s, 1).copy_(rnd({B, 1, C}, 8, DType::Float64));
    v2.narrow(1, s, 1).copy_(rnd({B, 1, C}, 9, DType::Float64));
    const Tensor out = multi_head_attention(q, k2, v2, 2, Tensor(), 0.0, false, nullptr, true);
    for (int64_t t = 0; t < T; ++t) {
      const double change = amax(abs(sub(out.narrow(1, t, 1), base.narrow(1, t, 1)))).item<double>();
      if (s <= t + S - T) {
        EXPECT_GT(change, 1e-6) << "query " << t << " ignores key " << s;
      } else {
        EXPECT_EQ(change, 0.0) << "query " << t << " sees key " << s;
      }
    }
  }
  // S == T: the lower triangle, so the first query sees only the first key: its output is v[0].
  const Tensor self = multi_head_attention(q, q, q, 1, Tensor(), 0.0, false, nullptr, true);
  EXPECT_TRUE(all_close(self.narrow(1, 0, 1), q.narrow(1, 0, 1), 1e-15));
}

TEST(CausalAttention, DropoutDrawsLikeDropoutOverTheKeyLength) {
  // One generator call of (B, heads, T, S), as dropout() over the probabilities makes.
  const TensorList in = {rnd({2, 5, 8}, 10, DType::Float32), rnd({2, 9, 8}, 11, DType::Float32),
                         rnd({2, 9, 8}, 12, DType::Float32)};
  Generator g1(7), g2(7);
  const Tensor a = multi_head_attention(in[0], in[1], in[2], 2, Tensor(), 0.5, true, &g1, true);
  const Tensor b = composed(in[0], in[1], in[2], 2, Tensor(), 0.5, true, &g2, true);
  EXPECT_TRUE(all_close(a, b, 1e-5, 1e-5));
  EXPECT_EQ(g1.state().offset, g2.state().offset);
  EXPECT_EQ(g1.state().offset, 1u);
  const Tensor c = multi_head_attention(in[0], in[1], in[2], 2, Tensor(), 0.5, true, &g1, true);
  EXPECT_FALSE(all_close(a, c, 1e-3, 1e-3)) << "the next call drew the same mask";
}

TEST(CausalAttention, FullyMaskedRowsAreNaNAsInTheComposite) {
  // Query 1 of batch 0 has -inf on every key it attends: its softmax is 0/0 in
  // the composite; the fused kernel gives the same NaNs and nothing else.
  const int64_t B = 2, T = 4, S = 6, C = 8, H = 2;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    std::vector<double> m(static_cast<size_t>(B * T * S), 0.0);
    for (int64_t s = 0; s < S; ++s)
      if (!causal || s <= 1 + S - T) m[static_cast<size_t>(1 * S + s)] = -INFINITY;
    const Tensor mask = tensor(m, {B, 1, T, S}, DType::Float32);
    const Tensor q = rnd({B, T, C}, 13, DType::Float32), k = rnd({B, S, C}, 14, DType::Float32);
    const Tensor v = rnd({B, S, C}, 15, DType::Float32);
    const Tensor got = multi_head_attention(q, k, v, H, mask, 0.0, false, nullptr, causal);
    const Tensor want = composed(q, k, v, H, mask, 0.0, false, nullptr, causal);
    EXPECT_TRUE(all_close(got, want, 2e-5, 2e-5));  // NaN where the composite has NaN, close elsewhere
    const std::vector<double> g = got.to_vector<double>();
    int64_t nans = 0;
    for (double x : g) nans += std::isnan(x);
    EXPECT_EQ(nans, C) << "one query row of NaN";
    EXPECT_TRUE(std::isnan(g[static_cast<size_t>(1 * C)]));
  }
}

TEST(CausalAttention, SameBitsOnAnyThreadCount) {
  const TensorList in = {rnd({3, 45, 16}, 16, DType::Float32), rnd({3, 80, 16}, 17, DType::Float32),
                         rnd({3, 80, 16}, 18, DType::Float32)};
  const Tensor mask = key_bias(3, 80, DType::Float32);
  auto f = [&](const TensorList& x) {
    Generator g(11);
    return multi_head_attention(x[0], x[1], x[2], 4, mask, 0.1, true, &g, true);
  };
  testing::ThreadCountGuard guard;
  set_num_threads(1);
  const GradResult one = run_with_grads(f, in);
  set_num_threads(2);
  const GradResult two = run_with_grads(f, in);
  EXPECT_TRUE(bitwise_equal(one.out, two.out));
  for (size_t i = 0; i < one.grads.size(); ++i) EXPECT_TRUE(bitwise_equal(one.grads[i], two.grads[i])) << i;
}

// ||got - want|| / ||want|| over float64 values.
double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to(DType::Float64).to_vector<double>(), w = want.to(DType::Float64).to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) num += (g[i] - w[i]) * (g[i] - w[i]), den += w[i] * w[i];
  return std::sqrt(num / den);
}

TEST(CausalAttention, HalfPrecisionRunsTheCompositeAndMatches) {
  // float16 on the CPU has no fused kernel: the op's own composite (scores,
  // mask, masked_fill, softmax) runs, and matches the float32 fused kernel on
  // the same rounded inputs to float16 precision (an off-by-one diagonal does not).
  const int64_t B = 2, C = 16, H = 2;
  for (const Case& c : {Case{9, 9, "key", true}, Case{3, 11, "", true}, Case{3, 11, "full-bh", true},
                        Case{5, 8, "full-1", false}}) {
    SCOPED_TRACE(describe(c, DType::Float16, 0.0));
    const Tensor mask = mask_for(c, B, H, DType::Float32);
    const TensorList in = {rnd({B, c.T, C}, 27, DType::Float32).to(DType::Float16).to(DType::Float32),
                           rnd({B, c.S, C}, 28, DType::Float32).to(DType::Float16).to(DType::Float32),
                           rnd({B, c.S, C}, 29, DType::Float32).to(DType::Float16).to(DType::Float32)};
    auto f = [&](DType dt) {
      return [&, dt](const TensorList& x) {
        const Tensor m = mask.defined() ? mask.to(dt) : Tensor();
        return multi_head_attention(x[0].to(dt), x[1].to(dt), x[2].to(dt), H, m, 0.0, false, nullptr, c.causal)
            .to(DType::Float32);
      };
    };
    const GradResult half = run_with_grads(f(DType::Float16), in), full = run_with_grads(f(DType::Float32), in);
    EXPECT_LT(relative_error(half.out, full.out), 2e-3) << "forward";
    for (size_t i = 0; i < half.grads.size(); ++i)
      EXPECT_LT(relative_error(half.grads[i], full.grads[i]), 5e-3) << "gradient of input " << i;
  }
}

TEST(CausalAttention, RejectsBadArguments) {
  const Tensor q = rnd({2, 3, 12}, 19, DType::Float32), kv = rnd({2, 5, 12}, 20, DType::Float32);
  // causal needs S >= T
  EXPECT_KILN_ERROR(multi_head_attention(kv, q, q, 2, Tensor(), 0.0, false, nullptr, true), "causal", "5 queries",
                    "3 keys");
  // k and v of different lengths, or not matching q's batch / hidden size
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, q, 2), "k and v of one shape", "[2, 5, 12]", "[2, 3, 12]");
  EXPECT_KILN_ERROR(multi_head_attention(q, rnd({1, 5, 12}, 21, DType::Float32), rnd({1, 5, 12}, 22, DType::Float32),
                                         2),
                    "q, k, v", "[1, 5, 12]");
  EXPECT_KILN_ERROR(multi_head_attention(q, rnd({2, 5, 8}, 23, DType::Float32), rnd({2, 5, 8}, 24, DType::Float32), 2),
                    "q, k, v", "[2, 5, 8]");
  // masks: the key bias must span S keys, a full mask (B|1, 1|heads, T, S)
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, kv, 2, zeros({2, 1, 1, 3})), "mask_bias", "[2, 1, 1, 3]",
                    "3 queries and 5 keys");
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, kv, 2, zeros({1, 1, 3, 3})), "mask_bias", "[1, 1, 3, 3]");
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, kv, 2, zeros({1, 3, 3, 5})), "mask_bias", "1 or 2", "[1, 3, 3, 5]");
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, kv, 2, zeros({3, 1, 3, 5})), "mask_bias", "[3, 1, 3, 5]");
  EXPECT_KILN_ERROR(multi_head_attention(q, kv, kv, 2, zeros({3, 5})), "mask_bias", "[3, 5]");
  EXPECT_KILN_ERROR(multi_head_attention_qkv(rnd({2, 3, 36}, 25, DType::Float32), 2, zeros({1, 1, 1, 5}), 0.0, false,
                                             nullptr, true),
                    "mask_bias", "[1, 1, 1, 5]");
  // what is accepted
  EXPECT_NO_THROW(multi_head_attention(q, kv, kv, 2, zeros({1, 2, 3, 5}), 0.0, false, nullptr, true));
  EXPECT_NO_THROW(multi_head_attention(q, kv, kv, 2, zeros({2, 1, 1, 5}), 0.0, false, nullptr, true));
  EXPECT_NO_THROW(multi_head_attention_qkv(rnd({2, 3, 36}, 26, DType::Float32), 2, zeros({2, 2, 3, 3}), 0.0, false,
                                           nullptr, true));
}

}  // namespace
}  // namespace kiln
