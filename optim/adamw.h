// AdamW (decoupled weight decay), as torch.optim.AdamW (PyTorch 1.13,
// amsgrad off). With g the gradient of p and t its update count:
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g            v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// (eps outside the square root, added after bias correction, as PyTorch).
// Per-parameter buffers: "exp_avg" (m), "exp_avg_sq" (v), zeros before the first update.
// Group options: "beta1", "beta2", "eps". Valid: betas in [0, 1), eps >= 0.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options);
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);

 protected:
  std::vector<std::string> buffer_names(const ParamGroup& group) const override;
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // CUDA parameters: one multi-tensor kernel per device and dtype (cuda/optim_kernels.cu).
  void update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) override;
};

// Shared by AdamW and LAMB: betas in [0, 1), eps >= 0 (kiln::Error naming `opt`).
void check_adam_options(const std::string& opt, const ParamGroup& group);

}  // namespace kiln::optim
