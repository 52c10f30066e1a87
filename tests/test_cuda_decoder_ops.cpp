// The decoder ops' CUDA kernels (cuda/decoder_kernels.cu) against their CPU
// twins (core/cpu/decoder_kernels.cpp), through the public ops forward and
// backward: rms_norm (with and without a weight), rotary_embedding (strided
// x, T = 1) and gated_activation (each activation; the halves of one
// projection), in float64, float32, bfloat16 and float16; operands on two
// devices are an error naming the op. Skipped without a GPU; on the emulated
// device (KILN_CUDA=EMU) they run in CI.
#include <functional>
#include <string>

#include "cuda_test_util.h"
#include "ops/decoder_ops.h"

namespace kiln {
namespace {

using testing::kFloatTypes;
using testing::kGpu;
using testing::matches;
using testing::random_cpu;

using DeviceFn = std::function<Tensor(const TensorList&, Device)>;

struct Outcome {
  Tensor y;
  TensorList grads;
};

// f on leaf copies of `in` on `device`, backpropagating dy; results on the CPU.
Outcome run_on(Device device, const DeviceFn& f, const TensorList& in, const Tensor& dy) {
  TensorList leaves;
  for (const Tensor& x : in) leaves.push_back(x.to(device).detach().requires_grad_());
  Tensor y = f(leaves, device);
  y.backward(dy.to(device));
  Outcome o{y.detach().to(kCPU), {}};
  for (const Tensor& l : leaves) o.grads.push_back(l.grad().to(kCPU));
  return o;
}

void expect_twins(const DeviceFn& f, const TensorList& in, const Shape& out_shape, DType dt, uint64_t seed,
                  const std::string& what) {
  const Tensor dy = random_cpu(out_shape, dt, seed);
  const Outcome g = run_on(kGpu, f, in, dy), c = run_on(kCPU, f, in, dy);
  EXPECT_TRUE(matches(g.y.to(kGpu), c.y, dt, what + " forward"));
  ASSERT_EQ(g.grads.size(), c.grads.size());
  for (size_t i = 0; i < g.grads.size(); ++i)
    EXPECT_TRUE(matches(g.grads[i].to(kGpu), c.grads[i], dt, what + " gradient " + std::to_string(i)));
}

TEST(CudaDecoderOps, RmsNormMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 900;
  // No C = 1: there dx = rstd * dy * w * (1 - x^2 / (x^2 + eps)) is all cancellation, a few ulps of nothing.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 2}, {7, 3}, {33, 128}, {300, 768}, {5, 1000}};
  for (DType dt : kFloatTypes)
    for (auto [R, C] : shapes)
      for (bool with_weight : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(R) + "x" + std::to_string(C) +
                     (with_weight ? " weight" : ""));
        TensorList in = {random_cpu({R, C}, dt, ++seed, -3, 3)};
        if (with_weight) in.push_back(random_cpu({C}, dt, ++seed));
        expect_twins([&](const TensorList& x, Device) { return rms_norm(x[0], with_weight ? x[1] : Tensor(), 1e-6); },
                     in, {R, C}, dt, ++seed, "rms_norm");
      }
}

TEST(CudaDecoderOps, RotaryMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 1000;
  struct Case { int64_t B, T, heads, D; bool slice; };
  for (DType dt : kFloatTypes)
    for (Case k : {Case{2, 5, 3, 8, false}, Case{1, 1, 4, 64, false}, Case{2, 7, 2, 16, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(k.T) + " D=" + std::to_string(k.D) +
                   (k.slice ? " column slice" : ""));
      const int64_t W = k.heads * k.D;
      const Tensor cs = random_cpu({k.T, k.D}, dt, ++seed), sn = random_cpu({k.T, k.D}, dt, ++seed);
      const Tensor x = random_cpu({k.B, k.T, k.slice ? 3 * W : W}, dt, ++seed);
      expect_twins(
          [&](const TensorList& in, Device d) {
            const Tensor q = k.slice ? narrow(in[0], 2, W, W) : in[0];
            return rotary_embedding(q, cs.to(d), sn.to(d), k.heads);
          },
          {x}, {k.B, k.T, W}, dt, ++seed, "rotary_embedding");
    }
}

TEST(CudaDecoderOps, GatedActivationMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 1100;
  for (DType dt : kFloatTypes)
    for (const char* act : {"silu", "gelu", "gelu_tanh"}) {
      const std::string a = act;
      for (const Shape& s : {Shape{3, 7}, Shape{33, 257}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + a + " " + shape_str(s));
        const uint64_t sa = ++seed, sb = ++seed, sg = ++seed;  // in order: argument evaluation is unsequenced
        expect_twins([&](const TensorList& x, Device) { return gated_activation(x[0], x[1], a); },
                     {random_cpu(s, dt, sa, -4, 4), random_cpu(s, dt, sb)}, s, dt, sg, "gated_activation");
      }
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + a + " halves of one (4, 258) projection");
      expect_twins(
          [&](const TensorList& x, Device) { return gated_activation(narrow(x[0], 1, 0, 129), narrow(x[0], 1, 129, 129), a); },
          {random_cpu({4, 258}, dt, seed + 1, -4, 4)}, {4, 129}, dt, seed + 2, "gated_activation halves");
      seed += 2;
    }
}

TEST(CudaDecoderOps, MixedDevicesAreOneErrorNamingTheOp) {
  KILN_REQUIRE_CUDA();
  const Tensor x = random_cpu({2, 3, 8}, DType::Float32, 1200);
  const Tensor xg = x.to(kGpu), t = random_cpu({3, 4}, DType::Float32, 1201);
  EXPECT_KILN_ERROR(rms_norm(xg, random_cpu({8}, DType::Float32, 1202), 1e-6), "rms_norm", "same device");
  EXPECT_KILN_ERROR(rotary_embedding(xg, t, t.to(kGpu), 2), "rotary_embedding", "same device");
  EXPECT_KILN_ERROR(rotary_embedding(xg, t.to(kGpu), t, 2), "rotary_embedding", "same device");
  EXPECT_KILN_ERROR(gated_activation(xg, x, "silu"), "gated_activation", "same device");
}

}  // namespace
}  // namespace kiln
