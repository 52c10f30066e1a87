// Forward results against double-precision references computed here with plain
// loops (no kiln ops): matmul, reductions, softmax, layer_norm, cross_entropy,
// gelu; and float16/bfloat16 results against float32 within their precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/grad_compare.h"
#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::rnd;
using testing::all_close;
using testing::ref_strides;
using testing::values;
using F64 = std::vector<double>;

// ---- references ----------------------------------------------------------------

// torch.matmul on row-major values: 1-D operands are promoted and their dim
// dropped from the result; batch dims broadcast.
F64 ref_matmul(const F64& a, Shape as, const F64& b, Shape bs) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as = {1, as[0]};
  if (b1) bs = {bs[0], 1};
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  Shape batch(nb);
  auto dim_of = [nb](const Shape& s, size_t i) { return i < nb - s.size() ? 1 : s[i - (nb - s.size())]; };
  int64_t total = 1;
  for (size_t i = 0; i < nb; ++i) total *= (batch[i] = std::max(dim_of(ab, i), dim_of(bb, i)));
  F64 out;
  for (int64_t bi = 0; bi < total; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, sa = 1, sb = 1;
    for (size_t i = nb; i-- > 0;) {
      const int64_t idx = rem % batch[i];
      rem /= batch[i];
      if (dim_of(ab, i) > 1) oa += idx * sa;
      if (dim_of(bb, i) > 1) ob += idx * sb;
      sa *= dim_of(ab, i);
      sb *= dim_of(bb, i);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += a[oa * M * K + m * K + k] * b[ob * K * N + k * N + n];
        out.push_back(acc);
      }
  }
  return out;
}

// Flat indices of every line of `shape` along dim d (each line in order).
std::vector<std::vector<int64_t>> lines(const Shape& shape, int64_t d) {
  const auto st = ref_strides(shape);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < n; ++i) {
    if ((i / st[d]) % shape[d] != 0) continue;
    std::vector<int64_t> line;
    for (int64_t k = 0; k < shape[d]; ++k) line.push_back(i + k * st[d]);
    out.push_back(line);
  }
  return out;
}

// Output slot (row-major over kept dims) of every input element.
std::vector<int64_t> reduce_slots(const Shape& shape, const Shape& dims, int64_t& n_out) {
  const auto st = ref_strides(shape);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto reduced = [&](int64_t d) { return dims.empty() || std::count(dims.begin(), dims.end(), d) > 0; };
  std::vector<int64_t> slot(static_cast<size_t>(n));
  n_out = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!reduced(static_cast<int64_t>(d))) n_out *= shape[d];
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!reduced(static_cast<int64_t>(d))) o = o * shape[d] + (i / st[d]) % shape[d];
    slot[static_cast<size_t>(i)] = o;
  }
  return slot;
}

// ---- matmul -------------------------------------------------------------------------

