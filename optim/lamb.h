// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT
// in 76 minutes", Algorithm 2, with phi the identity), the NVLAMB form that
// NVIDIA's FusedLAMB computes when its trust ratio is always applied. With g
// the gradient of p and t its update count:
//   m = beta1 * m + (1 - beta1) * g            v = beta2 * v + (1 - beta2) * g^2
//   bias_correction:  m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)
//   otherwise:        m_hat = m,                  v_hat = v
//   u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p     (decoupled decay, in the update)
//   r = ||p|| / ||u||   (2-norms over the whole parameter, before this update;
//                        r = 1 when either norm is 0)
//   p = p - lr * r * u
// Norms are accumulated in float64. Not included (do them outside): global
// gradient clipping (clip_grad_norm) and trust-ratio clipping.
// Per-parameter buffers: "exp_avg" (m), "exp_avg_sq" (v).
// Group options: "beta1", "beta2", "eps", "bias_correction" (0 or 1).
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct LAMBOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 1e-2;
  bool bias_correction = true;
};

class LAMB : public Optimizer {
 public:
  LAMB(std::vector<Tensor> params, const LAMBOptions& options);
  LAMB(std::vector<ParamGroup> groups, const LAMBOptions& options);

 protected:
  std::vector<std::string> buffer_names(const ParamGroup& group) const override;
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // CUDA parameters: one multi-tensor kernel per device and dtype (cuda/optim_kernels.cu).
  void update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) override;
};

}  // namespace kiln::optim
