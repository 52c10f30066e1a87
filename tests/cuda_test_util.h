// Shared by the CUDA-vs-CPU tests (test_cuda_ops.cpp, test_cuda_fused.cpp,
// test_cuda_sdpa.cpp): the skip when there is no GPU, the device, and the
// measure of agreement with the CPU oracle, the normalised error
// ||cuda - cpu||_2 / ||cpu||_2, against a per-dtype threshold.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/cuda.h"
#include "kiln.h"

// Skips the test when there is no GPU (no device, no driver) or kiln was
// built without CUDA, so CI stays green.
#define KILN_REQUIRE_CUDA()                                                               \
  do {                                                                                    \
    if (!::kiln::cuda::is_available())                                                    \
      GTEST_SKIP() << (::kiln::cuda_built() ? "no CUDA device" : "built without CUDA");   \
  } while (0)

namespace kiln::testing {

inline const Device kGpu(DeviceType::CUDA, 0);

// Normalised-error thresholds. float32: the CPU's vectorised exp/tanh/erf are
// within ~1e-6 of CUDA's; 16-bit: a few outputs may round the other way.
inline double tolerance(DType t) {
  switch (t) {
    case DType::Float64: return 1e-10;
    case DType::Float32: return 3e-5;
    case DType::Float16: return 1e-2;
    case DType::BFloat16: return 5e-2;
    default: return 0.0;  // integers and bool: exact
  }
}

// ||got - want||_2 / ||want||_2 over float64 values (both read on the CPU);
// +inf when shapes differ or NaNs or infinities do not line up.
inline double normalised_error(const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes()) return INFINITY;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool gn = std::isnan(g[i]), wn = std::isnan(w[i]);
    if (gn || wn) {
      if (gn != wn) return INFINITY;
      continue;
    }
    if (std::isinf(g[i]) || std::isinf(w[i])) {
      if (g[i] != w[i]) return INFINITY;
      continue;
    }
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  if (num == 0) return 0;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace kiln::testing
