// Frozen parameters: requires_grad false on a module's parameters.
//
// Note [Frozen parameters]
// A parameter with requires_grad false costs training nothing beyond its
// forward use: ops record a node only when some input requires grad, and a
// node computes only the input gradients its mask asks for (grad_mask,
// autograd/record.h; linear, linear_fused, linear_gelu, matmul, embedding and
// layer_norm skip a frozen weight's GEMM or reduction), so no gradient
// buffer is ever made for it; the trainer gives the optimizer only trainable
// parameters (optim::param_groups_no_decay skips the rest), so it holds no
// state for them; DDP all-reduces only parameters that require grad; a
// checkpoint still saves every parameter once (Module::state_dict).
// Module::to() keeps each parameter's requires_grad.
#pragma once

#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Sets requires_grad false on every parameter whose full name a pattern
// finds (a regular expression searched in the name, as Python's re.search:
// "embeddings", "^bert\\.encoder\\.layer\\.[0-3]\\."). A pattern that finds
// no parameter is a kiln::Error naming it and `source` (a mistyped
// --freeze must not silently train everything). Returns the frozen names.
std::vector<std::string> freeze(Module& model, const std::vector<std::string>& patterns,
                                const std::string& source = "freeze");

// The parameters that require grad, by full name.
NamedTensors trainable_parameters(const Module& model);

}  // namespace kiln::nn
