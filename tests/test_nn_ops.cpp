// Each fused neural-network kernel against the same op composed from
// primitives, forward and gradients (in float32 and float64); embedding's
// padding_idx; dropout's statistics and determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/backend.h"
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
using testing::values;
using F64 = std::vector<double>;

double tol_of(DType dt) { return dt == DType::Float64 ? 1e-12 : 2e-5; }

void expect_same(const Fn& fused, const Fn& composed, const TensorList& inputs, DType dt) {
  const GradResult a = run_with_grads(fused, inputs), b = run_with_grads(composed, inputs);
  EXPECT_EQ(a.out.dtype(), b.out.dtype());
  EXPECT_TRUE(all_close(a.out, b.out, tol_of(dt), tol_of(dt))) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(all_close(a.grads[i], b.grads[i], tol_of(dt), tol_of(dt))) << "gradient of input " << i;
}

const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64};

TEST(NnOps, SoftmaxMatchesComposition) {
  for (DType dt : kFloatTypes)
    for (int64_t d : {-1, 0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(d));
      auto composed = [d](const TensorList& x) {
        Tensor m = amax(x[0].detach(), {d}, true);
        Tensor e = exp(x[0] - m);
        return e / sum(e, {d}, true);
      };
      expect_same([d](const TensorList& x) { return softmax(x[0], d); }, composed, {rnd({4, 5, 6}, 1, dt, 3.0)},
                  dt);
    }
}

TEST(NnOps, LogSoftmaxMatchesComposition) {
  for (DType dt : kFloatTypes)
    for (int64_t d : {-1, 0}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(d));
      auto composed = [d](const TensorList& x) {
        Tensor m = amax(x[0].detach(), {d}, true);
        return x[0] - m - log(sum(exp(x[0] - m), {d}, true));
      };
      expect_same([d](const TensorList& x) { return log_softmax(x[0], d); }, composed,
                  {rnd({4, 5, 6}, 2, dt, 3.0)}, dt);
    }
}

TEST(NnOps, SoftmaxOfScalar) {
  // A 0-dim input is its own (one-element) row: softmax 1, log_softmax 0, gradient 0.
  EXPECT_EQ(softmax(scalar_tensor(2.0), 0).item<double>(), 1.0);
  EXPECT_EQ(log_softmax(scalar_tensor(2.0), -1).item<double>(), 0.0);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Tensor s = scalar_tensor(2.0);
        s.set_requires_grad(true);
        softmax(s, 0).backward();
        std::exit(s.grad().defined() && s.grad().item<double>() == 0.0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(NnOps, LayerNormMatchesComposition) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double eps = 1e-5;
    auto composed = [eps](const TensorList& x) {
      Tensor mu = mean(x[0], {-1}, true);
      Tensor v = var(x[0], {-1}, 0, true);
      return (x[0] - mu) / sqrt(v + eps) * x[1] + x[2];
    };
    auto fused = [eps](const TensorList& x) { return layer_norm(x[0], {16}, x[1], x[2], eps); };
    expect_same(fused, composed, {rnd({3, 8, 16}, 3, dt, 2.0) + 0.5, rnd({16}, 4, dt), rnd({16}, 5, dt)}, dt);
    // many rows (several weight-gradient blocks) and a non-contiguous input
    expect_same([eps](const TensorList& x) { return layer_norm(x[0].t(), {8}, x[1], x[2], eps); },
                [&composed](const TensorList& x) { return composed({x[0].t(), x[1], x[2]}); },
                {rnd({8, 200}, 6, dt), rnd({8}, 7, dt), rnd({8}, 8, dt)}, dt);
    // normalised over two dims, no affine
    expect_same([](const TensorList& x) { return layer_norm(x[0], {3, 4}, Tensor(), Tensor(), 1e-3); },
                [](const TensorList& x) {
                  Tensor mu = mean(x[0], {-2, -1}, true);
                  return (x[0] - mu) * rsqrt(var(x[0], {-2, -1}, 0, true) + 1e-3);
                },
                {rnd({2, 3, 4}, 9, dt)}, dt);
  }
}

