// Internal to the CUDA backend: what every .cu kernel file shares.
//  - device element types: DType -> float, double, __half, __nv_bfloat16,
//    int32_t, int64_t, bool (same bytes as kiln's host types), and
//    dispatch_device(dtype, op, f) calling f(TypeTag<T>{});
//  - Note [Low-precision compute] on the device: acc_t<T> is the arithmetic
//    type, to_acc() widens, convert<To>() rounds once on store (round to
//    nearest even, as kiln::Half / kiln::BFloat16 do on the host);
//  - the elementwise engine map_kernel(): operands of one shape (broadcast
//    inputs with stride 0) are coalesced by the CPU's make_loop()
//    (core/cpu/loops.h); all-contiguous operands take a vectorised kernel
//    (4 elements per thread through aligned vector loads), anything else a
//    strided kernel that turns each linear index into byte offsets;
//  - warp and block reductions in a fixed tree, so results never depend on
//    timing (kiln's deterministic-results rule holds on the device too).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <type_traits>

#include "core/cpu/loops.h"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"

namespace kiln::cuda {

// ---- element types ---------------------------------------------------------
template <typename T> inline constexpr bool is_low_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T> struct AccType { using type = T; };
template <> struct AccType<__half> { using type = float; };
template <> struct AccType<__nv_bfloat16> { using type = float; };
template <typename T> using acc_t = typename AccType<T>::type;

template <typename F>
decltype(auto) dispatch_device(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Float16: return f(TypeTag<__half>{});
    case DType::BFloat16: return f(TypeTag<__nv_bfloat16>{});
    case DType::Int32: return f(TypeTag<int32_t>{});
    case DType::Int64: return f(TypeTag<int64_t>{});
    case DType::Bool: return f(TypeTag<bool>{});
  }
  fail(op, ": unknown dtype");
}

template <typename F>
decltype(auto) dispatch_device_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Float16: return f(TypeTag<__half>{});
    case DType::BFloat16: return f(TypeTag<__nv_bfloat16>{});
    default: break;
  }
  fail(op, ": expected a floating-point tensor, got ", dtype_name(t));
}

template <typename T> __device__ __forceinline__ acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

template <typename T> __device__ __forceinline__ T low_from_float(float f) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(f);
  else return __float2bfloat16_rn(f);
}

// Converts between any two element types as core/cpu/elementwise.cpp's
// convert() does (bool: nonzero -> true; 16-bit floats through float).
template <typename To, typename From> __device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<To, bool>) return to_acc(v) != acc_t<From>(0);
  else if constexpr (is_low_v<To>) return low_from_float<To>(static_cast<float>(to_acc(v)));
  else return static_cast<To>(to_acc(v));
}

// Stores an arithmetic-type value as T (rounds once for 16-bit floats).
template <typename T, typename A> __device__ __forceinline__ T from_acc(A v) {
  if constexpr (is_low_v<T>) return low_from_float<T>(static_cast<float>(v));
  else return static_cast<T>(v);
}

// ---- math in float or double (no fast-math intrinsics) -----------------------
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
// The math policy of the shared activation formulas (core/activation_math.h).
struct DeviceMath {
  template <typename A> __device__ static A exp(A x) { return m_exp(x); }
  template <typename A> __device__ static A erf(A x) { return m_erf(x); }
  template <typename A> __device__ static A tanh(A x) { return m_tanh(x); }
};

// ---- launch helpers ------------------------------------------------------------
inline constexpr int kThreads = 256;

inline unsigned grid_for(int64_t work_items, int per_block = kThreads) {
  const int64_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
}

inline cudaStream_t stream_of(const Tensor& t) { return detail::current_cuda_stream(t.device().index); }

// ---- the elementwise engine --------------------------------------------------
// Coalesced strides of N operands (dim 0 innermost, byte strides), passed to
// kernels by value.
template <int N>
struct StridedMeta {
  int ndim;
  int64_t sizes[cpu::kMaxLoopDims];
  int64_t strides[N][cpu::kMaxLoopDims];
  char* base[N];

  __device__ __forceinline__ void pointers(int64_t i, char* (&p)[N]) const {
    if (ndim == 1) {
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] = base[k] + i * strides[k][0];
      return;
    }
    int64_t off[N];
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t idx = i % sizes[d];
      i /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = base[k] + off[k];
  }
};

