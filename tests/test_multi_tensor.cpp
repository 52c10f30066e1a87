// The multi-tensor ops on the CPU (ops/multi_tensor.h, Note [Multi-tensor
// ops]): a list step equals the same op one parameter at a time and the
// optimizers' step() bit for bit, and the formulas written out here within an
// ulp or two (a compiler may contract a * b + c differently in the loop and
// here); the norm of a list against float64 references, with inf and NaN;
// the non-finite check for every floating dtype; the argument checks; what
// the ops report to op observers. CUDA against these: test_cuda_multi_tensor.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/lamb.h"
#include "multi_tensor_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using L = std::vector<Tensor>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sizes around the blocked loops' cuts (core/block_loop.h: blocks of 2048,
// chunks of 65536) and the CUDA kernels' chunks of 16384.
const std::vector<Shape> kShapes = {{1}, {7, 3}, {2049}, {16385}, {129, 129}, {70001}};

using Lists = testing::ParamLists;

Lists make_lists(DType dt, uint64_t seed) { return testing::make_param_lists(kShapes, dt, seed, 2); }

Lists clone_lists(const Lists& a) { return a.to(kCPU); }

// max |got - want| / max |want|: the error relative to the tensor's scale.
double scaled_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = testing::values(got), w = testing::values(want);
  double err = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? err / scale : err;
}

// Four ulps of 1 in dtype.
double ulps4(DType dt) { return dt == DType::Float32 ? 4 * 1.2e-7 : 4 * 2.3e-16; }

void expect_near_formula(const Lists& got, const Lists& want, DType dt) {
  for (size_t i = 0; i < got.p.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_LE(scaled_error(got.p[i], want.p[i]), ulps4(dt));
    EXPECT_LE(scaled_error(got.m[i], want.m[i]), ulps4(dt));
    EXPECT_LE(scaled_error(got.v[i], want.v[i]), ulps4(dt));
  }
}

void expect_same(const Lists& a, const Lists& b) {
  for (size_t i = 0; i < a.p.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_TRUE(bitwise_equal(a.p[i], b.p[i]));
    EXPECT_TRUE(bitwise_equal(a.m[i], b.m[i]));
    EXPECT_TRUE(bitwise_equal(a.v[i], b.v[i]));
  }
}

// ---- AdamW -------------------------------------------------------------------------

// torch.optim.AdamW's single-tensor statements in T arithmetic (the CPU body's
// order and scalar roundings), element by element.
template <typename T>
void adamw_reference(Tensor p, const Tensor& g, Tensor m, Tensor v, int64_t step, double lr, double wd, double beta1,
                     double beta2, double eps) {
  const double t = static_cast<double>(step);
  const T decay = static_cast<T>(1.0 - lr * wd), b1 = static_cast<T>(beta1), c1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), c2 = static_cast<T>(1.0 - beta2);
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, t)));
  const T neg_step = static_cast<T>(-(lr / (1.0 - std::pow(beta1, t)))), e = static_cast<T>(eps);
  T *P = p.data_ptr<T>(), *M = m.data_ptr<T>(), *V = v.data_ptr<T>();
  const T* G = g.data_ptr<T>();
  for (int64_t i = 0; i < p.numel(); ++i) {
    if (decay != T(1)) P[i] = P[i] * decay;
    M[i] = M[i] * b1 + G[i] * c1;
    V[i] = V[i] * b2 + (G[i] * c2) * G[i];
    P[i] = P[i] + (M[i] * neg_step) / (std::sqrt(V[i]) / bc2_sqrt + e);
  }
}

