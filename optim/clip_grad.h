// Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <limits>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// The norm of order `norm_type` (> 0, or infinity for the max-abs norm) of all
// the gradients together, as if concatenated; parameters without a gradient
// are skipped (no gradients at all: returns 0). Accumulated in float64 in a
// fixed order, so it is deterministic for any thread count (and does not
// overflow where float32 squares would). Then every gradient is multiplied, in
// place, by min(1, max_norm / (total + 1e-6)), as PyTorch does: a nan total
// makes every gradient nan, an infinite one scales by 0. With
// error_if_nonfinite, a nan or infinite total is a kiln::Error instead (and no
// gradient changes). Returns the total norm.
// Gradients must be float32 or float64, on any device (CPU gradients take
// fused loops, others tensor ops: Note [Fused and generic updates] in
// optim/optimizer.h); max_norm must be >= 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// The same total norm without clipping.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

// Scales the gradients as clip_grad_norm does for a total norm computed
// elsewhere (e.g. added over the ranks of a sharded optimizer): by
// min(max_norm / (total_norm + 1e-6), 1).
void clip_grads_to_norm(const std::vector<Tensor>& params, double max_norm, double total_norm);

}  // namespace kiln::optim