TEST(NnOps, GeluMatchesComposition) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const TensorList in = {rnd({5, 40}, 10, dt, 2.5)};
    expect_same([](const TensorList& x) { return gelu(x[0]); },
                [](const TensorList& x) { return x[0] * 0.5 * (1.0 + erf(x[0] * M_SQRT1_2)); }, in, dt);
    expect_same([](const TensorList& x) { return gelu(x[0], "tanh"); },
                [](const TensorList& x) {
                  const double k = std::sqrt(2.0 / M_PI);
                  return x[0] * 0.5 * (1.0 + tanh((x[0] + pow(x[0], 3.0) * 0.044715) * k));
                },
                in, dt);
  }
}

TEST(NnOps, CrossEntropyMatchesComposition) {
  const int64_t N = 7, C = 5;
  const Tensor target = tensor_from({1, -100, 4, 0, 2, -100, 4});
  for (DType dt : kFloatTypes)
    for (double eps : {0.0, 0.1})
      for (const char* reduction : {"mean", "sum", "none"}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " smoothing " + std::to_string(eps) + " " + reduction);
        auto composed = [&, eps, reduction](const TensorList& x) {
          Tensor logp = log_softmax(x[0], -1);
          Tensor onehot = eq(arange(C).view({1, C}), target.view({N, 1})).to(x[0].dtype());
          Tensor nll = -sum(logp * onehot, {-1});
          Tensor smooth = -mean(logp, {-1});
          Tensor valid = ne(target, -100.0).to(x[0].dtype());
          Tensor rows = (nll * (1.0 - eps) + smooth * eps) * valid;
          const std::string r = reduction;
          if (r == "none") return rows;
          if (r == "sum") return sum(rows);
          return sum(rows) / sum(valid);
        };
        expect_same([&, eps, reduction](const TensorList& x) { return cross_entropy(x[0], target, -100, eps, reduction); },
                    composed, {rnd({N, C}, 11, dt, 2.0)}, dt);
      }
}

TEST(NnOps, EmbeddingMatchesIndexSelect) {
  const Tensor ids = tensor_from({3, 1, 3, 0, 9, 3, 1, 1, 2, 7, 3, 5, 6, 0, 9}, {3, 5});
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    expect_same([&](const TensorList& x) { return embedding(x[0], ids); },
                [&](const TensorList& x) { return index_select(x[0], 0, ids.reshape({-1})).reshape({3, 5, 4}); },
                {rnd({10, 4}, 12, dt)}, dt);
  }
  Tensor w = rnd({10, 4}, 12, DType::Float32);
  EXPECT_EQ(embedding(w, ids).sizes(), (Shape{3, 5, 4}));
  EXPECT_EQ(values(embedding(w, ids.to(DType::Int32))), values(embedding(w, ids)));
  EXPECT_EQ(values(embedding(w, tensor_from({9}, {1})).view({4})), values(w.select(0, 9)));
}

TEST(NnOps, EmbeddingPaddingRowGetsNoGradient) {
  const int64_t V = 6, C = 3, pad = 0;
  const std::vector<int64_t> idv = {0, 2, 0, 5, 2, 2, 1, 0};
  Tensor w = rnd({V, C}, 13, DType::Float32);
  w.set_requires_grad(true);
  Tensor ids = tensor_from(idv, {2, 4});
  Tensor out = embedding(w, ids, pad);
  // forward still returns the padding row's values
  EXPECT_EQ(values(out.select(0, 0).select(0, 0)), values(w.select(0, 0)));
  Tensor g = rnd({2, 4, C}, 14, DType::Float32);
  sum(out * g).backward();
  const F64 gv = values(g);
  F64 want(V * C, 0.0);
  for (size_t i = 0; i < idv.size(); ++i)
    if (idv[i] != pad)
      for (int64_t c = 0; c < C; ++c) want[idv[i] * C + c] += gv[i * C + c];
  EXPECT_TRUE(all_close(w.grad(), want, 1e-6));
  EXPECT_EQ(values(w.grad().select(0, pad)), F64(C, 0.0));
  EXPECT_NE(values(w.grad().select(0, 2)), F64(C, 0.0));
  EXPECT_EQ(values(w.grad().select(0, 3)), F64(C, 0.0));  // unused row
}

