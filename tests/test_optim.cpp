// optim/: SGD and AdamW trajectories against PyTorch 1.13 (reference numbers
// from tests/reference/optim_reference.py, run once with KILN_PYTHON), LAMB
// against its formula written out here, the HF schedules against their closed
// forms, no-decay grouping and a tiny model learning. State, resume, clipping
// and errors: test_optim_state.cpp.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>

#include "nn/models/bert.h"
#include "nn/layers.h"
#include "optim/optim.h"
#include "test_util.h"

namespace kiln {
namespace {

using json = nlohmann::json;
using kiln::testing::all_close;
using kiln::testing::bitwise_equal;
using kiln::testing::set_grad;
using kiln::testing::values;
using namespace kiln::optim;

using testing::env_or;
using testing::quoted;

// The reference file, made once per test run.
const json& reference() {
  static const json ref = [] {
    const std::string out = std::string(KILN_BINARY_DIR) + "/optim_reference.json";
    const std::string cmd = quoted(env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON)) + " " +
                            quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/optim_reference.py") + " " +
                            quoted(out);
    if (std::system(cmd.c_str()) != 0) throw Error("reference script failed: " + cmd);
    std::ifstream in(out);
    if (!in) throw Error("cannot read " + out);
    return json::parse(in);
  }();
  return ref;
}

const json& reference_case(const std::string& name) {
  for (const json& c : reference()["cases"])
    if (c["name"] == name) return c;
  throw Error("optim_reference.py has no case " + name);
}

Shape to_shape(const json& j) { return j.get<std::vector<int64_t>>(); }

Tensor from_values(const json& vals, const Shape& shape, DType dtype) {
  return tensor(vals.get<std::vector<double>>(), shape, dtype);
}

// The test problem's gradient, g = (p - target) * coef + ((p * p) * p) * 0.25,
// with the same IEEE operations the reference script uses.
Tensor problem_grad(const Tensor& p, const Tensor& target, const Tensor& coef) {
  NoGradGuard no_grad;
  const Tensor x = p.detach();
  return add(mul(sub(x, target), coef), mul(mul(mul(x, x), x), 0.25));
}

std::vector<ParamGroup> groups_from(const json& c, const std::vector<Tensor>& params) {
  std::vector<ParamGroup> groups;
  for (const json& g : c["groups"]) {
    ParamGroup group;
    for (int64_t i : g["params"].get<std::vector<int64_t>>()) group.params.push_back(params[static_cast<size_t>(i)]);
    for (const auto& [key, value] : g.items()) {
      if (key == "params") continue;
      if (key == "lr") group.lr = value.get<double>();
      else if (key == "weight_decay") group.weight_decay = value.get<double>();
      else group.options[key] = value.get<double>();
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::unique_ptr<Optimizer> optimizer_from(const json& c, const std::vector<Tensor>& params) {
  const json& d = c["defaults"];
  if (c["optimizer"] == "SGD") {
    SGDOptions o;
    o.lr = d["lr"];
    o.momentum = d.value("momentum", 0.0);
    o.dampening = d.value("dampening", 0.0);
    o.weight_decay = d.value("weight_decay", 0.0);
    o.nesterov = d.value("nesterov", 0) != 0;
    return std::make_unique<SGD>(groups_from(c, params), o);
  }
  AdamWOptions o;
  o.lr = d["lr"];
  o.beta1 = d["beta1"];
  o.beta2 = d["beta2"];
  o.eps = d["eps"];
  o.weight_decay = d["weight_decay"];
  return std::make_unique<AdamW>(groups_from(c, params), o);
}

class OptimReference : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimReference, TrajectoryMatchesPyTorch) {
  const json& c = reference_case(GetParam());
  const DType dtype = c["dtype"] == "float32" ? DType::Float32 : DType::Float64;
  std::vector<Tensor> params, targets, coefs;
  for (size_t i = 0; i < c["shapes"].size(); ++i) {
    const Shape shape = to_shape(c["shapes"][i]);
    params.push_back(from_values(c["init"][i], shape, dtype).set_requires_grad(true));
    targets.push_back(from_values(c["target"][i], shape, dtype));
    coefs.push_back(from_values(c["coef"][i], shape, dtype));
  }
  std::unique_ptr<Optimizer> opt = optimizer_from(c, params);
  std::unique_ptr<Scheduler> sched;
  if (c.contains("schedule") && !c["schedule"].is_null())
    sched = std::make_unique<Scheduler>(*opt, linear_schedule_with_warmup(c["schedule"]["warmup"], c["schedule"]["total"]));
  const std::vector<int64_t> every = c["grad_every"].get<std::vector<int64_t>>();
  // float64: the same formulas in the same order agree to rounding; float32:
  // kiln may fuse a multiply-add where PyTorch rounds twice, and 20 steps let
  // those last-bit differences grow a little.
  const double rtol = dtype == DType::Float64 ? 1e-10 : 2e-5;
  const double atol = dtype == DType::Float64 ? 1e-12 : 1e-6;
  double max_rel = 0;
  for (int64_t step = 0; step < c["steps"].get<int64_t>(); ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (step % every[i] == 0) set_grad(params[i], problem_grad(params[i], targets[i], coefs[i]));
      else params[i].zero_grad();
    }
    const std::vector<double> want_lrs = c["lrs"][step].get<std::vector<double>>();
    for (size_t g = 0; g < opt->num_groups(); ++g) EXPECT_DOUBLE_EQ(opt->lr(g), want_lrs[g]) << "step " << step;
    opt->step();
    if (sched) sched->step();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<double> want = c["traj"][step][i].get<std::vector<double>>();
      ASSERT_TRUE(all_close(params[i], want, atol, rtol)) << GetParam() << ", step " << step << ", parameter " << i;
      const std::vector<double> got = values(params[i]);
      for (size_t j = 0; j < got.size(); ++j)
        if (want[j] != 0) max_rel = std::max(max_rel, std::abs(got[j] - want[j]) / std::max(std::abs(want[j]), 1e-2));
    }
  }
  // Parameter i had a gradient on every grad_every[i]-th step only; param_step
  // takes the flat index over the groups.
  size_t flat = 0;
  for (const json& g : c["groups"])
    for (int64_t i : g["params"].get<std::vector<int64_t>>()) {
      const int64_t e = every[static_cast<size_t>(i)];
      EXPECT_EQ(opt->param_step(flat++), (c["steps"].get<int64_t>() + e - 1) / e) << "parameter " << i;
    }
  std::printf("%s: max difference to PyTorch relative to max(|value|, 0.01) %.3g\n", GetParam().c_str(), max_rel);
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimReference,
                         ::testing::Values("sgd_plain_float64", "sgd_momentum_dampening_wd_float64",
                                           "sgd_nesterov_wd_groups_float64", "adamw_float64",
                                           "adamw_groups_float64", "adamw_linear_schedule_float64",
                                           "sgd_plain_float32", "sgd_momentum_dampening_wd_float32",
                                           "sgd_nesterov_wd_groups_float32", "adamw_float32",
                                           "adamw_groups_float32", "adamw_linear_schedule_float32"),
                         [](const auto& info) { return info.param; });

// ---- LAMB against its formula ------------------------------------------------

struct LambRef {
  std::vector<double> p, m, v;
};

// One LAMB step of optim/lamb.h's formula in double.
void lamb_ref_step(LambRef& s, const std::vector<double>& g, int64_t t, double lr, double b1, double b2, double eps,
                   double wd, bool bias_correction) {
  const size_t n = s.p.size();
  const double bc1 = bias_correction ? 1 - std::pow(b1, static_cast<double>(t)) : 1.0;
  const double bc2 = bias_correction ? 1 - std::pow(b2, static_cast<double>(t)) : 1.0;
  std::vector<double> u(n);
  double pn = 0, un = 0;
  for (size_t i = 0; i < n; ++i) {
    s.m[i] = b1 * s.m[i] + (1 - b1) * g[i];
    s.v[i] = b2 * s.v[i] + (1 - b2) * g[i] * g[i];
    u[i] = (s.m[i] / bc1) / (std::sqrt(s.v[i] / bc2) + eps) + wd * s.p[i];
    pn += s.p[i] * s.p[i];
    un += u[i] * u[i];
  }
  pn = std::sqrt(pn);
  un = std::sqrt(un);
  const double ratio = pn > 0 && un > 0 ? pn / un : 1.0;
  for (size_t i = 0; i < n; ++i) s.p[i] -= lr * ratio * u[i];
}

void check_lamb_against_formula(DType dtype, bool bias_correction, double rtol) {
  // Parameter 1 starts at zero, so its first trust ratio is the "norm 0" case.
  const std::vector<Shape> shapes = {{5, 7}, {6}};
  std::vector<Tensor> params;
  std::vector<LambRef> ref;
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<double> init(static_cast<size_t>(shape_numel(shapes[k])));
    for (size_t i = 0; i < init.size(); ++i) init[i] = k == 1 ? 0.0 : 0.9 * std::sin(0.37 * static_cast<double>(i) + 1);
    params.push_back(tensor(init, shapes[k], dtype).set_requires_grad(true));
    ref.push_back({values(params.back()), std::vector<double>(init.size()), std::vector<double>(init.size())});
  }
  LAMBOptions o;
  o.lr = 0.01;
  o.beta1 = 0.85;
  o.beta2 = 0.98;
  o.eps = 1e-6;
  o.weight_decay = 0.05;
  o.bias_correction = bias_correction;
  LAMB opt(params, o);
  for (int64_t t = 1; t <= 20; ++t) {
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> g(ref[k].p.size());
      for (size_t i = 0; i < g.size(); ++i)
        g[i] = std::cos(0.11 * static_cast<double>(t * 7 + static_cast<int64_t>(i) + 3 * static_cast<int64_t>(k))) -
               0.3 * ref[k].p[i];
      // The gradient tensor holds what the reference uses (rounded to dtype).
      Tensor gt = tensor(g, shapes[k], dtype);
      set_grad(params[k], gt);
      lamb_ref_step(ref[k], values(gt), t, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, bias_correction);
    }
    opt.step();
    for (size_t k = 0; k < params.size(); ++k)
      ASSERT_TRUE(all_close(params[k], ref[k].p, 1e-12, rtol)) << "step " << t << ", parameter " << k;
  }
}

