// Accuracy of the vectorisable float32 exp/tanh/erf (core/cpu/vec_math.h)
// against the C library, over their whole useful ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/cpu/vec_math.h"

namespace kiln::cpu {
namespace {

int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}

TEST(VecMath, ExpWithinTwoUlp) {
  int64_t worst = 0;
  for (float x = -103.0f; x < 88.7f; x += 0.00071f) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    if (want < 1.2e-38f) continue;  // subnormal results: checked below in absolute terms
    worst = std::max(worst, ulp_distance(exp_f32(x), want));
  }
  EXPECT_LE(worst, 2);
  EXPECT_NEAR(exp_f32(-100.0f), std::exp(-100.0f), 1e-45f);
  EXPECT_EQ(exp_f32(-200.0f), 0.0f);
  EXPECT_EQ(exp_f32(100.0f), INFINITY);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
}

TEST(VecMath, TanhAccurateNearZeroAndSaturates) {
  double worst_abs = 0, worst_rel = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.0001f) {
    const double want = std::tanh(static_cast<double>(x)), got = tanh_f32(x);
    worst_abs = std::max(worst_abs, std::abs(want - got));
    if (want != 0) worst_rel = std::max(worst_rel, std::abs(want - got) / std::abs(want));
  }
  EXPECT_LE(worst_abs, 3e-7);
  EXPECT_LE(worst_rel, 2e-6);
  EXPECT_EQ(tanh_f32(50.0f), 1.0f);
  EXPECT_EQ(tanh_f32(-50.0f), -1.0f);
}

TEST(VecMath, ErfWithinSixTenMillionths) {
  double worst = 0;
  for (float x = -8.0f; x < 8.0f; x += 0.0001f)
    worst = std::max(worst, std::abs(std::erf(static_cast<double>(x)) - erf_f32(x)));
  EXPECT_LE(worst, 6e-7);
  EXPECT_EQ(erf_f32(10.0f), 1.0f);
  EXPECT_EQ(erf_f32(-10.0f), -1.0f);
}

}  // namespace
}  // namespace kiln::cpu
