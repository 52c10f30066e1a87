// optim/: the generic (tensor-op) update path against the fused CPU loops
// (Note [Fused and generic updates] in optim/optimizer.h). The generic path is
// what CUDA parameters take; set_force_generic_update(true) runs it on CPU so
// both paths can be compared here, on any machine: SGD, AdamW and LAMB
// trajectories, state_dict round trips, clip_grad_norm / grad_norm and
// all_finite. With a CUDA device, the optimizers on CUDA are compared with the
// fused CPU loops too (skipped otherwise), and a short training run on CUDA
// is checked.
//
// Tolerance: the generic path runs the fused loop's statements in the same
// order with the same scalars rounded to the same dtype, but rounds every op
// (p + round(round(-lr) * g)), while the fused loops, compiled with
// -march=native, may contract a * b + c into one FMA (one rounding): up to
// about an ulp per element and step. LAMB's and clip_grad_norm's float64
// norms are also summed in another order, which can move the rounded trust
// ratio or clip coefficient by an ulp. Over ten steps these compound, and an
// element may cancel to near zero, so parameters and buffers must agree to
// within kUlps ulps of the tensor's largest magnitude, not bit for bit.
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "cuda/cuda.h"
#include "optim/optim.h"
#include "test_util.h"
#include "train/mlm_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {

using namespace kiln::optim;

constexpr double kUlps = 4.0;  // measured: at most 2 on CPU (10 steps, float32 and float64)
constexpr double kCudaUlps = 8.0;  // unmeasured: device kernels contract and reduce in their own ways

// Generic path on for its lifetime.
struct ForceGeneric {
  ForceGeneric() { set_force_generic_update(true); }
  ~ForceGeneric() { set_force_generic_update(false); }
};

// The spacing of `dtype`'s values at magnitude |x| (x normal or zero).
double ulp_at(double x, DType dtype) {
  const double a = std::abs(x);
  if (dtype == DType::Float32) {
    const float f = static_cast<float>(a);
    return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity()) - f);
  }
  return std::nextafter(a, std::numeric_limits<double>::infinity()) - a;
}

// Every element of got within `ulps` ulps of want, measured at the larger of
// the element's magnitude and scale_floor (an element that cancels to near
// zero is compared at the tensor's own scale). Reports the worst element.
::testing::AssertionResult within_ulps(const Tensor& got, const Tensor& want, double ulps, double scale_floor = 0.0) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  const std::vector<double> g = testing::values(got), w = testing::values(want);
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    const double unit = ulp_at(std::max({std::abs(w[i]), std::abs(g[i]), scale_floor}), want.dtype());
    const double d = std::abs(g[i] - w[i]) / unit;
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  if (worst <= ulps) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst_i << ": " << g[worst_i] << " vs " << w[worst_i] << " ("
                                       << worst << " ulps > " << ulps << ")";
}

double max_abs(const Tensor& t) { return t.numel() == 0 ? 0.0 : amax(abs(t.to(DType::Float64))).item<double>(); }

// Parameters of several shapes: across the 2048-element blocks of the fused
// loops, a 0-dim one, a zero one (LAMB's trust ratio falls back to 1) and one
// that never gets a gradient.
std::vector<Tensor> make_params(DType dtype, Device device, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps{randn({5000}, dtype, &gen), randn({7, 13}, dtype, &gen), randn({}, dtype, &gen),
                         zeros({33}, dtype), randn({4}, dtype, &gen)};
  for (Tensor& p : ps) {
    p = p.to(device);
    p.set_requires_grad(true);
  }
  return ps;
}

std::vector<Tensor> cpu_copies(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().to(kCPU).clone());
  return out;
}

// Gradients of step s, the same for every copy of the parameters (the last
// parameter gets none).
void set_grads(const std::vector<Tensor>& ps, int s) {
  Generator gen(1000 + static_cast<uint64_t>(s));
  for (size_t i = 0; i + 1 < ps.size(); ++i) {
    Tensor g = randn(ps[i].sizes(), TensorOptions(ps[i].dtype()), &gen).to(ps[i].device());
    Tensor(ps[i]).mutable_grad() = g;
  }
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

struct Case {
  std::string name;
  MakeOptimizer make;
};

std::vector<Case> cases() {
  return {
      {"SGD", [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); }},
      {"SGD momentum dampening decay",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(
             p, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
       }},
      {"SGD nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p,
                                      SGDOptions{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true});
       }},
      {"AdamW", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-2}); }},
      {"AdamW no decay",
       [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(p, AdamWOptions{.lr = 3e-3, .beta1 = 0.8, .weight_decay = 0.0});
       }},
      {"LAMB", [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2}); }},
      {"LAMB no bias correction",
       [](std::vector<Tensor> p) {
         return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2, .weight_decay = 0.1, .bias_correction = false});
       }},
  };
}

