// Mixed precision: the autocast policy (ops/autocast.h) and the GradScaler
// (optim/grad_scaler.h), with the checks issue #5 asks for: the exact scale
// sequence, bit-identical skipped steps, no inf scale from 1e38, exact
// unscaling, and mixed-precision training tracking a float32 run.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "cuda/cuda.h"
#include "kiln.h"
#include "nn/models/bert.h"
#include "optim/optim.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using autocast::OpClass;
using testing::all_close;
using testing::bitwise_equal;
using testing::values;

Tensor randn_f32(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, {}, &g);
}

// ---- autocast policy ----------------------------------------------------------

// One call per op in the policy table, given inputs of dtype `dt` on `device`.
std::map<std::string, std::function<Tensor(DType)>> policy_probes(Device device = kCPU) {
  auto in = [device](const Shape& s, uint64_t seed, DType dt) { return to_dtype(randn_f32(s, seed), dt).to(device); };
  return {
      {"matmul", [=](DType dt) { return matmul(in({2, 3, 4}, 1, dt), in({2, 4, 5}, 2, dt)); }},
      {"linear", [=](DType dt) { return linear(in({3, 4}, 3, dt), in({5, 4}, 4, dt), in({5}, 5, dt)); }},
      {"softmax", [=](DType dt) { return softmax(in({3, 4}, 6, dt), -1); }},
      {"scaled_masked_softmax", [=](DType dt) { return scaled_masked_softmax(in({2, 3, 4}, 14, dt), 0.5, in({2, 1, 4}, 15, dt)); }},
      {"log_softmax", [=](DType dt) { return log_softmax(in({3, 4}, 7, dt), -1); }},
      {"layer_norm", [=](DType dt) { return layer_norm(in({3, 4}, 8, dt), {4}, in({4}, 9, dt), in({4}, 10, dt)); }},
      {"rms_norm", [=](DType dt) { return rms_norm(in({3, 4}, 20, dt), in({4}, 21, dt), 1e-6); }},
      {"cross_entropy",
       [=](DType dt) { return cross_entropy(in({3, 4}, 11, dt), tensor_from({0, 3, 1}, {3}, DType::Int64).to(device)); }},
      {"sum", [=](DType dt) { return sum(in({3, 4}, 12, dt), {1}); }},
      {"mean", [=](DType dt) { return mean(in({3, 4}, 13, dt)); }},
      {"mse_loss", [=](DType dt) { return mse_loss(in({3, 4}, 16, dt), in({3, 4}, 17, dt)); }},
      {"binary_cross_entropy_with_logits",
       [=](DType dt) { return binary_cross_entropy_with_logits(in({3, 4}, 18, dt), in({3, 4}, 19, dt)); }},
  };
}

void expect_policy_dtypes(Device device) {
  auto probes = policy_probes(device);
  ASSERT_EQ(probes.size(), autocast::policy().size()) << "a policy entry has no probe here (or a probe no entry)";
  for (DType low : {DType::BFloat16, DType::Float16}) {
    for (const autocast::PolicyEntry& e : autocast::policy()) {
      SCOPED_TRACE(std::string(e.op) + " under " + dtype_name(low));
      ASSERT_TRUE(probes.count(e.op));
      const auto& probe = probes.at(e.op);
      if (e.cls == OpClass::LowPrecision) {
        {
          AutocastGuard amp(low);
          EXPECT_EQ(probe(DType::Float32).dtype(), low);
          // The other 16-bit type is recast too; float64 is left alone.
          EXPECT_EQ(probe(low == DType::BFloat16 ? DType::Float16 : DType::BFloat16).dtype(), low);
          EXPECT_EQ(probe(DType::Float64).dtype(), DType::Float64);
        }
        EXPECT_EQ(probe(DType::Float32).dtype(), DType::Float32) << "outside autocast: unchanged";
      } else {
        {
          AutocastGuard amp(low);
          EXPECT_EQ(probe(low).dtype(), DType::Float32);
          EXPECT_EQ(probe(DType::Float32).dtype(), DType::Float32);
          EXPECT_EQ(probe(DType::Float64).dtype(), DType::Float64);
        }
        EXPECT_EQ(probe(low).dtype(), low) << "outside autocast: unchanged";
      }
    }
  }
}

