// CUDA unary elementwise ops. CPU twin: unary() in core/cpu/elementwise.cpp.
// Floats compute in float (16-bit storage too) or double with the CUDA math
// library's exp/log/tanh/erf (correctly rounded or within 2 ulp); the CPU
// uses its own vectorisable float32 exp/tanh/erf (core/cpu/vec_math.h, erf
// within 6e-7), so float32 results agree to about 1e-6, not bit for bit.
#include "core/activation_math.h"
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

template <UnaryOp OP, typename A>
__device__ __forceinline__ A unary_math(A x) {
  if constexpr (OP == UnaryOp::Neg) return static_cast<A>(-x);
  else if constexpr (OP == UnaryOp::Abs) return x < A(0) ? static_cast<A>(-x) : x;
  else if constexpr (OP == UnaryOp::Relu) return x > A(0) ? x : A(0);
  else if constexpr (OP == UnaryOp::Exp) return m_exp(x);
  else if constexpr (OP == UnaryOp::Log) return m_log(x);
  else if constexpr (OP == UnaryOp::Sqrt) return m_sqrt(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return A(1) / m_sqrt(x);
  else if constexpr (OP == UnaryOp::Tanh) return m_tanh(x);
  else if constexpr (OP == UnaryOp::Erf) return m_erf(x);
  else if constexpr (OP == UnaryOp::Sigmoid) return act::sigmoid<DeviceMath>(x);
  else if constexpr (OP == UnaryOp::Gelu) return act::gelu<DeviceMath>(x);
  else if constexpr (OP == UnaryOp::GeluTanh) return act::gelu_tanh<DeviceMath>(x);
  else return x;  // not reached: the host switch below picks the op
}

template <typename T, UnaryOp OP>
struct UnaryF {
  __device__ __forceinline__ T operator()(T x) const { return from_acc<T>(unary_math<OP>(to_acc(x))); }
};

template <typename T>
struct LogicalNotF {
  __device__ __forceinline__ bool operator()(T x) const { return !convert<bool, T>(x); }
};

template <typename T>
void unary_typed(UnaryOp op, const Tensor& out, const Tensor& in) {
#define KILN_UNARY_CASE(NAME) \
  case UnaryOp::NAME: return map_kernel<T, T>({&out, &in}, UnaryF<T, UnaryOp::NAME>{});
  if constexpr (std::is_same_v<T, bool>) {
    fail("unary ", static_cast<int>(op), ": not defined for bool");
  } else if constexpr (std::is_integral_v<T>) {
    switch (op) {
      KILN_UNARY_CASE(Neg)
      KILN_UNARY_CASE(Abs)
      KILN_UNARY_CASE(Relu)
      default: fail("unary op needs a floating-point tensor, got ", dtype_name(in.dtype()));
    }
  } else {
    switch (op) {
      KILN_UNARY_CASE(Neg)
      KILN_UNARY_CASE(Abs)
      KILN_UNARY_CASE(Relu)
      KILN_UNARY_CASE(Exp)
      KILN_UNARY_CASE(Log)
      KILN_UNARY_CASE(Sqrt)
      KILN_UNARY_CASE(Rsqrt)
      KILN_UNARY_CASE(Tanh)
      KILN_UNARY_CASE(Erf)
      KILN_UNARY_CASE(Sigmoid)
      KILN_UNARY_CASE(Gelu)
      KILN_UNARY_CASE(GeluTanh)
      case UnaryOp::LogicalNot: break;
    }
    fail("unary: unsupported op");
  }
#undef KILN_UNARY_CASE
}

}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  if (op == UnaryOp::LogicalNot) {
    dispatch_device(in.dtype(), "logical_not", [&](auto tag) {
      using T = typename decltype(tag)::type;
      map_kernel<bool, T>({&out, &in}, LogicalNotF<T>{});
    });
    return;
  }
  dispatch_device(in.dtype(), "unary", [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, out, in); });
}

}  // namespace kiln::cuda::kernels
