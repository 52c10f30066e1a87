// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h):
// __half as IEEE binary16 storage with the conversions kiln's kernels call.
// Round to nearest even through kiln::Half (core/dtype.h), the same rounding
// the CUDA intrinsics document; arithmetic happens in float, as in kiln.
#pragma once

#include <cstdint>

#include "core/dtype.h"

struct __half {
  uint16_t __x;
};

inline float __half2float(__half h) { return kiln::Half::to_float(h.__x); }
inline __half __float2half_rn(float f) { return __half{kiln::Half::from_float(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
