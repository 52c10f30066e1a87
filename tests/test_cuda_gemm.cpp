// cuBLASLt's cached plans and per-stream workspaces (Note [cuBLASLt plan
// cache], cuda/gemm_lt.cpp) against the CPU's matmul: more shapes than the
// cache holds (plans evicted and made again), epilogue pointers that change
// between calls of one plan, and threads on their own streams sharing plans
// while their GEMMs run at once. The cache itself: tests/test_lru_cache.cpp.
// Skips without a GPU.
#include <atomic>
#include <thread>

#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/internal.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::kGpu;
using testing::matches;
using testing::normalised_error;
using testing::on_gpu;
using testing::random_cpu;

TEST(CudaGemm, MoreShapesThanThePlanCacheHolds) {
  KILN_REQUIRE_CUDA();
  struct Shape3 {
    int64_t M, N, K;
  };
  std::vector<Shape3> shapes;  // 12 * 12 * 8 = 1152 > 1024 plans
  for (int64_t M = 1; M <= 12; ++M)
    for (int64_t N = 1; N <= 12; ++N)
      for (int64_t K = 1; K <= 8; ++K) shapes.push_back({M, N, K});
  uint64_t seed = 1000;
  auto check = [&](const Shape3& s) {
    const DType f = DType::Float32;
    const Tensor a = random_cpu({1, s.M, s.K}, f, ++seed), b = random_cpu({1, s.K, s.N}, f, ++seed);
    Tensor want = empty_tensor({1, s.M, s.N}, f, kCPU), got = empty_tensor({1, s.M, s.N}, f, kGpu);
    cpu_backend().matmul(want, a, b);
    backend(kGpu).matmul(got, on_gpu(a), on_gpu(b));
    return matches(got, want, DType::Float32,
                   "matmul " + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" + std::to_string(s.N));
  };
  for (const Shape3& s : shapes) ASSERT_TRUE(check(s));
  for (size_t i = 0; i < 100; ++i) ASSERT_TRUE(check(shapes[i]));  // evicted by now: made again
}

TEST(CudaGemm, EpiloguePointersFollowEveryCallOfOnePlan) {
  KILN_REQUIRE_CUDA();
  const int64_t M = 64, K = 96, N = 128;
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor a = random_cpu({M, K}, dt, 1), b = random_cpu({K, N}, dt, 2);
    const Tensor ag = on_gpu(a), bg = on_gpu(b);
    for (int call = 0; call < 3; ++call) {  // one plan; a new bias (and aux) each time
      const Tensor bias = random_cpu({N}, dt, 10 + static_cast<uint64_t>(call));
      Tensor want = empty_tensor({M, N}, dt, kCPU), got = empty_tensor({M, N}, dt, kGpu);
      cpu_backend().addmm(want, a, b, bias);
      backend(kGpu).addmm(got, ag, bg, on_gpu(bias));
      EXPECT_TRUE(matches(got, want, dt, "addmm call " + std::to_string(call)));
      Tensor pre_c = empty_tensor({M, N}, dt, kCPU), out_c = empty_tensor({M, N}, dt, kCPU);
      Tensor pre_g = empty_tensor({M, N}, dt, kGpu), out_g = empty_tensor({M, N}, dt, kGpu);
      cpu_backend().linear_gelu(out_c, pre_c, a, b, bias, true);
      backend(kGpu).linear_gelu(out_g, pre_g, ag, bg, on_gpu(bias), true);
      EXPECT_TRUE(matches(pre_g, pre_c, dt, "linear_gelu pre-activation call " + std::to_string(call)));
      EXPECT_TRUE(matches(out_g, out_c, dt, "linear_gelu call " + std::to_string(call)));
    }
  }
}

TEST(CudaGemm, ThreadsOnTheirOwnStreamsShareThePlans) {
  KILN_REQUIRE_CUDA();
  // Large enough to run at once on the device and to want a workspace (on
  // the emulated device the shape does not matter: small).
  const int64_t M = kEmulatedCuda ? 64 : 1024, K = kEmulatedCuda ? 96 : 4096, N = kEmulatedCuda ? 48 : 1024;
  constexpr int kThreads = 4, kRounds = 6;
  std::vector<Tensor> a, b, bias, want;
  for (int t = 0; t < kThreads; ++t) {
    a.push_back(random_cpu({M, K}, DType::Float32, 100 + static_cast<uint64_t>(t)));
    b.push_back(random_cpu({K, N}, DType::Float32, 200 + static_cast<uint64_t>(t)));
    bias.push_back(random_cpu({N}, DType::Float32, 300 + static_cast<uint64_t>(t)));
    want.push_back(empty_tensor({M, N}, DType::Float32, kCPU));
    cpu_backend().addmm(want.back(), a.back(), b.back(), bias.back());
  }
  std::vector<std::vector<Tensor>> results(kThreads);  // on the CPU; compared by this thread
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        const cuda::Stream stream = cuda::Stream::create(0);
        cuda::StreamGuard guard(stream);
        const Tensor ag = on_gpu(a[t]), bg = on_gpu(b[t]), biasg = on_gpu(bias[t]);
        std::vector<Tensor> outs;
        for (int r = 0; r < kRounds; ++r) {  // queued back to back, read at the end
          outs.push_back(empty_tensor({M, N}, DType::Float32, kGpu));
          if (r % 2) backend(kGpu).addmm(outs.back(), ag, bg, biasg);
          else backend(kGpu).linear_gelu(outs.back(), empty_tensor({M, N}, DType::Float32, kGpu), ag, bg, biasg,
                                         false);  // the bias epilogue, then erf GELU
        }
        for (const Tensor& o : outs) results[t].push_back(o.cpu());
      } catch (const std::exception&) {
        ++errors;
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    Tensor gelu_want = empty_tensor({M, N}, DType::Float32, kCPU);
    cpu_backend().unary(UnaryOp::Gelu, gelu_want, want[t]);
    ASSERT_EQ(results[t].size(), static_cast<size_t>(kRounds));
    for (int r = 0; r < kRounds; ++r)
      EXPECT_LE(normalised_error(results[t][r], r % 2 ? want[t] : gelu_want), 3e-5) << "thread " << t << " round " << r;
  }
}

}  // namespace
}  // namespace kiln
