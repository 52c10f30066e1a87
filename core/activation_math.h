// The scalar formulas of kiln's activations and their derivatives, one copy
// shared by the CPU kernels (core/cpu/elementwise.cpp, core/cpu/decoder_kernels.cpp)
// and the CUDA ones (cuda/elementwise_unary.cu, cuda/elementwise_binary.cu,
// cuda/decoder_kernels.cu). Each is a template over the arithmetic type A
// (float or double; 16-bit floats compute in float) and a math policy M whose
// static M::exp, M::erf and M::tanh the device supplies: the CPU's
// vectorisable float32 versions (core/cpu/vec_math.h), the CUDA math library
// on the device. The expressions are written once so the elementwise ops
// (sigmoid, gelu, gelu(x, "tanh") and their backward helpers) and the fused
// gated activations (gated_activation, ops/decoder_ops.h) round alike.
// Internal: not installed.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::act {

inline constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluTanhCoeff = 0.044715;

// sigmoid(x) = 1 / (1 + exp(-x))
template <class M, class A> KILN_HOST_DEVICE inline A sigmoid(A x) { return A(1) / (A(1) + M::exp(-x)); }

// gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
template <class M, class A> KILN_HOST_DEVICE inline A gelu(A x) {
  return A(0.5) * x * (A(1) + M::erf(x * A(kSqrt1_2)));
}
// gelu'(x) = Phi(x) + x phi(x)
template <class M, class A> KILN_HOST_DEVICE inline A gelu_grad(A x) {
  const A cdf = A(0.5) * (A(1) + M::erf(x * A(kSqrt1_2)));
  const A pdf = A(kInvSqrt2Pi) * M::exp(A(-0.5) * x * x);
  return cdf + x * pdf;
}

// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class M, class A> KILN_HOST_DEVICE inline A gelu_tanh(A x) {
  return A(0.5) * x * (A(1) + M::tanh(A(kSqrt2OverPi) * (x + A(kGeluTanhCoeff) * x * x * x)));
}
// its derivative: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <class M, class A> KILN_HOST_DEVICE inline A gelu_tanh_grad(A x) {
  const A k = A(kSqrt2OverPi), c = A(kGeluTanhCoeff);
  const A t = M::tanh(k * (x + c * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x);
}

// silu(x) = x sigmoid(x); silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
template <class M, class A> KILN_HOST_DEVICE inline A silu(A x) { return x * sigmoid<M>(x); }
template <class M, class A> KILN_HOST_DEVICE inline A silu_grad(A x) {
  const A s = sigmoid<M>(x);
  return s * (A(1) + x * (A(1) - s));
}

}  // namespace kiln::act
