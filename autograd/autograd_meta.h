// The autograd record a TensorImpl carries once it takes part in autograd.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/node.h"

namespace kiln {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                              // accumulated gradient (leaves, retained)
  std::shared_ptr<Node> grad_fn;            // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this is
  std::weak_ptr<AccumulateGrad> grad_accumulator;  // leaves that require grad
  bool retains_grad = false;
  std::vector<std::pair<int, TensorHook>> leaf_hooks;  // leaves: run before accumulation
  std::vector<std::pair<int, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

AutogradMeta& autograd_meta(const Tensor& t);        // creates when absent
const AutogradMeta* autograd_meta_if(const Tensor& t);

// The edge a gradient for t flows along: grad_fn for results of ops, the
// leaf's AccumulateGrad for leaves that require grad, none otherwise.
Edge gradient_edge(const Tensor& t);

// Runs backward from `roots` with the given output gradients.
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

}  // namespace kiln