TEST(Autocast, EveryOpInThePolicyTableRunsInItsClassDtype) { expect_policy_dtypes(kCPU); }

// The same table on a GPU (tools/gpu_check.sh runs Cuda*; skipped without one).
TEST(CudaAutocast, EveryOpInThePolicyTableRunsInItsClassDtype) {
  KILN_REQUIRE_CUDA();
  expect_policy_dtypes(testing::kGpu);
}

TEST(Autocast, CastsExactlyAsThePolicySays) {
  // Inside autocast, linear equals linear on inputs cast by hand (bit for bit),
  // and softmax of bf16 scores equals float32 softmax of the upcast scores.
  Tensor x = randn_f32({6, 8}, 20), w = randn_f32({5, 8}, 21), b = randn_f32({5}, 22);
  Tensor want = linear(to_dtype(x, DType::BFloat16), to_dtype(w, DType::BFloat16), to_dtype(b, DType::BFloat16));
  Tensor s16 = to_dtype(randn_f32({4, 7}, 23), DType::BFloat16);
  Tensor want_sm = softmax(to_dtype(s16, DType::Float32), -1);
  AutocastGuard amp(DType::BFloat16);
  EXPECT_TRUE(bitwise_equal(linear(x, w, b), want));
  EXPECT_TRUE(bitwise_equal(softmax(s16, -1), want_sm));
}

TEST(Autocast, LowPrecisionGemmAccumulatesInFloat32) {
  // A long inner dim (K = 512): the bf16 GEMM equals the float32 product of
  // the bf16-rounded inputs up to one final bf16 rounding (half an ulp, at
  // most 2^-8 relative) and float32 summation-order noise (1e-4 here).
  // Accumulating in bf16 would round every partial sum: errors near 1.
  Tensor x = randn_f32({4, 512}, 24), w = randn_f32({512, 6}, 25);
  Tensor xr = to_dtype(to_dtype(x, DType::BFloat16), DType::Float32);
  Tensor wr = to_dtype(to_dtype(w, DType::BFloat16), DType::Float32);
  const std::vector<double> want = values(matmul(xr, wr));
  Tensor got;
  {
    AutocastGuard amp(DType::BFloat16);
    got = matmul(x, w);
  }
  ASSERT_EQ(got.dtype(), DType::BFloat16);
  const std::vector<double> g = values(got);
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_LE(std::abs(g[i] - want[i]), std::ldexp(std::abs(want[i]), -8) + 1e-4) << "element " << i;
}

TEST(Autocast, IntegerAndUndefinedInputsAreLeftAlone) {
  AutocastGuard amp(DType::Float16);
  EXPECT_EQ(sum(tensor_from({1, 2, 3}, {3}, DType::Int64)).dtype(), DType::Int64);
  EXPECT_EQ(matmul(tensor_from({1, 2, 3, 4}, {2, 2}, DType::Int64), tensor_from({1, 0, 0, 1}, {2, 2}, DType::Int64))
                .dtype(),
            DType::Int64);
  EXPECT_EQ(linear(randn_f32({2, 3}, 1), randn_f32({4, 3}, 2)).dtype(), DType::Float16);  // no bias
}