TEST(OptimLamb, MatchesFormulaFloat64) {
  check_lamb_against_formula(DType::Float64, true, 1e-10);
  check_lamb_against_formula(DType::Float64, false, 1e-10);
}

TEST(OptimLamb, MatchesFormulaFloat32) { check_lamb_against_formula(DType::Float32, true, 1e-4); }

TEST(OptimLamb, TrustRatioScalesTheStep) {
  // One step, m = (1-b1) g, v = (1-b2) g^2; with bias correction m_hat = g and
  // v_hat = g^2, so u = sign(g) / (1 + eps/|g|) + wd * p. Here g = 2 everywhere,
  // p = 3 everywhere (n = 4): u = 2/(2+eps) + 3 wd, ||p|| = 6, ||u|| = 2 u.
  Tensor p = full({4}, 3.0, DType::Float64).set_requires_grad(true);
  LAMBOptions o;
  o.lr = 0.1;
  o.eps = 1e-6;
  o.weight_decay = 0.01;
  LAMB opt({p}, o);
  set_grad(p, full({4}, 2.0, DType::Float64));
  opt.step();
  const double u = 2.0 / (2.0 + 1e-6) + 0.03;
  const double ratio = 6.0 / (2.0 * u);
  EXPECT_TRUE(all_close(p, std::vector<double>(4, 3.0 - 0.1 * ratio * u), 0, 1e-14));
  EXPECT_NEAR(values(p)[0], 3.0 - 0.3, 1e-12);  // lr * ||p|| / sqrt(n): the step is 0.3 whatever u is
}

