// Autograd engine and tensor autograd surface: analytic gradients, accumulation,
// retain_graph, the saved-tensor version check, in-place refusal, detach,
// NoGradGuard, hooks, retain_grad, explicit output gradients, diamonds, long
// chains, broadcast reduction and non-differentiable ops.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::all_close;
using testing::values;
using F64 = std::vector<double>;

Tensor leaf(const std::vector<double>& v, const Shape& shape = {}, DType dt = DType::Float32) {
  Tensor t = tensor(v, shape, dt);
  t.set_requires_grad(true);
  return t;
}

TEST(Autograd, SimpleChainsMatchAnalyticGradients) {
  Tensor x = leaf({1, -2, 3});
  sum(x * x).backward();
  EXPECT_EQ(values(x.grad()), (F64{2, -4, 6}));
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  EXPECT_EQ(x.grad().sizes(), x.sizes());

  Tensor a = leaf({0.5, 1.5}, {}, DType::Float64), b = leaf({2, -1}, {}, DType::Float64);
  Tensor y = sum(exp(a) * b + a / b);  // dy/da = exp(a) b + 1/b, dy/db = exp(a) - a/b^2
  y.backward();
  F64 ga, gb;
  for (int i = 0; i < 2; ++i) {
    const double av = i ? 1.5 : 0.5, bv = i ? -1 : 2;
    ga.push_back(std::exp(av) * bv + 1 / bv);
    gb.push_back(std::exp(av) - av / (bv * bv));
  }
  EXPECT_TRUE(all_close(a.grad(), ga, 1e-12));
  EXPECT_TRUE(all_close(b.grad(), gb, 1e-12));

  Tensor m = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  mean(m.t().reshape({6}) * 2.0).backward();  // through views: d/dm = 2/6 everywhere
  EXPECT_TRUE(all_close(m.grad(), F64(6, 2.0 / 6), 1e-7));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2});
  sum(x * 3.0).backward();
  sum(x * x).backward();
  EXPECT_EQ(values(x.grad()), (F64{3 + 2, 3 + 4}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(values(x.grad()), (F64{1, 1}));
}

TEST(Autograd, RetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)}, 1e-5, 1e-6));
  EXPECT_KILN_ERROR(y.backward(), "second time");

  Tensor z = sum(x * x);
  z.backward();
  EXPECT_KILN_ERROR(z.backward(), "second time", "retain_graph");
}

TEST(Autograd, SavedTensorModifiedInPlaceIsAnError) {
  Tensor x = leaf({0.5, 1.0});
  Tensor y = x.exp();  // exp saves its output
  {
    NoGradGuard g;
    y.mul_(2);
  }
  Tensor s = sum(y);
  EXPECT_KILN_ERROR(s.backward(), "exp", "modified in place");

  Tensor x2 = leaf({0.5, 1.0});
  Tensor y2 = x2.exp();
  y2.detach().fill_(3);  // a detached alias shares the storage and its version
  EXPECT_KILN_ERROR(sum(y2).backward(), "modified in place");

  Tensor x3 = leaf({0.5, 1.0});
  Tensor y3 = x3 * x3;  // saves x3
  {
    NoGradGuard g;
    x3.add_(ones({2}));  // an optimizer-style step between forward and backward
  }
  EXPECT_KILN_ERROR(sum(y3).backward(), "mul", "modified in place");
}

TEST(Autograd, InPlaceOnRequiresGradInGradModeThrows) {
  Tensor x = leaf({1, 2});
  const uint32_t v0 = x.version();
  EXPECT_KILN_ERROR(x.mul_(2.0), "mul_", "in-place", "requires grad");
  EXPECT_KILN_ERROR(x.fill_(0), "fill_", "requires grad");
  EXPECT_KILN_ERROR(x.zero_(), "requires grad");
  Tensor plain = zeros({2});
  EXPECT_KILN_ERROR(plain.add_(x), "add_", "requires grad");
  EXPECT_KILN_ERROR(plain.copy_(x), "copy_", "requires grad");
  Tensor y = x * 2.0;
  EXPECT_KILN_ERROR(y.add_(ones({2})), "add_", "requires grad");
  EXPECT_EQ(x.version(), v0);
  EXPECT_EQ(values(x), (F64{1, 2}));
  {
    NoGradGuard g;
    x.add_(ones({2}), -0.5);  // allowed: an SGD step
  }
  EXPECT_EQ(values(x), (F64{0.5, 1.5}));
  EXPECT_GT(x.version(), v0);
  EXPECT_TRUE(x.requires_grad());
}

