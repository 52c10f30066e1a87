// The float32 CPU GEMM libraries (Note [GEMM library per shape],
// core/cpu/gemm_library.cpp): oneDNN and OpenBLAS each against a float64
// reference on every operand layout kiln passes (transposed, padded leading
// dimensions, accumulate), the per-shape rule, and kiln::matmul agreeing
// across the two. Thread-count invariance in each library:
// Determinism.MatmulInEachGemmLibrary (test_determinism.cpp). And signals
// arriving inside oneDNN's kernels (Note [Signals in oneDNN's kernels]).
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/cpu/gemm_library.h"
#include "tests/grad_compare.h"
#include "tests/test_util.h"

namespace kiln {
namespace {
using cpu::GemmLibrary;
using cpu::GemmPolicy;

// Restores the process's GEMM policy when a test ends.
class PolicyGuard {
 public:
  explicit PolicyGuard(GemmPolicy p) : saved_(cpu::set_gemm_policy(p)) {}
  ~PolicyGuard() { cpu::set_gemm_policy(saved_); }
  PolicyGuard(const PolicyGuard&) = delete;
  PolicyGuard& operator=(const PolicyGuard&) = delete;

 private:
  GemmPolicy saved_;
};

struct Shape3 {
  int64_t M, N, K;
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(CpuGemm, EachLibraryMatchesAFloat64ReferenceOnEveryLayout) {
  // Batch-1 head, just under and at the row threshold, skinny inference,
  // ragged sizes, and a long K.
  const std::vector<Shape3> shapes{{1, 384, 384}, {15, 70, 33}, {16, 70, 33}, {32, 1152, 384},
                                   {77, 129, 300}, {24, 24, 2048}};
  for (GemmLibrary lib : {GemmLibrary::OpenBLAS, GemmLibrary::OneDNN}) {
    for (const Shape3& s : shapes) {
      for (int layout = 0; layout < 8; ++layout) {
        const bool ta = layout & 1, tb = layout & 2, acc = layout & 4;
        const int64_t pad = 3;  // leading dimensions longer than the rows they hold
        const int64_t lda = (ta ? s.M : s.K) + pad, ldb = (tb ? s.K : s.N) + pad, ldc = s.N + pad;
        const std::vector<float> A = random_floats(static_cast<size_t>((ta ? s.K : s.M) * lda), 1);
        const std::vector<float> B = random_floats(static_cast<size_t>((tb ? s.N : s.K) * ldb), 2);
        std::vector<float> C = random_floats(static_cast<size_t>(s.M * ldc), 3);
        const std::vector<float> C0 = C;
        cpu::sgemm_in(lib, ta, tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, C.data(), ldc, acc ? 1.f : 0.f);
        double worst = 0;
        for (int64_t i = 0; i < s.M; ++i) {
          for (int64_t j = 0; j < s.N; ++j) {
            double want = acc ? C0[i * ldc + j] : 0.0;
            for (int64_t k = 0; k < s.K; ++k)
              want += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) *
                      static_cast<double>(tb ? B[j * ldb + k] : B[k * ldb + j]);
            worst = std::max(worst, std::abs(C[i * ldc + j] - want));
          }
          for (int64_t j = s.N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << "padding written";
        }
        // float32 accumulation over K terms of size <= 1: error ~ sqrt(K) ulp-scale.
        EXPECT_LT(worst, 2e-6 * static_cast<double>(s.K)) << cpu::gemm_library_name(lib) << " " << s.M << "x"
                                                           << s.N << "x" << s.K << " layout " << layout;
      }
    }
  }
}

TEST(CpuGemm, TheRuleFollowsTheMeasurements) {
  {
    PolicyGuard g(GemmPolicy::Auto);
    EXPECT_EQ(cpu::gemm_library_for(16, 384, 384), GemmLibrary::OneDNN);
    EXPECT_EQ(cpu::gemm_library_for(1024, 3072, 768), GemmLibrary::OneDNN);
    const GemmLibrary skinny = cpu::openblas_uses_generic_kernels() ? GemmLibrary::OneDNN : GemmLibrary::OpenBLAS;
    EXPECT_EQ(cpu::gemm_library_for(1, 384, 384), skinny);
    EXPECT_EQ(cpu::gemm_library_for(15, 384, 384), skinny);
    EXPECT_NE(cpu::gemm_libraries_description().find("oneDNN"), std::string::npos);
  }
  {
    PolicyGuard g(GemmPolicy::OpenBLAS);
    EXPECT_EQ(cpu::gemm_library_for(1024, 1024, 1024), GemmLibrary::OpenBLAS);
    EXPECT_NE(cpu::gemm_libraries_description().find("KILN_CPU_GEMM=openblas"), std::string::npos);
  }
  {
    PolicyGuard g(GemmPolicy::OneDNN);
    EXPECT_EQ(cpu::gemm_library_for(1, 8, 8), GemmLibrary::OneDNN);
  }
}

TEST(CpuGemm, MatmulAgreesAcrossTheLibrariesOnEverySplit) {
  // One block, rows split, columns split, K split into partials (Note [GEMM
  // threading]), batched, and a transposed view.
  const std::vector<std::pair<Tensor, Tensor>> cases{
      {testing::rnd({32, 32}, 1), testing::rnd({32, 32}, 2)},
      {testing::rnd({700, 64}, 3), testing::rnd({64, 600}, 4)},
      {testing::rnd({40, 64}, 5), testing::rnd({64, 1100}, 6)},
      {testing::rnd({64, 4096}, 7), testing::rnd({4096, 64}, 8)},
      {testing::rnd({6, 33, 20}, 9), testing::rnd({6, 20, 17}, 10)},
      {testing::rnd({300, 513}, 11).t(), testing::rnd({300, 129}, 12)},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Tensor& a = cases[i].first;
    const Tensor& b = cases[i].second;
    Tensor with_openblas, with_onednn;
    {
      PolicyGuard g(GemmPolicy::OpenBLAS);
      with_openblas = matmul(a, b);
    }
    {
      PolicyGuard g(GemmPolicy::OneDNN);
      with_onednn = matmul(a, b);
    }
    const double tol = 2e-6 * static_cast<double>(a.size(-1));
    EXPECT_TRUE(testing::all_close(with_onednn, with_openblas, tol)) << "case " << i;
  }
}

std::atomic<int> g_signals_seen{0};
extern "C" void count_signal(int) { g_signals_seen.fetch_add(1); }

// kiln pretrain was killed by glibc ("corrupted size vs. prev_size") after a
// SIGTERM that arrived inside oneDNN 2.6's JIT sgemm: the handler's frame
// was written where the kernel had pointed rsp, into its heap workspace. A
// thread runs oneDNN GEMMs between allocations while another signals it as
// fast as it can; every product must equal the first and the heap survive.
TEST(CpuGemm, SignalsDuringOneDnnKernelsLeaveTheHeapAndResultsIntact) {
  struct sigaction sa {}, previous {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &previous), 0);
  g_signals_seen.store(0);
  // The masked-LM head's and the FFN's shapes of the pretraining run that crashed.
  const std::vector<Shape3> shapes{{256, 174, 128}, {256, 512, 128}, {128, 128, 512}};
  std::vector<std::vector<float>> reference;
  for (const Shape3& s : shapes) {
    const std::vector<float> A = random_floats(static_cast<size_t>(s.M * s.K), 1);
    const std::vector<float> B = random_floats(static_cast<size_t>(s.K * s.N), 2);
    std::vector<float> C(static_cast<size_t>(s.M * s.N));
    cpu::sgemm_in(GemmLibrary::OneDNN, false, true, s.M, s.N, s.K, A.data(), s.K, B.data(), s.K, C.data(), s.N, 0.f);
    reference.push_back(C);
  }
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  std::thread worker([&] {
    for (int it = 0; it < 400; ++it) {
      const Shape3& s = shapes[static_cast<size_t>(it) % shapes.size()];
      const std::vector<float> A = random_floats(static_cast<size_t>(s.M * s.K), 1);  // allocations around the call
      const std::vector<float> B = random_floats(static_cast<size_t>(s.K * s.N), 2);
      std::vector<float> C(static_cast<size_t>(s.M * s.N));
      cpu::sgemm_in(GemmLibrary::OneDNN, false, true, s.M, s.N, s.K, A.data(), s.K, B.data(), s.K, C.data(), s.N,
                    0.f);
      const std::vector<float>& want = reference[static_cast<size_t>(it) % shapes.size()];
      if (std::memcmp(C.data(), want.data(), C.size() * sizeof(float)) != 0) mismatches.fetch_add(1);
    }
    done.store(true);
  });
  int sent = 0;
  while (!done.load()) {
    if (::pthread_kill(worker.native_handle(), SIGUSR1) == 0) ++sent;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  worker.join();
  ::sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(sent, 10);
  EXPECT_GT(g_signals_seen.load(), 0) << "the signals were never delivered (the test checks nothing)";
}

}  // namespace
}  // namespace kiln
