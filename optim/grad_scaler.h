// GradScaler: dynamic loss scaling for float16 mixed precision, with the
// semantics of PyTorch's torch.cuda.amp.GradScaler. Small gradients underflow
// to zero in float16; multiplying the loss by a large scale S before backward
// keeps them representable, and unscaling (grad / S) before the optimizer step
// restores their value in the float32 gradients of the master weights.
//
//   GradScaler scaler;                       // S = 2^16
//   scaler.scale(loss).backward();           // gradients of S * loss
//   scaler.unscale_(opt);                    // optional: before clip_grad_norm
//   clip_grad_norm(params, 1.0);
//   scaler.step(opt);                        // skipped if a gradient is inf/NaN
//   scaler.update();                         // adapt S
//   opt.zero_grad();
//
// Note [Loss scale update]: after each step, update() looks at whether any
// gradient of the step was inf or NaN:
//   - yes: S *= backoff_factor and the growth tracker resets (the step was
//     skipped: parameters and optimizer state are untouched, bit for bit);
//   - no: the tracker counts the step; after growth_interval clean steps in a
//     row, S *= growth_factor and the tracker resets.
// S is a float32 value, like PyTorch's scale tensor. It never becomes inf: a
// growth past the largest finite float32 (3.4e38) stops there. It never
// becomes 0 or subnormal either (a backoff stops at the smallest normal
// float32, 1.2e-38), so 1/S stays finite. Both limits only matter when
// training has already diverged; they keep the scaler itself well defined.
// With power-of-two factors and a power-of-two S (the defaults), scaling and
// unscaling are exact, so unscaled gradients equal the unscaled-loss ones
// bit for bit (barring overflow and float32 underflow).
//
// unscale_(opt) divides the gradients of opt's parameters by S (multiplies by
// the float32 1/S, as PyTorch) and records whether any was inf or NaN. Call it
// at most once per optimizer between update()s; step() calls it when it was
// not called. Several optimizers may share one scaler: update() backs off when
// any of them saw a non-finite gradient.
//
// Disabled (options.enabled = false): scale() returns the loss, unscale_() does
// nothing, step() always steps, update() does nothing, get_scale() is 1,
// state_dict() is empty and load_state_dict() ignores its argument (as
// PyTorch), so one training loop serves --amp none as well.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;    // 2^16; in (0, largest finite float32]
  double growth_factor = 2.0;     // > 1
  double backoff_factor = 0.5;    // in (0, 1)
  int64_t growth_interval = 2000; // > 0
  bool enabled = true;
};

// True when every value of every defined gradient is finite (no inf, no NaN).
// The result is a yes/no, so it does not depend on thread count or order.
// Any floating dtype and device; undefined tensors are skipped. CPU tensors
// are checked bit by bit on the raw data; others with tensor ops and a single
// read back (Note [Fused and generic updates] in optim/optimizer.h).
bool all_finite(const std::vector<Tensor>& grads);

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * S (a new tensor in the autograd graph); loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides opt's gradients by S in place; records whether any is inf/NaN.
  // kiln::Error if called twice for one optimizer since the last update(), or
  // after step().
  void unscale_(Optimizer& opt);
  // Unscales if unscale_ was not called, then runs opt.step() unless a
  // gradient was inf/NaN. Returns whether opt.step() ran.
  bool step(Optimizer& opt);
  // Adapts S (Note [Loss scale update]) and forgets the per-optimizer records.
  // kiln::Error if no unscale_()/step() happened since the last update().
  void update();

  double get_scale() const;          // S (1 when disabled)
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Named 0-dim tensors (empty when disabled):
  //   "scale" float32, "growth_tracker" int64, "growth_factor" float64,
  //   "backoff_factor" float64, "growth_interval" int64.
  std::map<std::string, Tensor> state_dict() const;
  // Checks every entry first (missing, unexpected, wrong dtype/shape, invalid
  // value: one kiln::Error listing them), then restores S, the tracker and the
  // options. Ignored when disabled.
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace kiln::optim
