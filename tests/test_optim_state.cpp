// optim/ state: bit-identical resume from state_dict (also through a
// safetensors file) and its layout, clip_grad_norm, thread-count invariance,
// zero_grad and versions, construction and load_state_dict errors.
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "nn/hf_checkpoint.h"
#include "optim/optim.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::bitwise_equal;
using kiln::testing::set_grad;
using kiln::testing::values;
using namespace kiln::optim;

// ---- resume from state_dict ------------------------------------------------------

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<Tensor>&)>;

std::vector<Tensor> fresh_params(DType dtype) {
  std::vector<Tensor> params;
  for (int k = 0; k < 3; ++k) {
    Generator gen(100 + static_cast<uint64_t>(k));
    params.push_back(randn({k == 1 ? 70000 : 5 + k, 3}, dtype, &gen).set_requires_grad(true));
  }
  return params;
}

// Gradients that depend on the step and the parameters; parameter 2 gets one
// on even steps only.
void make_grads(std::vector<Tensor>& params, int step) {
  for (size_t k = 0; k < params.size(); ++k) {
    if (k == 2 && step % 2) {
      params[k].zero_grad();
      continue;
    }
    NoGradGuard no_grad;
    const Tensor x = params[k].detach();
    const double s = static_cast<double>(step);
    set_grad(params[k], add(add(mul(x, 0.3 + 0.01 * s), mul(mul(x, x), 0.1 * (step % 3 - 1))), 0.02 * (s - 5)));
  }
}

void train(Optimizer& opt, Scheduler* sched, std::vector<Tensor>& params, int from, int to) {
  for (int s = from; s < to; ++s) {
    make_grads(params, s);
    opt.step();
    if (sched) sched->step();
  }
}

void check_resume(const MakeOptimizer& make, DType dtype, bool through_file) {
  // 20 steps straight.
  std::vector<Tensor> straight = fresh_params(dtype);
  std::unique_ptr<Optimizer> opt_a = make(straight);
  Scheduler sched_a(*opt_a, linear_schedule_with_warmup(3, 25));
  train(*opt_a, &sched_a, straight, 0, 20);

  // 10 steps, save, a new optimizer on new parameter tensors, load, 10 more.
  std::vector<Tensor> first = fresh_params(dtype);
  std::unique_ptr<Optimizer> opt_b = make(first);
  Scheduler sched_b(*opt_b, linear_schedule_with_warmup(3, 25));
  train(*opt_b, &sched_b, first, 0, 10);
  std::map<std::string, Tensor> opt_state = opt_b->state_dict();
  std::map<std::string, Tensor> sched_state = sched_b.state_dict();
  if (through_file) {
    const std::string path = std::string(KILN_BINARY_DIR) + "/optim_resume_" + opt_b->name() + ".safetensors";
    nn::NamedTensors named(opt_state.begin(), opt_state.end());
    nn::save_safetensors(path, named);
    opt_state = nn::load_safetensors(path);
    std::filesystem::remove(path);
  }
  std::vector<Tensor> snapshot;
  for (const Tensor& p : first) snapshot.push_back(p.detach().clone());
  train(*opt_b, &sched_b, first, 10, 12);  // the state snapshot must not see these
  std::vector<Tensor> resumed = fresh_params(dtype);
  for (size_t k = 0; k < resumed.size(); ++k) {
    NoGradGuard no_grad;
    resumed[k].copy_(snapshot[k]);
  }
  std::unique_ptr<Optimizer> opt_r = make(resumed);
  Scheduler sched_r(*opt_r, linear_schedule_with_warmup(3, 25));
  opt_r->load_state_dict(opt_state);
  sched_r.load_state_dict(sched_state);
  EXPECT_EQ(opt_r->param_step(0), 10);
  EXPECT_EQ(opt_r->param_step(2), 5);
  train(*opt_r, &sched_r, resumed, 10, 20);
  for (size_t k = 0; k < straight.size(); ++k)
    EXPECT_TRUE(bitwise_equal(resumed[k], straight[k])) << opt_r->name() << " parameter " << k;
  const std::map<std::string, Tensor> sa = opt_a->state_dict(), sr = opt_r->state_dict();
  ASSERT_EQ(sa.size(), sr.size());
  for (const auto& [key, t] : sa) {
    ASSERT_TRUE(sr.count(key)) << key;
    EXPECT_TRUE(bitwise_equal(sr.at(key), t)) << key;
  }
}

