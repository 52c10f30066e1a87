// SGD with momentum, dampening, Nesterov momentum and coupled weight decay,
// as torch.optim.SGD (PyTorch 1.13). With g the gradient of parameter p:
//   d = g + weight_decay * p
//   momentum != 0:  b = d on the first update, else b = momentum * b + (1 - dampening) * d
//                   d = nesterov ? d + momentum * b : b
//   p = p - lr * d
// Per-parameter buffer: "momentum_buffer" (only when momentum != 0).
// Group options: "momentum", "dampening", "nesterov" (0 or 1).
// Valid: momentum >= 0, dampening >= 0; nesterov needs momentum > 0 and dampening == 0.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);

 protected:
  std::vector<std::string> buffer_names(const ParamGroup& group) const override;
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
};

}  // namespace kiln::optim