TEST(OpsReference, MatmulShapes) {
  struct Case { Shape a, b; bool ta, tb; };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 3}, false, false},       {{64, 33}, {33, 17}, false, false},
      {{5, 7}, {7, 3}, true, false},        {{5, 7}, {7, 3}, false, true},
      {{6, 9}, {9, 4}, true, true},         {{2, 1, 4, 6}, {3, 6, 5}, false, false},
      {{3, 4, 8}, {8, 2}, false, false},    {{2, 3, 4, 8}, {8, 5}, false, true},
      {{4, 6}, {2, 6, 3}, false, false},    {{7}, {7, 3}, false, false},
      {{3, 7}, {7}, false, false},          {{9}, {9}, false, false},
      {{7}, {2, 7, 3}, false, false},       {{2, 3, 7}, {7}, false, false},
      {{1, 128}, {128, 1}, false, false},   {{0, 4}, {4, 3}, false, false},
      {{3, 0}, {0, 2}, false, false}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b) + (c.ta ? " a^T" : "") + (c.tb ? " b^T" : ""));
    Tensor a = rnd(c.a, seed++), b = rnd(c.b, seed++);
    // Transposed views with the same logical values.
    if (c.ta) a = a.transpose(-1, -2).contiguous().transpose(-1, -2);
    if (c.tb) b = b.transpose(-1, -2).contiguous().transpose(-1, -2);
    if (c.ta) {
      ASSERT_FALSE(a.is_contiguous());
    }
    Tensor y = matmul(a, b);
    const F64 want = ref_matmul(values(a), c.a, values(b), c.b);
    EXPECT_EQ(y.numel(), static_cast<int64_t>(want.size()));
    EXPECT_TRUE(all_close(y, want, 1e-4, 1e-4));
  }
  EXPECT_EQ(matmul(rnd({2, 1, 4, 6}, 1), rnd({3, 6, 5}, 2)).sizes(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(matmul(rnd({7}, 1), rnd({2, 7, 3}, 2)).sizes(), (Shape{2, 3}));
  EXPECT_EQ(matmul(rnd({9}, 1), rnd({9}, 2)).dim(), 0);
  EXPECT_EQ(values(matmul(rnd({3, 0}, 1), rnd({0, 2}, 2))), F64(6, 0.0));
  // a strided (every other element) vector and an expanded (stride 0) operand
  Tensor v = rnd({14}, 5).slice(0, 0, 14, 2);
  Tensor m = rnd({7, 3}, 6);
  EXPECT_TRUE(all_close(matmul(v, m), ref_matmul(values(v), {7}, values(m), {7, 3}), 1e-4, 1e-4));
  Tensor row = rnd({1, 7}, 7).expand({4, 7});
  EXPECT_TRUE(all_close(matmul(row, m), ref_matmul(values(row), {4, 7}, values(m), {7, 3}), 1e-4, 1e-4));
  // integers are exact
  Tensor ia = tensor_from({1, 2, 3, 4, 5, 6}, {2, 3}), ib = tensor_from({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_EQ(matmul(ia, ib).to_vector<int64_t>(), (std::vector<int64_t>{58, 64, 139, 154}));
}

// Shape errors name the caller's shapes, not the folded or unsqueezed ones
// the kernel sees (a (2, 5, 8) @ (8, 3) product runs as (10, 8) @ (8, 3)).
TEST(OpsReference, MatmulErrorsNameTheCallersShapes) {
  EXPECT_KILN_ERROR(matmul(rnd({2, 5, 8}, 1), rnd({9, 3}, 2)), "matmul: shapes [2, 5, 8] and [9, 3] cannot be multiplied (8 vs 9)");
  EXPECT_KILN_ERROR(matmul(rnd({7}, 1), rnd({2, 6, 3}, 2)), "matmul: shapes [7] and [2, 6, 3] cannot be multiplied (7 vs 6)");
  EXPECT_KILN_ERROR(matmul(rnd({4, 5}, 1), rnd({6}, 2)), "matmul: shapes [4, 5] and [6] cannot be multiplied (5 vs 6)");
  EXPECT_KILN_ERROR(matmul(rnd({9}, 1), rnd({8}, 2)), "matmul: shapes [9] and [8] cannot be multiplied (9 vs 8)");
  EXPECT_KILN_ERROR(matmul(rnd({2, 3, 4, 5}, 1), rnd({4, 5, 6}, 2)),
                    "matmul: shapes [2, 3, 4, 5] and [4, 5, 6] have batch dimensions that do not broadcast (3 vs 4 at dim -3)");
}

// ---- reductions ---------------------------------------------------------------------------

TEST(OpsReference, SumMeanVarAmaxOverDims) {
  const Shape shape{3, 4, 5};
  Tensor x = rnd(shape, 11);
  const F64 xv = values(x);
  const std::vector<Shape> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}};
  for (const Shape& dims_in : dim_sets) {
    SCOPED_TRACE("dims " + shape_str(dims_in));
    Shape dims;
    for (int64_t d : dims_in) dims.push_back(d < 0 ? d + 3 : d);
    int64_t n_out = 0;
    const auto slot = reduce_slots(shape, dims, n_out);
    F64 s(n_out, 0.0), cnt(n_out, 0.0), mx(n_out, -INFINITY), mn(n_out, INFINITY), sq(n_out, 0.0);
    for (size_t i = 0; i < xv.size(); ++i) {
      s[slot[i]] += xv[i];
      cnt[slot[i]] += 1;
      mx[slot[i]] = std::max(mx[slot[i]], xv[i]);
      mn[slot[i]] = std::min(mn[slot[i]], xv[i]);
    }
    F64 mu(n_out), var1(n_out), var0(n_out);
    for (int64_t o = 0; o < n_out; ++o) mu[o] = s[o] / cnt[o];
    for (size_t i = 0; i < xv.size(); ++i) sq[slot[i]] += (xv[i] - mu[slot[i]]) * (xv[i] - mu[slot[i]]);
    for (int64_t o = 0; o < n_out; ++o) {
      var1[o] = sq[o] / (cnt[o] - 1);
      var0[o] = sq[o] / cnt[o];
    }
    EXPECT_TRUE(all_close(sum(x, dims_in), s, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(sum(x.permute({2, 0, 1}).contiguous().permute({1, 2, 0}), dims_in), s, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(mean(x, dims_in, true), mu, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(var(x, dims_in), var1, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(var(x, dims_in, 0), var0, 1e-5, 1e-5));
    EXPECT_EQ(values(amax(x, dims_in)), mx);
    EXPECT_EQ(values(amin(x, dims_in)), mn);
    if (dims_in.empty()) continue;
    Shape keep = shape;
    for (int64_t d : dims) keep[d] = 1;
    EXPECT_EQ(sum(x, dims_in, true).sizes(), keep);
  }
  EXPECT_EQ(sum(x).dim(), 0);
  EXPECT_EQ(sum(x, {1}).sizes(), (Shape{3, 5}));
  Tensor ints = tensor_from({1, -2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(ints, {0}).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 9}));
  EXPECT_EQ(sum(ints, {1}).to_vector<int64_t>(), (std::vector<int64_t>{2, 15}));
  EXPECT_EQ(values(amax(ints, {1})), (F64{3, 6}));
}

TEST(OpsReference, ArgmaxAndMaxOverDims) {
  const Shape shape{4, 6, 5};
  Tensor x = rnd(shape, 12);
  const F64 xv = values(x);
  for (int64_t d = 0; d < 3; ++d) {
    std::vector<int64_t> want_i;
    F64 want_v;
    for (const auto& line : lines(shape, d)) {
      int64_t best = 0;
      for (int64_t k = 1; k < static_cast<int64_t>(line.size()); ++k)
        if (xv[line[k]] > xv[line[best]]) best = k;
      want_i.push_back(best);
      want_v.push_back(xv[line[best]]);
    }
    // lines() enumerates outputs in row-major order of the kept dims
    EXPECT_EQ(argmax(x, d).to_vector<int64_t>(), want_i) << "dim " << d;
    EXPECT_EQ(max(x, d).indices.to_vector<int64_t>(), want_i);
    EXPECT_EQ(values(max(x, d).values), want_v);
  }
  EXPECT_EQ(argmax(x, -1, true).sizes(), (Shape{4, 6, 1}));
  const auto it = std::max_element(xv.begin(), xv.end());
  EXPECT_EQ(argmax(x).item<int64_t>(), it - xv.begin());
  EXPECT_EQ(max(x).item<double>(), *it);
  EXPECT_EQ(argmax(tensor({1, 3, 3, 2})).item<int64_t>(), 1);  // first of ties
  EXPECT_EQ(argmax(tensor({1, NAN, 3})).item<int64_t>(), 1);   // NaN is the maximum
}

// ---- softmax, layer_norm, cross_entropy, gelu ------------------------------------------------

TEST(OpsReference, SoftmaxAndLogSoftmax) {
  const Shape shape{3, 4, 5};
  Tensor x = rnd(shape, 13) * 3.0;
  const F64 xv = values(x);
  for (int64_t d : {0, 1, 2, -1}) {
    const int64_t dd = d < 0 ? d + 3 : d;
    F64 sm(xv.size()), lsm(xv.size());
    for (const auto& line : lines(shape, dd)) {
      double m = -INFINITY, s = 0;
      for (int64_t i : line) m = std::max(m, xv[i]);
      for (int64_t i : line) s += std::exp(xv[i] - m);
      for (int64_t i : line) {
        sm[i] = std::exp(xv[i] - m) / s;
        lsm[i] = xv[i] - m - std::log(s);
      }
    }
    EXPECT_TRUE(all_close(softmax(x, d), sm, 1e-6, 1e-5)) << "dim " << d;
    EXPECT_TRUE(all_close(log_softmax(x, d), lsm, 1e-5, 1e-6)) << "dim " << d;
    EXPECT_TRUE(all_close(softmax(x.transpose(0, 2), d), values(softmax(x.transpose(0, 2).contiguous(), d)), 0));
  }
  // stability and masked entries
  EXPECT_EQ(values(softmax(tensor({1000, 1000}), 0)), (F64{0.5, 0.5}));
  EXPECT_EQ(values(softmax(tensor({0, -INFINITY}), 0)), (F64{1, 0}));
  EXPECT_TRUE(all_close(log_softmax(tensor({1000, 0}), 0), {0, -1000}, 1e-4));
}

TEST(OpsReference, LayerNorm) {
  Tensor x = rnd({4, 6}, 14) * 2.0 + 1.0, w = rnd({6}, 15), b = rnd({6}, 16);
  const F64 xv = values(x), wv = values(w), bv = values(b);
  F64 want;
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 6; ++c) m += xv[r * 6 + c] / 6;
    for (int c = 0; c < 6; ++c) v += (xv[r * 6 + c] - m) * (xv[r * 6 + c] - m) / 6;
    for (int c = 0; c < 6; ++c) want.push_back((xv[r * 6 + c] - m) / std::sqrt(v + 1e-5) * wv[c] + bv[c]);
  }
  EXPECT_TRUE(all_close(layer_norm(x, {6}, w, b, 1e-5), want, 1e-5, 1e-5));
  // no affine, normalised over the last two dims, eps visible
  Tensor y = rnd({2, 3, 4}, 17) * 0.01;
  const F64 yv = values(y);
  F64 want2;
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 12; ++c) m += yv[r * 12 + c] / 12;
    for (int c = 0; c < 12; ++c) v += (yv[r * 12 + c] - m) * (yv[r * 12 + c] - m) / 12;
    for (int c = 0; c < 12; ++c) want2.push_back((yv[r * 12 + c] - m) / std::sqrt(v + 1e-3));
  }
  EXPECT_TRUE(all_close(layer_norm(y, {3, 4}, Tensor(), Tensor(), 1e-3), want2, 1e-5, 1e-5));
}

