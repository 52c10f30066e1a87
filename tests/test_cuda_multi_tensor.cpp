// The multi-tensor ops on CUDA (ops/multi_tensor.h, Note [Multi-tensor ops];
// the bodies in cuda/optim_kernels.cu) against their CPU bodies, op by op:
// the AdamW and LAMB steps of a list, the norm of orders 2 and infinity (the
// multi-tensor kernels) and 1 and 3 (Backend's default composition), with
// strided, mixed-dtype and empty tensors and inf/NaN, and the non-finite
// check in every floating dtype. Skipped without a GPU. Through the
// optimizers: test_cuda_fused.cpp.
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "multi_tensor_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kGpu;
using testing::normalised_error;
using L = std::vector<Tensor>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Around the kernels' chunks of 16384 elements, and an empty parameter.
const std::vector<Shape> kShapes = {{1}, {7, 3}, {16384}, {16385}, {0}, {129, 129}, {3, 40000}};

using Lists = testing::ParamLists;

Lists make_lists(DType dt, uint64_t seed) { return testing::make_param_lists(kShapes, dt, seed, 3); }

void expect_close(const Lists& gpu, const Lists& cpu, double tol) {
  for (size_t i = 0; i < cpu.p.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_EQ(gpu.p[i].device(), kGpu);
    EXPECT_LE(normalised_error(gpu.p[i], cpu.p[i]), tol);
    EXPECT_LE(normalised_error(gpu.m[i], cpu.m[i]), tol);
    EXPECT_LE(normalised_error(gpu.v[i], cpu.v[i]), tol);
  }
}

TEST(CudaMultiTensor, AdamWMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (double wd : {0.0, 0.05}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " weight_decay " + std::to_string(wd));
      Lists c = make_lists(dt, 100), g = c.to(kGpu);
      multi_tensor_adamw_(c.p, c.g, c.m, c.v, c.steps, 1e-2, wd, 0.9, 0.999, 1e-8);
      multi_tensor_adamw_(g.p, g.g, g.m, g.v, g.steps, 1e-2, wd, 0.9, 0.999, 1e-8);
      // Same statements, same roundings, no contraction: expected bit-identical; the bound leaves an ulp.
      expect_close(g, c, dt == DType::Float32 ? 1e-7 : 1e-15);
    }
  }
}

TEST(CudaMultiTensor, LambMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (bool bc : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (bc ? " bias correction" : " no bias correction"));
      Lists c = make_lists(dt, 200), g = c.to(kGpu);
      multi_tensor_lamb_(c.p, c.g, c.m, c.v, c.steps, 1e-2, 0.01, 0.9, 0.999, 1e-6, bc);
      multi_tensor_lamb_(g.p, g.g, g.m, g.v, g.steps, 1e-2, 0.01, 0.9, 0.999, 1e-6, bc);
      // The float64 norms are summed in another order: the trust ratio may differ by an ulp.
      expect_close(g, c, dt == DType::Float32 ? 1e-6 : 1e-14);
    }
  }
}

L on(const L& ts, Device d) {
  L o;
  for (const Tensor& t : ts) o.push_back(t.to(d));
  return o;
}