TEST(Autocast, GuardsNestAndRestore) {
  Tensor x = randn_f32({2, 3}, 30), w = randn_f32({4, 3}, 31);
  EXPECT_FALSE(autocast_enabled());
  {
    AutocastGuard outer(DType::BFloat16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(linear(x, w).dtype(), DType::BFloat16);
    {
      AutocastGuard inner(DType::Float16);
      EXPECT_EQ(linear(x, w).dtype(), DType::Float16);
      {
        AutocastGuard off(DType::Float16, false);
        EXPECT_FALSE(autocast_enabled());
        EXPECT_EQ(linear(x, w).dtype(), DType::Float32);
      }
      EXPECT_EQ(linear(x, w).dtype(), DType::Float16);
    }
    EXPECT_EQ(autocast::low_precision_dtype(), DType::BFloat16);
    EXPECT_EQ(linear(x, w).dtype(), DType::BFloat16);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(linear(x, w).dtype(), DType::Float32);
}

TEST(Autocast, StateIsThreadLocal) {
  AutocastGuard amp(DType::BFloat16);
  DType other = DType::Bool;
  std::thread t([&] { other = linear(randn_f32({2, 3}, 1), randn_f32({4, 3}, 2)).dtype(); });
  t.join();
  EXPECT_EQ(other, DType::Float32);
  EXPECT_EQ(linear(randn_f32({2, 3}, 1), randn_f32({4, 3}, 2)).dtype(), DType::BFloat16);
}

TEST(Autocast, RejectsNonHalfDtypesAndUnknownOps) {
  EXPECT_KILN_ERROR(AutocastGuard(DType::Float32), "AutocastGuard", "float16 or bfloat16", "float32");
  EXPECT_KILN_ERROR(autocast::op_class("conv2d"), "conv2d", "policy table");
}

// A two-layer MLP loss; w1, w2 float32 leaves.
Tensor mlp_loss(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& target) {
  return cross_entropy(linear(gelu(linear(x, w1, b1)), w2), target);
}

TEST(Autocast, Float32ParamsGetFloat32GradientsThroughDifferentiableCasts) {
  Tensor x = randn_f32({8, 6}, 40), target = randint(0, 3, {8});
  Tensor w1 = randn_f32({5, 6}, 41).requires_grad_(), b1 = randn_f32({5}, 42).requires_grad_();
  Tensor w2 = randn_f32({3, 5}, 43).requires_grad_();
  {
    AutocastGuard amp(DType::BFloat16);
    Tensor loss = mlp_loss(x, w1, b1, w2, target);
    EXPECT_EQ(loss.dtype(), DType::Float32);
    loss.backward();
  }
  std::vector<Tensor> amp_grads;
  for (const Tensor& p : {w1, b1, w2}) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::Float32);
    amp_grads.push_back(p.grad().clone());
    Tensor(p).zero_grad();
  }
  // The same graph with the casts written by hand, outside autocast.
  const DType bf = DType::BFloat16;
  Tensor h = gelu(linear(to_dtype(x, bf), to_dtype(w1, bf), to_dtype(b1, bf)));
  cross_entropy(to_dtype(linear(h, to_dtype(w2, bf)), DType::Float32), target).backward();
  const Tensor params[] = {w1, b1, w2};
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(amp_grads[i], params[i].grad())) << "param " << i;
}

TEST(Autocast, BackwardRunsInTheForwardDtypesEvenInsideAGuard) {
  Tensor x = randn_f32({8, 6}, 50), target = randint(0, 3, {8});
  Tensor w1 = randn_f32({5, 6}, 51).requires_grad_(), b1 = randn_f32({5}, 52).requires_grad_();
  Tensor w2 = randn_f32({3, 5}, 53).requires_grad_();
  // A float32 forward whose backward() is called inside a guard: the matmul
  // backward GEMMs must stay float32, not be autocast to float16.
  mlp_loss(x, w1, b1, w2, target).backward();
  const Tensor plain = w1.grad().clone();
  w1.zero_grad();
  Tensor loss = mlp_loss(x, w1, b1, w2, target);
  {
    AutocastGuard amp(DType::Float16);
    loss.backward();
  }
  EXPECT_TRUE(bitwise_equal(w1.grad(), plain));
  // An autocast forward: backward inside or outside the guard is the same.
  Tensor inside, outside;
  {
    AutocastGuard amp(DType::Float16);
    w1.zero_grad();
    mlp_loss(x, w1, b1, w2, target).backward();
    inside = w1.grad().clone();
    w1.zero_grad();
    Tensor l = mlp_loss(x, w1, b1, w2, target);
    AutocastGuard off(DType::Float16, false);
    l.backward();
    outside = w1.grad().clone();
  }
  EXPECT_TRUE(bitwise_equal(inside, outside));
}