TEST(MultiTensor, AdamWListEqualsOneAtATimeAndTheFormula) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (double wd : {0.0, 0.05}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " weight_decay " + std::to_string(wd));
      const Lists start = make_lists(dt, 100);
      Lists list = clone_lists(start), single = clone_lists(start), ref = clone_lists(start);
      multi_tensor_adamw_(list.p, list.g, list.m, list.v, list.steps, 1e-2, wd, 0.9, 0.999, 1e-8);
      for (size_t i = 0; i < start.p.size(); ++i)
        multi_tensor_adamw_({single.p[i]}, {single.g[i]}, {single.m[i]}, {single.v[i]}, {single.steps[i]}, 1e-2,
                            wd, 0.9, 0.999, 1e-8);
      expect_same(list, single);
      for (size_t i = 0; i < start.p.size(); ++i) {
        if (dt == DType::Float32)
          adamw_reference<float>(ref.p[i], ref.g[i], ref.m[i], ref.v[i], ref.steps[i], 1e-2, wd, 0.9, 0.999, 1e-8);
        else
          adamw_reference<double>(ref.p[i], ref.g[i], ref.m[i], ref.v[i], ref.steps[i], 1e-2, wd, 0.9, 0.999, 1e-8);
      }
      expect_near_formula(list, ref, dt);
    }
  }
}

// Parameters with gradients like an optimizer sees them; parameter 1 gets no
// gradient at step 1, so update counts differ afterwards.
std::vector<Tensor> make_params(DType dt) {
  std::vector<Tensor> ps;
  for (size_t i = 0; i < kShapes.size(); ++i) ps.push_back(testing::seeded(kShapes[i], 300 + i, dt).requires_grad_());
  return ps;
}
void set_grads(const std::vector<Tensor>& ps, int s) {
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor p = ps[i];
    if (s == 1 && i == 1) {
      p.zero_grad();
      continue;
    }
    p.mutable_grad() = testing::seeded(p.sizes(), 400 + 10 * static_cast<uint64_t>(s) + i, p.dtype(), 0.1);
  }
}

// step() of `opt` over 4 steps equals `one` (the op on one parameter) applied
// to copies, bit for bit.
template <typename OneStep>
void expect_optimizer_equals_op(const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
                                const OneStep& one) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<Tensor> ps = make_params(dt);
    std::vector<Tensor> copies, ms, vs;
    std::vector<int64_t> steps(ps.size(), 0);
    for (const Tensor& p : ps) {
      copies.push_back(p.detach().clone());
      ms.push_back(zeros_like(p.detach()));
      vs.push_back(zeros_like(p.detach()));
    }
    auto opt = make(ps);
    for (int s = 0; s < 4; ++s) {
      set_grads(ps, s);
      opt->step();
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!ps[i].grad().defined()) continue;
        one(copies[i], ps[i].grad(), ms[i], vs[i], ++steps[i]);
      }
    }
    const auto state = opt->state_dict();
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      EXPECT_EQ(opt->param_step(i), steps[i]);
      EXPECT_TRUE(bitwise_equal(ps[i].detach(), copies[i]));
      EXPECT_TRUE(bitwise_equal(state.at("state." + std::to_string(i) + ".exp_avg"), ms[i]));
      EXPECT_TRUE(bitwise_equal(state.at("state." + std::to_string(i) + ".exp_avg_sq"), vs[i]));
    }
  }
}

TEST(MultiTensor, AdamWStepIsTheOp) {
  expect_optimizer_equals_op(
      [](std::vector<Tensor> ps) {
        optim::AdamWOptions o;
        o.lr = 1e-2;
        o.weight_decay = 0.05;
        return std::make_unique<optim::AdamW>(std::move(ps), o);
      },
      [](Tensor p, const Tensor& g, Tensor m, Tensor v, int64_t step) {
        multi_tensor_adamw_({p}, {g}, {m}, {v}, {step}, 1e-2, 0.05, 0.9, 0.999, 1e-8);
      });
}

// ---- LAMB --------------------------------------------------------------------------