TEST(OptimResume, BitIdenticalAfterStateDictRoundTrip) {
  const MakeOptimizer sgd = [](const std::vector<Tensor>& p) {
    return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.0, .weight_decay = 0.01,
                                               .nesterov = true});
  };
  const MakeOptimizer adamw = [](const std::vector<Tensor>& p) {
    return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01});
  };
  const MakeOptimizer lamb = [](const std::vector<Tensor>& p) {
    return std::make_unique<LAMB>(p, LAMBOptions{.lr = 0.01});
  };
  for (const MakeOptimizer* make : {&sgd, &adamw, &lamb}) {
    check_resume(*make, DType::Float32, false);
    check_resume(*make, DType::Float64, true);
  }
}

TEST(OptimResume, StateDictLayout) {
  std::vector<Tensor> params = fresh_params(DType::Float32);
  AdamW opt(std::vector<ParamGroup>{{{params[0], params[2]}, {}, {}, {}}, {{params[1]}, 0.5, 0.0, {{"beta1", 0.8}}}},
            AdamWOptions{});
  EXPECT_EQ(opt.state_dict().size(), 2u * 6);  // params, lr, weight_decay, beta1, beta2, eps per group; no state yet
  make_grads(params, 1);                        // parameter 2 has no gradient
  opt.step();
  const std::map<std::string, Tensor> sd = opt.state_dict();
  EXPECT_EQ(values(sd.at("param_groups.0.params")), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(sd.at("param_groups.1.params")), (std::vector<double>{2}));
  EXPECT_EQ(sd.at("param_groups.1.lr").item<double>(), 0.5);
  EXPECT_EQ(sd.at("param_groups.1.beta1").item<double>(), 0.8);
  EXPECT_EQ(sd.at("param_groups.0.beta1").item<double>(), 0.9);
  EXPECT_EQ(sd.at("state.0.step").dtype(), DType::Int64);
  EXPECT_EQ(sd.at("state.0.step").dim(), 0);
  EXPECT_EQ(sd.at("state.2.exp_avg").sizes(), params[1].sizes());
  EXPECT_FALSE(sd.count("state.1.step"));  // params[2] (flat index 1) never updated
  // A snapshot: later steps leave it alone.
  const Tensor before = sd.at("state.0.exp_avg").clone();
  make_grads(params, 2);
  opt.step();
  EXPECT_TRUE(bitwise_equal(sd.at("state.0.exp_avg"), before));
}

// Note [Sharded optimizer state]: two "ranks" owning alternate parameters
// update exactly what one unsharded optimizer does, and their state_dicts
// together are its state_dict; each loads the whole state and keeps its part.
TEST(OptimShard, OwnedParametersTogetherAreTheUnshardedOptimizer) {
  std::vector<Tensor> whole = fresh_params(DType::Float32), even = fresh_params(DType::Float32),
                      odd = fresh_params(DType::Float32);
  AdamW a(whole, AdamWOptions{.lr = 0.01}), e(even, AdamWOptions{.lr = 0.01}), o(odd, AdamWOptions{.lr = 0.01});
  std::vector<bool> mask;
  for (size_t i = 0; i < whole.size(); ++i) mask.push_back(i % 2 == 0);
  e.set_owned(mask);
  mask.flip();
  o.set_owned(mask);
  for (int step = 0; step < 3; ++step) {
    for (auto* ps : {&whole, &even, &odd}) make_grads(*ps, step + 1);
    a.step();
    e.step();
    o.step();
  }
  std::map<std::string, Tensor> merged = e.state_dict();
  for (auto& [k, t] : o.state_dict()) {
    if (k.rfind("state.", 0) == 0) {
      EXPECT_TRUE(merged.emplace(k, t).second) << k << " in both shards";
    }
  }
  const std::map<std::string, Tensor> want = a.state_dict();
  ASSERT_EQ(merged.size(), want.size());
  for (auto& [k, t] : want) EXPECT_TRUE(bitwise_equal(merged.at(k), t)) << k;
  for (size_t i = 0; i < whole.size(); ++i)
    EXPECT_TRUE(bitwise_equal((i % 2 == 0 ? even : odd)[i], whole[i])) << "parameter " << i;
  // Loading the whole state keeps only the owned part; the rest is accepted, not kept.
  AdamW again(fresh_params(DType::Float32), AdamWOptions{});
  std::vector<bool> first(whole.size(), false);
  first[0] = true;
  again.set_owned(first);
  again.load_state_dict(want);
  EXPECT_EQ(again.param_step(0), 3);
  EXPECT_EQ(again.param_step(1), 0);
  EXPECT_KILN_ERROR(again.set_owned({true}), "1 entries for");
}