TEST(Autocast, RepeatedCastsOfOneWeightStayCorrectUnderAutograd) {
  Tensor x = randn_f32({4, 6}, 60);
  Tensor w = randn_f32({6, 6}, 61).requires_grad_();
  AutocastGuard amp(DType::BFloat16);
  // A weight used twice in one forward (as BERT's tied decoder): gradients of
  // both uses add up, as with explicit casts.
  sum(linear(linear(x, w), w)).backward();
  Tensor g_twice = w.grad().clone();
  {
    AutocastGuard off(DType::BFloat16, false);
    w.zero_grad();
    Tensor wb = to_dtype(w, DType::BFloat16);
    Tensor wb2 = to_dtype(w, DType::BFloat16);
    sum(to_dtype(linear(linear(to_dtype(x, DType::BFloat16), wb), wb2), DType::Float32)).backward();
    EXPECT_TRUE(bitwise_equal(g_twice, w.grad()));
  }
  // Two forward/backward passes in one scope (gradient accumulation): the
  // second pass must not reuse the first pass's freed cast node.
  w.zero_grad();
  sum(linear(x, w)).backward();
  Tensor once = w.grad().clone();
  sum(linear(x, w)).backward();
  EXPECT_TRUE(bitwise_equal(w.grad(), mul(once, 2.0)));
  // An in-place update of the weight inside the scope (an optimizer step) is
  // seen by the next cast.
  Tensor before = linear(x, w).detach();
  {
    NoGradGuard ng;
    w.add_(ones_like(w));
  }
  Tensor after = linear(x, w).detach();
  AutocastGuard off(DType::BFloat16, false);
  EXPECT_TRUE(bitwise_equal(after, linear(to_dtype(x, DType::BFloat16), to_dtype(w.detach(), DType::BFloat16))));
  EXPECT_FALSE(bitwise_equal(after, before));
}

TEST(Autocast, BertAttentionGemmsRunInLowPrecision) {
  BertConfig c;
  c.vocab_size = 30;
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 16;
  manual_seed(3);
  nn::BertForMaskedLM m(c);
  Tensor ids = randint(1, 30, {2, 8});
  Tensor labels = to_dtype(where(lt(rand({2, 8}), 0.5), ids, -100.0), DType::Int64);
  AutocastGuard amp(DType::BFloat16);
  nn::MaskedLMOutput out = m.forward(ids, ones({2, 8}, DType::Int64), Tensor(), labels);
  EXPECT_EQ(out.logits.dtype(), DType::BFloat16) << "the tied decoder GEMM";
  EXPECT_EQ(out.loss.dtype(), DType::Float32);
  out.loss.backward();
  for (auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().dtype(), DType::Float32) << name;
  }
}

// ---- GradScaler ------------------------------------------------------------------

// One float32 parameter with gradient `g` set by hand.
void set_grad(Tensor& p, double g) {
  NoGradGuard ng;
  p.mutable_grad() = full(p.sizes(), g);
}

TEST(GradScaler, ExactScaleSequenceForGrowth2Backoff025Interval2) {
  Tensor p = zeros({3}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScalerOptions o;
  o.init_scale = 4.0;
  o.growth_factor = 2.0;
  o.backoff_factor = 0.25;
  o.growth_interval = 2;
  optim::GradScaler scaler(o);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(scaler.scale(scalar_tensor(1.5)).item<double>(), 6.0);
  struct Step {
    double grad;
    bool steps;
    double scale_after;
    int64_t tracker_after;
  };
  const Step steps[] = {{1.0, true, 4.0, 1},
                        {1.0, true, 8.0, 0},
                        {std::numeric_limits<double>::infinity(), false, 2.0, 0},
                        {1.0, true, 2.0, 1},
                        {std::numeric_limits<double>::quiet_NaN(), false, 0.5, 0}};
  for (size_t i = 0; i < std::size(steps); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    set_grad(p, steps[i].grad);
    EXPECT_EQ(scaler.step(opt), steps[i].steps);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), steps[i].scale_after);
    EXPECT_EQ(scaler.growth_tracker(), steps[i].tracker_after);
  }
}

