// The training-step fast paths against their plain forms: fused attention
// (ops/fused.cpp) against attention composed from primitives, forward and
// gradients, with and without dropout and key mask, q/k/v apart and packed;
// linear_fused against linear; dropout_add against dropout + add;
// the 8-wide Philox bernoulli against the scalar Philox of core/random.h; the
// eight-lane exp against the scalar one; the lane-wise cross-entropy rows
// against log_softmax on wide rows; the split float32 GEMM against a float64
// product. Attention and GEMM also on 1 and 2 threads, bit for bit (Note
// [Deterministic chunking]).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/cpu/vec_math.h"
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
using testing::values;

// The composite the fused op replaces (the BERT self-attention before it).
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const Tensor& mask,
                          double p, bool training, Generator* gen) {
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2);
  auto split = [&](const Tensor& x) { return x.reshape({B, T, heads, C / heads}).transpose(1, 2); };
  Tensor s = mul(matmul(split(q), split(k).transpose(-1, -2)), 1.0 / std::sqrt(static_cast<double>(C / heads)));
  if (mask.defined()) s = add(s, mask);
  return matmul(dropout(softmax(s, -1), p, training, gen), split(v)).transpose(1, 2).reshape({B, T, C});
}

// (B, 1, 1, T) key bias as BertModel builds it: lowest float where masked.
Tensor key_mask(int64_t B, int64_t T, DType dt) {
  std::vector<double> m(static_cast<size_t>(B * T), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = T - 1 - b; t < T; ++t) m[static_cast<size_t>(b * T + t)] = std::numeric_limits<float>::lowest();
  return tensor(m, {B, 1, 1, T}, dt);
}

TEST(FusedOps, AttentionMatchesComposition) {
  const int64_t B = 2, T = 7, C = 12, H = 3;
  for (DType dt : {DType::Float32, DType::Float64})
    for (double p : {0.0, 0.25})
      for (bool with_mask : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " p=" + std::to_string(p) + (with_mask ? " masked" : ""));
        const Tensor mask = with_mask ? key_mask(B, T, dt) : Tensor();
        const TensorList in = {rnd({B, T, C}, 1, dt), rnd({B, T, C}, 2, dt), rnd({B, T, C}, 3, dt)};
        const double tol = dt == DType::Float64 ? 1e-12 : 2e-5;
        const GradResult fused = run_with_grads([&](const TensorList& x) {
          Generator g(42);
          return multi_head_attention(x[0], x[1], x[2], H, mask, p, true, &g);
        }, in);
        const GradResult composed = run_with_grads([&](const TensorList& x) {
          Generator g(42);
          return composed_attention(x[0], x[1], x[2], H, mask, p, true, &g);
        }, in);
        expect_close(fused, composed, tol);
        // packed: one (B, T, 3C) input, its gradient the three blocks side by side
        const GradResult packed = run_with_grads([&](const TensorList& x) {
          Generator g(42);
          return multi_head_attention_qkv(x[0], H, mask, p, true, &g);
        }, {cat(in, 2)});
        EXPECT_TRUE(all_close(packed.out, fused.out, tol, tol));
        EXPECT_TRUE(all_close(packed.grads[0], cat(fused.grads, 2), tol, tol));
      }
}

TEST(FusedOps, AttentionDropoutDrawsLikeDropout) {
  // same generator, same call: the fused op drops exactly the composite's
  // probabilities, and the generator advances by one call as dropout's does
  const TensorList in = {rnd({1, 16, 8}, 4, DType::Float32), rnd({1, 16, 8}, 5, DType::Float32),
                         rnd({1, 16, 8}, 6, DType::Float32)};
  Generator g1(7), g2(7);
  Tensor a = multi_head_attention(in[0], in[1], in[2], 2, Tensor(), 0.5, true, &g1);
  Tensor b = composed_attention(in[0], in[1], in[2], 2, Tensor(), 0.5, true, &g2);
  EXPECT_TRUE(all_close(a, b, 1e-5, 1e-5));
  EXPECT_EQ(g1.state().offset, g2.state().offset);
  // eval mode and p = 0: no draw at all
  Generator g3(7);
  multi_head_attention(in[0], in[1], in[2], 2, Tensor(), 0.5, false, &g3);
  EXPECT_EQ(g3.state().offset, 0u);
}