// ---- clip_grad_norm ------------------------------------------------------------

TEST(OptimClip, TotalNormAndScaling) {
  Tensor a = tensor({3, 4}, {2}).set_requires_grad(true);        // grad [3, 4]
  Tensor b = tensor({0, 0, 12}, {3}).set_requires_grad(true);    // grad [0, 0, 12]
  Tensor c = zeros({2}).set_requires_grad(true);                  // no grad: skipped
  set_grad(a, tensor({3, 4}, {2}));
  set_grad(b, tensor({0, 0, 12}, {3}));
  EXPECT_DOUBLE_EQ(grad_norm({a, b, c}), 13.0);
  EXPECT_DOUBLE_EQ(grad_norm({a, b, c}, INFINITY), 12.0);
  EXPECT_NEAR(grad_norm({a, b, c}, 1.0), 19.0, 1e-12);
  // Under the limit: untouched.
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 20.0), 13.0);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3, 4}));
  // Over: scaled by max_norm / (total + 1e-6), in float32.
  const uint32_t version = a.grad().version();
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 6.5), 13.0);
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3.0f * coef, 4.0f * coef}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{0, 0, 12.0f * coef}));
  EXPECT_GT(a.grad().version(), version);
  EXPECT_FALSE(c.grad().defined());
  EXPECT_NEAR(grad_norm({a, b}), 6.5, 1e-5);
  // No gradients at all: 0.
  EXPECT_EQ(clip_grad_norm({c}, 1.0), 0.0);
}

TEST(OptimClip, NonFiniteNorms) {
  Tensor a = zeros({3}).set_requires_grad(true), b = zeros({2}).set_requires_grad(true);
  set_grad(a, tensor({1, NAN, 2}, {3}));
  set_grad(b, tensor({1, 1}, {2}));
  EXPECT_TRUE(std::isnan(clip_grad_norm({a, b}, 1.0)));
  for (double v : values(b.grad())) EXPECT_TRUE(std::isnan(v));  // scaled by nan, as PyTorch
  set_grad(a, tensor({1, INFINITY, 2}, {3}));
  set_grad(b, tensor({1, 1}, {2}));
  EXPECT_KILN_ERROR(clip_grad_norm({a, b}, 1.0, 2.0, true), "total norm of order 2 of the gradients is inf");
  EXPECT_EQ(values(b.grad()), (std::vector<double>{1, 1}));  // untouched on error
  EXPECT_TRUE(std::isinf(clip_grad_norm({a, b}, 1.0)));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{0, 0}));  // scaled by 1 / inf = 0
  set_grad(a, tensor({1, NAN, 2}, {3}));
  EXPECT_TRUE(std::isnan(grad_norm({a}, INFINITY)));
  EXPECT_KILN_ERROR(clip_grad_norm({a}, -1.0), "max_norm must be >= 0");
  EXPECT_KILN_ERROR(clip_grad_norm({a}, 1.0, 0.0), "norm_type must be > 0");
}

TEST(OptimClip, Float64AccumulationAndNonContiguousGrad) {
  // 1e20^2 overflows float32 but not the float64 accumulator.
  Tensor a = zeros({2}).set_requires_grad(true);
  set_grad(a, tensor({3e20, 4e20}, {2}));
  const double x = static_cast<float>(3e20), y = static_cast<float>(4e20);
  EXPECT_DOUBLE_EQ(grad_norm({a}), std::sqrt(x * x + y * y));
  Tensor w = zeros({3, 2}).set_requires_grad(true);
  set_grad(w, tensor({1, 2, 3, 4, 5, 6}, {2, 3}).t());  // transposed view
  EXPECT_NEAR(clip_grad_norm({w}, 1.0), std::sqrt(91.0), 1e-6);
  EXPECT_NEAR(grad_norm({w}), 1.0, 1e-6);
}