// A small float32 model and AdamW with some state, for skipped-step checks.
struct TinyProblem {
  Tensor x = randn_f32({16, 8}, 70), target;
  Tensor w1 = randn_f32({12, 8}, 71).requires_grad_(), b1 = zeros({12}).requires_grad_();
  Tensor w2 = randn_f32({4, 12}, 72).requires_grad_();
  TinyProblem() {
    Generator g(73);
    target = randint(0, 4, {16}, {}, &g);
  }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  Tensor loss() const { return mlp_loss(x, w1, b1, w2, target); }
};

TEST(GradScaler, SkippedStepLeavesParametersAndOptimizerStateBitIdentical) {
  TinyProblem t;
  optim::AdamW opt(t.params(), {.lr = 1e-2});
  optim::GradScaler scaler;
  for (int i = 0; i < 3; ++i) {  // build AdamW state
    opt.zero_grad();
    scaler.scale(t.loss()).backward();
    ASSERT_TRUE(scaler.step(opt));
    scaler.update();
  }
  std::vector<Tensor> before;
  for (const Tensor& p : t.params()) before.push_back(p.detach().clone());
  const auto state_before = opt.state_dict();
  const double scale_before = scaler.get_scale();

  opt.zero_grad();
  scaler.scale(t.loss()).backward();
  {
    NoGradGuard ng;
    Tensor g = t.w2.grad();
    g.narrow(0, 1, 1).fill_(std::numeric_limits<double>::infinity());  // one bad value
  }
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), scale_before * 0.5);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(bitwise_equal(t.params()[i].detach(), before[i]));
  const auto state_after = opt.state_dict();
  ASSERT_EQ(state_after.size(), state_before.size());
  for (const auto& [k, v] : state_before) EXPECT_TRUE(bitwise_equal(state_after.at(k), v)) << k;
  EXPECT_EQ(opt.param_step(0), 3);
}

TEST(GradScaler, InitialScale1e38NeverGivesAnInfScale) {
  TinyProblem t;
  optim::SGD opt(t.params(), {.lr = 1e-3});
  optim::GradScalerOptions o;
  o.init_scale = 1e38;
  o.growth_interval = 1;  // grow after every clean step: the fastest way to overflow
  optim::GradScaler scaler(o);
  int skipped = 0, stepped = 0;
  for (int i = 0; i < 12; ++i) {
    opt.zero_grad();
    Tensor scaled = scaler.scale(t.loss());
    scaled.backward();
    (scaler.step(opt) ? stepped : skipped)++;
    scaler.update();
    const double s = scaler.get_scale();
    EXPECT_TRUE(std::isfinite(s)) << "step " << i;
    EXPECT_LE(s, static_cast<double>(FLT_MAX));
    EXPECT_TRUE(std::isfinite(static_cast<float>(s)));
  }
  EXPECT_GT(skipped, 0) << "a loss of ~1 times 1e38 overflows float32 gradients";
  EXPECT_GT(stepped, 0) << "backing off must reach a usable scale";
  // Clean steps at the top: growth stops at the largest finite float32.
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt2({p}, {.lr = 0.0});
  optim::GradScaler top(o);
  for (int i = 0; i < 4; ++i) {
    set_grad(p, 0.0);
    EXPECT_TRUE(top.step(opt2));
    top.update();
    EXPECT_TRUE(std::isfinite(top.get_scale()));
  }
  EXPECT_EQ(top.get_scale(), static_cast<double>(FLT_MAX));
}

TEST(GradScaler, UnscaledGradientsEqualTheFloat32Ones) {
  TinyProblem t;
  optim::SGD opt(t.params(), {.lr = 0.0});
  t.loss().backward();
  std::vector<Tensor> want;
  for (const Tensor& p : t.params()) want.push_back(p.grad().clone());
  opt.zero_grad();
  optim::GradScaler scaler;  // 2^16: scaling by a power of two is exact
  scaler.scale(t.loss()).backward();
  EXPECT_FALSE(bitwise_equal(t.w1.grad(), want[0])) << "gradients are scaled before unscale_";
  scaler.unscale_(opt);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitwise_equal(t.params()[i].grad(), want[i])) << i;
  EXPECT_TRUE(scaler.step(opt));  // does not unscale a second time
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitwise_equal(t.params()[i].grad(), want[i])) << i;
  scaler.update();
}

