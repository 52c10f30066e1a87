#include "optim/param_groups.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace kiln::optim {

bool is_no_decay_parameter(const std::string& name) {
  const std::string suffix = "bias";
  if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return true;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("norm") != std::string::npos;
}

std::vector<ParamGroup> param_groups_no_decay(const nn::NamedTensors& named_parameters, double weight_decay) {
  KILN_CHECK(std::isfinite(weight_decay) && weight_decay >= 0,
             "param_groups_no_decay: weight_decay must be finite and >= 0, got ", weight_decay);
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const auto& [name, tensor] : named_parameters)
    groups[is_no_decay_parameter(name) ? 1 : 0].params.push_back(tensor);
  return groups;
}

std::vector<ParamGroup> param_groups_no_decay(const nn::Module& module, double weight_decay) {
  return param_groups_no_decay(module.named_parameters(), weight_decay);
}

}  // namespace kiln::optim
