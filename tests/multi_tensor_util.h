// What the multi-tensor op tests share (tests/test_multi_tensor.cpp on the
// CPU, tests/test_cuda_multi_tensor.cpp on CUDA): seeded float64-drawn
// tensors, and the parameter, gradient and moment lists of an optimizer step.
#pragma once

#include <cstdint>
#include <vector>

#include "test_util.h"

namespace kiln::testing {

// randn(shape) * scale, drawn in float64 with `seed`, then cast to `dtype`.
inline Tensor seeded(const Shape& shape, uint64_t seed, DType dtype, double scale = 1.0) {
  Generator gen(seed);
  return mul(randn(shape, TensorOptions(DType::Float64), &gen), scale).to(dtype);
}

struct ParamLists {
  std::vector<Tensor> p, g, m, v;
  std::vector<int64_t> steps;
  // Copies of every tensor on `d`.
  ParamLists to(Device d) const {
    ParamLists o;
    for (size_t i = 0; i < p.size(); ++i) {
      o.p.push_back(p[i].to(d).clone());
      o.g.push_back(g[i].to(d).clone());
      o.m.push_back(m[i].to(d).clone());
      o.v.push_back(v[i].to(d).clone());
    }
    o.steps = steps;
    return o;
  }
};

// Parameters, gradients and moments (v >= 0) as after a few steps; parameter
// i at update count 1 + step_stride * i.
inline ParamLists make_param_lists(const std::vector<Shape>& shapes, DType dt, uint64_t seed, int64_t step_stride) {
  ParamLists l;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t s = seed + 10 * i;
    l.p.push_back(seeded(shapes[i], s, dt));
    l.g.push_back(seeded(shapes[i], s + 1, dt, 0.1));
    l.m.push_back(seeded(shapes[i], s + 2, dt, 0.01));
    l.v.push_back(abs(seeded(shapes[i], s + 3, dt, 1e-4)));
    l.steps.push_back(1 + step_stride * static_cast<int64_t>(i));
  }
  return l;
}

}  // namespace kiln::testing
