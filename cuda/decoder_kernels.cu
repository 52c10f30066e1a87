// CUDA bodies of the decoder ops (ops/decoder_ops.h; contracts in
// core/backend.h): RMS norm, rotary position embedding and the gated
// activations, forward and backward. CPU twin: core/cpu/decoder_kernels.cpp
// (same formulas; the activations' are core/activation_math.h's, shared).
//
// RMS norm is a row kernel (one block per row, cuda/row_kernels.cuh); its
// weight gradient is summed, as on the CPU, over fixed blocks of 64 rows
// whose partials are then added in block order: no atomics. Rotary runs one
// thread per (row, head, pair of rotated elements); the gated activations
// run on the elementwise engine (map_kernel, cuda/device_utils.cuh).
#include "core/activation_math.h"
#include "cuda/row_kernels.cuh"

namespace kiln::cuda::kernels {
namespace {

// x * rstd rounded to T (transformers' .to(input_dtype)), back in the accumulation type.
template <typename T, typename A>
__device__ __forceinline__ A normed(T x, A rs) { return to_acc(from_acc<T>(to_acc(x) * rs)); }

template <typename T, typename S>
__global__ void rms_norm_kernel(T* y, S* rstd, const T* x, const T* w, int64_t C, double eps) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T* yr = y + r * C;
  A ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A v = to_acc(xr[c]);
    ss += v * v;
  }
  ss = block_all_reduce(ss, SumOp{}) / static_cast<A>(C);
  const A rs = A(1) / m_sqrt(ss + static_cast<A>(eps));
  if (threadIdx.x == 0) rstd[r] = static_cast<S>(rs);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A h = normed(xr[c], rs);
    yr[c] = from_acc<T>(w ? h * to_acc(w[c]) : h);
  }
}

template <typename T, typename S>
__global__ void rms_norm_backward_dx_kernel(T* dx, const T* dy, const T* x, const S* rstd, const T* w, int64_t C) {
  using A = acc_t<T>;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  const A rs = static_cast<A>(rstd[blockIdx.x]);
  A dot = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += to_acc(dy[base + c]) * (w ? to_acc(w[c]) : A(1)) * normed(x[base + c], rs);
  dot = block_all_reduce(dot, SumOp{});
  const A inv_c = A(1) / static_cast<A>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A g = to_acc(dy[base + c]) * (w ? to_acc(w[c]) : A(1));
    dx[base + c] = from_acc<T>(rs * (g - normed(x[base + c], rs) * (dot * inv_c)));
  }
}

// Thread (column c, row block y) sums rows [y*rows, (y+1)*rows) into partials.
template <typename T, typename S>
__global__ void rms_norm_backward_dw_kernel(acc_t<T>* part, const T* dy, const T* x, const S* rstd, int64_t R,
                                            int64_t C, int64_t rows) {
  using A = acc_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows, r1 = r0 + rows < R ? r0 + rows : R;
  A acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += to_acc(dy[r * C + c]) * normed(x[r * C + c], static_cast<A>(rstd[r]));
  part[blockIdx.y * C + c] = acc;
}

template <typename T>
__global__ void rms_norm_backward_dw_final_kernel(T* dw, const acc_t<T>* part, int64_t blocks, int64_t C) {
  using A = acc_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  A s = 0;
  for (int64_t k = 0; k < blocks; ++k) s += part[k * C + c];
  dw[c] = from_acc<T>(s);
}

// x (B, T, heads * D) with element strides (xs0, xs1, xs2); y contiguous.
template <typename T>
__global__ void rotary_kernel(T* y, const T* x, int64_t xs0, int64_t xs1, int64_t xs2, const T* cos, const T* sin,
                              int64_t Tn, int64_t heads, int64_t D, int64_t total, bool transpose) {
  using A = acc_t<T>;
  const int64_t half = D / 2, W = heads * D;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx % half, h = (idx / half) % heads, row = idx / (half * heads);
    const int64_t b = row / Tn, t = row % Tn;
    const int64_t j1 = h * D + i, j2 = j1 + half;
    const T* xr = x + b * xs0 + t * xs1;
    const A x1 = to_acc(xr[j1 * xs2]), x2 = to_acc(xr[j2 * xs2]);
    const A c1 = to_acc(cos[t * D + i]), c2 = to_acc(cos[t * D + i + half]);
    const A s1 = to_acc(sin[t * D + i]), s2 = to_acc(sin[t * D + i + half]);
    T* yr = y + row * W;
    if (transpose) {
      yr[j1] = from_acc<T>(x1 * c1 + x2 * s2);
      yr[j2] = from_acc<T>(x2 * c2 - x1 * s1);
    } else {
      yr[j1] = from_acc<T>(x1 * c1 - x2 * s1);
      yr[j2] = from_acc<T>(x2 * c2 + x1 * s2);
    }
  }
}