// ---- schedules -------------------------------------------------------------------

TEST(OptimSchedule, HuggingFaceClosedForms) {
  const double pi = std::numbers::pi;
  const LrMultiplier constant = constant_schedule();
  const LrMultiplier cwarm = constant_schedule_with_warmup(4);
  const LrMultiplier lin = linear_schedule_with_warmup(4, 20);
  const LrMultiplier cos = cosine_schedule_with_warmup(4, 20);
  const LrMultiplier cos3 = cosine_schedule_with_warmup(4, 20, 1.5);
  const LrMultiplier poly = polynomial_decay_schedule_with_warmup(4, 20, 1e-3, 1e-5, 2.0);
  for (int64_t s : {0, 1, 3, 4, 5, 10, 19, 20, 21, 30}) {
    const double sd = static_cast<double>(s);
    const double warm = sd / 4.0;
    EXPECT_EQ(constant(s), 1.0);
    EXPECT_EQ(cwarm(s), s < 4 ? warm : 1.0) << s;
    EXPECT_DOUBLE_EQ(lin(s), s < 4 ? warm : std::max(0.0, (20.0 - sd) / 16.0)) << s;
    const double progress = (sd - 4.0) / 16.0;
    EXPECT_DOUBLE_EQ(cos(s), s < 4 ? warm : std::max(0.0, 0.5 * (1 + std::cos(pi * progress)))) << s;
    EXPECT_DOUBLE_EQ(cos3(s), s < 4 ? warm : std::max(0.0, 0.5 * (1 + std::cos(3.0 * pi * progress)))) << s;
    const double poly_want = s < 4 ? warm
                             : s > 20 ? 1e-5 / 1e-3
                                      : ((1e-3 - 1e-5) * std::pow(1.0 - progress, 2.0) + 1e-5) / 1e-3;
    EXPECT_DOUBLE_EQ(poly(s), poly_want) << s;
  }
  // Spot values by hand.
  EXPECT_EQ(lin(2), 0.5);
  EXPECT_EQ(lin(12), 0.5);
  EXPECT_EQ(lin(25), 0.0);
  EXPECT_DOUBLE_EQ(cos(12), 0.5);
  EXPECT_DOUBLE_EQ(poly(12), (0.99e-3 * 0.25 + 1e-5) / 1e-3);
  // No warmup: step 0 is the full rate (max(1, 0) guards the division).
  EXPECT_EQ(linear_schedule_with_warmup(0, 10)(0), 1.0);
  EXPECT_EQ(constant_schedule_with_warmup(0)(0), 1.0);
  EXPECT_EQ(polynomial_decay_schedule_with_warmup(0, 10, 1.0, 0.0, 1.0)(5), 0.5);
}

