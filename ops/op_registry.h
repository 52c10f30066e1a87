// The op registry: every public op registers itself next to its definition
// with samples for the test harness (tests/test_gradcheck.cpp checks every
// differentiable op in float64 by central differences, on contiguous,
// transposed-strided and sliced-strided copies of each sample; a registered op
// with no samples fails the suite, and an op that records autograd history
// under a name the registry lacks fails it too).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct OpSample {
  std::string desc;
  std::vector<Tensor> inputs;  // float64 for differentiable inputs
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  // Central-difference step and tolerances; only lossy ops (casts to float32)
  // loosen them, and say why where they do.
  double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
};

struct OpInfo {
  std::string name;
  bool differentiable = true;
  std::function<std::vector<OpSample>()> samples;
};

const std::vector<OpInfo>& op_registry();
const OpInfo* find_op(const std::string& name);

struct OpRegistrar {
  explicit OpRegistrar(OpInfo info);
};

}  // namespace kiln

#define KILN_OP_CONCAT2(a, b) a##b
#define KILN_OP_CONCAT(a, b) KILN_OP_CONCAT2(a, b)
// KILN_REGISTER_OP("name", differentiable, [] { return std::vector<OpSample>{...}; });
#define KILN_REGISTER_OP(NAME, DIFF, ...) \
  static ::kiln::OpRegistrar KILN_OP_CONCAT(kiln_op_registrar_, __LINE__)(::kiln::OpInfo{NAME, DIFF, __VA_ARGS__})
