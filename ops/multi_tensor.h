// Multi-tensor ops: one optimizer step, a norm or a non-finite check over a
// whole list of tensors in one call (ops/multi_tensor.cpp). Included by
// ops/ops.h.
//
// Note [Multi-tensor ops]
// ~~~~~~~~~~~~~~~~~~~~~~~
// An optimizer step touches every parameter, and a BERT has a few hundred
// of them, many tiny (biases, LayerNorm weights). These ops take whole lists,
// entry i of each list belonging to parameter i, and make one device call per
// list, backend(device).multi_tensor_* (core/backend.h), like every other op:
//  - the CPU body (core/cpu/multi_tensor.cpp) runs each tensor's fused,
//    blocked loop in list order, so a list gives bit for bit what its tensors
//    give one at a time;
//  - the CUDA body (cuda/optim_kernels.cu, Note [Multi-tensor launches]) cuts
//    every tensor of the list into chunks and runs the list in a few launches,
//    the CPU's statements with the CPU's roundings: AdamW agrees bit for bit,
//    LAMB and the norms up to the order of their float64 sums.
// The op checks its arguments once (list lengths, one device, dtypes, shapes,
// contiguity) with errors naming the op and the offending entry; the bodies
// trust them. The in-place steps write the parameters and both moment buffers
// and bump their versions; like Tensor's in-place methods they record no
// autograd history (under grad mode, a tensor that requires grad is an error)
// and ONNX export refuses them. multi_tensor_norm and multi_tensor_all_finite
// return 0-dim tensors on the list's device: nothing is read back to the host
// until the caller asks (item()). The optimizers (optim/adamw.cpp, lamb.cpp,
// clip_grad.cpp, grad_scaler.cpp) reach the device kernels through these ops
// only.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// One AdamW step (optim/adamw.h; torch.optim.AdamW's formula) of every
// parameter of a list, in place: params, grads, exp_avgs and exp_avg_sqs hold
// contiguous tensors of one device and one dtype (float32 or float64), entry i
// of each of params[i]'s shape; steps[i] >= 1 is parameter i's update count
// (1 on its first update). Lists of equal length; empty lists do nothing.
void multi_tensor_adamw_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                         const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                         double beta2, double eps);
// One LAMB step (optim/lamb.h) of every parameter of a list, in place; the
// lists as for multi_tensor_adamw_. Each parameter gets its own trust ratio.
void multi_tensor_lamb_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps, bool bias_correction);
// The norm of order norm_type (> 0, or infinity: the largest |x|) of all the
// tensors together, as if concatenated: a 0-dim float64 tensor on their
// device (a CPU zero for an empty list). Tensors of one device, each float32
// or float64, any strides; the sum runs in float64 in a fixed order
// (deterministic), and a NaN anywhere makes the norm NaN.
Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0);
// A 0-dim bool tensor on the tensors' device: false when some element of a
// floating tensor is inf or NaN (integer and bool tensors are always finite).
// Tensors of one device, any dtype and strides; an empty list is true (CPU).
Tensor multi_tensor_all_finite(const std::vector<Tensor>& tensors);

}  // namespace kiln