TEST(CudaMultiTensor, NormMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  const Tensor base = testing::seeded({300, 200}, 300, DType::Float32), strided = base.transpose(0, 1);
  const std::vector<std::pair<std::string, L>> cases = {
      {"float32", {testing::seeded({5}, 301, DType::Float32), testing::seeded({16385}, 302, DType::Float32), zeros({0}),
                   testing::seeded({3, 40000}, 303, DType::Float32, 3.0)}},
      {"float64", {testing::seeded({7, 3}, 304, DType::Float64), testing::seeded({70001}, 305, DType::Float64)}},
      {"mixed dtypes", {testing::seeded({100}, 306, DType::Float32), testing::seeded({20000}, 307, DType::Float64)}},
      {"strided", {strided, testing::seeded({9}, 308, DType::Float32)}},
  };
  for (const auto& [name, cpu] : cases) {
    SCOPED_TRACE(name);
    L gpu = on(cpu, kGpu);
    if (name == "strided") gpu[0] = base.to(kGpu).transpose(0, 1);  // strided on the GPU too
    for (double p : {2.0, kInf, 1.0, 3.0}) {
      const Tensor c = multi_tensor_norm(cpu, p), g = multi_tensor_norm(gpu, p);
      EXPECT_EQ(g.device(), kGpu);
      EXPECT_EQ(g.dtype(), DType::Float64);
      if (std::isinf(p)) EXPECT_TRUE(bitwise_equal(g, c)) << "order inf: a max is exact";
      else EXPECT_NEAR(g.item<double>(), c.item<double>(), 1e-11 * c.item<double>()) << "order " << p;
      EXPECT_TRUE(bitwise_equal(multi_tensor_norm(gpu, p), g)) << "deterministic, order " << p;
    }
  }
  EXPECT_EQ(multi_tensor_norm({zeros({0}).to(kGpu)}, 2.0).item<double>(), 0.0);
}

TEST(CudaMultiTensor, NormPropagatesInfAndNaN) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (double bad : {kInf, -kInf, kNaN}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(bad));
      L ts = {testing::seeded({5}, 400, dt), testing::seeded({3, 7001}, 401, dt), testing::seeded({70001}, 402, dt)};
      ts[1].view({ts[1].numel()}).narrow(0, 12345, 1).fill_(bad);
      const L gpu = on(ts, kGpu);
      for (double p : {2.0, kInf, 1.0}) {
        const double c = multi_tensor_norm(ts, p).item<double>(), g = multi_tensor_norm(gpu, p).item<double>();
        if (std::isnan(c)) EXPECT_TRUE(std::isnan(g)) << "order " << p;
        else EXPECT_EQ(g, c) << "order " << p;
      }
    }
  }
}

TEST(CudaMultiTensor, AllFiniteMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (double bad : {kInf, -kInf, kNaN}) {
      L ts = {testing::seeded({5}, 500, dt), testing::seeded({16384}, 501, dt), testing::seeded({3, 7001}, 502, dt),
              zeros({4}, TensorOptions(DType::Int64))};
      L gpu = on(ts, kGpu);
      const Tensor ok = multi_tensor_all_finite(gpu);
      EXPECT_EQ(ok.device(), kGpu);
      EXPECT_EQ(ok.dtype(), DType::Bool);
      EXPECT_TRUE(ok.item<bool>());
      for (Tensor* t : {&ts[2], &gpu[2]}) t->view({t->numel()}).narrow(0, t->numel() - 1, 1).fill_(bad);
      EXPECT_EQ(multi_tensor_all_finite(gpu).item<bool>(), multi_tensor_all_finite(ts).item<bool>());
      EXPECT_FALSE(multi_tensor_all_finite(gpu).item<bool>());
      EXPECT_FALSE(multi_tensor_all_finite({gpu[2].transpose(0, 1)}).item<bool>());  // any strides
      EXPECT_TRUE(multi_tensor_all_finite({gpu[0], gpu[1], gpu[3]}).item<bool>());
    }
  }
}

TEST(CudaMultiTensor, ListsOnTwoDevicesAreRefused) {
  KILN_REQUIRE_CUDA();
  const Tensor c = testing::seeded({3}, 600, DType::Float32), g = c.to(kGpu);
  EXPECT_KILN_ERROR(multi_tensor_norm({c, g}, 2.0), "multi_tensor_norm", "same device", "tensor 1");
  EXPECT_KILN_ERROR(multi_tensor_all_finite({g, c}), "multi_tensor_all_finite", "same device");
  EXPECT_KILN_ERROR(multi_tensor_adamw_({g}, {c}, {zeros_like(g)}, {zeros_like(g)}, {1}, 1e-2, 0.0, 0.9, 0.999, 1e-8),
                    "multi_tensor_adamw_", "same device", "grads[0]");
}

}  // namespace
}  // namespace kiln