TEST(OpsReference, CrossEntropyWithIgnoreIndexAndSmoothing) {
  const int64_t N = 6, C = 5;
  Tensor logits = rnd({N, C}, 18) * 2.0;
  const std::vector<int64_t> tv = {1, -100, 4, 0, -100, 2};
  const F64 xv = values(logits);
  for (double eps : {0.0, 0.1, 1.0}) {
    SCOPED_TRACE("label_smoothing " + std::to_string(eps));
    F64 rows;
    double total = 0, counted = 0;
    for (int64_t n = 0; n < N; ++n) {
      double m = -INFINITY, s = 0, mean_neg_logp = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, xv[n * C + c]);
      for (int64_t c = 0; c < C; ++c) s += std::exp(xv[n * C + c] - m);
      const double lse = m + std::log(s);
      for (int64_t c = 0; c < C; ++c) mean_neg_logp += (lse - xv[n * C + c]) / C;
      const double loss = tv[n] == -100 ? 0.0 : (1 - eps) * (lse - xv[n * C + tv[n]]) + eps * mean_neg_logp;
      rows.push_back(loss);
      total += loss;
      counted += tv[n] != -100;
    }
    Tensor t = tensor_from(tv);
    EXPECT_TRUE(all_close(cross_entropy(logits, t, -100, eps, "none"), rows, 1e-5, 1e-5));
    EXPECT_NEAR(cross_entropy(logits, t, -100, eps, "sum").item<double>(), total, 1e-4);
    EXPECT_NEAR(cross_entropy(logits, t, -100, eps).item<double>(), total / counted, 1e-5);
  }
  // 3-D logits, int32 targets, a custom ignore_index that is also a valid class
  Tensor l3 = logits.reshape({2, 3, C});
  Tensor t3 = tensor_from({1, 3, 4, 0, 3, 2}, {2, 3}, DType::Int32);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t target = t3.to_vector<int64_t>()[n];
    if (target == 3) continue;
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(xv[n * C + c]);
    total += std::log(s) - xv[n * C + target];
  }
  Tensor loss3 = cross_entropy(l3, t3, 3, 0.0, "mean");
  EXPECT_EQ(loss3.dim(), 0);
  EXPECT_NEAR(loss3.item<double>(), total / 4, 1e-5);
  EXPECT_EQ(cross_entropy(l3, t3, 3, 0.0, "none").sizes(), (Shape{2, 3}));
  // every target ignored: mean is NaN (0/0), as in PyTorch
  EXPECT_TRUE(std::isnan(cross_entropy(logits, full({N}, -100, DType::Int64)).item<double>()));
}