TEST(FusedOps, AttentionSameBitsOnAnyThreadCount) {
  const TensorList in = {rnd({3, 33, 16}, 8, DType::Float32), rnd({3, 33, 16}, 9, DType::Float32),
                         rnd({3, 33, 16}, 10, DType::Float32)};
  const Tensor mask = key_mask(3, 33, DType::Float32);
  auto f = [&](const TensorList& x) {
    Generator g(11);
    return multi_head_attention_qkv(cat(x, 2), 4, mask, 0.1, true, &g);
  };
  testing::ThreadCountGuard guard;
  set_num_threads(1);
  const GradResult one = run_with_grads(f, in);
  set_num_threads(2);
  const GradResult two = run_with_grads(f, in);
  expect_bitwise(one, two);
}

TEST(FusedOps, AttentionRejectsBadArguments) {
  Tensor x = rnd({2, 3, 12}, 12, DType::Float32);
  EXPECT_KILN_ERROR(multi_head_attention(x, x, x, 5), "multi_head_attention", "12", "5 heads");
  EXPECT_KILN_ERROR(multi_head_attention(x, x, x, 2, zeros({2, 3})), "mask_bias", "[2, 3]");
  EXPECT_KILN_ERROR(multi_head_attention(x, x, rnd({2, 4, 12}, 1, DType::Float32), 2), "q, k, v", "[2, 4, 12]");
  EXPECT_KILN_ERROR(multi_head_attention_qkv(rnd({2, 3, 10}, 2, DType::Float32), 2), "3 * hidden", "[2, 3, 10]");
  EXPECT_KILN_ERROR(multi_head_attention(x, x, x, 2, Tensor(), 1.5, true), "dropout probability", "1.5");
}

TEST(FusedOps, LinearFusedMatchesLinear) {
  // sizes that take the single GEMM call and the split ones (Note [GEMM threading])
  struct Case {
    Shape x;
    int64_t out;
  };
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : {Case{{2, 3, 4}, 5}, Case{{700, 64}, 96}, Case{{3, 40, 600}, 30}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(c.x));
      const TensorList in = {rnd(c.x, 40, dt), rnd({c.out, c.x.back()}, 41, dt), rnd({c.out}, 42, dt)};
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-4;
      expect_close(run_with_grads([](const TensorList& x) { return linear_fused(x[0], x[1], x[2]); }, in),
                   run_with_grads([](const TensorList& x) { return linear(x[0], x[1], x[2]); }, in), tol);
    }
  Tensor x = rnd({2, 4}, 43, DType::Float32);
  EXPECT_KILN_ERROR(linear_fused(x, rnd({3, 5}, 44, DType::Float32), rnd({3}, 45, DType::Float32)), "linear", "[2, 4]");
}

TEST(FusedOps, DropoutAddMatchesComposition) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (bool with_residual : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_residual ? " residual" : " plain"));
      TensorList in = {rnd({5, 1001}, 20, dt)};
      if (with_residual) in.push_back(rnd({5, 1001}, 21, dt));
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
      const GradResult fused = run_with_grads([&](const TensorList& x) {
        Generator g(31);
        return dropout_add(x[0], with_residual ? x[1] : Tensor(), 0.3, true, &g);
      }, in);
      const GradResult composed = run_with_grads([&](const TensorList& x) {
        Generator g(31);
        Tensor d = dropout(x[0], 0.3, true, &g);
        return with_residual ? add(d, x[1]) : d;
      }, in);
      expect_close(fused, composed, tol);
    }
  // eval mode: x + residual, no draw
  Tensor x = rnd({4, 9}, 22, DType::Float32), r = rnd({4, 9}, 23, DType::Float32);
  Generator g(5);
  EXPECT_TRUE(bitwise_equal(dropout_add(x, r, 0.3, false, &g), add(x, r)));
  EXPECT_EQ(g.state().offset, 0u);
  EXPECT_KILN_ERROR(dropout_add(x, rnd({4, 8}, 1, DType::Float32), 0.1, true), "dropout_add", "[4, 8]", "[4, 9]");
}

TEST(FusedOps, BernoulliMatchesScalarPhilox) {
  // Note [Random numbers]: element i is word i % 4 of block i / 4, 1 when
  // below ceil(p 2^32). The kernel runs 8 blocks at a time, the scalar
  // philox4x32 here; sizes that leave tails and cross a 16384-element chunk,
  // in float32 and bool
  for (int64_t n : {int64_t{5}, int64_t{8}, int64_t{33}, int64_t{16387}, int64_t{40001}})
    for (double p : {0.1, 0.5, 0.9})
      for (DType dt : {DType::Float32, DType::Bool}) {
        Generator g(123);
        const PhiloxState st = g.state();
        const std::vector<double> got = values(bernoulli({n}, p, dt, &g));
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t w = philox_words(st, static_cast<uint64_t>(i / 4))[i % 4];
          ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<double>(w) < p * 4294967296.0 ? 1.0 : 0.0)
              << n << " " << p << " " << i;
        }
      }
}