// LAMB's formula in float64 from T inputs (the moments rounded to T as the
// op stores them): the trust ratio's norms differ from the op's float64 sums
// in order only.
template <typename T>
void lamb_reference(Tensor p, const Tensor& g, Tensor m, Tensor v, int64_t step, double lr, double wd, double beta1,
                    double beta2, double eps, bool bc) {
  const double t = static_cast<double>(step);
  const T bc1 = static_cast<T>(bc ? 1.0 - std::pow(beta1, t) : 1.0);
  const T bc2 = static_cast<T>(bc ? 1.0 - std::pow(beta2, t) : 1.0);
  const T b1 = static_cast<T>(beta1), c1 = static_cast<T>(1.0 - beta1), b2 = static_cast<T>(beta2),
          c2 = static_cast<T>(1.0 - beta2), e = static_cast<T>(eps), w = static_cast<T>(wd);
  T *P = p.data_ptr<T>(), *M = m.data_ptr<T>(), *V = v.data_ptr<T>();
  const T* G = g.data_ptr<T>();
  const int64_t n = p.numel();
  std::vector<T> u(static_cast<size_t>(n));
  double sp = 0, su = 0;
  for (int64_t i = 0; i < n; ++i) {
    M[i] = M[i] * b1 + G[i] * c1;
    V[i] = V[i] * b2 + (G[i] * c2) * G[i];
    u[i] = (M[i] / bc1) / (std::sqrt(V[i] / bc2) + e) + w * P[i];
    sp += static_cast<double>(P[i]) * P[i];
    su += static_cast<double>(u[i]) * u[i];
  }
  const double ratio = sp > 0 && su > 0 ? std::sqrt(sp) / std::sqrt(su) : 1.0;
  const T scale = static_cast<T>(-(lr * ratio));
  for (int64_t i = 0; i < n; ++i) P[i] = P[i] + scale * u[i];
}

TEST(MultiTensor, LambListEqualsOneAtATimeAndTheFormula) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (bool bc : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (bc ? " bias correction" : " no bias correction"));
      const Lists start = make_lists(dt, 200);
      Lists list = clone_lists(start), single = clone_lists(start), ref = clone_lists(start);
      multi_tensor_lamb_(list.p, list.g, list.m, list.v, list.steps, 1e-2, 0.01, 0.9, 0.999, 1e-6, bc);
      for (size_t i = 0; i < start.p.size(); ++i)
        multi_tensor_lamb_({single.p[i]}, {single.g[i]}, {single.m[i]}, {single.v[i]}, {single.steps[i]}, 1e-2, 0.01,
                           0.9, 0.999, 1e-6, bc);
      expect_same(list, single);
      for (size_t i = 0; i < start.p.size(); ++i) {
        if (dt == DType::Float32)
          lamb_reference<float>(ref.p[i], ref.g[i], ref.m[i], ref.v[i], ref.steps[i], 1e-2, 0.01, 0.9, 0.999, 1e-6, bc);
        else
          lamb_reference<double>(ref.p[i], ref.g[i], ref.m[i], ref.v[i], ref.steps[i], 1e-2, 0.01, 0.9, 0.999, 1e-6,
                                 bc);
      }
      expect_near_formula(list, ref, dt);
    }
  }
}

TEST(MultiTensor, LambStepIsTheOp) {
  for (bool bc : {true, false}) {
    SCOPED_TRACE(bc ? "bias correction" : "no bias correction");
    expect_optimizer_equals_op(
        [bc](std::vector<Tensor> ps) {
          optim::LAMBOptions o;
          o.lr = 1e-2;
          o.weight_decay = 0.01;
          o.bias_correction = bc;
          return std::make_unique<optim::LAMB>(std::move(ps), o);
        },
        [bc](Tensor p, const Tensor& g, Tensor m, Tensor v, int64_t step) {
          const optim::LAMBOptions d;
          multi_tensor_lamb_({p}, {g}, {m}, {v}, {step}, 1e-2, 0.01, d.beta1, d.beta2, d.eps, bc);
        });
  }
}

