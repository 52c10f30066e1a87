// GradScaler (optim/grad_scaler.h): loss scaling, unscaling with the
// non-finite check, skipped steps and the scale update.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "cuda/cuda.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

constexpr double kMaxScale = FLT_MAX;  // largest finite float32
constexpr double kMinScale = FLT_MIN;  // smallest normal float32

// 1 when some element of the contiguous CPU buffer has an all-ones exponent
// (inf or NaN). Bits, not std::isfinite, so 16-bit floats need no conversion;
// the loop has no early exit and vectorises.
template <typename U>
int has_nonfinite(const void* data, int64_t n, U exponent_mask) {
  const U* p = static_cast<const U*>(data);
  return parallel_reduce<int>(
      n, 1 << 16, 0,
      [&](int64_t b, int64_t e) {
        int bad = 0;
        for (int64_t i = b; i < e; ++i) bad |= (p[i] & exponent_mask) == exponent_mask;
        return bad;
      },
      [](int a, int b) { return a | b; });
}

bool finite_cpu(const Tensor& g) {
  const Tensor c = g.is_contiguous() ? g : contiguous(g);
  const void* d = c.raw_data();
  const int64_t n = c.numel();
  switch (c.dtype()) {
    case DType::Float32: return !has_nonfinite<uint32_t>(d, n, 0x7f800000u);
    case DType::Float64: return !has_nonfinite<uint64_t>(d, n, 0x7ff0000000000000ull);
    case DType::Float16: return !has_nonfinite<uint16_t>(d, n, 0x7c00u);
    case DType::BFloat16: return !has_nonfinite<uint16_t>(d, n, 0x7f80u);
    default: return true;  // integers and bools are always finite
  }
}

// CUDA gradients go to one multi-tensor kernel per device
// (cuda::multi_tensor_all_finite, a device flag read back once); under
// set_force_generic_update, and for any other device, the generic path.
// Any device (the generic path, Note [Fused and generic updates] in
// optim/optimizer.h): x * 0 is 0 for finite x and NaN for inf or NaN, and a
// sum with a NaN in it is NaN. A float32 0-dim probe per floating gradient,
// added up on one device, so all_finite reads back one value in all.
Tensor nonfinite_probe(const Tensor& g) { return to_dtype(sum(mul(g, 0.0)), DType::Float32); }

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
  bool ok = true;
  Tensor probe;  // sum of the generic-path probes: NaN when some value is inf or NaN
  std::vector<std::vector<Tensor>> on_cuda;  // per CUDA device: one multi-tensor kernel each
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (detail::use_fused_update(g)) {
      ok = finite_cpu(g) && ok;
      continue;
    }
    if (!is_floating(g.dtype())) continue;  // integers and bools are always finite
    if (g.device().is_cuda() && !force_generic_update()) {
      const Tensor c = g.is_contiguous() ? g : contiguous(g);
      auto same = std::find_if(on_cuda.begin(), on_cuda.end(),
                               [&](const std::vector<Tensor>& l) { return l.front().device() == c.device(); });
      if (same == on_cuda.end()) on_cuda.push_back({c});
      else same->push_back(c);
      continue;
    }
    Tensor part = nonfinite_probe(g);
    if (probe.defined() && part.device() != probe.device()) part = to_device(part, probe.device());
    probe = probe.defined() ? add(probe, part) : part;
  }
  for (const std::vector<Tensor>& list : on_cuda) ok = cuda::multi_tensor_all_finite(list) && ok;
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