template <typename T, int V> struct alignas(sizeof(T) * V) VecT { T v[V]; };

template <int V, typename T> __device__ __forceinline__ VecT<T, V> load_vec(const T* p) {
  return *reinterpret_cast<const VecT<T, V>*>(p);
}

template <int V, typename TOut, typename F, typename... VIn>
__device__ __forceinline__ void apply_vec(TOut* out, const F& f, const VIn&... in) {
  VecT<TOut, V> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.v[k] = f(in.v[k]...);
  *reinterpret_cast<VecT<TOut, V>*>(out) = o;
}

// out[i] = f(in[i]...), all contiguous; V elements per thread and step.
template <int V, typename F, typename TOut, typename... TIn>
__global__ void contiguous_map_kernel(int64_t n, F f, TOut* out, const TIn*... in) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += step) {
    if (i + V <= n) {
      apply_vec<V>(out + i, f, load_vec<V>(in + i)...);
    } else {
      for (int64_t j = i; j < n; ++j) out[j] = f(in[j]...);
    }
  }
}

template <typename F, typename TOut, typename... TIn, size_t... I>
__device__ __forceinline__ void strided_apply(char* const* p, const F& f, std::index_sequence<I...>) {
  *reinterpret_cast<TOut*>(p[0]) = f(*reinterpret_cast<const TIn*>(p[I + 1])...);
}

template <typename F, typename TOut, typename... TIn>
__global__ void strided_map_kernel(int64_t n, F f, StridedMeta<1 + sizeof...(TIn)> m) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    char* p[1 + sizeof...(TIn)];
    m.pointers(i, p);
    strided_apply<F, TOut, TIn...>(p, f, std::index_sequence_for<TIn...>{});
  }
}

template <int V, typename TOut, typename... TIn, typename F, size_t... I>
void launch_contiguous(int64_t n, F f, const std::array<char*, 1 + sizeof...(TIn)>& b, cudaStream_t stream,
                       std::index_sequence<I...>) {
  KILN_LAUNCH(grid_for(n, kThreads * V), kThreads, 0, stream, contiguous_map_kernel<V, F, TOut, TIn...>)(
      n, f, reinterpret_cast<TOut*>(b[0]), reinterpret_cast<const TIn*>(b[I + 1])...);
  KILN_CUDA_CHECK_LAUNCH();
}

// Runs out = f(in...) elementwise over operands of one shape (ops[0] is out).
// TOut/TIn are the device element types of the operands, in order.
template <typename TOut, typename... TIn, typename F>
void map_kernel(const std::array<const Tensor*, 1 + sizeof...(TIn)>& ops, F f) {
  constexpr int N = 1 + sizeof...(TIn);
  const Tensor& out = *ops[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  const cpu::StridedLoop<N> L = cpu::make_loop<N>(ops);
  const cudaStream_t stream = stream_of(out);
  constexpr int64_t sizes[N] = {static_cast<int64_t>(sizeof(TOut)), static_cast<int64_t>(sizeof(TIn))...};
  constexpr int kVec = 4;
  bool contiguous = L.ndim == 1, aligned = true;
  for (int k = 0; k < N; ++k) {
    contiguous = contiguous && L.strides[k][0] == sizes[k];
    aligned = aligned && reinterpret_cast<uintptr_t>(L.base[k]) % static_cast<uintptr_t>(sizes[k] * kVec) == 0;
  }
  if (contiguous && aligned) {
    std::array<char*, N> bases{};
    for (int k = 0; k < N; ++k) bases[k] = L.base[k];
    launch_contiguous<kVec, TOut, TIn...>(n, f, bases, stream, std::index_sequence_for<TIn...>{});
    return;
  }
  StridedMeta<N> m{};
  m.ndim = L.ndim;
  for (int d = 0; d < L.ndim; ++d) m.sizes[d] = L.sizes[d];
  for (int k = 0; k < N; ++k) {
    m.base[k] = L.base[k];
    for (int d = 0; d < L.ndim; ++d) m.strides[k][d] = L.strides[k][d];
  }
  KILN_LAUNCH(grid_for(n), kThreads, 0, stream, strided_map_kernel<F, TOut, TIn...>)(n, f, m);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda
