#include "optim/param_groups.h"

#include <cmath>

namespace kiln::optim {

bool is_no_decay_parameter(const Tensor& parameter) { return parameter.dim() <= 1; }

std::vector<ParamGroup> param_groups_no_decay(const nn::NamedTensors& named_parameters, double weight_decay) {
  KILN_CHECK(std::isfinite(weight_decay) && weight_decay >= 0,
             "param_groups_no_decay: weight_decay must be finite and >= 0, got ", weight_decay);
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const auto& [name, tensor] : named_parameters)
    groups[is_no_decay_parameter(tensor) ? 1 : 0].params.push_back(tensor);
  return groups;
}

std::vector<ParamGroup> param_groups_no_decay(const nn::Module& module, double weight_decay) {
  nn::NamedTensors trainable;  // Note [Frozen parameters] (nn/freeze.h): no optimizer state for the rest
  for (const auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  KILN_CHECK(!trainable.empty(), "param_groups_no_decay: every parameter of the model is frozen (requires_grad false): nothing to train");
  return param_groups_no_decay(trainable, weight_decay);
}

}  // namespace kiln::optim
