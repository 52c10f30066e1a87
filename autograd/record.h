// How an op joins the autograd graph: after computing its outputs, an op calls
// record(name, inputs, outputs, backward) when any_requires_grad(inputs) and
// grad mode is on. backward receives the outputs' gradients and returns one
// gradient per input (undefined where the input needs none).
#pragma once

#include <set>
#include <string>

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/node.h"

namespace kiln {

bool any_requires_grad(const TensorList& inputs);
// Whether to record: grad mode on and some input requires grad.
inline bool should_record(const TensorList& inputs) { return grad_enabled() && any_requires_grad(inputs); }
// Per input: does it need a gradient?
std::vector<bool> grad_mask(const TensorList& inputs);

void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward);

// Names of every op that recorded a node in this process (for the registry test).
std::set<std::string> recorded_op_names();

}  // namespace kiln