// ---- determinism across thread counts ------------------------------------------

TEST(OptimDeterminism, SameBitsForAnyThreadCount) {
  kiln::testing::ThreadCountGuard guard;
  auto run = [](int threads, const char* which) {
    set_num_threads(threads);
    std::vector<Tensor> params = fresh_params(DType::Float32);  // one has 210000 elements (> 3 chunks)
    std::unique_ptr<Optimizer> opt;
    if (std::string(which) == "AdamW") opt = std::make_unique<AdamW>(params, AdamWOptions{});
    else opt = std::make_unique<LAMB>(params, LAMBOptions{});
    double norm = 0;
    for (int s = 0; s < 3; ++s) {
      make_grads(params, s);
      norm += clip_grad_norm(params, 50.0);
      opt->step();
    }
    return std::make_pair(params, norm);
  };
  for (const char* which : {"AdamW", "LAMB"}) {
    const auto [one, n1] = run(1, which);
    const auto [two, n2] = run(2, which);
    EXPECT_EQ(n1, n2) << which;
    for (size_t k = 0; k < one.size(); ++k) EXPECT_TRUE(bitwise_equal(one[k], two[k])) << which << " " << k;
  }
}

// ---- zero_grad, versions and errors ----------------------------------------------

TEST(OptimBasics, ZeroGradAndVersions) {
  Tensor p = ones({3}).set_requires_grad(true);
  SGD opt({p}, SGDOptions{.lr = 0.5});
  set_grad(p, ones({3}));
  const uint32_t v0 = p.version();
  opt.step();
  EXPECT_GT(p.version(), v0);
  EXPECT_EQ(values(p), (std::vector<double>{0.5, 0.5, 0.5}));
  opt.zero_grad(false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(values(p.grad()), (std::vector<double>{0, 0, 0}));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // nothing to do
  EXPECT_EQ(opt.param_step(0), 1);
  opt.set_lr(0.25);
  EXPECT_EQ(opt.lr(0), 0.25);
}

TEST(OptimBasics, ConstructionErrors) {
  Tensor p = ones({3}).set_requires_grad(true);
  EXPECT_KILN_ERROR(SGD({p}, SGDOptions{.lr = -0.1}), "SGD: invalid learning rate -0.1 in parameter group 0");
  EXPECT_KILN_ERROR(AdamW(std::vector<ParamGroup>{{{p}, -1.0, {}, {}}}, AdamWOptions{}),
                    "AdamW: invalid learning rate -1");
  EXPECT_KILN_ERROR(SGD(std::vector<Tensor>{}, SGDOptions{}), "SGD: got an empty parameter list");
  EXPECT_KILN_ERROR(AdamW(std::vector<ParamGroup>{{{}, {}, {}, {}}}, AdamWOptions{}), "empty parameter list");
  EXPECT_KILN_ERROR(SGD({p, p}, SGDOptions{}), "parameter 1 of group 0 shares its storage");
  EXPECT_KILN_ERROR(SGD({ones({2, 3}).t()}, SGDOptions{}), "is not contiguous");
  EXPECT_KILN_ERROR(SGD({zeros({2}, DType::Int64)}, SGDOptions{}), "int64; parameters must be float32 or float64");
  EXPECT_KILN_ERROR(SGD({Tensor()}, SGDOptions{}), "undefined tensor");
  Tensor nonleaf = mul(p, 2.0);
  EXPECT_KILN_ERROR(SGD({nonleaf}, SGDOptions{}), "not a leaf tensor");
  EXPECT_KILN_ERROR(SGD({p}, SGDOptions{.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    "Nesterov momentum requires momentum > 0 and zero dampening");
  EXPECT_KILN_ERROR(SGD({p}, SGDOptions{.weight_decay = -1}), "invalid weight_decay -1");
  EXPECT_KILN_ERROR(AdamW({p}, AdamWOptions{.beta2 = 1.0}), "AdamW: invalid beta2 1");
  EXPECT_KILN_ERROR(LAMB({p}, LAMBOptions{.eps = -1}), "LAMB: invalid eps -1");
  EXPECT_KILN_ERROR(AdamW(std::vector<ParamGroup>{{{p}, {}, {}, {{"momentum", 0.9}}}}, AdamWOptions{}),
                    "unknown option 'momentum' in parameter group 0 (known: beta1, beta2, eps)");
  SGD opt({p}, SGDOptions{});
  EXPECT_KILN_ERROR(opt.set_lr(-1.0), "invalid learning rate -1");
  EXPECT_KILN_ERROR(opt.set_lr(3, 0.1), "SGD.set_lr: group 3 out of range (1 groups)");
  set_grad(p, ones({4}));
  EXPECT_KILN_ERROR(opt.step(), "SGD.step: the gradient of parameter 0 of group 0 is Tensor[4]");
}

TEST(OptimBasics, LoadStateDictErrors) {
  std::vector<Tensor> params = fresh_params(DType::Float32);
  SGD sgd(params, SGDOptions{.momentum = 0.9});
  AdamW adamw(params, AdamWOptions{});
  make_grads(params, 0);
  sgd.step();
  adamw.step();
  const std::map<std::string, Tensor> sgd_state = sgd.state_dict(), adam_state = adamw.state_dict();
  // Another optimizer's state.
  EXPECT_KILN_ERROR(adamw.load_state_dict(sgd_state), "AdamW.load_state_dict: the state does not match",
                    "missing: param_groups.0.beta1", "state.0.exp_avg", "unexpected: param_groups.0.dampening",
                    "state.0.momentum_buffer");
  // A buffer of the wrong shape, and a group of another size.
  std::map<std::string, Tensor> bad = adam_state;
  bad["state.1.exp_avg"] = zeros({3});
  EXPECT_KILN_ERROR(adamw.load_state_dict(bad), "mismatched: state.1.exp_avg is Tensor[3] float32 cpu",
                    "but parameter 1 is Tensor[70000, 3] float32 cpu");
  std::vector<Tensor> two(params.begin(), params.begin() + 2);
  AdamW smaller(two, AdamWOptions{});
  EXPECT_KILN_ERROR(smaller.load_state_dict(adam_state), "param_groups.0.params is Tensor[3] int64 cpu",
                    "unexpected: state.2.exp_avg");
  // Invalid hyperparameters and a bad step count; nothing changes on error.
  bad = adam_state;
  bad["param_groups.0.lr"] = scalar_tensor(-1.0, DType::Float64);
  bad["state.0.step"] = scalar_tensor(0.0, DType::Int64);
  EXPECT_KILN_ERROR(adamw.load_state_dict(bad), "invalid hyperparameters: AdamW: invalid learning rate -1",
                    "state.0.step is 0, expected in [1, 2^53]");
  // A step past 2^53 (a hostile checkpoint: tests/fuzz/corpus/checkpoint) is
  // refused, not cast from a double out of int64's range.
  bad = adam_state;
  Tensor huge = empty_tensor({}, DType::Int64, kCPU);
  *huge.data_ptr<int64_t>() = INT64_MAX;
  bad["state.0.step"] = huge;
  EXPECT_KILN_ERROR(adamw.load_state_dict(bad), "state.0.step is 9.22337e+18, expected in [1, 2^53]");
  bad = adam_state;
  bad["param_groups.0.eps"] = zeros({1}, DType::Float64);
  EXPECT_KILN_ERROR(adamw.load_state_dict(bad), "param_groups.0.eps is Tensor[1] float64 cpu, expected a 0-dim float64");
  EXPECT_EQ(adamw.lr(0), 1e-3);
  EXPECT_EQ(adamw.param_step(0), 1);
  // Partial state: a step without its buffers.
  bad = adam_state;
  bad.erase("state.0.exp_avg_sq");
  EXPECT_KILN_ERROR(adamw.load_state_dict(bad), "missing: state.0.exp_avg_sq");
  // A state without per-parameter entries resets them.
  std::map<std::string, Tensor> groups_only;
  for (const auto& [k, v] : adam_state)
    if (k.rfind("param_groups.", 0) == 0) groups_only[k] = v;
  adamw.load_state_dict(groups_only);
  EXPECT_EQ(adamw.param_step(0), 0);
}

}  // namespace
}  // namespace kiln
