// Activation checkpointing: trade compute for memory, as
// torch.utils.checkpoint.checkpoint (ops/activation_checkpoint.cpp).
//
//   TensorList out = kiln::checkpoint(
//       [block](const TensorList& in) { return TensorList{block->forward(in[0], in[1])}; },
//       {x, mask_bias}, block->parameters());
//   // ... loss.backward(): the block's activations are recomputed here
//
// Note [Activation checkpointing]: checkpoint(fn, inputs, params) runs fn
// under no-grad, so none of fn's intermediate activations are saved, and
// records one autograd node ("checkpoint") whose inputs are `inputs` and
// whose outputs are fn's (floating-point) outputs. It keeps the inputs (as
// saved tensors: modifying one in place before backward is an error), fn,
// the default generator's Philox state (core/random.h) and the autocast
// state (ops/autocast.h) of the forward. Its backward:
//   1. detaches each input, with requires_grad as the original;
//   2. sets the generator to the saved state (so every dropout mask is the
//      forward's), turns grad mode on, marks the scope as forward
//      (BackwardScope(false): autocast is off inside backward, and the
//      recomputation must see the forward's autocast state) and re-runs fn
//      under the saved autocast state; then puts the generator back where
//      the outer step had it, so the recomputation draws nothing visible;
//   3. runs a nested backward (run_backward, autograd/autograd_meta.h) from
//      the recomputed outputs that got a gradient, with those gradients: the
//      parameters fn uses get their gradients accumulated into .grad by that
//      backward, as an ordinary backward would, and the detached inputs'
//      .grad become the node's input gradients.
// The recomputed values are bitwise the forward's (the same kernels on the
// same values and random numbers), so gradients are bitwise equal to a
// backward without checkpointing where each gradient meets the others in the
// same order, as in the models' layer loops (tests/test_activation_checkpoint.cpp).
//
// When it records: grad mode on and some input or some tensor of `params`
// requires grad. `params` names the tensors that fn uses besides its inputs
// (its parameters): only their requires_grad is read, so a block whose
// inputs need no gradient (frozen embeddings, LoRA) still checkpoints. With
// grad mode on and nothing in inputs or params requiring grad, fn runs as a
// plain forward (recording whatever fn's own ops record: correct gradients
// for parameters missing from `params`, without the memory saving). With
// grad mode off it is fn(inputs).
//
// Outputs: the outputs that require grad are the node's; an integer or bool
// output, or an undefined one, is returned as fn gave it. A gradient that
// does not reach an output (an unused output) is zero, as for any op. The
// graph behind the node may be backpropagated twice with retain_graph (each
// backward recomputes). Only the default generator is replayed: fn must not
// draw from another Generator. fn must compute the same shapes from the same
// inputs (kiln::Error otherwise) and is called once per backward.
//
// The node is a Node class of its own (as AccumulateGrad is), not an op's
// FunctionNode made by record(): it is no op, so it is not in the op registry
// and not in recorded_op_names() (GradCheck.RecordedOpsAreRegistered), and
// its float64 gradient check is ActivationCheckpoint.Float64GradCheck.
#pragma once

#include <functional>

#include "kiln/autograd/node.h"

namespace kiln {

using CheckpointFn = std::function<TensorList(const TensorList& inputs)>;

TensorList checkpoint(CheckpointFn fn, const TensorList& inputs, const TensorList& params = {});

}  // namespace kiln
