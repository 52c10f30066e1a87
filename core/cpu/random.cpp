// CPU random fills from Philox (Note [Random numbers]): element i of a call
// uses the block at counter (i, offset), so values never depend on threads.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"
#include "core/random.h"

namespace kiln::cpu {
namespace {

template <typename F>
void fill_random(const Tensor& out, const char* op, F value_of) {
  dispatch_all(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double v = value_of(static_cast<uint64_t>(i));
        if constexpr (std::is_same_v<T, bool>) o[i] = v != 0.0;
        else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) o[i] = T(static_cast<float>(v));
        else o[i] = static_cast<T>(v);
      }
    });
  });
}

}  // namespace

void uniform(const Tensor& out, double lo, double hi, PhiloxState st) {
  fill_random(out, "uniform", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    return lo + (hi - lo) * philox_uniform(w[0], w[1]);
  });
}

void normal(const Tensor& out, double mean, double std, PhiloxState st) {
  fill_random(out, "normal", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    const double u1 = 1.0 - philox_uniform(w[0], w[1]);  // (0, 1]
    const double u2 = philox_uniform(w[2], w[3]);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

namespace {

// Philox-4x32-10 for the counters (j0 + l, offset), l < 8: the same
// arithmetic as philox4x32 (core/random.h), eight blocks at a time. Word k of
// block j0 + l lands in w[k][l].
#if defined(__AVX2__)
// 32x32 -> 64-bit products of the 8 lanes of a with m: low and high halves.
inline void mul_hi_lo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                         // lanes 0, 2, 4, 6 as 64-bit
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

void philox8_blocks(PhiloxState st, uint64_t j0, uint32_t (&w)[4][8]) {
  alignas(32) uint32_t lo_j[8], hi_j[8];
  for (int l = 0; l < 8; ++l) {
    const uint64_t j = j0 + static_cast<uint64_t>(l);
    lo_j[l] = static_cast<uint32_t>(j);
    hi_j[l] = static_cast<uint32_t>(j >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo_j));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi_j));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(st.offset)));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(st.offset >> 32)));
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(st.seed), k1 = static_cast<uint32_t>(st.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, m0, hi0, lo0);
    mul_hi_lo(c2, m1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[0]), c0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[1]), c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[2]), c2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[3]), c3);
}
#else
void philox8_blocks(PhiloxState st, uint64_t j0, uint32_t (&w)[4][8]) {
  for (int l = 0; l < 8; ++l) {
    const auto b = philox_words(st, j0 + static_cast<uint64_t>(l));
    for (int k = 0; k < 4; ++k) w[k][l] = b[k];
  }
}
#endif

// Note [Random numbers]: element i is word i % 4 of block i / 4, kept when
// below the threshold; 32 elements (8 blocks) at a time.
template <typename T>
void bernoulli_fill(T* o, int64_t n, double p, PhiloxState st) {
  const uint64_t threshold = bernoulli_threshold(p);
  auto put = [&](int64_t i, uint32_t word) {
    const bool one = word < threshold;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) o[i] = T(one ? 1.f : 0.f);
    else o[i] = one ? T(1) : T(0);
  };
  parallel_for(n, 16384, [&](int64_t b, int64_t e) {  // chunks start at multiples of 4
    int64_t i = b;
    for (; i < e && i % 4 != 0; ++i) put(i, bernoulli_word(st, static_cast<uint64_t>(i)));
    uint32_t w[4][8];
    for (; i + 32 <= e; i += 32) {
      philox8_blocks(st, static_cast<uint64_t>(i / 4), w);
      for (int l = 0; l < 8; ++l)
        for (int k = 0; k < 4; ++k) put(i + 4 * l + k, w[k][l]);
    }
    for (; i < e; ++i) put(i, bernoulli_word(st, static_cast<uint64_t>(i)));
  });
}

}  // namespace

void bernoulli(const Tensor& out, double p, PhiloxState st) {
  dispatch_all(out.dtype(), "bernoulli", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bernoulli_fill<T>(out.data_ptr<T>(), out.numel(), p, st);
  });
}

// Note [Keep masks as bytes]: loops over a bool keep mask read it through a
// uint8_t pointer (the same 0/1 bytes). GCC does not vectorize loads of
// bool; of uint8_t it does, and `k ? s : 0` then becomes a vector select.
const uint8_t* keep_bytes(const Tensor& keep) { return reinterpret_cast<const uint8_t*>(keep.data_ptr<bool>()); }

void masked_scale_add(const Tensor& out, const Tensor& x, const Tensor& keep, double scale, const Tensor& residual) {
  dispatch_floating(x.dtype(), "masked_scale_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const T* xp = x.data_ptr<T>();
    const uint8_t* kp = keep_bytes(keep);  // Note [Keep masks as bytes]
    const T* rp = residual.defined() ? residual.data_ptr<T>() : nullptr;
    T* o = out.data_ptr<T>();
    // the factor rounded to T first, as dropout() multiplies by keep * scale in T
    const A s = static_cast<A>(static_cast<T>(scale));
    parallel_for(x.numel(), 32768, [&](int64_t b, int64_t e) {
      if (rp) {
        for (int64_t i = b; i < e; ++i) {
          const T dropped = static_cast<T>(static_cast<A>(xp[i]) * (kp[i] ? s : A(0)));
          o[i] = static_cast<T>(static_cast<A>(dropped) + static_cast<A>(rp[i]));
        }
      } else {
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(static_cast<A>(xp[i]) * (kp[i] ? s : A(0)));
      }
    });
  });
}

void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st) {
  const uint64_t range = static_cast<uint64_t>(hi - lo);
  fill_random(out, "randint", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    const uint64_t r = ((static_cast<uint64_t>(w[0]) << 32) | w[1]) % range;
    return static_cast<double>(lo + static_cast<int64_t>(r));
  });
}

}  // namespace kiln::cpu