TEST(OptimSchedule, SchedulerDrivesGroupLearningRates) {
  Tensor a = zeros({2}).set_requires_grad(true), b = zeros({3}).set_requires_grad(true);
  AdamW opt(std::vector<ParamGroup>{{{a}, 0.1, {}, {}}, {{b}, 0.02, {}, {}}}, AdamWOptions{});
  Scheduler sched(opt, linear_schedule_with_warmup(2, 6));
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{0.1, 0.02}));
  const std::vector<double> mult = {0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0};
  for (int64_t s = 0; s < static_cast<int64_t>(mult.size()); ++s) {
    EXPECT_EQ(sched.last_step(), s);
    EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * mult[static_cast<size_t>(s)]) << s;
    EXPECT_DOUBLE_EQ(opt.lr(1), 0.02 * mult[static_cast<size_t>(s)]) << s;
    sched.step();
  }
  // Round trip (at step 3) into a new scheduler on an optimizer with other lrs.
  Tensor a2 = zeros({2}).set_requires_grad(true), b2 = zeros({3}).set_requires_grad(true);
  AdamW opt2(std::vector<ParamGroup>{{{a2}, 0.5, {}, {}}, {{b2}, 0.5, {}, {}}}, AdamWOptions{});
  Scheduler sched2(opt2, linear_schedule_with_warmup(2, 6));
  Scheduler sched3(opt, linear_schedule_with_warmup(2, 6));  // on opt at lr 0: base lrs 0
  EXPECT_EQ(sched3.base_lrs(), (std::vector<double>{0.0, 0.0}));
  Tensor c = zeros({2}).set_requires_grad(true), d = zeros({3}).set_requires_grad(true);
  AdamW opt3(std::vector<ParamGroup>{{{c}, 0.1, {}, {}}, {{d}, 0.02, {}, {}}}, AdamWOptions{});
  Scheduler at3(opt3, linear_schedule_with_warmup(2, 6));
  for (int i = 0; i < 3; ++i) at3.step();
  // A last_step past 2^53 (a hostile checkpoint) is refused before step() could overflow it.
  std::map<std::string, Tensor> huge = at3.state_dict();
  huge["last_step"] = empty_tensor({}, DType::Int64, kCPU);
  *huge["last_step"].data_ptr<int64_t>() = INT64_MAX;
  EXPECT_KILN_ERROR(sched2.load_state_dict(huge), "last_step is 9223372036854775807, expected in [0, 2^53]");
  sched2.load_state_dict(at3.state_dict());
  EXPECT_EQ(sched2.last_step(), 3);
  EXPECT_EQ(sched2.base_lrs(), (std::vector<double>{0.1, 0.02}));
  EXPECT_EQ(opt2.lr(0), opt3.lr(0));
  EXPECT_DOUBLE_EQ(opt2.lr(1), 0.02 * 0.75);
  sched2.step();
  at3.step();
  EXPECT_EQ(opt2.lr(0), opt3.lr(0));
  EXPECT_EQ(opt2.lr(1), opt3.lr(1));
}

