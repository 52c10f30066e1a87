// The ops a GPT needs beyond BERT's, on the CPU, against hand-computed
// PyTorch-semantics expectations: gather / scatter / scatter_add, sort /
// argsort / topk, cumsum, multinomial (determinism and distribution), tril /
// triu / causal_mask, softmax / log_softmax with an output dtype, and where /
// masked_fill broadcasting. Gradients: the registry-wide check
// (test_gradcheck.cpp) runs every one of their registered samples; the few
// backward tests here pin exact values. CUDA against these: test_cuda_gather_scan.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::bitwise_equal;
using testing::values;

Tensor ivec(const std::vector<int64_t>& v, const Shape& s = {}) { return tensor_from(v, s); }
Tensor fvec(const std::vector<double>& v, const Shape& s = {}) { return tensor(v, s, TensorOptions(DType::Float32)); }
std::vector<double> ints(const Tensor& t) { return values(t); }

// ---- gather / scatter / scatter_add ---------------------------------------------------

TEST(GatherScatter, GatherAlongEachDim) {
  Tensor x = fvec({1, 2, 3, 4, 5, 6}, {2, 3});
  // torch.gather(x, 1, [[2, 0], [1, 1]]) = [[3, 1], [5, 5]]
  EXPECT_TRUE(all_close(gather(x, 1, ivec({2, 0, 1, 1}, {2, 2})), {3, 1, 5, 5}, 0));
  EXPECT_EQ(gather(x, 1, ivec({2, 0, 1, 1}, {2, 2})).sizes(), Shape({2, 2}));
  // dim 0, index smaller than x in dim 1: [[1, 0]] -> [[4, 2]]
  EXPECT_TRUE(all_close(gather(x, 0, ivec({1, 0}, {1, 2})), {4, 2}, 0));
  // negative dim equals the last
  EXPECT_TRUE(bitwise_equal(gather(x, -1, ivec({0, 2, 2, 0}, {2, 2})), gather(x, 1, ivec({0, 2, 2, 0}, {2, 2}))));
  // int64 values, 3-D
  Tensor xi = arange(0.0, 12.0, 1.0, TensorOptions(DType::Int64)).reshape({2, 3, 2});
  Tensor g = gather(xi, 1, ivec({2, 0, 0, 1}, {2, 1, 2}));  // [[[x000? ...]]]
  EXPECT_EQ(g.dtype(), DType::Int64);
  // out[b][0][k] = xi[b][idx][k]: b0: idx 2,0 -> xi[0][2][0]=4, xi[0][0][1]=1; b1: idx 0,1 -> 6, 9
  EXPECT_EQ(ints(g), (std::vector<double>{4, 1, 6, 9}));
}