// 10 steps of `c` on `ps` (any device), generic or fused per `generic`.
void run_steps(Optimizer& opt, const std::vector<Tensor>& ps, bool generic, int from, int to) {
  for (int s = from; s < to; ++s) {
    set_grads(ps, s);
    if (generic) {
      ForceGeneric force;
      opt.step();
    } else {
      opt.step();
    }
  }
}

// Parameters and every state buffer of `got` within tolerance of `want`.
void expect_same_trajectory(const std::string& what, const std::vector<Tensor>& got_p, const Optimizer& got,
                            const std::vector<Tensor>& want_p, const Optimizer& want, double ulps) {
  for (size_t i = 0; i < want_p.size(); ++i) {
    const Tensor g = got_p[i].detach().to(kCPU), w = want_p[i].detach();
    EXPECT_TRUE(within_ulps(g, w, ulps, max_abs(w))) << what << ", parameter " << i;
  }
  const auto gs = got.state_dict(), ws = want.state_dict();
  ASSERT_EQ(gs.size(), ws.size()) << what;
  for (const auto& [key, w] : ws) {
    ASSERT_TRUE(gs.count(key)) << what << ": " << key;
    const Tensor& g = gs.at(key);
    EXPECT_TRUE(g.device().is_cpu()) << what << ": state_dict() must hand out CPU copies, " << key;
    if (w.dtype() == DType::Int64 || key.rfind("param_groups.", 0) == 0) {
      EXPECT_TRUE(testing::bitwise_equal(g, w)) << what << ": " << key;
    } else {
      EXPECT_TRUE(within_ulps(g, w, ulps, max_abs(w))) << what << ": " << key;
    }
  }
}

TEST(OptimGeneric, TrajectoriesMatchTheFusedLoops) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases()) {
      const std::string what = c.name + " " + dtype_name(dtype);
      const std::vector<Tensor> fused_p = make_params(dtype, kCPU, 5), generic_p = make_params(dtype, kCPU, 5);
      auto fused = c.make(fused_p), generic = c.make(generic_p);
      run_steps(*fused, fused_p, false, 0, 10);
      run_steps(*generic, generic_p, true, 0, 10);
      expect_same_trajectory(what, generic_p, *generic, fused_p, *fused, kUlps);
      // The parameters did move (a path that did nothing would fail above,
      // unless both did nothing).
      EXPECT_GT(max_abs(sub(fused_p[0].detach(), make_params(dtype, kCPU, 5)[0].detach())), 1e-3) << what;
      EXPECT_EQ(generic->param_step(0), 10) << what;
      EXPECT_EQ(generic->param_step(4), 0) << what;  // no gradient: skipped
    }
  }
}

// The generic path computes the documented formula statement by statement,
// each op rounded once: one SGD step equals p + round(round(-lr) * g)
// computed here in scalar float code. The fused loop may contract that into
// an FMA (one rounding), so it is only within an ulp of it.
TEST(OptimGeneric, GenericPathRoundsEachStatement) {
  Generator gen(3);
  const Tensor p0 = randn({4099}, {}, &gen), g = randn({4099}, {}, &gen);
  std::vector<Tensor> ps;
  for (bool generic : {false, true}) {
    Tensor p = p0.clone().set_requires_grad(true);
    p.mutable_grad() = g.clone();
    SGD opt({p}, SGDOptions{.lr = 0.1});
    if (generic) {
      ForceGeneric force;
      opt.step();
    } else {
      opt.step();
    }
    ps.push_back(p.detach());
  }
  const std::vector<float> P = p0.to_vector<float>(), G = g.to_vector<float>(), got = ps[1].to_vector<float>();
  const float neg_lr = -0.1f;
  for (size_t i = 0; i < P.size(); ++i) {
    volatile float product = neg_lr * G[i];  // volatile: rounded here, no contraction
    const float want = P[i] + product;
    ASSERT_EQ(got[i], want) << "element " << i;
  }
  EXPECT_TRUE(within_ulps(ps[0], ps[1], 1.0, max_abs(p0)));  // at the tensor's scale: the result may cancel
}