TEST(GradScaler, RecoversFloat16GradientsThatWouldUnderflow) {
  // A loss this small gives output gradients (~1e-9) below float16's smallest
  // subnormal (6e-8): without scaling every float16 gradient is 0.
  Tensor x = randn_f32({8, 16}, 80);
  Tensor w = mul(randn_f32({16, 16}, 81), 0.25).requires_grad_();
  auto loss_fn = [&] { return mul(mean(linear(x, w)), 1e-7); };
  loss_fn().backward();
  Tensor want = w.grad().clone();
  w.zero_grad();
  {
    AutocastGuard amp(DType::Float16);
    loss_fn().backward();
  }
  EXPECT_EQ(amax(abs(w.grad())).item<double>(), 0.0) << "float16 gradients underflow without a loss scale";
  w.zero_grad();
  optim::SGD opt({w}, {.lr = 0.0});
  optim::GradScalerOptions o;
  o.init_scale = 1 << 24;
  optim::GradScaler scaler(o);
  {
    AutocastGuard amp(DType::Float16);
    scaler.scale(loss_fn()).backward();
  }
  scaler.unscale_(opt);
  // float16 keeps 11 significant bits (relative rounding 4.9e-4) and x is
  // rounded to float16 too: 4e-3 relative covers the two roundings with room.
  const double top = amax(abs(want)).item<double>();
  EXPECT_TRUE(all_close(w.grad(), want, 4e-3 * top, 4e-3));
}

TEST(GradScaler, MisuseIsAnError) {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler;
  EXPECT_KILN_ERROR(scaler.update(), "update", "no unscale_() or step()");
  set_grad(p, 1.0);
  scaler.unscale_(opt);
  EXPECT_KILN_ERROR(scaler.unscale_(opt), "unscale_", "already called");
  scaler.step(opt);
  EXPECT_KILN_ERROR(scaler.step(opt), "step", "already called");
  EXPECT_KILN_ERROR(scaler.unscale_(opt), "unscale_", "after step()");
  scaler.update();
  set_grad(p, 1.0);
  scaler.unscale_(opt);  // fine again after update()
  EXPECT_KILN_ERROR(scaler.scale(Tensor()), "scale", "undefined");
  for (auto bad : std::vector<std::function<void(optim::GradScalerOptions&)>>{
           [](auto& o) { o.init_scale = 0.0; }, [](auto& o) { o.init_scale = 1e39; },
           [](auto& o) { o.growth_factor = 1.0; }, [](auto& o) { o.backoff_factor = 1.0; },
           [](auto& o) { o.growth_interval = 0; }, [](auto& o) { o.growth_interval = INT64_MAX; }}) {
    optim::GradScalerOptions o;
    bad(o);
    EXPECT_KILN_ERROR(optim::GradScaler{o}, "GradScaler:");
  }
}

