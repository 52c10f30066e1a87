// CUDA binary elementwise ops and comparisons. CPU twin: binary() in
// core/cpu/elementwise.cpp (same NaN rule for maximum/minimum: a NaN in
// either operand wins; integer division by zero gives 0).
#include "core/activation_math.h"
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

template <BinaryOp OP, typename A>
__device__ __forceinline__ A binary_math(A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    if constexpr (OP == BinaryOp::Mul || OP == BinaryOp::Minimum) return a && b;
    else return a || b;  // Add, Maximum
  } else if constexpr (OP == BinaryOp::Add) {
    return static_cast<A>(a + b);
  } else if constexpr (OP == BinaryOp::Sub) {
    return static_cast<A>(a - b);
  } else if constexpr (OP == BinaryOp::Mul) {
    return static_cast<A>(a * b);
  } else if constexpr (OP == BinaryOp::Maximum) {
    return (a != a || a > b) ? a : b;
  } else if constexpr (OP == BinaryOp::Minimum) {
    return (a != a || a < b) ? a : b;
  } else if constexpr (OP == BinaryOp::Div) {
    if constexpr (std::is_integral_v<A>) return b == 0 ? A(0) : static_cast<A>(a / b);
    else return a / b;
  } else if constexpr (OP == BinaryOp::Pow) {
    return m_pow(a, b);
  } else if constexpr (OP == BinaryOp::ReluBackward) {
    return a > A(0) ? b : A(0);
  } else if constexpr (OP == BinaryOp::GeluBackward) {
    return b * act::gelu_grad<DeviceMath>(a);
  } else if constexpr (OP == BinaryOp::GeluTanhBackward) {
    return b * act::gelu_tanh_grad<DeviceMath>(a);
  } else if constexpr (OP == BinaryOp::TanhBackward) {
    return b * (A(1) - a * a);
  } else if constexpr (OP == BinaryOp::SigmoidBackward) {
    return b * a * (A(1) - a);
  } else {
    return a;  // not reached: the host switch picks the op
  }
}

template <BinaryOp OP, typename A>
__device__ __forceinline__ bool compare(A a, A b) {
  if constexpr (OP == BinaryOp::Eq) return a == b;
  else if constexpr (OP == BinaryOp::Ne) return a != b;
  else if constexpr (OP == BinaryOp::Lt) return a < b;
  else if constexpr (OP == BinaryOp::Le) return a <= b;
  else if constexpr (OP == BinaryOp::Gt) return a > b;
  else return a >= b;
}

template <typename T, BinaryOp OP>
struct BinaryF {
  __device__ __forceinline__ T operator()(T a, T b) const {
    return from_acc<T>(binary_math<OP>(to_acc(a), to_acc(b)));
  }
};

template <typename T, BinaryOp OP>
struct CompareF {
  __device__ __forceinline__ bool operator()(T a, T b) const { return compare<OP>(to_acc(a), to_acc(b)); }
};

template <typename T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
#define KILN_BINARY_CASE(NAME) \
  case BinaryOp::NAME: return map_kernel<T, T, T>({&out, &a, &b}, BinaryF<T, BinaryOp::NAME>{});
#define KILN_COMPARE_CASE(NAME) \
  case BinaryOp::NAME: return map_kernel<bool, T, T>({&out, &a, &b}, CompareF<T, BinaryOp::NAME>{});
  switch (op) {
    KILN_COMPARE_CASE(Eq)
    KILN_COMPARE_CASE(Ne)
    KILN_COMPARE_CASE(Lt)
    KILN_COMPARE_CASE(Le)
    KILN_COMPARE_CASE(Gt)
    KILN_COMPARE_CASE(Ge)
    default: break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      KILN_BINARY_CASE(Mul)
      KILN_BINARY_CASE(Minimum)
      KILN_BINARY_CASE(Add)
      KILN_BINARY_CASE(Maximum)
      default: fail("binary op not defined for bool tensors");
    }
  } else {
    switch (op) {
      KILN_BINARY_CASE(Add)
      KILN_BINARY_CASE(Sub)
      KILN_BINARY_CASE(Mul)
      KILN_BINARY_CASE(Maximum)
      KILN_BINARY_CASE(Minimum)
      KILN_BINARY_CASE(Div)
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      fail("binary op needs floating-point tensors, got ", dtype_name(a.dtype()));
    } else {
      switch (op) {
        KILN_BINARY_CASE(Pow)
        KILN_BINARY_CASE(ReluBackward)
        KILN_BINARY_CASE(GeluBackward)
        KILN_BINARY_CASE(GeluTanhBackward)
        KILN_BINARY_CASE(TanhBackward)
        KILN_BINARY_CASE(SigmoidBackward)
        default: break;
      }
      fail("binary: unsupported op");
    }
  }
#undef KILN_BINARY_CASE
#undef KILN_COMPARE_CASE
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_device(a.dtype(), "binary", [&](auto tag) { binary_typed<typename decltype(tag)::type>(op, out, a, b); });
}

}  // namespace kiln::cuda::kernels
