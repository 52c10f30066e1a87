// Comparing an op with the composition it replaces, forward and backward:
// shared by the fused-op, nn-op, causal-attention and determinism tests.
#pragma once

#include <functional>

#include "tests/test_util.h"

namespace kiln::testing {

using Fn = std::function<Tensor(const TensorList&)>;

struct GradResult {
  Tensor out;
  TensorList grads;  // one per floating input; zeros where none flowed
};

// Runs f on fresh leaf copies of `inputs` (the floating ones require grad)
// and backpropagates sum(f(...) * v) for a fixed random v.
inline GradResult run_with_grads(const Fn& f, const TensorList& inputs) {
  TensorList leaves;
  for (const Tensor& x : inputs) {
    Tensor l = x.clone().detach();
    if (l.is_floating_point()) l.set_requires_grad(true);
    leaves.push_back(l);
  }
  Tensor y = f(leaves);
  Generator g(777);
  Tensor v = randn(y.sizes(), y.dtype(), &g);
  sum(y * v).backward();
  GradResult r{y.detach(), {}};
  for (const Tensor& l : leaves)
    if (l.is_floating_point()) r.grads.push_back(l.grad().defined() ? l.grad() : zeros_like(l));
  return r;
}

inline void expect_close(const GradResult& a, const GradResult& b, double tol) {
  EXPECT_TRUE(all_close(a.out, b.out, tol, tol)) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(all_close(a.grads[i], b.grads[i], tol, tol)) << "gradient of input " << i;
}

inline void expect_bitwise(const GradResult& a, const GradResult& b) {
  EXPECT_TRUE(bitwise_equal(a.out, b.out)) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(bitwise_equal(a.grads[i], b.grads[i])) << "gradient " << i;
}

// Seeded N(0, scale^2) values of dtype dt.
inline Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::Float32, double scale = 1.0) {
  Generator g(seed);
  Tensor t = randn(s, dt, &g);
  return scale == 1.0 ? t : t * scale;
}

}  // namespace kiln::testing
