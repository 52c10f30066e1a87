// Branch-free float32 exp, tanh and erf that the compiler can vectorise (glibc's
// expf/tanhf/erff are scalar calls without -ffast-math, which kiln never uses).
// float64 keeps std:: functions. Accuracy, checked against std:: in
// tests/test_vec_math.cpp: exp within 2 ulp; tanh within 3e-7 absolute and
// 2e-6 relative; erf within 6e-7 absolute (Abramowitz & Stegun 7.1.26, the
// formula PyTorch's vectorised CPU erf uses too).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::cpu {

inline float exp_f32(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2 / 2 (Cody-Waite split
  // of ln2); 2^n applied as two halves so subnormal results come out right.
  // The clamp sends NaN to the low bound (it fails both tests), so the int
  // conversion below never sees NaN (undefined behaviour, UBSan's
  // float-cast-overflow); the last line returns the NaN itself.
  const float xc = x > -103.972084f ? (x < 88.7228394f ? x : 88.7228394f) : -103.972084f;
  // round to nearest by the 1.5 * 2^23 trick: plain arithmetic, so it vectorises
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n1 = static_cast<int32_t>(n) / 2, n2 = static_cast<int32_t>(n) - n1;
  const int32_t e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &e1, 4);
  std::memcpy(&s2, &e2, 4);
  float y = p * s1 * s2;
  y = x > 88.7228394f ? INFINITY : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

inline float tanh_f32(float x) {
  const float a = std::fabs(x);
  // |x| < 0.625: x + x^3 P(x^2) (Cephes tanhf); otherwise 1 - 2 / (exp(2|x|) + 1)
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float big = 1.0f - 2.0f / (exp_f32(2.0f * (a < 15.0f ? a : 15.0f)) + 1.0f);
  const float signed_big = x < 0 ? -big : big;
  return a < 0.625f ? small : signed_big;
}

inline float erf_f32(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * exp_f32(-a * a);
  return x < 0 ? -y : y;
}

// Note [Eight-lane exp]: GCC does not vectorise a loop over exp_f32: with
// -ftrapping-math (the default, kept because kiln uses no fast-math flags) it
// may not turn the floating-point comparisons of the clamps into selects, so
// the loop keeps branches. exp_f32x8 is exp_f32 on eight lanes written with
// GCC/Clang vector extensions, where the comparisons are lane masks and the
// selects are blends: the same operations in the same order on each lane.
// Row kernels that are exp-bound (cross-entropy over the vocabulary, the
// attention softmax) call it on 8 elements at a time and exp_f32 on the tail.
using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));

inline f32x8 splat8(float v) { return f32x8{v, v, v, v, v, v, v, v}; }
inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }

inline f32x8 exp_f32x8(f32x8 x) {
  const f32x8 lo = splat8(-103.972084f), hi = splat8(88.7228394f);
  f32x8 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const f32x8 n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const f32x8 r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  f32x8 p = splat8(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32x8 ni = __builtin_convertvector(n, i32x8);
  const i32x8 n1 = ni / 2, n2 = ni - n1;
  const i32x8 e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
  f32x8 s1, s2;
  std::memcpy(&s1, &e1, sizeof s1);
  std::memcpy(&s2, &e2, sizeof s2);
  f32x8 y = p * s1 * s2;
  y = x > hi ? splat8(INFINITY) : y;
  y = x < lo ? splat8(0.0f) : y;
  return x != x ? x : y;
}

// Dispatch on the compute type: float gets the vectorisable versions.
template <typename A> inline A vexp(A x) { return std::exp(x); }
template <> inline float vexp<float>(float x) { return exp_f32(x); }
template <typename A> inline A vtanh(A x) { return std::tanh(x); }
template <> inline float vtanh<float>(float x) { return tanh_f32(x); }
template <typename A> inline A verf(A x) { return std::erf(x); }
template <> inline float verf<float>(float x) { return erf_f32(x); }

// The math policy of the shared activation formulas (core/activation_math.h).
struct VecMath {
  template <typename A> static A exp(A x) { return vexp(x); }
  template <typename A> static A erf(A x) { return verf(x); }
  template <typename A> static A tanh(A x) { return vtanh(x); }
};

}  // namespace kiln::cpu
