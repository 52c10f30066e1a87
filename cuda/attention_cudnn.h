// Scaled-dot-product attention through cuDNN 9's fused flash-attention
// engines (cuda/attention_cudnn.cpp, Note [cuDNN attention]). The CUDA Backend
// (cuda/backend_cuda.cpp) forwards Backend::sdpa_* here; the contracts are the
// ones core/backend.h states for them. Names no cuDNN type. The decisions
// that need no GPU (version rules, length buckets, argument layout) are in
// cuda/attention_cudnn_rules.h. Safe to call from several threads (Note
// [cuDNN handle lock]).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace kiln::cuda::sdpa {

// Static limits of the fused engines: float16/bfloat16, head size a multiple
// of 8 up to 128, a device of compute capability 8.0 or newer, a cuDNN the
// version rules take (Note [cuDNN version rules]), a causal mask they build
// (Note [cuDNN causal masks]). Whether cuDNN then accepts
// the exact graph is only known when it is built and first run (forward()).
bool supported(int device, DType dtype, int64_t T, int64_t S, int64_t head_size, bool has_mask, double p,
               bool causal);

// Builds (once per problem, cached; one problem serves a bucket of lengths,
// Note [cuDNN attention buckets]) the forward and backward graphs and runs
// the forward one: q, out (B, T, C), k, v (B, S, C), stats (B, heads, T)
// float32; causal as core/backend.h states it. Returns false,
// having written nothing, when cuDNN has no engine for the graphs or refuses
// them on their first run (Note [Declined at first run]; the caller then takes
// another path); throws kiln::Error on any other cuDNN failure.
bool forward(int device, const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& mask, int64_t heads, double scale, double p, PhiloxState st, bool causal);

// Runs the backward graph of the same problem (built and first run by forward()).
void backward(int device, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& stats, const Tensor& mask,
              int64_t heads, double scale, double p, PhiloxState st, bool causal);

// Whether problems on `device` are built per length bucket (ragged tensors
// available, Note [cuDNN version rules]); false: per exact length.
bool buckets_enabled(int device);

// For tests: the problems in the plan cache, over all devices (each holds a
// forward and a backward plan, or is a declined problem).
int64_t cached_problems();

}  // namespace kiln::cuda::sdpa
