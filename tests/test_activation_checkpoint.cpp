// checkpoint() (ops/activation_checkpoint.h, Note [Activation checkpointing]):
// the same values and bitwise the same gradients as running fn directly,
// dropout and autocast included; inputs without gradients, unused and
// integer outputs, several outputs, nesting, no-grad, retain_graph, in-place
// misuse; and a float64 gradient check by central differences.
#include <gtest/gtest.h>

#include "kiln.h"
#include "test_util.h"

namespace kiln {
namespace {
using testing::bitwise_equal;

// A block with a parameter and dropout: (4, 6) x, (6, 6) w, (4, 6) m.
TensorList block(const TensorList& in, const Tensor& w) {
  Tensor h = gelu(matmul(in[0], w));
  h = dropout(h, 0.3, true);
  h = add(mul(h, in[1]), in[0]);   // m needs no gradient
  return {tanh(h), sum(h, {1})};   // (4, 6), (4)
}

struct BlockRun {
  TensorList out;
  Tensor gx, gw;
  PhiloxState rng_after;
};

// forward (checkpointed or not) and backward of sum(out0 * 2) + sum(out1).
BlockRun run_block(bool checkpointed, uint64_t seed, int* calls = nullptr) {
  manual_seed(1);
  Tensor x = randn({4, 6}).set_requires_grad(true);
  Tensor w = mul(randn({6, 6}), 0.5).detach().set_requires_grad(true);
  Tensor m = rand({4, 6});
  manual_seed(seed);
  auto fn = [w, calls](const TensorList& in) {
    if (calls) ++*calls;
    return block(in, w);
  };
  BlockRun r;
  r.out = checkpointed ? checkpoint(fn, {x, m}, {w}) : fn({x, m});
  Tensor loss = add(sum(mul(r.out[0], 2.0)), sum(r.out[1]));
  loss.backward();
  r.gx = x.grad();
  r.gw = w.grad();
  r.rng_after = default_generator().state();
  return r;
}

TEST(ActivationCheckpoint, GradientsAreBitwiseThoseWithoutIt) {
  int calls = 0;
  const BlockRun plain = run_block(false, 5), ckpt = run_block(true, 5, &calls);
  EXPECT_EQ(calls, 2);  // the forward and the recomputation in backward
  ASSERT_EQ(ckpt.out.size(), 2u);
  EXPECT_TRUE(bitwise_equal(ckpt.out[0], plain.out[0]));
  EXPECT_TRUE(bitwise_equal(ckpt.out[1], plain.out[1]));
  ASSERT_TRUE(ckpt.gx.defined() && ckpt.gw.defined());
  EXPECT_TRUE(bitwise_equal(ckpt.gx, plain.gx));
  EXPECT_TRUE(bitwise_equal(ckpt.gw, plain.gw));
  // the replayed dropout drew nothing visible: the generator is where the plain run left it
  EXPECT_EQ(ckpt.rng_after.seed, plain.rng_after.seed);
  EXPECT_EQ(ckpt.rng_after.offset, plain.rng_after.offset);
  // and another seed gives other masks, so the comparison above is not vacuous
  EXPECT_FALSE(bitwise_equal(run_block(true, 6).gw, plain.gw));
}

TEST(ActivationCheckpoint, RecordsOneNodeAndNoInnerHistory) {
  Tensor x = randn({3, 3}).set_requires_grad(true);
  TensorList y = checkpoint([](const TensorList& in) { return TensorList{exp(mul(in[0], in[0]))}; }, {x});
  ASSERT_TRUE(y[0].requires_grad());
  ASSERT_NE(y[0].grad_fn(), nullptr);
  EXPECT_EQ(y[0].grad_fn()->name(), "checkpoint");
  ASSERT_EQ(y[0].grad_fn()->next_edges.size(), 1u);
  EXPECT_EQ(y[0].grad_fn()->next_edges[0].fn->name(), "AccumulateGrad");  // straight to x: mul and exp kept nothing
}

TEST(ActivationCheckpoint, InputsWithoutGradientAndUnusedAndIntegerOutputs) {
  manual_seed(3);
  Tensor x = randn({5}).set_requires_grad(true), c = randn({5});
  auto fn = [](const TensorList& in) {
    Tensor a = mul(in[0], in[1]);
    return TensorList{a, exp(in[0]), argmax(a), Tensor()};
  };
  TensorList y = checkpoint(fn, {x, c, Tensor()});
  ASSERT_EQ(y.size(), 4u);
  EXPECT_TRUE(y[0].requires_grad());
  EXPECT_TRUE(y[1].requires_grad());
  EXPECT_FALSE(y[2].requires_grad());  // int64
  EXPECT_FALSE(y[3].defined());
  sum(y[0]).backward();  // y[1] unused: its gradient is zero
  EXPECT_TRUE(bitwise_equal(x.grad(), c));
  EXPECT_FALSE(c.grad().defined());
  // a second output alone
  Tensor x2 = x.detach().clone().set_requires_grad(true);
  sum(checkpoint(fn, {x2, c, Tensor()})[1]).backward();
  EXPECT_TRUE(bitwise_equal(x2.grad(), exp(x.detach())));
}

TEST(ActivationCheckpoint, ParametersOnlyStillCheckpointAndGetTheirGradients) {
  manual_seed(4);
  const Tensor x = randn({2, 3});  // needs no gradient (a frozen embedding's output)
  Tensor w = randn({3, 3}).set_requires_grad(true);
  int calls = 0;
  auto fn = [w, &calls](const TensorList& in) {
    ++calls;
    return TensorList{matmul(in[0], w)};
  };
  Tensor y = checkpoint(fn, {x}, {w})[0];
  EXPECT_EQ(y.grad_fn()->name(), "checkpoint");
  sum(y).backward();
  EXPECT_EQ(calls, 2);
  Tensor w2 = w.detach().clone().set_requires_grad(true);
  sum(matmul(x, w2)).backward();
  EXPECT_TRUE(bitwise_equal(w.grad(), w2.grad()));

  // without params and with no input needing a gradient: a plain forward, gradients still right
  w.zero_grad();
  calls = 0;
  Tensor z = checkpoint(fn, {x})[0];
  EXPECT_NE(z.grad_fn()->name(), "checkpoint");
  sum(z).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(bitwise_equal(w.grad(), w2.grad()));
}

TEST(ActivationCheckpoint, UnderNoGradItIsAPlainForward) {
  Tensor x = randn({4}).set_requires_grad(true);
  int calls = 0;
  TensorList y;
  {
    NoGradGuard ng;
    y = checkpoint(
        [&calls](const TensorList& in) {
          ++calls;
          return TensorList{exp(in[0])};
        },
        {x});
  }
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y[0].requires_grad());
  EXPECT_TRUE(bitwise_equal(y[0], exp(x.detach())));
}

TEST(ActivationCheckpoint, NestedCheckpointsGiveTheSameGradients) {
  auto inner = [](const TensorList& in) { return TensorList{dropout(tanh(in[0]), 0.5, true)}; };
  auto outer = [inner](const TensorList& in) {
    Tensor h = checkpoint(inner, {mul(in[0], 3.0)})[0];
    return TensorList{mul(h, in[0])};
  };
  auto grad_of = [&](bool ckpt) {
    manual_seed(11);
    Tensor x = randn({8}).set_requires_grad(true);
    sum(ckpt ? checkpoint(outer, {x})[0] : outer({x})[0]).backward();
    return x.grad();
  };
  EXPECT_TRUE(bitwise_equal(grad_of(true), grad_of(false)));
}

TEST(ActivationCheckpoint, RecomputesUnderTheForwardsAutocast) {
  auto grads = [](bool ckpt) {
    manual_seed(2);
    Tensor x = randn({4, 8}).set_requires_grad(true);
    Tensor w = randn({8, 8}).set_requires_grad(true);
    auto fn = [w](const TensorList& in) { return TensorList{softmax(matmul(in[0], w), -1)}; };
    Tensor y;
    {
      AutocastGuard amp(DType::BFloat16);
      y = ckpt ? checkpoint(fn, {x}, {w})[0] : fn({x})[0];
    }
    EXPECT_EQ(y.dtype(), DType::Float32);
    sum(mul(y, y)).backward();
    return TensorList{x.grad(), w.grad()};
  };
  const TensorList plain = grads(false), ckpt = grads(true);
  EXPECT_TRUE(bitwise_equal(ckpt[0], plain[0]));
  EXPECT_TRUE(bitwise_equal(ckpt[1], plain[1]));
}

TEST(ActivationCheckpoint, RetainGraphRecomputesAgainAndMisuseIsAnError) {
  Tensor x = randn({3}).set_requires_grad(true);
  auto fn = [](const TensorList& in) { return TensorList{mul(in[0], in[0])}; };
  Tensor y = sum(checkpoint(fn, {x})[0]);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_TRUE(bitwise_equal(x.grad(), mul(x.detach(), 4.0)));
  EXPECT_KILN_ERROR(y.backward(), "backward through the graph a second time");

  Tensor a = randn({3}).set_requires_grad(true);
  Tensor b = mul(a, 1.0);
  Tensor z = sum(checkpoint(fn, {b})[0]);
  {
    NoGradGuard ng;
    b.add_(ones_like(b));
  }
  EXPECT_KILN_ERROR(z.backward(), "checkpoint", "modified in place");
  EXPECT_KILN_ERROR(checkpoint(CheckpointFn(), {a}), "checkpoint: fn is empty");
  // a recomputation of another shape than the forward's
  int calls = 0;
  Tensor odd = sum(checkpoint(
      [&calls](const TensorList& in) { return TensorList{++calls == 1 ? in[0] * 2.0 : in[0].slice(0, 0, 2)}; }, {a})[0]);
  EXPECT_KILN_ERROR(odd.backward(), "checkpoint: the recomputation in backward gave a different output");
}

TEST(ActivationCheckpoint, OutputThatIsAnInputKeepsTheInputsRecord) {
  Tensor x = randn({3}).set_requires_grad(true);
  TensorList y = checkpoint([](const TensorList& in) { return TensorList{in[0], mul(in[0], 2.0)}; }, {x});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(y[0].grad_fn()->name(), "checkpoint");
  sum(add(y[0], y[1])).backward();
  EXPECT_TRUE(bitwise_equal(x.grad(), full({3}, 3.0)));
}

// Float64 central differences through checkpoint(), dropout replayed by
// reseeding before every evaluation.
TEST(ActivationCheckpoint, Float64GradCheck) {
  const TensorOptions f64(DType::Float64);
  manual_seed(21);
  Tensor x = randn({3, 4}, f64).set_requires_grad(true);
  Tensor w = randn({4, 4}, f64).set_requires_grad(true);
  Tensor m = rand({3, 4}, f64);
  auto fn = [w](const TensorList& in) {
    Tensor h = dropout(gelu(matmul(in[0], w)), 0.25, true);
    return TensorList{mul(tanh(h), in[1]), exp(mul(in[0], 0.1))};
  };
  const Tensor v0 = randn({3, 4}, f64), v1 = randn({3, 4}, f64);
  auto objective = [&] {
    manual_seed(99);
    const TensorList y = checkpoint(fn, {x, m}, {w});
    return add(sum(mul(y[0], v0)), sum(mul(y[1], v1)));
  };
  objective().backward();
  for (Tensor* t : {&x, &w}) {
    const std::vector<double> analytic = t->grad().to_vector<double>();
    double* p = static_cast<double*>(t->storage()->data()) + t->offset();
    for (int64_t j = 0; j < t->numel(); ++j) {
      const double orig = p[j], eps = 1e-6;
      double fp = 0, fm = 0;
      {
        NoGradGuard ng;
        p[j] = orig + eps;
        fp = objective().item<double>();
        p[j] = orig - eps;
        fm = objective().item<double>();
        p[j] = orig;
      }
      const double numeric = (fp - fm) / (2 * eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(j)], numeric, 1e-5 + 1e-3 * std::abs(numeric)) << "element " << j;
    }
  }
}

}  // namespace
}  // namespace kiln