template <GatedAct G, typename A>
__device__ __forceinline__ A act_value(A x) {
  if constexpr (G == GatedAct::Silu) return act::silu<DeviceMath>(x);
  else if constexpr (G == GatedAct::Gelu) return act::gelu<DeviceMath>(x);
  else return act::gelu_tanh<DeviceMath>(x);
}
template <GatedAct G, typename A>
__device__ __forceinline__ A act_grad(A x) {
  if constexpr (G == GatedAct::Silu) return act::silu_grad<DeviceMath>(x);
  else if constexpr (G == GatedAct::Gelu) return act::gelu_grad<DeviceMath>(x);
  else return act::gelu_tanh_grad<DeviceMath>(x);
}

template <typename T, GatedAct G>
struct GatedF {  // act(a) * b
  __device__ __forceinline__ T operator()(T a, T b) const { return from_acc<T>(act_value<G>(to_acc(a)) * to_acc(b)); }
};
template <typename T, GatedAct G>
struct GatedDaF {  // dy * b * act'(a)
  __device__ __forceinline__ T operator()(T dy, T a, T b) const {
    return from_acc<T>(to_acc(dy) * to_acc(b) * act_grad<G>(to_acc(a)));
  }
};
template <typename T, GatedAct G>
struct GatedDbF {  // dy * act(a)
  __device__ __forceinline__ T operator()(T dy, T a) const { return from_acc<T>(to_acc(dy) * act_value<G>(to_acc(a))); }
};

template <typename F>
void dispatch_gated(GatedAct act, F&& f) {
  switch (act) {
    case GatedAct::Silu: return f(std::integral_constant<GatedAct, GatedAct::Silu>{});
    case GatedAct::Gelu: return f(std::integral_constant<GatedAct, GatedAct::Gelu>{});
    case GatedAct::GeluTanh: return f(std::integral_constant<GatedAct, GatedAct::GeluTanh>{});
  }
  fail("gated_activation: unknown activation");
}

}  // namespace

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  dispatch_device_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream_of(y), rms_norm_kernel<T, S>)(
        ptr<T>(y), ptr<S>(rstd), ptr<T>(x), opt_ptr<T>(weight), C, eps);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                       const Tensor& weight) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  const cudaStream_t stream = stream_of(dx);
  dispatch_device_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using A = acc_t<T>;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream, rms_norm_backward_dx_kernel<T, S>)(
        ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<S>(rstd), opt_ptr<T>(weight), C);
    KILN_CUDA_CHECK_LAUNCH();
    if (!dweight.defined()) return;
    // Row blocks of 64 as the CPU twin (more when that would exceed the grid's y limit).
    const int64_t rows = std::max<int64_t>(64, (R + 65534) / 65535);
    const int64_t blocks = (R + rows - 1) / rows;
    const DType acc_dtype = std::is_same_v<A, double> ? DType::Float64 : DType::Float32;
    Tensor part = empty_tensor({blocks, C}, acc_dtype, x.device());
    const unsigned bx = static_cast<unsigned>((C + kThreads - 1) / kThreads);
    KILN_LAUNCH(dim3(bx, static_cast<unsigned>(blocks)), kThreads, 0, stream, rms_norm_backward_dw_kernel<T, S>)(
        ptr<A>(part), ptr<T>(dy), ptr<T>(x), ptr<S>(rstd), R, C, rows);
    KILN_CUDA_CHECK_LAUNCH();
    KILN_LAUNCH(bx, kThreads, 0, stream, rms_norm_backward_dw_final_kernel<T>)(ptr<T>(dweight), ptr<A>(part), blocks,
                                                                              C);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads,
                      bool transpose) {
  const int64_t B = x.size(0), Tn = x.size(1), D = x.size(2) / heads;
  const int64_t total = B * Tn * heads * (D / 2);
  if (total == 0) return;
  dispatch_device_floating(x.dtype(), "rotary_embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream_of(y), rotary_kernel<T>)(
        ptr<T>(y), ptr<T>(x), x.stride(0), x.stride(1), x.stride(2), ptr<T>(cos), ptr<T>(sin), Tn, heads, D, total,
        transpose);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void gated_activation(const Tensor& out, const Tensor& a, const Tensor& b, GatedAct act) {
  dispatch_device_floating(a.dtype(), "gated_activation", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_gated(act, [&](auto g) { map_kernel<T, T, T>({&out, &a, &b}, GatedF<T, decltype(g)::value>{}); });
  });
}

void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a, const Tensor& b,
                               GatedAct act) {
  dispatch_device_floating(a.dtype(), "gated_activation_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_gated(act, [&](auto g) {
      map_kernel<T, T, T, T>({&da, &dy, &a, &b}, GatedDaF<T, decltype(g)::value>{});
      map_kernel<T, T, T>({&db, &dy, &a}, GatedDbF<T, decltype(g)::value>{});
    });
  });
}

}  // namespace kiln::cuda::kernels
