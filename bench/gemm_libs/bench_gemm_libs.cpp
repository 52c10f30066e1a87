// bench_gemm_libs: float32 row-major C = op(A) op(B) on the exact GEMM shapes
// of kiln's training step (bert-base, 8 x 128 tokens: forward, dX and dW) and
// of inference (all-MiniLM-L6-v2 at 1 x 32, 8 x 128 and 32 x 128, and the
// skinny one-row head), through OpenBLAS (cblas_sgemm, what kiln calls),
// oneDNN (dnnl_sgemm, libdnnl-dev) and libxsmm (libxsmm_sgemm, libxsmm-dev:
// JIT kernels for small shapes, BLAS above its threshold), in the same run.
// One thread per library (kiln runs its GEMM blocks one per pool thread):
// run with OMP_NUM_THREADS=1 (oneDNN's OpenMP reads it at load). GFLOP/s =
// 2 M N K / median time. Issue 26; the figures are in docs/performance.md.
//
//   OMP_NUM_THREADS=1 build/bin/bench_gemm_libs [reps]
#include <cblas.h>
#include <libxsmm.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tools/bench.h"

namespace {

struct Shape {
  const char* what;
  long m, n, k;
  bool ta, tb;  // A is stored [K, M] (dW = X^T dY) / B is stored [N, K] (Y = X W^T, dX = dY W)
};

using kiln::tools::median_seconds;  // tools/bench.h: one warm-up, then the median

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr || std::string(omp) != "1")
    std::fprintf(stderr, "bench_gemm_libs: set OMP_NUM_THREADS=1 (oneDNN would use every core)\n");
  openblas_set_num_threads(1);
  libxsmm_init();
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("bench_gemm_libs: float32, 1 thread, median of %d; OpenBLAS %s (core %s%s), oneDNN %d.%d.%d, "
              "libxsmm %s\n",
              reps, openblas_get_config(), openblas_get_corename(), core ? ", OPENBLAS_CORETYPE set" : "",
              dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, LIBXSMM_VERSION);
  // bert-base step at 8 x 128 (1024 tokens; nn.Linear weights [out, in]): forward Y = X W^T,
  // backward dX = dY W and dW = dY^T X; MiniLM (hidden 384, intermediate 1536) inference.
  const std::vector<Shape> shapes = {
      {"step fwd QKV", 1024, 2304, 768, false, true},   {"step fwd attn-out", 1024, 768, 768, false, true},
      {"step fwd FFN up", 1024, 3072, 768, false, true}, {"step fwd FFN down", 1024, 768, 3072, false, true},
      {"step dX FFN up", 1024, 768, 3072, false, false}, {"step dW FFN up", 3072, 768, 1024, true, false},
      {"step dW QKV", 2304, 768, 1024, true, false},     {"MiniLM 1x32 QKV", 32, 1152, 384, false, true},
      {"MiniLM 1x32 FFN up", 32, 1536, 384, false, true}, {"MiniLM 1x32 FFN down", 32, 384, 1536, false, true},
      {"MiniLM 8x128 FFN up", 1024, 1536, 384, false, true}, {"MiniLM 32x128 FFN up", 4096, 1536, 384, false, true},
      {"head 1 row 384x384", 1, 384, 384, false, true},  {"attn scores 32x32x32", 32, 32, 32, false, true},
  };
  std::printf("%-24s %16s %10s %10s %10s %9s %9s\n", "shape", "M x N x K", "openblas", "onednn", "libxsmm",
              "dnnl/blas", "xsmm/blas");
  std::mt19937 gen(1);
  std::normal_distribution<float> dist;
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (float& x : a) x = dist(gen);
    for (float& x : b) x = dist(gen);
    const long lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const int r = flop < 1e7 ? reps * 100 : reps;
    const double t_blas = median_seconds([&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f, a.data(),
                  static_cast<int>(lda), b.data(), static_cast<int>(ldb), 0.f, c.data(), static_cast<int>(ldc));
    }, r);
    const double t_dnnl = median_seconds([&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f,
                 c.data(), ldc);
    }, r);
    // libxsmm is column-major (BLAS): row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    const libxsmm_blasint m = s.n, n = s.m, k = s.k, la = ldb, lb = lda, lc = ldc;
    const char tra = s.tb ? 'T' : 'N', trb = s.ta ? 'T' : 'N';
    const float alpha = 1.f, beta = 0.f;
    const double t_xsmm = median_seconds([&] {
      libxsmm_sgemm(&tra, &trb, &m, &n, &k, &alpha, b.data(), &la, a.data(), &lb, &beta, c.data(), &lc);
    }, r);
    char dims[48];
    std::snprintf(dims, sizeof(dims), "%ldx%ldx%ld", s.m, s.n, s.k);
    std::printf("%-24s %16s %10.1f %10.1f %10.1f %8.2fx %8.2fx\n", s.what, dims, flop / t_blas * 1e-9,
                flop / t_dnnl * 1e-9, flop / t_xsmm * 1e-9, t_blas / t_dnnl, t_blas / t_xsmm);
  }
  libxsmm_finalize();
  return 0;
}
