// Autocast state (thread-local), the policy table and the cast rule
// (Note [Autocast policy] in ops/autocast.h).
#include "ops/autocast.h"

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln {
namespace {

thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::BFloat16;

bool is_half_type(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

namespace autocast {

const std::vector<PolicyEntry>& policy() {
  static const std::vector<PolicyEntry> kAutocastPolicy = {
      {"matmul", OpClass::LowPrecision},      {"linear", OpClass::LowPrecision},
      {"softmax", OpClass::Float32},          {"log_softmax", OpClass::Float32},
      {"scaled_masked_softmax", OpClass::Float32},
      {"layer_norm", OpClass::Float32},       {"rms_norm", OpClass::Float32},
      {"cross_entropy", OpClass::Float32},
      {"sum", OpClass::Float32},              {"mean", OpClass::Float32},
      {"mse_loss", OpClass::Float32},         {"binary_cross_entropy_with_logits", OpClass::Float32},
  };
  return kAutocastPolicy;
}

OpClass op_class(std::string_view op) {
  for (const PolicyEntry& e : policy())
    if (op == e.op) return e.cls;
  fail("autocast: op '", std::string(op), "' is not in the policy table (ops/autocast.cpp)");
}

bool is_active() { return t_enabled && !in_backward(); }
DType low_precision_dtype() { return t_dtype; }

Tensor cast(const Tensor& t, OpClass cls, DType low) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::Float64) return t;
  if (cls == OpClass::LowPrecision) return t.dtype() == low ? t : to_dtype(t, low);
  return is_half_type(t.dtype()) ? to_dtype(t, DType::Float32) : t;
}

}  // namespace autocast

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  KILN_CHECK(is_half_type(dtype), "AutocastGuard: dtype must be float16 or bfloat16, got ", dtype_name(dtype));
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
}

bool autocast_enabled() { return t_enabled; }

}  // namespace kiln
