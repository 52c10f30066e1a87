// Parameter grouping helpers for the Hugging Face fine-tuning recipe: no weight
// decay on biases and normalisation weights, told apart by their kind (a
// tensor of at most one dimension), not by their names, so any model's naming
// works: BERT's "LayerNorm.weight" and "bias", GPT-2's "ln_1.weight",
// "ln_f.weight", a user's "norm2.g".
#pragma once

#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// True for a parameter of at most one dimension: biases, LayerNorm (and RMS
// norm) weights and other per-feature scales. For BERT this is exactly the set
// transformers' recipe names ("bias", "LayerNorm.weight"); matrices and
// embeddings get weight decay.
bool is_no_decay_parameter(const Tensor& parameter);

// Two groups, in this order: [0] every other parameter with `weight_decay`,
// [1] the no-decay parameters with weight_decay 0. Registration order within
// each; lr and options unset (the optimizer's defaults); either group may be
// empty. weight_decay must be >= 0.
std::vector<ParamGroup> param_groups_no_decay(const nn::NamedTensors& named_parameters, double weight_decay);
// The module's form takes only its trainable parameters (requires_grad;
// Note [Frozen parameters], nn/freeze.h); none is a kiln::Error.
std::vector<ParamGroup> param_groups_no_decay(const nn::Module& module, double weight_decay);

}  // namespace kiln::optim