TEST(Autograd, DetachSharesStorageWithoutHistory) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_TRUE(d.shares_storage_with(y));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.grad().defined());
  EXPECT_EQ(values(d), (F64{2, 4, 6}));
  Tensor z = sum(d * x);  // d is a constant here
  z.backward();
  EXPECT_EQ(values(x.grad()), (F64{2, 4, 6}));
  EXPECT_KILN_ERROR(y.set_requires_grad(false), "leaf");
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(grad_enabled());
  {
    NoGradGuard g;
    EXPECT_FALSE(grad_enabled());
    Tensor y = exp(x) * x + 1.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(matmul(x.view({1, 2}), x.view({2, 1})).requires_grad());
    EXPECT_FALSE(x.view({2, 1}).requires_grad());
    {
      NoGradGuard inner;
    }
    EXPECT_FALSE(grad_enabled());
    EXPECT_KILN_ERROR(sum(y).backward(), "does not require grad");
  }
  EXPECT_TRUE(grad_enabled());
  Tensor y = x * 1.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "mul");
  EXPECT_FALSE(y.is_leaf());
}

TEST(Autograd, HooksOnIntermediateAndLeaf) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 2.0;
  });
  sum(y * y).backward();  // dL/dy = 2y = {6, 12}, doubled -> {12, 24}; dL/dx = 3 * that
  EXPECT_EQ(seen, (F64{6, 12}));
  EXPECT_EQ(values(x.grad()), (F64{36, 72}));

  Tensor w = leaf({1, 1, 1});
  const int h = w.register_hook([](const Tensor& g) { return g * 2.0; });
  int observed = 0;
  w.register_hook([&](const Tensor&) { ++observed; return Tensor(); });  // observer only
  sum(w * 5.0).backward();
  EXPECT_EQ(values(w.grad()), (F64{10, 10, 10}));
  EXPECT_EQ(observed, 1);
  w.remove_hook(h);
  w.zero_grad();
  sum(w * 5.0).backward();
  EXPECT_EQ(values(w.grad()), (F64{5, 5, 5}));
  EXPECT_EQ(observed, 2);

  Tensor v = leaf({1});
  Tensor u = v * 1.0;
  int calls = 0;
  double got = 0;
  const int hu = u.register_hook([&](const Tensor& g) { ++calls; got = g.item<double>(); return Tensor(); });
  sum(u + u * 3.0).backward(Tensor(), true);  // two uses of u: the hook sees the summed gradient once
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, 4.0);
  u.remove_hook(hu);
  sum(u * 2.0).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_KILN_ERROR(ones({2}).register_hook([](const Tensor& g) { return g; }), "register_hook",
                    "does not require grad");
}

TEST(Autograd, PostAccumulateGradHook) {
  Tensor x = leaf({1, 2});
  int calls = 0;
  std::vector<F64> grads;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    grads.push_back(values(t.grad()));
  });
  sum(x * x + x).backward();  // x used three times, one accumulation
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0], (F64{3, 5}));
  sum(x * 2.0).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(grads[1], (F64{5, 7}));  // the accumulated gradient
  Tensor y = x * 1.0;
  EXPECT_KILN_ERROR(y.register_post_accumulate_grad_hook([](const Tensor&) {}), "leaf");
}

TEST(Autograd, RetainGradOnNonLeaf) {
  Tensor x = leaf({1, -1, 2});
  Tensor y = x * 2.0;
  Tensor h = y + 1.0;  // not retained
  y.retain_grad();
  Tensor z = sum(h * h);
  z.retain_grad();
  z.backward();
  EXPECT_EQ(values(y.grad()), (F64{6, -2, 10}));  // 2 (y + 1)
  EXPECT_EQ(values(x.grad()), (F64{12, -4, 20}));
  EXPECT_FALSE(h.grad().defined());
  EXPECT_EQ(z.grad().item<double>(), 1.0);  // a retained root gets the seed gradient
  EXPECT_KILN_ERROR(ones({1}).retain_grad(), "retain_grad");
}

TEST(Autograd, ExplicitAndRequiredOutputGradients) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x;
  y.backward(tensor({1, 0.5, 2}));
  EXPECT_EQ(values(x.grad()), (F64{2, 2, 12}));
  Tensor y2 = x * x;
  EXPECT_KILN_ERROR(y2.backward(), "backward", "one-element", "[3]");
  EXPECT_KILN_ERROR(y2.backward(ones({2})), "backward", "[2]", "[3]");
  Tensor one = sum(x, {0}, true);  // shape [1]: implicit gradient allowed
  x.zero_grad();
  one.backward();
  EXPECT_EQ(values(x.grad()), (F64{1, 1, 1}));
  Tensor l = leaf({4}, {1});
  l.backward(tensor({3}, {1}));  // backward on a leaf accumulates the given gradient
  EXPECT_EQ(values(l.grad()), (F64{3}));
}

TEST(Autograd, DiamondGraphSumsGradients) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 2.0, b = x * 3.0;
  sum(a * b).backward();  // 6 x^2 -> 12 x
  EXPECT_EQ(values(x.grad()), (F64{12, 24}));
  Tensor w = leaf({1, 2});
  sum(w + w).backward();
  EXPECT_EQ(values(w.grad()), (F64{2, 2}));
  Tensor p = leaf({3});
  Tensor q = p * p;
  Tensor r = q * p + q;  // p^3 + p^2 -> 3p^2 + 2p
  sum(r).backward();
  EXPECT_EQ(values(p.grad()), (F64{33}));
}