TEST(GradScaler, DisabledIsATransparentPassThrough) {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScalerOptions o;
  o.enabled = false;
  optim::GradScaler scaler(o);
  Tensor loss = scalar_tensor(3.0);
  EXPECT_EQ(scaler.scale(loss).impl_ptr().get(), loss.impl_ptr().get());
  set_grad(p, 2.0);
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(all_close(p.detach(), {-2.0, -2.0}, 0.0));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, StateDictRoundTripsAndResumesTheSameSequence) {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScalerOptions o;
  o.init_scale = 1024.0;
  o.growth_interval = 3;
  o.backoff_factor = 0.25;
  optim::GradScaler a(o);
  auto run = [&](optim::GradScaler& s, double g) {
    set_grad(p, g);
    s.step(opt);
    s.update();
  };
  run(a, 1.0);
  run(a, std::nan(""));
  run(a, 1.0);
  run(a, 1.0);  // tracker 2, scale 256
  const auto sd = a.state_dict();
  EXPECT_EQ(sd.at("scale").dtype(), DType::Float32);
  EXPECT_EQ(sd.at("scale").item<double>(), 256.0);
  EXPECT_EQ(sd.at("growth_tracker").item<int64_t>(), 2);
  optim::GradScaler b;  // different options: loading restores them
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.options().growth_interval, 3);
  EXPECT_EQ(b.options().backoff_factor, 0.25);
  run(a, 1.0);
  run(b, 1.0);
  EXPECT_EQ(b.get_scale(), 512.0);
  EXPECT_EQ(a.get_scale(), b.get_scale());

  auto broken = sd;
  broken.erase("growth_tracker");
  broken["scale"] = scalar_tensor(-1.0, DType::Float64);
  broken["extra"] = scalar_tensor(0.0);
  EXPECT_KILN_ERROR(b.load_state_dict(broken), "load_state_dict", "missing 'growth_tracker'", "'scale' must be",
                    "unexpected 'extra'");
  auto negative = sd;
  negative["scale"] = scalar_tensor(-1.0, DType::Float32);
  EXPECT_KILN_ERROR(b.load_state_dict(negative), "'scale' must be a positive finite float32");
  auto huge = sd;  // a hostile checkpoint's interval, past 2^53
  huge["growth_interval"] = empty_tensor({}, DType::Int64, kCPU);
  *huge["growth_interval"].data_ptr<int64_t>() = INT64_MAX;
  EXPECT_KILN_ERROR(b.load_state_dict(huge), "'growth_interval' must be in [1, 2^53]");
  EXPECT_EQ(b.get_scale(), 512.0) << "a failed load changes nothing";
}

TEST(GradScaler, AllFiniteFindsEveryKindOfNonFiniteValue) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(optim::all_finite({}));
  EXPECT_TRUE(optim::all_finite({Tensor(), zeros({0})}));
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (double bad : {inf, -inf, nan}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(bad));
      // Large enough for several parallel chunks; the bad value in the last one.
      Tensor g = to_dtype(randn_f32({300001}, 90), dt);
      EXPECT_TRUE(optim::all_finite({g}));
      {
        NoGradGuard ng;
        g.narrow(0, 300000, 1).fill_(bad);
      }
      EXPECT_FALSE(optim::all_finite({ones({3}), g}));
      testing::ThreadCountGuard tg;
      set_num_threads(1);
      EXPECT_FALSE(optim::all_finite({g}));
      // A strided view that skips the bad element is finite; one that holds it is not.
      EXPECT_TRUE(optim::all_finite({g.narrow(0, 0, 300000).slice(0, 0, 300000, 3)}));
      EXPECT_FALSE(optim::all_finite({g.slice(0, 0, 300001, 3)}));
    }
  }
  EXPECT_TRUE(optim::all_finite({full({4}, FLT_MAX), full({4}, 65504.0, DType::Float16)}));
}

// ---- mixed-precision training tracks float32 ------------------------------------

BertConfig tiny_bert() {
  BertConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 32;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  return c;
}

enum class Amp { None, BF16, FP16Scaled };

// Losses of 20 AdamW steps of a tiny BertForMaskedLM on a fixed batch, from
// the same initial weights, under the given precision.
std::vector<double> train_tiny_bert(Amp amp, std::vector<Tensor>* final_params = nullptr,
                                    std::vector<Tensor>* initial_params = nullptr, Device device = kCPU) {
  manual_seed(11);
  nn::BertForMaskedLM m(tiny_bert());
  if (initial_params)
    for (const Tensor& p : m.parameters()) initial_params->push_back(p.detach().clone());
  m.to(device);  // before the optimizer, which holds the parameter tensors
  Generator g(12);
  Tensor ids = randint(1, 64, {4, 16}, {}, &g);
  Tensor labels = to_dtype(where(lt(rand({4, 16}, {}, &g), 0.25), ids, -100.0), DType::Int64).to(device);
  Tensor mask = ones({4, 16}, DType::Int64).to(device);
  ids = ids.to(device);
  optim::AdamW opt(m.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  optim::GradScalerOptions so;
  so.enabled = amp == Amp::FP16Scaled;
  optim::GradScaler scaler(so);
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard guard(amp == Amp::BF16 ? DType::BFloat16 : DType::Float16, amp != Amp::None);
      loss = m.forward(ids, mask, Tensor(), labels).loss;
    }
    EXPECT_EQ(loss.dtype(), DType::Float32);
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    optim::clip_grad_norm(m.parameters(), 1.0);
    EXPECT_TRUE(scaler.step(opt)) << "step " << step;
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  if (final_params)
    for (const Tensor& p : m.parameters()) final_params->push_back(p.detach().to(kCPU));
  return losses;
}

