// Internal to the CUDA backend: what the row kernels (cuda/nn_kernels.cu,
// cuda/decoder_kernels.cu) share. One block per row; each thread walks the
// row with a block-sized stride and the block combines per-thread partials
// in a fixed tree (block_all_reduce), so results are reproducible run to run.
#pragma once

#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {

struct SumOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {  // std::max(a, b) of the CPU twin: b only when a < b
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a < b ? b : a; }
};

// All threads of the block get op over every thread's v (fixed order).
template <typename A, typename Op>
__device__ A block_all_reduce(A v, Op op) {
  __shared__ A shm[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  A r = shm[0];
  for (int w = 1; w < warps; ++w) r = op(r, shm[w]);
  __syncthreads();  // shm may be reused by the next call
  return r;
}

// Threads per row block for rows of C elements: 32 to 512, about 4 elements a thread.
inline int threads_for(int64_t C) {
  int t = 32;
  while (t < 512 && t * 4 < C) t *= 2;
  return t;
}

template <typename T>
const T* opt_ptr(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr; }
template <typename T>
T* ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

inline void check_rows(int64_t R) {
  KILN_CHECK(R < (int64_t{1} << 31), "CUDA row kernels take at most 2^31-1 rows, got ", R);
}

}  // namespace kiln::cuda::kernels