// The message of the kiln::Error fn throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// On the CPU the index checks are eager and name the first offender
// (Note [Lazy index checks] covers CUDA: tests/test_cuda_index.cpp).
TEST(NnOps, OutOfRangeIdsAndTargetsFailAtOnceOnTheCpu) {
  const Tensor w = rnd({5, 3}, 15, DType::Float32);
  EXPECT_EQ(error_of([&] { embedding(w, tensor_from({1, 7, 2, 9})); }),
            "embedding: id 7 at position 1 is out of range for 5 embeddings");
  EXPECT_EQ(error_of([&] { embedding(w, tensor_from({0, 4, -1}, {1, 3})); }),
            "embedding: id -1 at position 2 is out of range for 5 embeddings");
  EXPECT_EQ(error_of([&] { embedding(w, tensor_from({4, 5}).to(DType::Int32)); }),
            "embedding: id 5 at position 1 is out of range for 5 embeddings");
  EXPECT_EQ(error_of([&] { embedding(w, tensor_from({4, 0, 3})); }), "");
  const Tensor logits = rnd({4, 5}, 16, DType::Float32);
  EXPECT_EQ(error_of([&] { cross_entropy(logits, tensor_from({0, -100, 5, 1}), -100); }),
            "cross_entropy: target 5 at position 2 is out of range for 5 classes");
  EXPECT_EQ(error_of([&] { cross_entropy(logits, tensor_from({0, -7, 4, 1}), -100, 0.0, "none"); }),
            "cross_entropy: target -7 at position 1 is out of range for 5 classes");
  // an ignored target may be any value, even one outside [0, C)
  EXPECT_EQ(error_of([&] { cross_entropy(logits, tensor_from({-3, 2, -3, 4}), -3); }), "");
}

TEST(NnOps, CrossEntropyMeanCountsTheTargetsNotIgnored) {
  const Tensor logits = rnd({5, 4}, 17, DType::Float32);
  const Tensor target = tensor_from({3, -100, 0, -100, 2});
  const double total = values(cross_entropy(logits, target, -100, 0.0, "sum"))[0];
  EXPECT_EQ(values(cross_entropy(logits, target, -100))[0], static_cast<double>(static_cast<float>(total) / 3.0f));
  EXPECT_TRUE(std::isnan(values(cross_entropy(logits, tensor_from({-100, -100, -100, -100, -100}), -100))[0]));
  EXPECT_TRUE(std::isnan(values(cross_entropy(zeros({0, 4}), tensor_from(std::vector<int64_t>{}, {0})))[0]));
}

// Backend::check_index, the CPU's (and the fallback of every device): eager,
// names from IndexCheck, the kept entries counted.
TEST(NnOps, CpuCheckIndexNamesTheFirstOffenderAndCounts) {
  Backend& be = cpu_backend();
  const IndexCheck what{"gather", "row", "rows"};
  Tensor counted = zeros({}, DType::Int64);
  be.check_index(tensor_from({2, -1, 0, -1, 2, 1}), 3, int64_t{-1}, what, counted);
  EXPECT_EQ(counted.item<int64_t>(), 4);
  be.check_index(tensor_from({2, 0}), 3, std::nullopt, what, counted);
  EXPECT_EQ(counted.item<int64_t>(), 2);
  be.check_index(tensor_from({2, 0}), 3, std::nullopt, what, Tensor());  // no count asked for
  EXPECT_EQ(error_of([&] { be.check_index(tensor_from({2, 3, 4}), 3, std::nullopt, what, counted); }),
            "gather: row 3 at position 1 is out of range for 3 rows");
  EXPECT_EQ(error_of([&] { be.check_index(tensor_from({-1, -2}), 3, int64_t{-1}, what, Tensor()); }),
            "gather: row -2 at position 1 is out of range for 3 rows");
  be.raise_deferred_errors();  // the CPU defers nothing
}