TEST(MixedPrecision, TinyBertTracksAFloat32RunOver20AdamWSteps) {
  std::vector<Tensor> p0, p32, pbf, pfp;
  const std::vector<double> f32 = train_tiny_bert(Amp::None, &p32, &p0);
  const std::vector<double> bf16 = train_tiny_bert(Amp::BF16, &pbf);
  const std::vector<double> fp16 = train_tiny_bert(Amp::FP16Scaled, &pfp);
  EXPECT_LT(f32.back(), f32.front() * 0.8) << "the float32 run must learn for the comparison to mean anything";
  // Tolerance. Every GEMM rounds its inputs and output to 8 significant bits
  // (bf16, relative rounding 2^-9 = 2e-3) or 11 (fp16, 4.9e-4); these errors
  // are random in sign, so they mostly cancel in the loss, and AdamW (whose
  // update size does not depend on the gradient's scale) does not amplify the
  // drift over 20 steps. Measured on this problem: at most 4.4e-4 (bf16) and
  // 5e-5 (fp16) relative loss gap. The bounds, 3e-3 and 5e-4, leave about 7x
  // and 10x room for other BLAS builds while staying well below the loss
  // decrease per step (~1.5%), so a run that stopped tracking would fail.
  // (The per-op dtypes themselves are pinned by the Autocast tests above.)
  for (size_t i = 0; i < f32.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_NEAR(bf16[i], f32[i], 3e-3 * f32[i]);
    EXPECT_NEAR(fp16[i], f32[i], 5e-4 * f32[i]);
  }
  // Master weights stay float32, and the mixed-precision runs end near the
  // float32 run compared with how far training moved the weights (measured:
  // 1.1% for bf16, 0.17% for fp16; bounds 5% and 1%).
  double moved = 0, gap_bf = 0, gap_fp = 0;
  for (size_t i = 0; i < p32.size(); ++i) {
    ASSERT_EQ(pbf[i].dtype(), DType::Float32);
    ASSERT_EQ(pfp[i].dtype(), DType::Float32);
    moved += sum(pow(sub(p32[i], p0[i]), 2.0)).item<double>();
    gap_bf += sum(pow(sub(pbf[i], p32[i]), 2.0)).item<double>();
    gap_fp += sum(pow(sub(pfp[i], p32[i]), 2.0)).item<double>();
  }
  EXPECT_LT(std::sqrt(gap_bf), 0.05 * std::sqrt(moved));
  EXPECT_LT(std::sqrt(gap_fp), 0.01 * std::sqrt(moved));
}

// The same runs on a GPU against the CPU's float32 run, with the same bounds
// (dropout is off, so the GPU runs the same computation up to rounding).
TEST(CudaMixedPrecision, TinyBertOnTheGpuTracksTheCpuFloat32Run) {
  KILN_REQUIRE_CUDA();
  const Device gpu = testing::kGpu;
  const std::vector<double> f32 = train_tiny_bert(Amp::None);
  const std::vector<double> gpu32 = train_tiny_bert(Amp::None, nullptr, nullptr, gpu);
  const std::vector<double> bf16 = train_tiny_bert(Amp::BF16, nullptr, nullptr, gpu);
  const std::vector<double> fp16 = train_tiny_bert(Amp::FP16Scaled, nullptr, nullptr, gpu);
  for (size_t i = 0; i < f32.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_NEAR(gpu32[i], f32[i], 1e-4 * f32[i]);
    EXPECT_NEAR(bf16[i], f32[i], 3e-3 * f32[i]);
    EXPECT_NEAR(fp16[i], f32[i], 5e-4 * f32[i]);
  }
}

}  // namespace
}  // namespace kiln
