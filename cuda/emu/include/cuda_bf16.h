// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h):
// __nv_bfloat16 as the top 16 bits of a float32 with the conversions kiln's
// kernels call (round to nearest even through kiln::BFloat16, core/dtype.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"

struct __nv_bfloat16 {
  uint16_t __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  kiln::BFloat16 b;
  b.bits = h.__x;
  return static_cast<float>(b);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{kiln::BFloat16::from_float(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
