// CUDA reductions: sum, max, min, argmax over any set of dims. CPU twin:
// core/cpu/reduce.cpp; both take their layout from plan_reduce
// (core/reduce_plan.h):
//  - columns (a contiguous input whose reduced dims lead, e.g. a bias
//    gradient): out[k] = sum_r in[r, k], one thread per column k, the rows
//    split into S fixed chunks when K alone cannot fill the GPU;
//  - rows: the kept dims permuted first (one copy when that is not already
//    contiguous), and each output reduces one contiguous row of R
//    elements: a block per (row, chunk), S chunks when rows are few and long,
//    and a second pass over the S partials.
// Sums accumulate in float (16-bit floats and float32), double or int64;
// partials combine in a fixed tree, so results are the same on every run
// (they differ from the CPU's 8-lane order by rounding only). max/min
// propagate NaN; argmax returns the first index of the maximum (first NaN).
#include <limits>

#include "core/reduce_plan.h"
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

template <typename T, ReduceOp OP>
using value_t = std::conditional_t<OP == ReduceOp::Sum && std::is_integral_v<T>, int64_t, acc_t<T>>;

template <typename V>
struct Part {
  V v;
  int64_t i;  // index of v (max/min/argmax); -1: empty
};

template <ReduceOp OP, typename V>
__device__ __forceinline__ Part<V> combine(Part<V> x, Part<V> y) {
  if constexpr (OP == ReduceOp::Sum) {
    return {static_cast<V>(x.v + y.v), 0};
  } else {
    if (x.i < 0) return y;
    if (y.i < 0) return x;
    const bool xn = x.v != x.v, yn = y.v != y.v;  // NaN (never for integers)
    if (xn || yn) return (xn && (!yn || x.i < y.i)) ? x : y;
    if (x.v == y.v) return x.i < y.i ? x : y;
    if constexpr (OP == ReduceOp::Min) return y.v < x.v ? y : x;
    else return y.v > x.v ? y : x;
  }
}

template <ReduceOp OP, typename V>
__device__ __forceinline__ Part<V> identity() {
  return {V(0), OP == ReduceOp::Sum ? 0 : -1};
}

// Combines one Part per thread over the block in a fixed tree; thread 0 gets the result.
template <ReduceOp OP, typename V>
__device__ Part<V> block_combine(Part<V> p) {
  __shared__ V sv[32];
  __shared__ int64_t si[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Part<V> q{__shfl_down_sync(0xffffffffu, p.v, o), __shfl_down_sync(0xffffffffu, p.i, o)};
    if (lane + o < 32) p = combine<OP>(p, q);
  }
  if (lane == 0) { sv[warp] = p.v; si[warp] = p.i; }
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  if (warp == 0) {
    p = lane < warps ? Part<V>{sv[lane], si[lane]} : identity<OP, V>();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      Part<V> q{__shfl_down_sync(0xffffffffu, p.v, o), __shfl_down_sync(0xffffffffu, p.i, o)};
      if (lane + o < 32) p = combine<OP>(p, q);
    }
  }
  return p;
}

template <typename T, ReduceOp OP, typename V>
__device__ __forceinline__ void store_result(void* out, int64_t k, const Part<V>& p) {
  if constexpr (OP == ReduceOp::Argmax) static_cast<int64_t*>(out)[k] = p.i;
  else static_cast<T*>(out)[k] = from_acc<T>(p.v);
}

// Block (k, s) reduces in[k, s*chunk : (s+1)*chunk]; S == 1 writes out[k].
template <typename T, ReduceOp OP>
__global__ void row_reduce_kernel(const T* in, int64_t R, int64_t chunk, int S, Part<value_t<T, OP>>* partials,
                                  void* out) {
  using V = value_t<T, OP>;
  const int64_t k = blockIdx.x / S, s = blockIdx.x % S;
  const int64_t begin = s * chunk, end = begin + chunk < R ? begin + chunk : R;
  const T* row = in + k * R;
  Part<V> p = identity<OP, V>();
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x)
    p = combine<OP>(p, Part<V>{static_cast<V>(to_acc(row[r])), r});
  p = block_combine<OP>(p);
  if (threadIdx.x != 0) return;
  if (S == 1) store_result<T, OP>(out, k, p);
  else partials[k * S + s] = p;
}

// Second pass: out[k] = combine of partials[k, 0:S] (block per k).
template <typename T, ReduceOp OP>
__global__ void partials_reduce_kernel(const Part<value_t<T, OP>>* partials, int S, void* out) {
  using V = value_t<T, OP>;
  const int64_t k = blockIdx.x;
  Part<V> p = identity<OP, V>();
  for (int s = threadIdx.x; s < S; s += blockDim.x) p = combine<OP>(p, partials[k * S + s]);
  p = block_combine<OP>(p);
  if (threadIdx.x == 0) store_result<T, OP>(out, k, p);
}