TEST(GatherScatter, GatherEdgeCases) {
  Tensor x = fvec({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(gather(x, 1, empty({2, 0}, TensorOptions(DType::Int64))).sizes(), Shape({2, 0}));
  EXPECT_EQ(gather(scalar_tensor(7.0), 0, scalar_tensor(0.0, TensorOptions(DType::Int64))).item<double>(), 7.0);
  // a transposed (strided) input
  Tensor xt = x.t();  // [[1, 4], [2, 5], [3, 6]]
  EXPECT_TRUE(all_close(gather(xt, 1, ivec({1, 0, 1}, {3, 1})), {4, 2, 6}, 0));
  // int32 index accepted
  EXPECT_TRUE(all_close(gather(x, 1, ivec({2, 1}, {2, 1}).to(DType::Int32)), {3, 5}, 0));
}

TEST(GatherScatter, ScatterAndScatterAdd) {
  Tensor x = zeros({2, 4});
  Tensor src = fvec({1, 2, 3, 4, 5, 6}, {2, 3});
  // index (2, 2) uses the leading 2x2 block of src
  Tensor idx = ivec({3, 0, 1, 2}, {2, 2});
  EXPECT_TRUE(all_close(scatter(x, 1, idx, src), {2, 0, 0, 1, 0, 4, 5, 0}, 0));
  EXPECT_TRUE(all_close(scatter(x, -1, idx, 9.0), {9, 0, 0, 9, 0, 9, 9, 0}, 0));
  // duplicates: scatter_add sums them, scatter keeps the last in row-major order
  Tensor dup = ivec({1, 1, 1, 0, 0, 0}, {2, 3});
  EXPECT_TRUE(all_close(scatter_add(x, 1, dup, src), {0, 6, 0, 0, 15, 0, 0, 0}, 0));
  EXPECT_TRUE(all_close(scatter(x, 1, dup, src), {0, 3, 0, 0, 6, 0, 0, 0}, 0));
  // dim 0: out[index[i][j]][j] += src[i][j]
  Tensor x0 = ones({3, 2});
  EXPECT_TRUE(all_close(scatter_add(x0, 0, ivec({2, 0, 2, 2}, {2, 2}), fvec({1, 2, 3, 4}, {2, 2})),
                        {1, 3, 1, 1, 5, 5}, 0));
  // the input is not modified
  EXPECT_TRUE(all_close(x0, {1, 1, 1, 1, 1, 1}, 0));
  // an empty index changes nothing
  EXPECT_TRUE(all_close(scatter_add(x0, 0, empty({0, 2}, TensorOptions(DType::Int64)), zeros({0, 2})),
                        values(x0), 0));
}

TEST(GatherScatter, Backward) {
  Tensor x = fvec({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad(true);
  // repeated index: the gradient accumulates
  gather(x, 1, ivec({2, 2, 0, 1}, {2, 2})).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {0, 0, 2, 1, 1, 0}, 0));
  Tensor a = zeros({2, 3}).set_requires_grad(true);
  Tensor s = fvec({1, 2, 3, 4}, {2, 2}).set_requires_grad(true);
  Tensor w = fvec({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(mul(scatter(a, 1, ivec({0, 2, 1, 0}, {2, 2}), s), w)).backward();
  EXPECT_TRUE(all_close(a.grad(), {0, 2, 0, 0, 0, 6}, 0));  // written positions get none
  EXPECT_TRUE(all_close(s.grad(), {1, 3, 5, 4}, 0));        // w at each target
}

TEST(GatherScatter, ScatterAddIsDeterministicAcrossThreads) {
  testing::ThreadCountGuard guard;
  // 4096 float32 sources into 3 targets per row: order-sensitive rounding
  Tensor src = randn({8, 4096}, {}, nullptr);
  Tensor idx = randint(0, 3, {8, 4096});
  Tensor base = zeros({8, 3});
  set_num_threads(1);
  Tensor one = scatter_add(base, 1, idx, src);
  set_num_threads(4);
  Tensor four = scatter_add(base, 1, idx, src);
  EXPECT_TRUE(bitwise_equal(one, four));
  // and in row-major order: the same as adding one source at a time
  std::vector<float> ref(24, 0.f);
  const std::vector<double> sv = values(src), iv = values(idx);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t j = 0; j < 4096; ++j)
      ref[static_cast<size_t>(r * 3 + static_cast<int64_t>(iv[r * 4096 + j]))] += static_cast<float>(sv[r * 4096 + j]);
  const std::vector<double> got = values(one);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(static_cast<float>(got[i]), ref[i]) << i;
}

TEST(GatherScatter, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_KILN_ERROR(gather(x, 1, ivec({0, 3}, {2, 1})), "gather", "index 3 is out of bounds", "dimension 1",
                    "size 3");
  EXPECT_KILN_ERROR(gather(x, 1, ivec({-1, 0}, {2, 1})), "gather", "index -1");
  EXPECT_KILN_ERROR(gather(x, 1, ivec({0, 1})), "gather", "as many dims");
  EXPECT_KILN_ERROR(gather(x, 1, ivec({0, 0, 0, 0, 0, 0}, {3, 2})), "gather", "larger than the input");
  EXPECT_KILN_ERROR(gather(x, 1, fvec({0, 1}, {2, 1})), "gather", "int64 or int32");
  EXPECT_KILN_ERROR(gather(x, 2, ivec({0, 1}, {2, 1})), "gather");
  EXPECT_KILN_ERROR(scatter(x, 0, ivec({2, 0}, {1, 2}), ones({1, 2})), "scatter", "index 2 is out of bounds",
                    "dimension 0", "size 2");
  EXPECT_KILN_ERROR(scatter_add(x, 1, ivec({0, 1, 2, 0}, {2, 2}), ones({2, 1})), "scatter_add", "larger than src");
  EXPECT_KILN_ERROR(scatter_add(zeros({2}, TensorOptions(DType::Bool)), 0, ivec({0}), zeros({1}, TensorOptions(DType::Bool))),
                    "scatter_add", "bool");
}

// ---- sort / argsort / topk -----------------------------------------------------------

TEST(SortTopk, SortIsStableBothWays) {
  Tensor x = fvec({3, 1, 2, 1, 3, 0});
  ValuesIndices a = sort(x);
  EXPECT_TRUE(all_close(a.values, {0, 1, 1, 2, 3, 3}, 0));
  EXPECT_EQ(ints(a.indices), (std::vector<double>{5, 1, 3, 2, 0, 4}));
  ValuesIndices d = sort(x, -1, true);
  EXPECT_TRUE(all_close(d.values, {3, 3, 2, 1, 1, 0}, 0));
  EXPECT_EQ(ints(d.indices), (std::vector<double>{0, 4, 2, 1, 3, 5}));  // ties keep index order descending too
  EXPECT_EQ(ints(argsort(x, 0, true)), ints(d.indices));
  EXPECT_EQ(a.indices.dtype(), DType::Int64);
}

TEST(SortTopk, NanAndSignedZero) {
  const double nan = std::nan("");
  Tensor x = fvec({nan, 1, -0.0, -INFINITY, 0.0, INFINITY});
  ValuesIndices a = sort(x);
  // NaN above +inf; -0.0 and +0.0 tie (index order)
  EXPECT_EQ(ints(a.indices), (std::vector<double>{3, 2, 4, 1, 5, 0}));
  ValuesIndices d = sort(x, 0, true);
  EXPECT_EQ(ints(d.indices), (std::vector<double>{0, 5, 1, 2, 4, 3}));
  EXPECT_TRUE(std::isnan(topk(x, 1).values.item<double>()));
}

TEST(SortTopk, DimsDtypesAndEdges) {
  Tensor x = fvec({5, 2, 8, 1, 9, 3}, {2, 3});
  ValuesIndices s0 = sort(x, 0);
  EXPECT_TRUE(all_close(s0.values, {1, 2, 3, 5, 9, 8}, 0));
  EXPECT_EQ(ints(s0.indices), (std::vector<double>{1, 0, 1, 0, 1, 0}));
  ValuesIndices sn = sort(x, -2);
  EXPECT_TRUE(bitwise_equal(sn.values, s0.values));
  ValuesIndices si = sort(tensor_from({4, -7, 0, -7}), 0, true);
  EXPECT_EQ(ints(si.values), (std::vector<double>{4, 0, -7, -7}));
  EXPECT_EQ(ints(si.indices), (std::vector<double>{0, 2, 1, 3}));
  EXPECT_EQ(sort(empty({3, 0})).values.sizes(), Shape({3, 0}));
  EXPECT_EQ(sort(empty({0})).indices.sizes(), Shape({0}));
  ValuesIndices sc = sort(scalar_tensor(4.0));
  EXPECT_EQ(sc.values.dim(), 0);
  EXPECT_EQ(sc.indices.item<int64_t>(), 0);
}

TEST(SortTopk, Topk) {
  Tensor x = fvec({1, 4, 4, 2, 0, 4}, {1, 6});
  ValuesIndices t = topk(x, 2);
  EXPECT_TRUE(all_close(t.values, {4, 4}, 0));
  EXPECT_EQ(ints(t.indices), (std::vector<double>{1, 2}));  // ties by index
  ValuesIndices lo = topk(x, 3, -1, false);
  EXPECT_TRUE(all_close(lo.values, {0, 1, 2}, 0));
  EXPECT_EQ(ints(lo.indices), (std::vector<double>{4, 0, 3}));
  EXPECT_EQ(topk(x, 0).values.sizes(), Shape({1, 0}));
  EXPECT_EQ(ints(topk(x, 6).indices), (std::vector<double>{1, 2, 5, 3, 0, 4}));
  Tensor y = fvec({5, 2, 8, 1, 9, 3}, {2, 3});
  ValuesIndices t0 = topk(y, 1, 0);
  EXPECT_EQ(t0.values.sizes(), Shape({1, 3}));
  EXPECT_TRUE(all_close(t0.values, {5, 9, 8}, 0));
  EXPECT_EQ(ints(t0.indices), (std::vector<double>{0, 1, 0}));
  EXPECT_KILN_ERROR(topk(x, 7), "topk", "k = 7", "size 6");
  EXPECT_KILN_ERROR(topk(x, -1), "topk", "k = -1");
  EXPECT_KILN_ERROR(sort(x, 2), "sort");
}

TEST(SortTopk, Backward) {
  Tensor x = fvec({3, 1, 2, 5}).set_requires_grad(true);
  Tensor w = fvec({10, 20, 30, 40});
  sum(mul(sort(x, 0, true).values, w)).backward();  // sorted: 5, 3, 2, 1
  EXPECT_TRUE(all_close(x.grad(), {20, 40, 30, 10}, 0));
  Tensor y = fvec({3, 1, 2, 5}).set_requires_grad(true);
  sum(mul(topk(y, 2).values, fvec({1, 2}))).backward();  // 5, 3
  EXPECT_TRUE(all_close(y.grad(), {2, 0, 0, 1}, 0));
  EXPECT_FALSE(argsort(y).requires_grad());
}

// ---- cumsum ----------------------------------------------------------------------------

TEST(Cumsum, ValuesDimsAndDtypes) {
  Tensor x = fvec({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(all_close(cumsum(x, 1), {1, 3, 6, 4, 9, 15}, 0));
  EXPECT_TRUE(all_close(cumsum(x, 0), {1, 2, 3, 5, 7, 9}, 0));
  EXPECT_TRUE(bitwise_equal(cumsum(x, -1), cumsum(x, 1)));
  EXPECT_TRUE(all_close(cumsum(x.t(), 1), {1, 5, 2, 7, 3, 9}, 0));  // strided input
  Tensor ci = cumsum(tensor_from({1, -2, 3}, {}, TensorOptions(DType::Int32)), 0);
  EXPECT_EQ(ci.dtype(), DType::Int64);
  EXPECT_EQ(ints(ci), (std::vector<double>{1, -1, 2}));
  Tensor cb = cumsum(gt(fvec({1, 0, 1, 1}), 0.0), 0);
  EXPECT_EQ(cb.dtype(), DType::Int64);
  EXPECT_EQ(ints(cb), (std::vector<double>{1, 1, 2, 3}));
  EXPECT_EQ(cumsum(empty({2, 0}), 1).sizes(), Shape({2, 0}));
  EXPECT_EQ(cumsum(scalar_tensor(3.0), 0).item<double>(), 3.0);
  EXPECT_KILN_ERROR(cumsum(x, 2), "cumsum");
  // float16: accumulated in float32, rounded once per element
  Tensor h = cumsum(full({3000}, 1.0, TensorOptions(DType::Float16)), 0);
  EXPECT_EQ(values(h).back(), 3000.0);  // float16 accumulation would stop at 2048
}

TEST(Cumsum, BackwardIsReverseCumsum) {
  Tensor x = fvec({1, 2, 3, 4}).set_requires_grad(true);
  sum(mul(cumsum(x, 0), fvec({1, 10, 100, 1000}))).backward();
  EXPECT_TRUE(all_close(x.grad(), {1111, 1110, 1100, 1000}, 0));
}

TEST(Cumsum, DeterministicAcrossThreads) {
  testing::ThreadCountGuard guard;
  Tensor x = randn({64, 3000});
  set_num_threads(1);
  Tensor a = cumsum(x, 1), b = cumsum(x, 0);
  set_num_threads(4);
  EXPECT_TRUE(bitwise_equal(a, cumsum(x, 1)));
  EXPECT_TRUE(bitwise_equal(b, cumsum(x, 0)));
}

// ---- multinomial -----------------------------------------------------------------------

// Pearson's statistic of `counts` against probabilities p over `n` draws.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double chi = 0;
  for (size_t c = 0; c < p.size(); ++c) {
    const double e = p[c] * static_cast<double>(n);
    chi += (static_cast<double>(counts[c]) - e) * (static_cast<double>(counts[c]) - e) / e;
  }
  return chi;
}

TEST(Multinomial, SameSeedSameSamples) {
  Tensor p = fvec({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3});
  Generator g1(123), g2(123), g3(124);
  Tensor a = multinomial(p, 50, true, &g1), b = multinomial(p, 50, true, &g2), c = multinomial(p, 50, true, &g3);
  EXPECT_EQ(a.sizes(), Shape({2, 50}));
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_FALSE(bitwise_equal(a, c));
  // one generator call per draw call, as every random op
  EXPECT_EQ(g1.state().offset, 1u);
  EXPECT_TRUE(bitwise_equal(multinomial(p, 50, true, &g1), multinomial(p, 50, true, &g2)));
  // 1-D probs give 1-D samples; unnormalised weights are fine
  Generator g4(5);
  Tensor one = multinomial(fvec({2, 0, 6}), 7, true, &g4);
  EXPECT_EQ(one.sizes(), Shape({7}));
  for (double v : values(one)) EXPECT_NE(v, 1.0);  // zero weight: never drawn
  // a fixed, known draw: the Philox uniforms of seed 123 under the inverse CDF
  Generator g5(123);
  Tensor u = rand({2, 50}, TensorOptions(DType::Float64), &g5);
  const std::vector<double> uv = values(u), av = values(a);
  for (size_t i = 0; i < uv.size(); ++i) {  // the float32 weights, widened exactly
    const std::vector<double> w = i < 50 ? std::vector<double>{0.1f, 0.2f, 0.3f} : std::vector<double>{0.4f, 0.5f, 0.6f};
    const double t = uv[i] * ((w[0] + w[1]) + w[2]);
    const double want = t < w[0] ? 0 : t < w[0] + w[1] ? 1 : 2;
    EXPECT_EQ(av[i], want) << i;
  }
}

TEST(Multinomial, WithReplacementFollowsTheDistribution) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  const int64_t n = 40000;
  Generator g(2024);
  const std::vector<double> draws = values(multinomial(fvec(p), n, true, &g));
  std::vector<int64_t> counts(4, 0);
  for (double d : draws) ++counts[static_cast<size_t>(d)];
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. The seed is fixed, so the
  // statistic is too; the bound says the draws follow p, not luck.
  EXPECT_LT(chi_square(counts, p, n), 16.27);
}

TEST(Multinomial, WithoutReplacement) {
  // Rows of distinct draws; n = C gives a permutation; zero weights never appear.
  Generator g(7);
  Tensor w = fvec({1, 0, 2, 3, 0, 4, 1, 1, 1, 1, 1, 1}, {2, 6});
  Tensor s = multinomial(w, 4, false, &g);
  const std::vector<double> v = values(s);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) {
      if (r == 0) {
        EXPECT_TRUE(v[i] != 1 && v[i] != 4) << v[i];
      }
      for (int j = 0; j < i; ++j) EXPECT_NE(v[r * 4 + i], v[r * 4 + j]);
    }
  std::vector<double> perm = values(multinomial(fvec({1, 1, 1, 1, 1}), 5, false, &g));
  std::sort(perm.begin(), perm.end());
  EXPECT_EQ(perm, (std::vector<double>{0, 1, 2, 3, 4}));
  // Distribution of the first and second draw of p = (1/2, 1/4, 1/4):
  // first ~ p; second: P(0) = 2 * 1/4 * 2/3 = 1/3, P(1) = 1/2 * 1/2 + 1/4 * 1/3 = 1/3, P(2) = 1/3.
  const int64_t rows = 30000;
  Tensor probs = expand(fvec({0.5, 0.25, 0.25}, {1, 3}), {rows, 3});
  Generator g2(99);
  const std::vector<double> d = values(multinomial(probs, 2, false, &g2));
  std::vector<int64_t> first(3, 0), second(3, 0);
  for (int64_t r = 0; r < rows; ++r) {
    ++first[static_cast<size_t>(d[static_cast<size_t>(2 * r)])];
    ++second[static_cast<size_t>(d[static_cast<size_t>(2 * r + 1)])];
  }
  // 2 degrees of freedom: P(chi2 > 13.82) = 0.001
  EXPECT_LT(chi_square(first, {0.5, 0.25, 0.25}, rows), 13.82);
  EXPECT_LT(chi_square(second, {1.0 / 3, 1.0 / 3, 1.0 / 3}, rows), 13.82);
}

TEST(Multinomial, Errors) {
  EXPECT_KILN_ERROR(multinomial(fvec({0.5, -0.1}), 1, true), "multinomial", "< 0");
  EXPECT_KILN_ERROR(multinomial(fvec({0.5, NAN}), 1, true), "multinomial", "nan");
  EXPECT_KILN_ERROR(multinomial(fvec({0.5, INFINITY}), 1, true), "multinomial", "inf");
  EXPECT_KILN_ERROR(multinomial(fvec({0, 0, 1, 1}, {2, 2}), 1, true), "multinomial", "row 0", "positive sum");
  EXPECT_KILN_ERROR(multinomial(fvec({1, 0, 1}), 3, false), "multinomial", "without replacement", "2 categories");
  EXPECT_KILN_ERROR(multinomial(fvec({1, 1}), 3, false), "multinomial", "from 2 categories");
  EXPECT_KILN_ERROR(multinomial(fvec({1, 1}), 0, true), "multinomial", "num_samples = 0");
  EXPECT_KILN_ERROR(multinomial(ones({2, 2, 2}), 1, true), "multinomial", "1-D or 2-D");
  EXPECT_KILN_ERROR(multinomial(tensor_from({1, 2}), 1, true), "multinomial", "floating");
}

// ---- tril / triu / causal_mask -----------------------------------------------------------

TEST(Triangle, TrilTriu) {
  Tensor x = arange(1.0, 13.0).reshape({3, 4});
  EXPECT_TRUE(all_close(tril(x), {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}, 0));
  EXPECT_TRUE(all_close(tril(x, 1), {1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}, 0));
  EXPECT_TRUE(all_close(tril(x, -1), {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}, 0));
  EXPECT_TRUE(all_close(triu(x), {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}, 0));
  EXPECT_TRUE(all_close(triu(x, 2), {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}, 0));
  EXPECT_TRUE(all_close(triu(x, -1), {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}, 0));
  EXPECT_TRUE(all_close(tril(x, 10), values(x), 0));
  EXPECT_TRUE(all_close(triu(x, 10), std::vector<double>(12, 0.0), 0));
  // batched: the last two dims; a strided input
  Tensor b = stack({x, x}, 0);
  EXPECT_TRUE(bitwise_equal(tril(b).select(0, 1), tril(x)));
  EXPECT_TRUE(bitwise_equal(triu(x.t()), triu(x.t().contiguous())));
  EXPECT_EQ(tril(empty({2, 0, 3})).sizes(), Shape({2, 0, 3}));
  EXPECT_KILN_ERROR(tril(ones({3})), "tril", "at least 2 dims");
  Tensor xg = ones({2, 2}).set_requires_grad(true);
  sum(mul(triu(xg), fvec({1, 2, 3, 4}, {2, 2}))).backward();
  EXPECT_TRUE(all_close(xg.grad(), {1, 2, 0, 4}, 0));
}

TEST(Triangle, CausalMask) {
  Tensor m = causal_mask(3);
  EXPECT_EQ(m.sizes(), Shape({1, 1, 3, 3}));
  EXPECT_EQ(m.dtype(), DType::Float32);
  const double lo = std::numeric_limits<float>::lowest();
  EXPECT_EQ(values(m), (std::vector<double>{0, lo, lo, 0, 0, lo, 0, 0, 0}));
  Tensor mb = causal_mask(3, DType::Bool);
  EXPECT_EQ(mb.dtype(), DType::Bool);
  EXPECT_EQ(values(mb), (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(values(causal_mask(2, DType::Float16))[1], -65504.0);
  EXPECT_EQ(causal_mask(0).sizes(), Shape({1, 1, 0, 0}));
  // as attention takes it: row i of softmax(0 + mask) is uniform over keys 0..i
  Tensor probs = scaled_masked_softmax(zeros({2, 4, 3, 3}), 1.0, m);
  EXPECT_TRUE(all_close(probs.select(0, 1).select(0, 2), {1.0, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-6));
  // the bool form with masked_fill gives the same probabilities
  Tensor p2 = softmax(masked_fill(zeros({2, 4, 3, 3}), logical_not(mb), -INFINITY), -1);
  EXPECT_TRUE(all_close(p2, probs, 1e-6));
  EXPECT_KILN_ERROR(causal_mask(3, DType::Int64), "causal_mask", "floating-point", "bool");
  EXPECT_KILN_ERROR(causal_mask(-1), "causal_mask");
}

// ---- softmax / log_softmax with an output dtype ----------------------------------------------

TEST(SoftmaxDtype, LowPrecisionInWideOut) {
  Tensor x = randn({4, 7}).to(DType::BFloat16);
  Tensor p = softmax(x, -1, DType::Float32);
  EXPECT_EQ(p.dtype(), DType::Float32);
  EXPECT_TRUE(bitwise_equal(p, softmax(x.to(DType::Float32), -1)));
  Tensor lp = log_softmax(x, 0, DType::Float64);
  EXPECT_EQ(lp.dtype(), DType::Float64);
  EXPECT_TRUE(bitwise_equal(lp, log_softmax(x.to(DType::Float64), 0)));
  // a narrower output: computed in float32, rounded once
  Tensor xf = randn({3, 5});
  EXPECT_TRUE(bitwise_equal(softmax(xf, 1, DType::Float16), softmax(xf, 1).to(DType::Float16)));
  // gradients reach the bfloat16 input in its dtype
  Tensor xg = x.detach().set_requires_grad(true);
  sum(softmax(xg, -1, DType::Float32)).backward();
  EXPECT_EQ(xg.grad().dtype(), DType::BFloat16);
  EXPECT_KILN_ERROR(softmax(xf, 1, DType::Int64), "softmax", "output dtype must be floating-point");
  EXPECT_KILN_ERROR(log_softmax(xf, 2, DType::Float32), "log_softmax");
}

// ---- where / masked_fill broadcasting --------------------------------------------------------------

TEST(WhereMaskedFill, BroadcastAllOperands) {
  Tensor c = gt(fvec({1, -1, 1}, {3, 1}), 0.0);  // (3, 1)
  Tensor a = fvec({10, 20}, {1, 2});            // (1, 2)
  Tensor b = fvec({-1, -2, -3}, {3, 1});        // (3, 1)
  Tensor w = where(c, a, b);
  EXPECT_EQ(w.sizes(), Shape({3, 2}));
  EXPECT_TRUE(all_close(w, {10, 20, -2, -2, 10, 20}, 0));
  EXPECT_TRUE(all_close(where(c, 5.0, b), {5, -2, 5}, 0));
  EXPECT_TRUE(all_close(where(c, b, 7.0), {-1, 7, -3}, 0));
  EXPECT_KILN_ERROR(where(c, fvec({1, 2, 3, 4}, {1, 4}), fvec({1, 2}, {2, 1})), "where: condition [3, 1], a [1, 4] and "
                    "b [2, 1] cannot be broadcast together");
  EXPECT_KILN_ERROR(where(fvec({1}), a, b), "where", "bool");
}

TEST(WhereMaskedFill, MaskedFillBroadcastsAndTakesATensorValue) {
  Tensor x = fvec({1, 2, 3});                              // (3)
  Tensor m = gt(fvec({1, -1}, {2, 1}), 0.0);               // (2, 1)
  Tensor y = masked_fill(x, m, -5.0);                      // broadcast to (2, 3)
  EXPECT_EQ(y.sizes(), Shape({2, 3}));
  EXPECT_TRUE(all_close(y, {-5, -5, -5, 1, 2, 3}, 0));
  Tensor v = scalar_tensor(4.0).set_requires_grad(true);
  Tensor xg = fvec({1, 2, 3, 4}, {2, 2}).set_requires_grad(true);
  Tensor mask = gt(fvec({1, -1, 1, 1}, {2, 2}), 0.0);
  Tensor z = masked_fill(xg, mask, v);
  EXPECT_TRUE(all_close(z, {4, 2, 4, 4}, 0));
  sum(mul(z, fvec({1, 2, 3, 4}, {2, 2}))).backward();
  EXPECT_DOUBLE_EQ(v.grad().item<double>(), 8.0);  // 1 + 3 + 4
  EXPECT_TRUE(all_close(xg.grad(), {0, 2, 0, 0}, 0));
  EXPECT_KILN_ERROR(masked_fill(x, gt(fvec({1, 1}), 0.0), 0.0), "masked_fill: mask [2] and input [3] cannot be broadcast");
  EXPECT_KILN_ERROR(masked_fill(x, m, fvec({1, 2})), "masked_fill", "0-dim");
  EXPECT_KILN_ERROR(masked_fill(x, fvec({1, 0, 1}), 0.0), "masked_fill", "bool");
}

}  // namespace
}  // namespace kiln