// state_dict() / load_state_dict() through the generic path: 5 steps, a new
// optimizer loads the state, 5 more steps on both give the same bits; and a
// state written by the fused path continues under the generic one.
TEST(OptimGeneric, StateDictRoundTrip) {
  for (const Case& c : cases()) {
    const std::vector<Tensor> a_p = make_params(DType::Float32, kCPU, 11);
    auto a = c.make(a_p);
    run_steps(*a, a_p, true, 0, 5);
    std::vector<Tensor> b_p = cpu_copies(a_p);
    for (Tensor& p : b_p) p.set_requires_grad(true);
    auto b = c.make(b_p);
    b->load_state_dict(a->state_dict());
    run_steps(*a, a_p, true, 5, 10);
    run_steps(*b, b_p, true, 5, 10);
    for (size_t i = 0; i < a_p.size(); ++i)
      EXPECT_TRUE(testing::bitwise_equal(b_p[i].detach(), a_p[i].detach())) << c.name << ", parameter " << i;
    for (const auto& [key, t] : b->state_dict()) {
      EXPECT_TRUE(t.device().is_cpu()) << key;
      EXPECT_TRUE(testing::bitwise_equal(t, a->state_dict().at(key))) << c.name << ": " << key;
    }

    // fused state -> generic continuation == all fused, within tolerance
    const std::vector<Tensor> f_p = make_params(DType::Float32, kCPU, 11), g_p = make_params(DType::Float32, kCPU, 11);
    auto f = c.make(f_p), g = c.make(g_p);
    run_steps(*f, f_p, false, 0, 5);
    run_steps(*g, g_p, false, 0, 5);
    auto g2 = c.make(g_p);
    g2->load_state_dict(g->state_dict());
    run_steps(*f, f_p, false, 5, 10);
    run_steps(*g2, g_p, true, 5, 10);
    expect_same_trajectory(c.name + " fused->generic", g_p, *g2, f_p, *f, kUlps);
  }
}

// Gradients of mixed dtypes, a non-contiguous one, an empty one and a
// parameter without gradient.
std::vector<Tensor> clip_params(double scale) {
  Generator gen(21);
  std::vector<Tensor> ps{zeros({3000}), zeros({6, 5}, DType::Float64), zeros({0}), zeros({17}), zeros({4})};
  for (Tensor& p : ps) p.set_requires_grad(true);
  Tensor(ps[0]).mutable_grad() = mul(randn({3000}, {}, &gen), scale);
  Tensor(ps[1]).mutable_grad() = mul(randn({6, 5}, DType::Float64, &gen), scale);
  Tensor(ps[2]).mutable_grad() = zeros({0});
  Tensor(ps[3]).mutable_grad() = mul(randn({17, 2}, {}, &gen), scale).select(1, 1);  // stride 2
  return ps;
}

TEST(OptimGeneric, ClipGradNormMatchesTheFusedLoops) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double norm_type : {2.0, 1.0, 3.0, inf}) {
    for (double max_norm : {1.0, 1e6}) {  // clipped, and left alone
      const std::vector<Tensor> fp = clip_params(3.0), gp = clip_params(3.0);
      ASSERT_FALSE(gp[3].grad().is_contiguous());
      const double fused_norm = grad_norm(fp, norm_type);
      double generic_norm = 0, generic_total = 0;
      {
        ForceGeneric force;
        generic_norm = grad_norm(gp, norm_type);
        generic_total = clip_grad_norm(gp, max_norm, norm_type);
      }
      const double fused_total = clip_grad_norm(fp, max_norm, norm_type);
      EXPECT_NEAR(generic_norm, fused_norm, 1e-12 * fused_norm) << norm_type;
      EXPECT_NEAR(generic_total, fused_total, 1e-12 * fused_total) << norm_type;
      EXPECT_GT(fused_total, 2.0) << norm_type;  // so max_norm 1 clips
      // The coefficient comes from totals summed in different orders: one
      // float32 ulp, or a relative 1e-14 (64 ulps) in float64.
      for (size_t i = 0; i < 4; ++i)
        EXPECT_TRUE(within_ulps(gp[i].grad(), fp[i].grad(), gp[i].grad().dtype() == DType::Float32 ? 1.0 : 64.0))
            << "norm " << norm_type << ", max " << max_norm << ", gradient " << i;
      if (max_norm == 1.0) {  // really clipped: the new norm is max_norm
        ForceGeneric force;
        EXPECT_NEAR(grad_norm(gp, norm_type), 1.0, 1e-5) << norm_type;
      }
    }
  }
}

TEST(OptimGeneric, ClipGradNormNonFinite) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
      const std::vector<Tensor> fp = clip_params(1.0), gp = clip_params(1.0);
      for (const auto* ps : {&fp, &gp}) Tensor((*ps)[1].grad()).view({-1}).narrow(0, 7, 1).fill_(bad);
      const double fused = grad_norm(fp, norm_type);
      ForceGeneric force;
      const double generic = grad_norm(gp, norm_type);
      EXPECT_EQ(std::isnan(generic), std::isnan(fused)) << bad << " " << norm_type;
      EXPECT_EQ(std::isinf(generic), std::isinf(fused)) << bad << " " << norm_type;
      EXPECT_FALSE(std::isfinite(generic));
      EXPECT_KILN_ERROR(clip_grad_norm(gp, 1.0, norm_type, /*error_if_nonfinite=*/true), "error_if_nonfinite");
    }
  }
  ForceGeneric force;
  EXPECT_EQ(grad_norm({zeros({3}).requires_grad_()}), 0.0);  // no gradients at all
}