// Column sums: thread (k, s) sums rows [s*chunk, (s+1)*chunk) of column k.
template <typename T, typename V>
__global__ void column_sum_kernel(const T* in, int64_t R, int64_t K, int64_t chunk, int S, V* partials, T* out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= K) return;
  const int64_t s = blockIdx.y;
  const int64_t begin = s * chunk, end = begin + chunk < R ? begin + chunk : R;
  V acc = 0;
  for (int64_t r = begin; r < end; ++r) acc += static_cast<V>(to_acc(in[r * K + k]));
  if (S == 1) out[k] = from_acc<T>(acc);
  else partials[s * K + k] = acc;
}

template <typename T, typename V>
__global__ void column_partials_kernel(const V* partials, int64_t K, int S, T* out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= K) return;
  V acc = 0;
  for (int s = 0; s < S; ++s) acc += partials[s * K + k];
  out[k] = from_acc<T>(acc);
}

// A scratch buffer of `bytes` on `device`, from the caching allocator.
Tensor scratch(size_t bytes, Device device) {
  return empty_tensor({static_cast<int64_t>((bytes + 7) / 8)}, DType::Int64, device);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, ReduceOp OP>
void row_reduce(const Tensor& out, const Tensor& src, int64_t K, int64_t R) {
  using V = value_t<T, OP>;
  const int sms = detail::sm_count(out.device().index);
  int threads = 32;
  while (threads < 256 && threads < R) threads *= 2;
  int64_t S = 1;
  if (R > 8192 && K < 4 * sms) S = std::min<int64_t>(ceil_div(4 * sms, K), ceil_div(R, 4096));
  const int64_t chunk = ceil_div(R, S);
  KILN_CHECK(K * S < (int64_t{1} << 31), "reduce: too many rows (", K, ") for one launch");
  const cudaStream_t stream = stream_of(out);
  Tensor buf;
  Part<V>* partials = nullptr;
  if (S > 1) {
    buf = scratch(static_cast<size_t>(K * S) * sizeof(Part<V>), out.device());
    partials = static_cast<Part<V>*>(buf.raw_data());
  }
  KILN_LAUNCH(static_cast<unsigned>(K * S), threads, 0, stream, row_reduce_kernel<T, OP>)(
      static_cast<const T*>(src.raw_data()), R, chunk, static_cast<int>(S), partials, out.raw_data());
  KILN_CUDA_CHECK_LAUNCH();
  if (S > 1) {
    KILN_LAUNCH(static_cast<unsigned>(K), 32, 0, stream, partials_reduce_kernel<T, OP>)(partials, static_cast<int>(S),
                                                                                out.raw_data());
    KILN_CUDA_CHECK_LAUNCH();
  }
}

template <typename T>
void column_sum(const Tensor& out, const Tensor& in, int64_t R, int64_t K) {
  using V = value_t<T, ReduceOp::Sum>;
  const int sms = detail::sm_count(out.device().index);
  const int64_t bx = ceil_div(K, kThreads);
  const int64_t S = std::clamp<int64_t>(ceil_div(4 * sms, bx), 1, std::min<int64_t>(ceil_div(R, 64), 65535));
  const int64_t chunk = ceil_div(R, S);
  const cudaStream_t stream = stream_of(out);
  Tensor buf;
  V* partials = nullptr;
  if (S > 1) {
    buf = scratch(static_cast<size_t>(S * K) * sizeof(V), out.device());
    partials = static_cast<V*>(buf.raw_data());
  }
  T* o = static_cast<T*>(out.raw_data());
  KILN_LAUNCH(dim3(static_cast<unsigned>(bx), static_cast<unsigned>(S)), kThreads, 0, stream, column_sum_kernel<T, V>)(
      static_cast<const T*>(in.raw_data()), R, K, chunk, static_cast<int>(S), partials, o);
  KILN_CUDA_CHECK_LAUNCH();
  if (S > 1) {
    KILN_LAUNCH(static_cast<unsigned>(bx), kThreads, 0, stream, column_partials_kernel<T, V>)(partials, K,
                                                                                     static_cast<int>(S), o);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) {
  KILN_CHECK(in.dtype() != DType::Bool, "reduce: bool tensors must be cast first");
  const ReducePlan plan = plan_reduce(op, out, in, dims);
  if (plan.layout == ReducePlan::Layout::Empty) return fill(out, 0.0);
  if (plan.layout == ReducePlan::Layout::Columns) {
    dispatch_device(in.dtype(), "sum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) column_sum<T>(out, in, plan.R, plan.K);
    });
    return;
  }
  const Tensor src = contiguous_rows(plan, [](const Tensor& d, const Tensor& s) { copy(d, s); });
  const int64_t K = plan.K, R = plan.R;
  dispatch_device(in.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      switch (op) {
        case ReduceOp::Sum: return row_reduce<T, ReduceOp::Sum>(out, src, K, R);
        case ReduceOp::Max: return row_reduce<T, ReduceOp::Max>(out, src, K, R);
        case ReduceOp::Min: return row_reduce<T, ReduceOp::Min>(out, src, K, R);
        case ReduceOp::Argmax: return row_reduce<T, ReduceOp::Argmax>(out, src, K, R);
      }
    }
  });
}

}  // namespace kiln::cuda::kernels
