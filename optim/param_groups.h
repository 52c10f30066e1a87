// Parameter grouping helpers for the Hugging Face fine-tuning recipe: no weight
// decay on biases and normalisation weights.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace kiln::optim {

// True for a full parameter name that ends in "bias" or contains "norm" in any
// letter case ("encoder.layer.0.output.LayerNorm.weight", "pooler.dense.bias").
bool is_no_decay_parameter(const std::string& name);

// Two groups, in this order: [0] every other parameter with `weight_decay`,
// [1] the no-decay parameters with weight_decay 0. Registration order within
// each; lr and options unset (the optimizer's defaults); either group may be
// empty. weight_decay must be >= 0.
std::vector<ParamGroup> param_groups_no_decay(const nn::NamedTensors& named_parameters, double weight_decay);
std::vector<ParamGroup> param_groups_no_decay(const nn::Module& module, double weight_decay);

}  // namespace kiln::optim