TEST(MultiTensor, StepsBumpVersionsAndEmptyListsDoNothing) {
  Lists l = make_lists(DType::Float32, 500);
  const uint32_t vp = l.p[0].version(), vm = l.m[0].version(), vv = l.v[0].version(), vg = l.g[0].version();
  multi_tensor_adamw_(l.p, l.g, l.m, l.v, l.steps, 1e-2, 0.0, 0.9, 0.999, 1e-8);
  EXPECT_GT(l.p[0].version(), vp);
  EXPECT_GT(l.m[0].version(), vm);
  EXPECT_GT(l.v[0].version(), vv);
  EXPECT_EQ(l.g[0].version(), vg);  // read only
  multi_tensor_adamw_({}, {}, {}, {}, {}, 1e-2, 0.0, 0.9, 0.999, 1e-8);
  multi_tensor_lamb_({}, {}, {}, {}, {}, 1e-2, 0.0, 0.9, 0.999, 1e-6, true);
}

// ---- norm --------------------------------------------------------------------------

// sum |x|^p (max |x| for inf) of all the values in float64, in plain order.
double reference_norm(const L& ts, double p) {
  double acc = 0;
  for (const Tensor& t : ts)
    for (double x : testing::values(t)) {
      const double a = std::abs(x);
      if (std::isinf(p)) acc = std::isnan(acc) || acc > a ? acc : a;
      else acc += p == 2.0 ? a * a : std::pow(a, p);
    }
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

TEST(MultiTensor, NormOfAListMatchesFloat64References) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    L ts;
    for (size_t i = 0; i < kShapes.size(); ++i) ts.push_back(testing::seeded(kShapes[i], 600 + i, dt, 1.0 + i));
    for (double p : {2.0, 1.0, 3.0, 0.5, kInf}) {
      const Tensor n = multi_tensor_norm(ts, p);
      EXPECT_EQ(n.dim(), 0);
      EXPECT_EQ(n.dtype(), DType::Float64);
      EXPECT_TRUE(n.device().is_cpu());
      const double got = n.item<double>(), want = reference_norm(ts, p);
      if (std::isinf(p)) EXPECT_EQ(got, want);  // a max is exact
      else EXPECT_NEAR(got, want, 1e-12 * want) << "order " << p;
      EXPECT_EQ(multi_tensor_norm(ts, p).item<double>(), got);  // deterministic
      // what clip_grad_norm / grad_norm use
      std::vector<Tensor> ps;
      for (const Tensor& t : ts) {
        Tensor q = zeros_like(t).requires_grad_();
        q.mutable_grad() = t;
        ps.push_back(q);
      }
      EXPECT_EQ(optim::grad_norm(ps, p), got);
    }
  }
}

TEST(MultiTensor, NormTakesAnyStridesMixedDtypesAndEmptyTensors) {
  const Tensor a = testing::seeded({40, 30}, 700, DType::Float32), b = testing::seeded({1000}, 701, DType::Float64);
  const Tensor at = a.transpose(0, 1);  // not contiguous
  const Tensor empty = zeros({0, 3}, TensorOptions(DType::Float32));
  for (double p : {2.0, 1.0, kInf}) {
    EXPECT_EQ(multi_tensor_norm({at, empty, b}, p).item<double>(),
              multi_tensor_norm({at.contiguous(), b}, p).item<double>());
    const double want = reference_norm({at, b}, p);
    EXPECT_NEAR(multi_tensor_norm({at, b}, p).item<double>(), want, 1e-12 * want);
  }
  EXPECT_EQ(multi_tensor_norm({}, 2.0).item<double>(), 0.0);
  EXPECT_EQ(multi_tensor_norm({empty}, kInf).item<double>(), 0.0);
}

TEST(MultiTensor, NormPropagatesInfAndNaN) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    for (double bad : {kInf, -kInf, kNaN}) {
      L ts = {testing::seeded({5}, 800, dt), testing::seeded({3, 7001}, 801, dt), testing::seeded({70001}, 802, dt)};
      ts[1].view({ts[1].numel()}).narrow(0, 12345, 1).fill_(bad);
      for (double p : {2.0, 1.0, 3.0, kInf}) {
        const double n = multi_tensor_norm(ts, p).item<double>();
        if (std::isnan(bad)) EXPECT_TRUE(std::isnan(n)) << "order " << p << ": " << n;
        else EXPECT_EQ(n, kInf) << "order " << p;
      }
    }
  }
}

