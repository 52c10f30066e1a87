// Autocast: mixed-precision forward passes. Inside an AutocastGuard scope the
// ops named in the policy table below cast their floating-point inputs, with
// differentiable casts (to_dtype), before they run:
//
//   {
//     kiln::AutocastGuard amp(kiln::DType::BFloat16);   // or Float16
//     Tensor loss = model.forward(...).loss;             // GEMMs in bf16, softmax/norms/loss in float32
//   }
//   loss.backward();                                     // float32 gradients on the float32 weights
//
// Note [Autocast policy]: one table (kAutocastPolicy in ops/autocast.cpp)
// gives each affected op its class, and each such op's public entry point
// asks the table by name (autocast::cast_inputs("matmul", a, b)):
//
//   op              class          why
//   matmul          LowPrecision   GEMM: the bulk of the FLOPs. Covers batched
//                                  (B, M, K) @ (B, K, N) products, i.e. bmm and
//                                  the attention GEMMs q @ k^T and probs @ v
//                                  (kiln has no separate bmm op).
//   linear          LowPrecision   x @ W^T + b; x, W and b all cast, so the
//                                  output is low precision too.
//   softmax         Float32        exp and a row sum: range and accumulation.
//   log_softmax     Float32        as softmax.
//   layer_norm      Float32        mean/variance statistics.
//   rms_norm        Float32        the mean-square statistic (as layer_norm).
//   cross_entropy   Float32        the loss (log-sum-exp); kiln's only loss op.
//   sum, mean       Float32        reductions (var builds on them).
//
// LowPrecision casts float32 inputs (and the other 16-bit float type) to the
// scope's dtype; float64 is left alone, as are integer and bool tensors.
// Float32 casts float16/bfloat16 inputs up to float32. An op not in the table
// runs in whatever dtypes it is given (elementwise ops promote as usual, so
// bf16 + float32 gives float32). Low-precision kernels still accumulate in
// float32 (Note [Low-precision compute], core/dtype.h): cpu::matmul runs
// float16/bfloat16 GEMMs as float32 GEMMs and rounds once on store.
//
// Gradients: each cast is a to_dtype node, whose backward casts the gradient
// back, so float32 master weights get float32 gradients. Casts are not cached:
// every use of a weight casts it again (cheap next to the GEMM that follows).
// A cache keyed on the weight would be wrong under autograd in two ways kiln
// tests for (tests/test_amp.cpp): a cast node is freed by the first backward
// that runs through it, so a second forward/backward in the same scope
// (gradient accumulation) would hit a freed graph; and a weight updated in
// place inside the scope would keep its stale cast.
//
// Scope: the state is thread-local; guards nest and restore the previous state
// (an AutocastGuard with enabled = false turns autocast off in an inner
// scope). Backward never autocasts (autograd/grad_mode.h in_backward()):
// backward formulas run in the dtypes their forward chose, even when
// backward() is called inside a guard. The policy is the same on every
// device; CUDA tensors take the same path.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

namespace autocast {

enum class OpClass { LowPrecision, Float32 };

struct PolicyEntry {
  const char* op;
  OpClass cls;
};

// The policy table (Note [Autocast policy]).
const std::vector<PolicyEntry>& policy();
// The class of `op`; kiln::Error when the table lacks it.
OpClass op_class(std::string_view op);

// Whether autocast applies on this thread now (a guard enabled it and no
// backward is running), and the low-precision dtype of the innermost guard.
bool is_active();
DType low_precision_dtype();

// t cast (differentiably) as class `cls` wants under dtype `low`; t itself
// when no cast applies (undefined, non-floating, float64, already right).
Tensor cast(const Tensor& t, OpClass cls, DType low);

// At the top of a public op in the table: replaces each argument with its
// autocast version when autocast is active; does nothing otherwise.
template <typename... Ts>
void cast_inputs(std::string_view op, Ts&... ts) {
  if (!is_active()) return;
  const OpClass cls = op_class(op);
  const DType low = low_precision_dtype();
  ((ts = cast(ts, cls, low)), ...);
}

}  // namespace autocast

// RAII autocast scope. dtype is Float16 or BFloat16 (else kiln::Error);
// enabled = false disables autocast inside the scope. The previous state
// comes back on destruction.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

// Whether an AutocastGuard enabled autocast on this thread (backward or not).
bool autocast_enabled();

}  // namespace kiln
