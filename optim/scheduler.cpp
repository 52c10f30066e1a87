#include "optim/scheduler.h"
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {
namespace {

void check_steps(const char* fn, int64_t warmup_steps, int64_t total_steps, bool strict) {
  KILN_CHECK(warmup_steps >= 0, fn, ": warmup_steps must be >= 0, got ", warmup_steps);
  KILN_CHECK(strict ? total_steps > warmup_steps : total_steps >= warmup_steps, fn, ": total_steps (", total_steps,
             ") must be ", strict ? "> " : ">= ", "warmup_steps (", warmup_steps, ")");
}

double warmup(int64_t step, int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
}

}  // namespace

LrMultiplier constant_schedule() {
  return [](int64_t) { return 1.0; };
}

LrMultiplier constant_schedule_with_warmup(int64_t warmup_steps) {
  KILN_CHECK(warmup_steps >= 0, "constant_schedule_with_warmup: warmup_steps must be >= 0, got ", warmup_steps);
  return [warmup_steps](int64_t s) { return s < warmup_steps ? warmup(s, warmup_steps) : 1.0; };
}

LrMultiplier linear_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps) {
  check_steps("linear_schedule_with_warmup", warmup_steps, total_steps, false);
  return [warmup_steps, total_steps](int64_t s) {
    if (s < warmup_steps) return warmup(s, warmup_steps);
    return std::max(0.0, static_cast<double>(total_steps - s) /
                             static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
  };
}

LrMultiplier cosine_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps, double num_cycles) {
  check_steps("cosine_schedule_with_warmup", warmup_steps, total_steps, false);
  KILN_CHECK(std::isfinite(num_cycles) && num_cycles >= 0,
             "cosine_schedule_with_warmup: num_cycles must be finite and >= 0, got ", num_cycles);
  return [warmup_steps, total_steps, num_cycles](int64_t s) {
    if (s < warmup_steps) return warmup(s, warmup_steps);
    const double progress = static_cast<double>(s - warmup_steps) /
                            static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
    return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
  };
}

LrMultiplier polynomial_decay_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps, double lr_init,
                                                   double lr_end, double power) {
  check_steps("polynomial_decay_schedule_with_warmup", warmup_steps, total_steps, true);
  KILN_CHECK(lr_init > lr_end, "polynomial_decay_schedule_with_warmup: lr_end (", lr_end,
             ") must be smaller than the initial lr (", lr_init, ")");
  KILN_CHECK(std::isfinite(power), "polynomial_decay_schedule_with_warmup: power must be finite, got ", power);
  return [=](int64_t s) {
    if (s < warmup_steps) return warmup(s, warmup_steps);
    if (s > total_steps) return lr_end / lr_init;
    const double lr_range = lr_init - lr_end;
    const double decay_steps = static_cast<double>(total_steps - warmup_steps);
    const double pct_remaining = 1.0 - static_cast<double>(s - warmup_steps) / decay_steps;
    const double decay = lr_range * std::pow(pct_remaining, power) + lr_end;
    return decay / lr_init;
  };
}

Scheduler::Scheduler(Optimizer& optimizer, LrMultiplier multiplier)
    : optimizer_(optimizer), multiplier_(std::move(multiplier)) {
  KILN_CHECK(static_cast<bool>(multiplier_), "Scheduler: empty multiplier function");
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  apply();
}

void Scheduler::step() {
  ++last_step_;
  apply();
}

std::vector<double> Scheduler::lrs_at(int64_t step, const std::vector<double>& base_lrs) const {
  const double m = multiplier_(step);
  std::vector<double> lrs(base_lrs.size());
  for (size_t g = 0; g < base_lrs.size(); ++g) {
    lrs[g] = base_lrs[g] * m;
    KILN_CHECK(std::isfinite(lrs[g]) && lrs[g] >= 0, "Scheduler: step ", step, " gives learning rate ", lrs[g],
               " for group ", g, " (base ", base_lrs[g], " x multiplier ", m, ")");
  }
  return lrs;
}

void Scheduler::apply() {
  const std::vector<double> lrs = lrs_at(last_step_, base_lrs_);
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(g, lrs[g]);
}

std::map<std::string, Tensor> Scheduler::state_dict() const {
  Tensor step = empty_tensor({}, DType::Int64, kCPU);
  *step.data_ptr<int64_t>() = last_step_;
  Tensor base = empty_tensor({static_cast<int64_t>(base_lrs_.size())}, DType::Float64, kCPU);
  std::copy(base_lrs_.begin(), base_lrs_.end(), base.data_ptr<double>());
  return {{"last_step", step}, {"base_lrs", base}};
}

void Scheduler::load_state_dict(const std::map<std::string, Tensor>& state) {
  for (const auto& [key, value] : state)
    KILN_CHECK(key == "last_step" || key == "base_lrs", "Scheduler.load_state_dict: unexpected entry '", key,
               "' (expected last_step, base_lrs)");
  const auto step = state.find("last_step");
  const auto base = state.find("base_lrs");
  KILN_CHECK(step != state.end() && step->second.defined(), "Scheduler.load_state_dict: missing 'last_step'");
  KILN_CHECK(base != state.end() && base->second.defined(), "Scheduler.load_state_dict: missing 'base_lrs'");
  const Tensor& s = step->second;
  const Tensor& b = base->second;
  KILN_CHECK(s.dim() == 0 && s.dtype() == DType::Int64, "Scheduler.load_state_dict: last_step is ", s.str(),
             ", expected a 0-dim int64");
  KILN_CHECK(b.dim() == 1 && b.dtype() == DType::Float64 && b.size(0) == static_cast<int64_t>(base_lrs_.size()),
             "Scheduler.load_state_dict: base_lrs is ", b.str(), ", expected float64 [", base_lrs_.size(),
             "] (one per parameter group)");
  const int64_t last = s.item<int64_t>();
  KILN_CHECK(last >= 0 && last <= kMaxStateCount, "Scheduler.load_state_dict: last_step is ", last,
             ", expected in [0, 2^53]");
  const std::vector<double> lrs = b.to_vector<double>();
  for (size_t g = 0; g < lrs.size(); ++g)
    KILN_CHECK(std::isfinite(lrs[g]) && lrs[g] >= 0, "Scheduler.load_state_dict: base lr ", lrs[g], " of group ", g,
               " is not finite and >= 0");
  (void)lrs_at(last, lrs);  // throws before anything changes
  base_lrs_ = lrs;
  last_step_ = last;
  apply();
}

}  // namespace kiln::optim