// ---- all_finite --------------------------------------------------------------------

TEST(MultiTensor, AllFiniteFindsInfAndNaNInEveryFloatingDtype) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (double bad : {kInf, -kInf, kNaN}) {
      L ts = {testing::seeded({5}, 900, dt), testing::seeded({16384}, 901, dt), testing::seeded({3, 7001}, 902, dt),
              zeros({4}, TensorOptions(DType::Int64))};
      const Tensor ok = multi_tensor_all_finite(ts);
      EXPECT_EQ(ok.dim(), 0);
      EXPECT_EQ(ok.dtype(), DType::Bool);
      EXPECT_TRUE(ok.item<bool>());
      Tensor last = ts[2];
      last.view({last.numel()}).narrow(0, last.numel() - 1, 1).fill_(bad);  // the last element
      EXPECT_FALSE(multi_tensor_all_finite(ts).item<bool>());
      EXPECT_FALSE(multi_tensor_all_finite({ts[2].transpose(0, 1)}).item<bool>());  // any strides
      EXPECT_TRUE(multi_tensor_all_finite({ts[0], ts[1], ts[3]}).item<bool>());
      EXPECT_FALSE(optim::all_finite(ts));
    }
  }
  EXPECT_TRUE(multi_tensor_all_finite({}).item<bool>());
  EXPECT_TRUE(multi_tensor_all_finite({zeros({0}), ones({3}, TensorOptions(DType::Int32))}).item<bool>());
}

// ---- argument checks -------------------------------------------------------------------

TEST(MultiTensor, StepArgumentChecks) {
  Lists l = make_lists(DType::Float32, 1000);
  auto adamw = [](const L& p, const L& g, const L& m, const L& v, const std::vector<int64_t>& s) {
    multi_tensor_adamw_(p, g, m, v, s, 1e-2, 0.0, 0.9, 0.999, 1e-8);
  };
  EXPECT_KILN_ERROR(adamw(l.p, {l.g[0]}, l.m, l.v, l.steps), "multi_tensor_adamw_", "differ in length", "grads 1");
  EXPECT_KILN_ERROR(adamw(l.p, l.g, l.m, l.v, {1}), "multi_tensor_adamw_", "steps 1");
  L g = l.g;
  g[2] = g[2].to(DType::Float64);
  EXPECT_KILN_ERROR(adamw(l.p, g, l.m, l.v, l.steps), "multi_tensor_adamw_", "grads[2]", "float32");
  g = l.g;
  g[1] = testing::seeded({3, 7}, 1, DType::Float32).transpose(0, 1);
  EXPECT_KILN_ERROR(adamw(l.p, g, l.m, l.v, l.steps), "multi_tensor_adamw_", "contiguous", "grads[1]");
  L m = l.m;
  m[3] = zeros({3});
  EXPECT_KILN_ERROR(adamw(l.p, l.g, m, l.v, l.steps), "multi_tensor_adamw_", "exp_avgs[3]", "params[3]");
  m[3] = Tensor();
  EXPECT_KILN_ERROR(adamw(l.p, l.g, m, l.v, l.steps), "multi_tensor_adamw_", "exp_avgs[3] is an undefined tensor");
  std::vector<int64_t> steps = l.steps;
  steps[4] = 0;
  EXPECT_KILN_ERROR(adamw(l.p, l.g, l.m, l.v, steps), "multi_tensor_adamw_", "steps[4] is 0");
  const L h = {zeros({3}, TensorOptions(DType::Float16))};
  EXPECT_KILN_ERROR(adamw(h, h, h, h, {1}), "multi_tensor_adamw_", "float32 or float64", "float16");
  // In-place on a tensor that requires grad, with grad mode on: refused as
  // Tensor's in-place methods refuse it; under NoGradGuard (as optimizers run) fine.
  Tensor leaf = l.p[0].detach().clone().requires_grad_();
  L p = l.p;
  p[0] = leaf;
  EXPECT_KILN_ERROR(multi_tensor_lamb_(p, l.g, l.m, l.v, l.steps, 1e-2, 0.0, 0.9, 0.999, 1e-6, true),
                    "multi_tensor_lamb_", "requires grad");
  NoGradGuard no_grad;
  multi_tensor_lamb_(p, l.g, l.m, l.v, l.steps, 1e-2, 0.0, 0.9, 0.999, 1e-6, true);
}

