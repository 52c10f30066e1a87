// GradScaler (optim/grad_scaler.h): loss scaling, unscaling with the
// non-finite check, skipped steps and the scale update.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "autograd/grad_mode.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "optim/optimizer.h"

namespace kiln::optim {
namespace {

constexpr double kMaxScale = FLT_MAX;  // largest finite float32
constexpr double kMinScale = FLT_MIN;  // smallest normal float32

// Gradients on a CPU or CUDA device go to one multi-tensor op per device
// (multi_tensor_all_finite, Note [Multi-tensor ops]: one value read back per
// device); under set_force_generic_update, and for any other device, the
// generic path (Note [Fused and generic updates] in optim/optimizer.h): x * 0
// is 0 for finite x and NaN for inf or NaN, and a sum with a NaN in it is NaN.
// A float32 0-dim probe per floating gradient, added up on one device, so
// the generic path reads back one value in all.
Tensor nonfinite_probe(const Tensor& g) { return to_dtype(sum(mul(g, 0.0)), DType::Float32); }

bool use_multi_tensor_check(const Tensor& g) {
  return (g.device().is_cpu() || g.device().is_cuda()) && !force_generic_update();
}

// Every parameter gradient of opt that is defined.
std::vector<Tensor> grads_of(const Optimizer& opt) {
  std::vector<Tensor> out;
  for (const ParamGroup& group : opt.param_groups())
    for (const Tensor& p : group.params)
      if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

double scalar_value(const Tensor& t) { return t.item<double>(); }

}  // namespace

bool all_finite(const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  AutocastGuard no_autocast(DType::BFloat16, false);
  Tensor probe;  // sum of the generic-path probes: NaN when some value is inf or NaN
  std::vector<std::vector<Tensor>> per_device;  // one multi-tensor op each
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (use_multi_tensor_check(g)) {
      auto same = std::find_if(per_device.begin(), per_device.end(),
                               [&](const std::vector<Tensor>& l) { return l.front().device() == g.device(); });
      if (same == per_device.end()) per_device.push_back({g});
      else same->push_back(g);
      continue;
    }
    if (!is_floating(g.dtype())) continue;  // integers and bools are always finite
    Tensor part = nonfinite_probe(g);
    if (probe.defined() && part.device() != probe.device()) part = to_device(part, probe.device());
    probe = probe.defined() ? add(probe, part) : part;
  }
  bool ok = true;
  for (const std::vector<Tensor>& list : per_device) ok = multi_tensor_all_finite(list).item<bool>() && ok;
  if (probe.defined()) ok = !std::isnan(probe.item<double>()) && ok;
  return ok;
}

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o) {
  KILN_CHECK(o.init_scale > 0.0 && o.init_scale <= kMaxScale, "GradScaler: init_scale must be in (0, ", kMaxScale,
             "] (a finite float32), got ", o.init_scale);
  KILN_CHECK(o.growth_factor > 1.0 && std::isfinite(o.growth_factor),
             "GradScaler: growth_factor must be a finite number > 1, got ", o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
             o.backoff_factor);
  KILN_CHECK(o.growth_interval > 0 && o.growth_interval <= kMaxStateCount,
             "GradScaler: growth_interval must be in [1, 2^53], got ", o.growth_interval);
  scale_ = static_cast<float>(o.init_scale);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  KILN_CHECK(loss.defined(), "GradScaler::scale: the loss is an undefined tensor");
  if (!options_.enabled) return loss;
  return mul(loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& st = per_opt_[&opt];
  KILN_CHECK(st.stage == Stage::Ready, "GradScaler::unscale_: ",
             st.stage == Stage::Unscaled ? "already called for this optimizer since the last update()"
                                         : "called after step(); call update() first");
  NoGradGuard no_grad;
  AutocastGuard no_autocast(DType::BFloat16, false);
  // Multiply by the float32 reciprocal (exact for a power-of-two scale), then
  // check what the optimizer will see.
  const double inv = static_cast<double>(1.0f / scale_);
  std::vector<Tensor> grads = grads_of(opt);
  for (Tensor& g : grads) {
    if (g.dtype() == DType::Float64)
      g.mul_(1.0 / static_cast<double>(scale_));
    else
      g.mul_(inv);
  }
  st.found_inf = !all_finite(grads);
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  {
    auto it = per_opt_.find(&opt);
    KILN_CHECK(it == per_opt_.end() || it->second.stage != Stage::Stepped,
               "GradScaler::step: already called for this optimizer since the last update()");
    if (it == per_opt_.end() || it->second.stage == Stage::Ready) unscale_(opt);
  }
  PerOptimizer& st = per_opt_[&opt];
  st.stage = Stage::Stepped;
  if (st.found_inf) return false;  // skipped: parameters and state untouched
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  KILN_CHECK(!per_opt_.empty(), "GradScaler::update: no unscale_() or step() since the last update() "
                                "(nothing recorded whether gradients were finite)");
  bool found_inf = false;
  for (const auto& [opt, st] : per_opt_) found_inf = found_inf || st.found_inf;
  per_opt_.clear();
  if (found_inf) {
    const double s = static_cast<double>(scale_) * options_.backoff_factor;
    scale_ = static_cast<float>(s < kMinScale ? kMinScale : s);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const double s = static_cast<double>(scale_) * options_.growth_factor;
    scale_ = static_cast<float>(s > kMaxScale ? kMaxScale : s);
    growth_tracker_ = 0;
  }
}

double GradScaler::get_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", scalar_tensor(static_cast<double>(scale_), TensorOptions(DType::Float32))},
          {"growth_tracker", scalar_tensor(static_cast<double>(growth_tracker_), TensorOptions(DType::Int64))},
          {"growth_factor", scalar_tensor(options_.growth_factor, TensorOptions(DType::Float64))},
          {"backoff_factor", scalar_tensor(options_.backoff_factor, TensorOptions(DType::Float64))},
          {"growth_interval",
           scalar_tensor(static_cast<double>(options_.growth_interval), TensorOptions(DType::Int64))}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  if (!options_.enabled) return;
  const std::map<std::string, DType> expected = {{"scale", DType::Float32},
                                                 {"growth_tracker", DType::Int64},
                                                 {"growth_factor", DType::Float64},
                                                 {"backoff_factor", DType::Float64},
                                                 {"growth_interval", DType::Int64}};
  std::vector<std::string> problems;
  for (const auto& [key, dtype] : expected) {
    auto it = state.find(key);
    if (it == state.end()) {
      problems.push_back("missing '" + key + "'");
      continue;
    }
    const Tensor& t = it->second;
    if (!t.defined() || t.dim() != 0 || t.dtype() != dtype)
      problems.push_back("'" + key + "' must be a 0-dim " + dtype_name(dtype) + " tensor, got " +
                         (t.defined() ? t.str() : std::string("an undefined tensor")));
  }
  for (const auto& [key, t] : state)
    if (!expected.count(key)) problems.push_back("unexpected '" + key + "'");
  if (problems.empty()) {
    const double s = scalar_value(state.at("scale")), gf = scalar_value(state.at("growth_factor")),
                 bf = scalar_value(state.at("backoff_factor"));
    const int64_t gt = state.at("growth_tracker").item<int64_t>(), gi = state.at("growth_interval").item<int64_t>();
    if (!(s > 0.0 && s <= kMaxScale)) problems.push_back("'scale' must be a positive finite float32");
    if (!(gf > 1.0 && std::isfinite(gf))) problems.push_back("'growth_factor' must be > 1");
    if (!(bf > 0.0 && bf < 1.0)) problems.push_back("'backoff_factor' must be in (0, 1)");
    if (gi <= 0 || gi > kMaxStateCount) problems.push_back("'growth_interval' must be in [1, 2^53]");
    else if (gt < 0 || gt >= gi) problems.push_back("'growth_tracker' must be in [0, growth_interval)");
  }
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << "GradScaler::load_state_dict: ";
    for (size_t i = 0; i < problems.size(); ++i) msg << (i ? "; " : "") << problems[i];
    fail(msg.str());
  }
  scale_ = static_cast<float>(scalar_value(state.at("scale")));
  growth_tracker_ = state.at("growth_tracker").item<int64_t>();
  options_.growth_factor = scalar_value(state.at("growth_factor"));
  options_.backoff_factor = scalar_value(state.at("backoff_factor"));
  options_.growth_interval = state.at("growth_interval").item<int64_t>();
  per_opt_.clear();
}

}  // namespace kiln::optim