TEST(OpsReference, GeluExactAndTanh) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = arange(-6.0, 6.0, 0.01, dt);
    const F64 xv = values(x);
    F64 exact, approx;
    for (double v : xv) {
      exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
      approx.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    const double tol = dt == DType::Float32 ? 2e-6 : 1e-14;
    EXPECT_TRUE(all_close(gelu(x), exact, tol, tol));
    EXPECT_TRUE(all_close(gelu(x, "tanh"), approx, tol, tol));
  }
  EXPECT_EQ(values(gelu(tensor({0.0, 20.0, -20.0}))), (F64{0.0, 20.0, -0.0}));
  EXPECT_EQ(values(gelu(tensor({0.0, 20.0}), "tanh")), (F64{0.0, 20.0}));
}

// ---- 16-bit floats against float32 ------------------------------------------------------------

// Relative precision of one rounding to the dtype, with a little slack.
double rtol_of(DType dt) { return dt == DType::Float16 ? 1.0e-3 : 8.0e-3; }

TEST(OpsReference, LowPrecisionAgreesWithFloat32) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator g(21);
    // Inputs already representable in dt, so only the op's own rounding differs.
    Tensor a = rand({64, 512}, {}, &g).to(dt), b = rand({64, 512}, {}, &g).to(dt);
    Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);

    Tensor s = a + b;
    EXPECT_EQ(s.dtype(), dt);
    EXPECT_TRUE(testing::bitwise_equal(s.to(DType::Float32), (a32 + b32).to(dt).to(DType::Float32)));

    // sums of positive values: accumulating in dt itself would stall far off
    EXPECT_TRUE(all_close(sum(a).to(DType::Float32), values(sum(a32.to(DType::Float64))), 0, rtol_of(dt)));
    EXPECT_TRUE(all_close(sum(a, {0}), values(sum(a32.to(DType::Float64), {0})), 0, rtol_of(dt)));
    EXPECT_TRUE(all_close(sum(a, {1}), values(sum(a32.to(DType::Float64), {1})), 0, rtol_of(dt)));
    EXPECT_EQ(sum(a).dtype(), dt);

    Tensor m = matmul(a, b.t());  // K = 512
    EXPECT_EQ(m.dtype(), dt);
    EXPECT_TRUE(all_close(m, values(matmul(a32.to(DType::Float64), b32.t().to(DType::Float64))), 0, rtol_of(dt)));

    Tensor sm = softmax(a * 8.0, -1);
    EXPECT_EQ(sm.dtype(), dt);
    EXPECT_TRUE(all_close(sm, values(softmax((a32 * 8.0).to(DType::Float64), -1)), 1e-6, rtol_of(dt)));
    EXPECT_TRUE(all_close(sum(sm.to(DType::Float32), {-1}), F64(64, 1.0), 0, 2 * rtol_of(dt)));
  }
}

TEST(OpsReference, LowPrecisionMeanDoesNotOverflow) {
  // The mean of 16-bit values is representable even when their sum is not
  // (float16 max 65504), as with PyTorch, which accumulates and divides in float32.
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(mean(ones({70000}, dt)).item<double>(), 1.0);
    EXPECT_EQ(mean(full({4096}, 20.0, dt)).item<double>(), 20.0);  // sum 81920
    EXPECT_TRUE(all_close(mean(ones({300, 300}, dt), {1}), std::vector<double>(300, 1.0), 0));
    EXPECT_EQ(mean(ones({300, 300}, dt), {0, 1}).item<double>(), 1.0);
  }
}

}  // namespace
}  // namespace kiln