TEST(OptimSchedule, Errors) {
  EXPECT_KILN_ERROR(linear_schedule_with_warmup(-1, 10), "warmup_steps must be >= 0");
  EXPECT_KILN_ERROR(cosine_schedule_with_warmup(10, 5), "total_steps (5) must be >= warmup_steps (10)");
  EXPECT_KILN_ERROR(polynomial_decay_schedule_with_warmup(0, 10, 1e-7, 1e-7), "lr_end (1e-07) must be smaller");
  EXPECT_KILN_ERROR(polynomial_decay_schedule_with_warmup(5, 5, 1e-3), "must be > warmup_steps");
  Tensor a = zeros({2}).set_requires_grad(true);
  SGD opt({a}, SGDOptions{});
  Scheduler sched(opt, constant_schedule());
  EXPECT_KILN_ERROR(Scheduler(opt, [](int64_t) { return -1.0; }), "gives learning rate -0.01");
  std::map<std::string, Tensor> st = sched.state_dict();
  st["extra"] = zeros({1});
  EXPECT_KILN_ERROR(sched.load_state_dict(st), "unexpected entry 'extra'");
  st.erase("extra");
  st["base_lrs"] = zeros({2}, DType::Float64);
  EXPECT_KILN_ERROR(sched.load_state_dict(st), "base_lrs is Tensor[2] float64 cpu, expected float64 [1]");
  st.erase("base_lrs");
  EXPECT_KILN_ERROR(sched.load_state_dict(st), "missing 'base_lrs'");
}

// ---- no-decay groups ------------------------------------------------------------

struct TinyEncoder : nn::Module {
  TinyEncoder() {
    embed = register_module("word_embeddings", std::make_shared<nn::Embedding>(11, 4));
    dense = register_module("dense", std::make_shared<nn::Linear>(4, 4));
    norm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(4));
    head = register_module("classifier", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& ids) const {
    return head->forward(norm->forward(gelu(dense->forward(embed->forward(ids))))).mean({1});
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> dense, head;
  std::shared_ptr<nn::LayerNorm> norm;
};

// GPT-2's names (ln_1, ln_f, c_attn) hold no "norm" or "LayerNorm": the
// groups follow the parameters' kind, so its norms still get no decay.
struct TinyGpt2Block : nn::Module {
  TinyGpt2Block() {
    wte = register_module("wte", std::make_shared<nn::Embedding>(11, 4));
    ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(4));
    c_attn = register_module("c_attn", std::make_shared<nn::Linear>(4, 12));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(4));
  }
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_f;
  std::shared_ptr<nn::Linear> c_attn;
};

TEST(OptimParamGroups, NoDecayByKindForGpt2Names) {
  TinyGpt2Block model;
  const std::vector<ParamGroup> groups = param_groups_no_decay(model, 0.1);
  const std::vector<Tensor> decay = {model.wte->weight, model.c_attn->weight};
  const std::vector<Tensor> no_decay = {model.ln_1->weight, model.ln_1->bias, model.c_attn->bias, model.ln_f->weight,
                                        model.ln_f->bias};
  ASSERT_EQ(groups[0].params.size(), decay.size());
  ASSERT_EQ(groups[1].params.size(), no_decay.size());
  for (size_t i = 0; i < decay.size(); ++i) EXPECT_TRUE(groups[0].params[i].shares_storage_with(decay[i])) << i;
  for (size_t i = 0; i < no_decay.size(); ++i)
    EXPECT_TRUE(groups[1].params[i].shares_storage_with(no_decay[i])) << i;
}

// On BERT the kind rule gives exactly transformers' recipe (no decay for
// names holding "bias" or "LayerNorm.weight").
TEST(OptimParamGroups, BertGroupsEqualTheTransformersRecipe) {
  nn::BertForMaskedLM model(BertConfig::preset("bert-tiny"));
  for (const auto& [name, p] : model.named_parameters()) {
    const bool by_name = name.find("bias") != std::string::npos || name.find("LayerNorm.weight") != std::string::npos;
    EXPECT_EQ(is_no_decay_parameter(p), by_name) << name;
  }
}