TEST(MultiTensor, NormAndAllFiniteArgumentChecks) {
  const L ts = {testing::seeded({3}, 1, DType::Float32), testing::seeded({4}, 2, DType::Float32)};
  EXPECT_KILN_ERROR(multi_tensor_norm(ts, 0.0), "multi_tensor_norm", "norm_type must be > 0");
  EXPECT_KILN_ERROR(multi_tensor_norm(ts, -1.0), "multi_tensor_norm", "norm_type");
  EXPECT_KILN_ERROR(multi_tensor_norm(ts, kNaN), "multi_tensor_norm", "norm_type");
  EXPECT_KILN_ERROR(multi_tensor_norm({ts[0], ones({2}, TensorOptions(DType::Int64))}, 2.0), "multi_tensor_norm",
                    "float32 or float64", "tensor 1");
  EXPECT_KILN_ERROR(multi_tensor_norm({ts[0], testing::seeded({2}, 3, DType::BFloat16)}, 2.0), "multi_tensor_norm", "tensor 1");
  EXPECT_KILN_ERROR(multi_tensor_norm({ts[0], Tensor()}, 2.0), "multi_tensor_norm", "tensor 1 is an undefined tensor");
  EXPECT_KILN_ERROR(multi_tensor_all_finite({Tensor(), ts[0]}), "multi_tensor_all_finite",
                    "tensor 0 is an undefined tensor");
}

// ---- op observers ----------------------------------------------------------------------

TEST(MultiTensor, OpsReportThemselves) {
  struct Last : OpObserver {
    std::vector<OpRecord> top;
    void op_finished(const OpRecord& r) override {
      if (r.depth == 0) top.push_back(r);
    }
  } seen;
  OpObserver* prev = set_thread_op_observer(&seen);
  Lists l = make_lists(DType::Float64, 1100);
  multi_tensor_adamw_(l.p, l.g, l.m, l.v, l.steps, 1e-2, 0.0, 0.9, 0.999, 1e-8);
  const Tensor n = multi_tensor_norm(l.g, kInf);
  const Tensor f = multi_tensor_all_finite(l.g);
  set_thread_op_observer(prev);
  ASSERT_GE(seen.top.size(), 3u);
  const OpRecord& step = seen.top[seen.top.size() - 3];
  EXPECT_EQ(std::string(step.name), "multi_tensor_adamw_");
  EXPECT_EQ(step.inputs.size(), 4 * l.p.size());
  EXPECT_EQ(step.outputs.size(), 3 * l.p.size());  // params and both moment lists, written in place
  ASSERT_NE(step.attr("steps"), nullptr);
  EXPECT_EQ(std::get<std::vector<int64_t>>(*step.attr("steps")), l.steps);
  EXPECT_EQ(std::get<double>(*step.attr("lr")), 1e-2);
  const OpRecord& norm = seen.top[seen.top.size() - 2];
  EXPECT_EQ(std::string(norm.name), "multi_tensor_norm");
  EXPECT_EQ(std::get<double>(*norm.attr("norm_type")), kInf);
  ASSERT_EQ(norm.outputs.size(), 1u);
  EXPECT_EQ(&norm.outputs[0].impl(), &n.impl());
  EXPECT_EQ(std::string(seen.top.back().name), "multi_tensor_all_finite");
  EXPECT_EQ(&seen.top.back().outputs[0].impl(), &f.impl());
}

}  // namespace
}  // namespace kiln
