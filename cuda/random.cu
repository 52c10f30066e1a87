// CUDA random fills from Philox-4x32-10 (Note [Random numbers],
// core/random.h). CPU twin: core/cpu/random.cpp. Element i of a call uses the
// block at counter (i, offset) under key seed (bernoulli: word i % 4 of block
// i / 4), with the same arithmetic as the CPU, so uniform, bernoulli (dropout
// masks) and randint give the CPU's values bit for bit; normal agrees to the
// last bit or two of a double (the device's log/cos are within 1-2 ulp,
// glibc's correctly rounded), which float32 and narrower outputs almost never
// show.
//
// The double arithmetic uses explicitly rounded intrinsics (__dmul_rn, ...)
// so that nvcc cannot contract it into fused multiply-adds the CPU does not do.
#include "core/random.h"
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

enum Kind { kUniform, kNormal, kRandint };

struct Words {
  uint32_t w[4];
};

// core/random.h: philox4x32() on counter (i, offset), key seed.
__device__ __forceinline__ Words philox_words(uint64_t seed, uint64_t offset, uint64_t i) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(i), c1 = static_cast<uint32_t>(i >> 32);
  uint32_t c2 = static_cast<uint32_t>(offset), c3 = static_cast<uint32_t>(offset >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// core/random.h: philox_uniform(), a double in [0, 1) from 53 random bits.
__device__ __forceinline__ double uniform01(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ (static_cast<uint64_t>(b) >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

struct RandomParams {
  uint64_t seed, offset;
  double a, b;        // uniform: lo, hi; normal: mean, std
  int64_t lo;         // randint
  uint64_t range;     // randint: hi - lo
};

template <typename T, Kind K>
__global__ void random_kernel(T* out, int64_t n, RandomParams p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const Words w = philox_words(p.seed, p.offset, static_cast<uint64_t>(i));
    double v;
    if constexpr (K == kUniform) {
      v = __dadd_rn(p.a, __dmul_rn(__dsub_rn(p.b, p.a), uniform01(w.w[0], w.w[1])));
    } else if constexpr (K == kNormal) {
      const double u1 = __dsub_rn(1.0, uniform01(w.w[0], w.w[1]));  // (0, 1]
      const double u2 = uniform01(w.w[2], w.w[3]);
      const double r = sqrt(__dmul_rn(-2.0, log(u1)));
      v = __dadd_rn(p.a, __dmul_rn(__dmul_rn(p.b, r), cos(__dmul_rn(6.283185307179586, u2))));
    } else {
      const uint64_t r = ((static_cast<uint64_t>(w.w[0]) << 32) | w.w[1]) % p.range;
      v = static_cast<double>(p.lo + static_cast<int64_t>(r));
    }
    out[i] = convert<T, double>(v);
  }
}

template <Kind K>
void fill_random(const Tensor& out, const char* op, const RandomParams& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_device(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(n), kThreads, 0, stream_of(out), random_kernel<T, K>)(static_cast<T*>(out.raw_data()), n, p);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

// Note [Random numbers]: block j gives elements 4j .. 4j+3, each 1 when its
// word is below threshold (bernoulli_threshold(p), computed on the host).
template <typename T>
__global__ void bernoulli_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold) {
  const int64_t blocks = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks; j += step) {
    const Words w = philox_words(seed, offset, static_cast<uint64_t>(j));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * j + k;
      if (i < n) out[i] = convert<T, double>(w.w[k] < threshold ? 1.0 : 0.0);
    }
  }
}

}  // namespace

void uniform(const Tensor& out, double lo, double hi, PhiloxState st) {
  fill_random<kUniform>(out, "uniform", {st.seed, st.offset, lo, hi, 0, 0});
}

void normal(const Tensor& out, double mean, double std, PhiloxState st) {
  fill_random<kNormal>(out, "normal", {st.seed, st.offset, mean, std, 0, 0});
}

void bernoulli(const Tensor& out, double p, PhiloxState st) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const uint64_t threshold = bernoulli_threshold(p);
  const int64_t blocks = (n + 3) / 4;
  dispatch_device(out.dtype(), "bernoulli", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(blocks), kThreads, 0, stream_of(out), bernoulli_kernel<T>)(static_cast<T*>(out.raw_data()), n, st.seed,
                                                                            st.offset, threshold);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st) {
  fill_random<kRandint>(out, "randint", {st.seed, st.offset, 0.0, 0.0, lo, static_cast<uint64_t>(hi - lo)});
}

}  // namespace kiln::cuda::kernels