TEST(OptimGeneric, AllFiniteMatchesTheFusedCheck) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (double bad : {0.0, nan, inf, -inf}) {
      Tensor a = randn({3000}).to(dtype), b = randn({5, 4}).to(dtype);
      if (bad != 0.0) b.view({-1}).narrow(0, 13, 1).fill_(bad);
      const std::vector<Tensor> grads{a, Tensor(), zeros({0}, dtype), b.t(), tensor_from({1, 2, 3})};
      const bool fused = all_finite(grads);
      bool generic;
      {
        ForceGeneric force;
        generic = all_finite(grads);
      }
      EXPECT_EQ(fused, bad == 0.0) << dtype_name(dtype) << " " << bad;
      EXPECT_EQ(generic, fused) << dtype_name(dtype) << " " << bad;
    }
  }
}

// ---- CUDA (skipped without a device) ---------------------------------------------

#define KILN_REQUIRE_CUDA_DEVICE()                                                      \
  do {                                                                                  \
    if (!::kiln::cuda::is_available())                                                  \
      GTEST_SKIP() << (::kiln::cuda_built() ? "no CUDA device" : "built without CUDA"); \
  } while (0)

TEST(OptimGenericCuda, TrajectoriesMatchTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Device gpu(DeviceType::CUDA, 0);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases()) {
      const std::string what = c.name + " " + dtype_name(dtype) + " cuda";
      const std::vector<Tensor> cpu_p = make_params(dtype, kCPU, 5), gpu_p = make_params(dtype, gpu, 5);
      auto cpu = c.make(cpu_p), on_gpu = c.make(gpu_p);
      run_steps(*cpu, cpu_p, false, 0, 10);
      run_steps(*on_gpu, gpu_p, false, 0, 10);
      for (const Tensor& p : gpu_p) EXPECT_EQ(p.device(), gpu);
      expect_same_trajectory(what, gpu_p, *on_gpu, cpu_p, *cpu, kCudaUlps);
      // state_dict() from the GPU loads back onto it
      auto again = c.make(gpu_p);
      again->load_state_dict(on_gpu->state_dict());
      EXPECT_EQ(again->param_step(0), 10);
    }
  }
}

TEST(OptimGenericCuda, ClipAndAllFiniteMatchTheCpu) {
  KILN_REQUIRE_CUDA_DEVICE();
  const Device gpu(DeviceType::CUDA, 0);
  const std::vector<Tensor> cp = clip_params(3.0), gp = clip_params(3.0);
  for (const Tensor& p : gp) {
    Tensor q = p;
    if (q.grad().defined()) q.mutable_grad() = q.grad().to(gpu);
  }
  // parameters stay on CPU: clip_grad_norm looks at the gradients only
  const double c = clip_grad_norm(cp, 1.0), g = clip_grad_norm(gp, 1.0);
  EXPECT_NEAR(g, c, 1e-12 * c);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(within_ulps(gp[i].grad().to(kCPU), cp[i].grad(), cp[i].grad().dtype() == DType::Float32 ? 1.0 : 64.0))
        << i;
  std::vector<Tensor> grads{randn({100}).to(gpu), randn({7}).to(gpu)};
  EXPECT_TRUE(all_finite(grads));
  grads[1].narrow(0, 3, 1).fill_(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(all_finite(grads));
}

// A short pretraining run with --device cuda: the model and optimizer state
// live on the GPU, the checkpoint is written and resumes.
TEST(OptimGenericCuda, PretrainingRunsOnTheDevice) {
  KILN_REQUIRE_CUDA_DEVICE();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_optim_generic_cuda_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  train::TrainingArguments a;
  a.output_dir = dir.string();
  a.synthetic_documents = 200;
  a.max_seq_length = 32;
  a.batch_size = 8;
  a.lr = 1e-3;
  a.max_steps = 4;
  a.logging_steps = 1;
  a.save_steps = 2;
  a.workers = 0;
  a.device = "cuda";
  std::ostringstream log;
  {
    train::MlmTask task(a, log);
    for (const auto& [name, p] : task.model().named_parameters()) ASSERT_FALSE(p.device().is_cpu()) << name;
    const train::TrainResult r = train::train(a, task, log);
    EXPECT_TRUE(r.finished) << log.str();
    EXPECT_TRUE(std::isfinite(r.last_loss)) << log.str();
    EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