TEST(OptimParamGroups, NoDecayForBiasesAndNorms) {
  EXPECT_TRUE(is_no_decay_parameter(zeros({8})));      // a bias, a norm weight
  EXPECT_TRUE(is_no_decay_parameter(scalar_tensor(1.0)));  // a scalar scale
  EXPECT_FALSE(is_no_decay_parameter(zeros({8, 4})));  // a weight matrix, an embedding
  EXPECT_FALSE(is_no_decay_parameter(zeros({2, 3, 4})));

  TinyEncoder model;
  const std::vector<ParamGroup> groups = param_groups_no_decay(model, 0.01);
  ASSERT_EQ(groups.size(), 2u);
  const std::vector<Tensor> decay = {model.embed->weight, model.dense->weight, model.head->weight};
  const std::vector<Tensor> no_decay = {model.dense->bias, model.norm->weight, model.norm->bias, model.head->bias};
  ASSERT_EQ(groups[0].params.size(), decay.size());
  ASSERT_EQ(groups[1].params.size(), no_decay.size());
  for (size_t i = 0; i < decay.size(); ++i) EXPECT_TRUE(groups[0].params[i].shares_storage_with(decay[i])) << i;
  for (size_t i = 0; i < no_decay.size(); ++i)
    EXPECT_TRUE(groups[1].params[i].shares_storage_with(no_decay[i])) << i;
  EXPECT_EQ(groups[0].weight_decay, 0.01);
  EXPECT_EQ(groups[1].weight_decay, 0.0);
  EXPECT_FALSE(groups[0].lr.has_value());

  AdamWOptions o;
  o.lr = 3e-4;
  o.weight_decay = 0.5;  // overridden by both groups
  AdamW opt(groups, o);
  EXPECT_EQ(opt.lr(0), 3e-4);
  EXPECT_EQ(opt.lr(1), 3e-4);
  EXPECT_EQ(*opt.param_groups()[0].weight_decay, 0.01);
  EXPECT_EQ(*opt.param_groups()[1].weight_decay, 0.0);
  EXPECT_EQ(opt.param_groups()[1].option("beta2"), 0.999);

  // A zero gradient leaves no-decay parameters unchanged and shrinks the rest by (1 - lr * wd).
  std::vector<Tensor> params = model.parameters();
  for (Tensor& p : params) set_grad(p, zeros_like(p));
  const Tensor norm_before = model.norm->weight.clone(), dense_before = model.dense->weight.clone();
  opt.step();
  EXPECT_TRUE(bitwise_equal(model.norm->weight, norm_before));
  const float shrink = static_cast<float>(1.0 - 3e-4 * 0.01);
  std::vector<double> want = values(dense_before);
  for (double& w : want) w = static_cast<float>(static_cast<float>(w) * shrink);
  EXPECT_TRUE(all_close(model.dense->weight, want, 0, 0));
}

TEST(OptimTraining, TinyModelLearnsWithGroupsScheduleAndClipping) {
  TinyEncoder model;
  AdamWOptions o;
  o.lr = 0.05;
  AdamW opt(param_groups_no_decay(model, 0.01), o);
  Scheduler sched(opt, linear_schedule_with_warmup(5, 120));
  Generator gen(7);
  const Tensor ids = randint(0, 11, {16, 5}, {}, &gen);
  // Label: whether the sequence contains a token < 3 (learnable from embeddings).
  std::vector<int64_t> labels;
  for (int64_t r = 0; r < 16; ++r) {
    bool any = false;
    for (int64_t c = 0; c < 5; ++c) any = any || ids.select(0, r).select(0, c).item<int64_t>() < 3;
    labels.push_back(any ? 1 : 0);
  }
  const Tensor target = tensor_from(labels);
  double first = 0, last = 0;
  for (int step = 0; step < 120; ++step) {
    opt.zero_grad();
    // Two micro-batches of 8: gradient accumulation by not zeroing between them.
    for (int half = 0; half < 2; ++half) {
      const Tensor x = ids.narrow(0, half * 8, 8), y = target.narrow(0, half * 8, 8);
      const Tensor loss = cross_entropy(model.forward(x), y) * 0.5;
      loss.backward();
      if (step == 0 && half == 0) first = loss.item<double>() * 2;
      if (step == 119 && half == 0) last = loss.item<double>() * 2;
    }
    const double norm = clip_grad_norm(model.parameters(), 1.0);
    EXPECT_TRUE(std::isfinite(norm));
    opt.step();
    sched.step();
  }
  EXPECT_LT(last, 0.5 * first) << "first loss " << first << ", last " << last;
}

}  // namespace
}  // namespace kiln
