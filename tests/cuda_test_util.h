// Shared by the CUDA-vs-CPU tests (test_cuda_ops.cpp, test_cuda_device.cpp,
// test_cuda_kernels.cpp, test_cuda_fused.cpp, test_cuda_sdpa.cpp): the skip when there is no GPU, the device, and the
// measure of agreement with the CPU oracle, the normalised error
// ||cuda - cpu||_2 / ||cpu||_2, against a per-dtype threshold.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "cuda/cuda.h"
#include "kiln.h"
#include "test_util.h"

// On the emulated device (KILN_CUDA=EMU, Note [Emulated CUDA device] in
// cuda/emu/emu.h) kernels run on the CPU under ASan + UBSan: a test whose
// shape matters only on a real GPU (to fill it, or to want a workspace)
// picks a small one there.
#if defined(KILN_CUDA_EMU)
inline constexpr bool kEmulatedCuda = true;
#else
inline constexpr bool kEmulatedCuda = false;
#endif

// Skips the test when there is no GPU (no device, no driver) or kiln was
// built without CUDA, so CI stays green. With KILN_REQUIRE_CUDA=1 in the
// environment (tools/gpu_check.sh sets it) the same test fails instead: on
// the GPU machine a skip would pass a check that never ran.
#define KILN_REQUIRE_CUDA() KILN_REQUIRE_GPU_PART(::kiln::cuda::is_available(), \
    ::kiln::cuda_built() ? "no CUDA device" : "built without CUDA")
#define KILN_REQUIRE_GPU_PART(ok, why)                                                   \
  do {                                                                                   \
    if (!(ok)) {                                                                         \
      const char* kiln_require_ = std::getenv("KILN_REQUIRE_CUDA");                      \
      if (kiln_require_ != nullptr && std::string(kiln_require_) == "1")                 \
        GTEST_FAIL() << "KILN_REQUIRE_CUDA=1, but " << (why);                            \
      GTEST_SKIP() << (why);                                                             \
    }                                                                                    \
  } while (0)
// cuDNN's fused attention: a device, and not the emulated one (where cuDNN
// cannot run and attention declines to the composite path, docs/gpu.md).
#define KILN_REQUIRE_CUDNN()                                                              \
  do {                                                                                   \
    KILN_REQUIRE_CUDA();                                                                 \
    if (kEmulatedCuda) GTEST_SKIP() << "cuDNN does not run on the emulated device";      \
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

// ---- CUDA-vs-CPU helpers -------------------------------------------------------

inline constexpr DType kFloatTypes[] = {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16};

inline ::testing::AssertionResult matches(const Tensor& gpu, const Tensor& cpu, DType dtype, const std::string& what) {
  if (gpu.device() != kGpu && gpu.device().is_cpu())
    return ::testing::AssertionFailure() << what << ": result is on the CPU, expected CUDA";
  if (gpu.dtype() != cpu.dtype())
    return ::testing::AssertionFailure() << what << ": dtype " << dtype_name(gpu.dtype()) << " vs "
                                         << dtype_name(cpu.dtype());
  const double tol = tolerance(dtype);
  if (tol == 0.0) {
    ::testing::AssertionResult r = bitwise_equal(gpu, cpu);
    if (!r) return ::testing::AssertionFailure() << what << ": " << r.message();
    return r;
  }
  const double err = normalised_error(gpu, cpu);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name(dtype) << "): normalised error " << err
                                       << " > " << tol;
}

// A CPU tensor of `dtype` with values in [lo, hi) (integers: [lo, hi) whole numbers).
inline Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Tensor t = empty_tensor(shape, dtype, kCPU);
  if (is_floating(dtype)) {
    Tensor f = empty_tensor(shape, DType::Float64, kCPU);
    cpu_backend().uniform(f, lo, hi, PhiloxState{seed, 0});
    cpu_backend().copy(t, f);
  } else if (dtype == DType::Bool) {
    cpu_backend().bernoulli(t, 0.5, PhiloxState{seed, 0});
  } else {
    cpu_backend().randint(t, static_cast<int64_t>(lo), static_cast<int64_t>(hi), PhiloxState{seed, 0});
  }
  return t;
}

inline Tensor on_gpu(const Tensor& t) { return t.to(kGpu); }

inline Shape random_shape(std::mt19937& rng, int max_dims = 4, int64_t max_size = 9) {
  std::uniform_int_distribution<int> nd(1, max_dims);
  std::uniform_int_distribution<int64_t> sz(1, max_size);
  Shape s(static_cast<size_t>(nd(rng)));
  for (auto& d : s) d = sz(rng);
  return s;
}

// A transposed (last two dims swapped) view holding the values of x.
inline Tensor transposed_copy(const Tensor& x) {
  if (x.dim() < 2) return x;
  Shape s = x.sizes();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor base = empty_tensor(s, x.dtype(), x.device());
  Shape perm;
  for (int64_t i = 0; i < x.dim(); ++i) perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  Shape vs, vst;
  for (int64_t d : perm) { vs.push_back(base.size(d)); vst.push_back(base.stride(d)); }
  Tensor v = make_tensor(base.storage(), vs, vst, 0, x.dtype());
  backend(x.device()).copy(v, x);
  return v;
}

}  // namespace kiln::testing
