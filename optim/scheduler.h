// Learning-rate schedules as multipliers of the step count, and a Scheduler
// that applies one to an optimizer (torch.optim.lr_scheduler.LambdaLR).
//
// The schedule functions are Hugging Face transformers' (get_*_schedule*),
// computed in double exactly as their Python closed forms. With w warmup and
// N total steps, for step s >= 0:
//   constant                      1
//   constant_with_warmup          s < w ? s / max(1, w) : 1
//   linear_with_warmup            s < w ? s / max(1, w) : max(0, (N - s) / max(1, N - w))
//   cosine_with_warmup            s < w ? s / max(1, w) :
//                                 max(0, 0.5 * (1 + cos(pi * cycles * 2 * (s - w) / max(1, N - w))))
//   polynomial_decay_with_warmup  s < w ? s / max(1, w) : s > N ? lr_end / lr_init :
//                                 ((lr_init - lr_end) * (1 - (s - w) / (N - w))^power + lr_end) / lr_init
// (HF takes lr_init from the optimizer's default lr; pass that value.)
//
// Scheduler semantics (as LambdaLR): the constructor records every group's
// current lr as its base lr and sets lr = base * multiplier(0); each step()
// (called after optimizer.step()) advances the count s and sets
// lr = base * multiplier(s). So with warmup the first update uses lr 0, as in
// the HF training scripts. The Scheduler refers to the optimizer, which must
// outlive it. To resume, load both state dicts (either order): the
// scheduler's restores its base lrs and step and sets the groups' lrs again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

using LrMultiplier = std::function<double(int64_t step)>;

// kiln::Error for: negative step counts; total_steps < warmup_steps (for the
// polynomial: total_steps <= warmup_steps); num_cycles < 0; non-finite power;
// lr_init <= lr_end (as HF's ValueError).
LrMultiplier constant_schedule();
LrMultiplier constant_schedule_with_warmup(int64_t warmup_steps);
LrMultiplier linear_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps);
LrMultiplier cosine_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps, double num_cycles = 0.5);
LrMultiplier polynomial_decay_schedule_with_warmup(int64_t warmup_steps, int64_t total_steps, double lr_init,
                                                   double lr_end = 1e-7, double power = 1.0);

class Scheduler {
 public:
  Scheduler(Optimizer& optimizer, LrMultiplier multiplier);

  void step();
  int64_t last_step() const { return last_step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  double multiplier() const { return multiplier_(last_step_); }

  // {"last_step": int64 0-dim, "base_lrs": float64 [groups]}. Loading checks
  // the entries (kiln::Error naming what is wrong) and applies the lrs again.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  // base * multiplier(step) per group; kiln::Error unless each is finite and >= 0.
  std::vector<double> lrs_at(int64_t step, const std::vector<double>& base_lrs) const;
  void apply();

  Optimizer& optimizer_;
  LrMultiplier multiplier_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

}  // namespace kiln::optim