TEST(Autograd, LeafGradientsNeverShareStorage) {
  // Note [Stealing the gradient]: a leaf may take its incoming gradient's
  // storage only when nothing else holds it. add's backward hands one tensor
  // to both inputs; a hook may keep the tensor it saw; a retained gradient
  // is the same tensor the next node receives.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  sum((a + b) * tensor({2, 3})).backward();
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  a.mutable_grad().add_(tensor({10, 10}));
  EXPECT_EQ(values(a.grad()), (F64{12, 13}));
  EXPECT_EQ(values(b.grad()), (F64{2, 3}));

  Tensor x = leaf({1, -1});
  Tensor seen;
  x.register_hook([&](const Tensor& g) { seen = g; return Tensor(); });
  sum(x * tensor({5, 7})).backward();
  EXPECT_NE(x.grad().storage(), seen.storage());
  x.mutable_grad().add_(tensor({1, 1}));
  EXPECT_EQ(values(seen), (F64{5, 7}));

  Tensor w = leaf({2, 4});
  Tensor y = w * tensor({3, 3});
  Tensor z = y + 1.0;
  y.retain_grad();  // y keeps its gradient; w's is a new tensor from mul's backward
  Tensor u = leaf({0, 0});
  Tensor v = u + 0.0;  // v's gradient reaches u as the same tensor
  v.retain_grad();
  sum(z * z + v * tensor({1, 2})).backward();
  EXPECT_NE(u.grad().storage(), v.grad().storage());
  u.mutable_grad().add_(tensor({1, 1}));
  EXPECT_EQ(values(v.grad()), (F64{1, 2}));
  EXPECT_EQ(values(u.grad()), (F64{2, 3}));
  EXPECT_EQ(values(w.grad()), (F64{42, 78}));  // 2 (3w + 1) * 3
}

TEST(Autograd, LongChainIsIterative) {
  Tensor x = leaf({1, 2});
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y + 1.0;
  EXPECT_EQ(values(y), (F64{10001, 10002}));
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), (F64{1, 1}));
  y = Tensor();  // frees the whole chain
  Tensor z = x;
  for (int i = 0; i < 10000; ++i) z = z * 1.0;
  sum(z).backward();
  EXPECT_EQ(values(x.grad()), (F64{2, 2}));
}

TEST(Autograd, FreeingAVeryLongGraphDoesNotRecurse) {
  // A running total that is never detached (loss = loss + step_loss over an
  // epoch) builds a chain of 300000 nodes; dropping it must not recurse once
  // per node. Run in a child process so a stack overflow fails only this test.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Tensor x = leaf({1});
        Tensor y = x;
        for (int i = 0; i < 300000; ++i) y = y + 1.0;
        sum(y).backward();
        y = Tensor();
        std::exit(x.grad().item<double>() == 1.0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Autograd, BroadcastGradientsReduceToInputShape) {
  Tensor a = leaf({1, 2, 3}, {3, 1}), b = leaf({10, 20, 30, 40}, {1, 4});
  sum(a * b).backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 1}));
  EXPECT_EQ(b.grad().sizes(), (Shape{1, 4}));
  EXPECT_EQ(values(a.grad()), (F64{100, 100, 100}));
  EXPECT_EQ(values(b.grad()), (F64{6, 6, 6, 6}));

  Tensor x = leaf(F64(24, 1.0), {2, 3, 4}), bias = leaf({1, 2, 3, 4}), s = leaf({2});
  sum((x + bias) * s).backward();
  EXPECT_EQ(bias.grad().sizes(), (Shape{4}));
  EXPECT_EQ(values(bias.grad()), F64(4, 12.0));  // 6 rows, each times s = 2
  EXPECT_EQ(s.grad().dim(), 0);
  double total = 0;
  for (int i = 0; i < 24; ++i) total += 1 + (i % 4 + 1);
  EXPECT_EQ(s.grad().item<double>(), total);
  Tensor col = leaf({1, 2}, {2, 1});
  sum(col.expand({3, 2, 5})).backward();
  EXPECT_EQ(values(col.grad()), (F64{15, 15}));
}

TEST(Autograd, NonDifferentiableOutputs) {
  Tensor x = leaf({1, 5, 3});
  Tensor am = argmax(x, 0);
  EXPECT_EQ(am.dtype(), DType::Int64);
  EXPECT_EQ(am.item<int64_t>(), 1);
  EXPECT_FALSE(am.requires_grad());
  EXPECT_KILN_ERROR(am.backward(), "does not require grad");
  Tensor c = gt(x, 2.0);
  EXPECT_EQ(c.dtype(), DType::Bool);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_KILN_ERROR(c.backward(ones({3}, DType::Bool)), "does not require grad");
  EXPECT_FALSE(max(x, 0).indices.requires_grad());
  EXPECT_TRUE(max(x, 0).values.requires_grad());
  EXPECT_KILN_ERROR(x.to(DType::Int64), "to", "requires grad");
  // the bool mask still routes gradient through where()
  sum(where(c, x, 0.0)).backward();
  EXPECT_EQ(values(x.grad()), (F64{0, 1, 1}));
}

}  // namespace
}  // namespace kiln