TEST(FusedOps, BernoulliThresholdIsExact) {
  EXPECT_EQ(bernoulli_threshold(0.0), 0u);
  EXPECT_EQ(bernoulli_threshold(-0.0), 0u);
  EXPECT_EQ(bernoulli_threshold(1.0), uint64_t{1} << 32);
  EXPECT_EQ(bernoulli_threshold(0.5), uint64_t{1} << 31);  // exact: word < 2^31
  EXPECT_EQ(bernoulli_threshold(0.25), uint64_t{1} << 30);
  // 0.9 * 2^32 = 3865470566.4: words up to 3865470566 are kept
  EXPECT_EQ(bernoulli_threshold(0.9), 3865470567u);
  EXPECT_EQ(bernoulli_threshold(std::ldexp(1.0, -32)), 1u);
  EXPECT_EQ(bernoulli_threshold(std::ldexp(1.0, -40)), 1u);  // tiny p still keeps word 0
}

TEST(FusedOps, EightLaneExpIsScalarExpPerLane) {
  // Note [Eight-lane exp]: the same bits as exp_f32 on every lane, specials included
  std::vector<float> xs = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 88.72f, 88.73f, -103.97f, -103.98f, -87.5f, 1e-30f};
  for (float x = -110.0f; x < 95.0f; x += 0.0173f) xs.push_back(x);
  while (xs.size() % 8 != 0) xs.push_back(1.0f);
  for (size_t i = 0; i < xs.size(); i += 8) {
    float out[8];
    cpu::store8(out, cpu::exp_f32x8(cpu::load8(xs.data() + i)));
    for (size_t l = 0; l < 8; ++l) {
      const float want = cpu::exp_f32(xs[i + l]);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(out[l])) << xs[i + l];
      else ASSERT_EQ(out[l], want) << xs[i + l];
    }
  }
}

TEST(FusedOps, CrossEntropyWideRowsMatchLogSoftmax) {
  // rows wider than the kernel's 8 lanes, with a tail and large logits
  const int64_t N = 9, C = 1037;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < N; ++i) t.push_back(i == 4 ? -100 : (i * 131) % C);
  const Tensor target = tensor_from(t);
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor logits = rnd({N, C}, 13, dt) * 20.0;
    const double tol = dt == DType::Float64 ? 1e-12 : 2e-5;
    for (double eps : {0.0, 0.1}) {
      auto composed = [&, eps](const TensorList& x) {
        Tensor logp = log_softmax(x[0], -1);
        Tensor onehot = eq(arange(C).view({1, C}), target.view({N, 1})).to(x[0].dtype());
        Tensor valid = ne(target, -100.0).to(x[0].dtype());
        return ((-sum(logp * onehot, {-1})) * (1.0 - eps) + (-mean(logp, {-1})) * eps) * valid;
      };
      const GradResult a = run_with_grads([&, eps](const TensorList& x) { return cross_entropy(x[0], target, -100, eps, "none"); },
                           {logits});
      expect_close(a, run_with_grads(composed, {logits}), tol);
    }
  }
}

TEST(FusedOps, SplitSgemmMatchesFloat64AndThreadCounts) {
  // shapes that take the row split, the column split, the depth split and the
  // single call, with transposed operands
  struct Case {
    int64_t M, K, N;
    bool ta, tb;
  };
  for (const Case& c : {Case{700, 64, 96, false, false}, Case{96, 80, 1500, false, true}, Case{530, 33, 530, true, false},
                        Case{40, 3000, 50, true, false}, Case{50, 2100, 40, false, true}, Case{20, 16, 24, true, true}}) {
    SCOPED_TRACE(std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N));
    Tensor a = c.ta ? rnd({c.K, c.M}, 14, DType::Float32).t() : rnd({c.M, c.K}, 14, DType::Float32);
    Tensor b = c.tb ? rnd({c.N, c.K}, 15, DType::Float32).t() : rnd({c.K, c.N}, 15, DType::Float32);
    testing::ThreadCountGuard guard;
    set_num_threads(1);
    Tensor one = matmul(a, b);
    set_num_threads(2);
    Tensor two = matmul(a, b);
    EXPECT_TRUE(bitwise_equal(one, two));
    Tensor ref = matmul(a.to(DType::Float64), b.to(DType::Float64));
    EXPECT_TRUE(all_close(two, values(ref), 1e-4, 1e-4));
  }
}

}  // namespace
}  // namespace kiln