TEST(NnOps, Dropout) {
  Generator g(99);
  Tensor x = rand({100000}, {}, &g) + 0.5;  // no zeros in x
  EXPECT_EQ(values(dropout(x, 0.0, true, &g)), values(x));
  EXPECT_EQ(values(dropout(x, 0.5, false, &g)), values(x));
  EXPECT_EQ(values(dropout(x, 1.0, true, &g)), F64(100000, 0.0));
  EXPECT_KILN_ERROR(dropout(x, 1.5, true), "dropout", "1.5");

  Generator g1(5), g2(5), g3(6);
  Tensor y = dropout(x, 0.5, true, &g1);
  const F64 xv = values(x), yv = values(y);
  int64_t zeros_seen = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) ++zeros_seen;
    else ASSERT_EQ(yv[i], static_cast<double>(static_cast<float>(xv[i] * 2))) << i;
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 100000, 0.5, 0.01);
  EXPECT_EQ(values(dropout(x, 0.5, true, &g2)), yv);  // same seed, same mask
  EXPECT_NE(values(dropout(x, 0.5, true, &g3)), yv);
  Tensor p3 = dropout(x, 0.2, true, &g1);
  double dropped = 0;
  for (double v : values(p3)) dropped += v == 0.0;
  EXPECT_NEAR(dropped / 100000, 0.2, 0.01);

  // the gradient is the same mask and scale
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  Generator g4(5);
  sum(dropout(leaf, 0.5, true, &g4)).backward();
  const F64 gv = values(leaf.grad());
  for (size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(gv[i], yv[i] == 0.0 ? 0.0 : 2.0) << i;
}

// The composite losses against their formulas evaluated in double, element by
// element, and their gradients: d mse / dx = 2 (x - y) / n; d bce / dx =
// (sigmoid(x) - y) / n. Logits of +-60 stay finite (the stable form).
TEST(Losses, MseAndBinaryCrossEntropyMatchTheirFormulas) {
  const std::vector<double> x = {-60.0, -2.5, -0.3, 0.0, 0.7, 3.0, 60.0, 1.5};
  const std::vector<double> y = {0.0, 1.0, 0.25, 1.0, 0.0, 1.0, 0.0, 0.5};
  const double n = static_cast<double>(x.size());
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
    Tensor tx = tensor(x, {2, 4}, TensorOptions(dt)), ty = tensor(y, {2, 4}, TensorOptions(dt));
    double mse = 0, bce = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      mse += (x[i] - y[i]) * (x[i] - y[i]) / n;
      // -[y log s + (1 - y) log(1 - s)] with log(1 - s) = log s(-x), both via log1p
      bce += (y[i] * std::log1p(std::exp(-x[i])) + (1 - y[i]) * std::log1p(std::exp(x[i]))) / n;
    }
    Tensor a = tx.clone().detach();
    a.set_requires_grad(true);
    Tensor lm = mse_loss(a, ty);
    EXPECT_NEAR(lm.item<double>(), mse, tol * std::abs(mse));
    lm.backward();
    std::vector<double> g = a.grad().to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(g[i], 2 * (x[i] - y[i]) / n, tol) << i;

    Tensor b = tx.clone().detach();
    b.set_requires_grad(true);
    Tensor lb = binary_cross_entropy_with_logits(b, ty);
    EXPECT_TRUE(std::isfinite(lb.item<double>()));
    EXPECT_NEAR(lb.item<double>(), bce, tol * bce);
    lb.backward();
    g = b.grad().to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(g[i], (1.0 / (1.0 + std::exp(-x[i])) - y[i]) / n, tol) << i;

    EXPECT_EQ(mse_loss(tx, ty, "none").sizes(), (Shape{2, 4}));
    EXPECT_NEAR(binary_cross_entropy_with_logits(tx, ty, "sum").item<double>(), bce * n, tol * bce * n);
  }
}

TEST(Losses, BadInputsNameTheOpAndShapes) {
  EXPECT_KILN_ERROR(mse_loss(zeros({2, 3}), zeros({3, 2})), "mse_loss", "[3, 2]", "[2, 3]");
  EXPECT_KILN_ERROR(binary_cross_entropy_with_logits(zeros({2}), zeros({2}), "avg"), "reduction", "avg");
  EXPECT_KILN_ERROR(mse_loss(zeros({2}), tensor_from({1, 2})), "mse_loss", "floating-point");
}

}  // namespace
}  // namespace kiln
