// `kiln bench gemm` and `kiln bench elementwise`: the CPU floor figures.
//
// gemm: float32 C = A @ B at n = 256 ... 4096 through kiln::matmul (oneDNN or
// OpenBLAS: Note [GEMM library per shape]), beside OpenBLAS's cblas_sgemm called directly and Eigen's own product (no BLAS), in
// the same run. GFLOP/s = 2 n^3 / time.
// elementwise: bytes moved per second for add, mul-by-scalar, exp, a strided
// copy, beside a plain memcpy of the same bytes (the machine's bandwidth).
#include <cblas.h>

#include <Eigen/Core>
#include <cstdio>
#include <cstring>

#include "core/cpu/gemm_library.h"
#include "kiln.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct GemmOptions {
  std::vector<int64_t> sizes{256, 512, 1024, 2048, 4096};
  int threads = 0;
};

int run_gemm(const GemmOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  std::printf("bench gemm: float32, %d threads (kiln matmul | OpenBLAS sgemm | Eigen product)\n", get_num_threads());
  std::printf("kiln matmul runs %s\n", cpu::gemm_libraries_description().c_str());
  std::printf("%6s %12s %12s %12s %10s\n", "n", "kiln GF/s", "openblas", "eigen", "kiln/blas");
  for (int64_t n : o.sizes) {
    Tensor a = randn({n, n}), b = randn({n, n});
    const double flop = 2.0 * static_cast<double>(n) * n * n;
    const int reps = n <= 512 ? 20 : n <= 1024 ? 8 : 3;
    const double t_kiln = median_seconds([&] { matmul(a, b); }, reps);
    Tensor c = empty({n, n});
    const double t_blas = median_seconds([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                  static_cast<int>(n), 1.f, a.data_ptr<float>(), static_cast<int>(n), b.data_ptr<float>(),
                  static_cast<int>(n), 0.f, c.data_ptr<float>(), static_cast<int>(n));
    }, reps);
    using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const Mat> ea(a.data_ptr<float>(), n, n), eb(b.data_ptr<float>(), n, n);
    Eigen::Map<Mat> ec(c.data_ptr<float>(), n, n);
    const double t_eigen = n <= 2048 ? median_seconds([&] { ec.noalias() = ea * eb; }, reps) : 0.0;
    std::printf("%6lld %12.1f %12.1f %12s %9.2fx\n", static_cast<long long>(n), flop / t_kiln * 1e-9,
                flop / t_blas * 1e-9,
                t_eigen > 0 ? std::to_string(static_cast<int>(flop / t_eigen * 1e-9)).c_str() : "-",
                t_blas / t_kiln);
  }
  return 0;
}

struct ElementwiseOptions {
  int64_t numel = int64_t{1} << 24;
  int threads = 0;
};

int run_elementwise(const ElementwiseOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  const int64_t n = o.numel;
  Tensor a = randn({n}), b = randn({n});
  Tensor big = randn({4096, n / 4096});
  std::vector<char> src(static_cast<size_t>(n) * 8), dst(static_cast<size_t>(n) * 8);
  std::memset(src.data(), 1, src.size());
  std::printf("bench elementwise: float32, %lld elements, %d threads\n", static_cast<long long>(n), get_num_threads());
  auto line = [&](const char* name, double bytes, double secs) {
    std::printf("%-28s %8.2f GB/s  (%.3f ms)\n", name, bytes / secs * 1e-9, secs * 1e3);
  };
  const double f = 4.0 * static_cast<double>(n);
  line("memcpy (reference)", 2 * 2 * f, median_seconds([&] { std::memcpy(dst.data(), src.data(), src.size()); }, 10));
  line("add(a, b)", 3 * f, median_seconds([&] { add(a, b); }, 10));
  line("mul(a, 2.0)", 2 * f, median_seconds([&] { mul(a, 2.0); }, 10));
  line("exp(a)", 2 * f, median_seconds([&] { kiln::exp(a); }, 10));
  line("gelu(a)", 2 * f, median_seconds([&] { gelu(a); }, 10));
  line("transpose copy (contiguous)", 2 * f, median_seconds([&] { big.t().contiguous(); }, 10));
  line("sum(a)", f, median_seconds([&] { sum(a); }, 10));
  return 0;
}

const BenchRegistrar gemm_reg("gemm", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("gemm", "float32 GEMM GFLOP/s beside OpenBLAS and Eigen");
  auto o = std::make_shared<GemmOptions>();
  cmd->add_option("--sizes", o->sizes, "matrix sizes n (n x n times n x n)");
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  return [o] { return run_gemm(*o); };
});

const BenchRegistrar ew_reg("elementwise", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("elementwise", "elementwise and reduction GB/s beside memcpy");
  auto o = std::make_shared<ElementwiseOptions>();
  cmd->add_option("--numel", o->numel, "elements per tensor")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  return [o] { return run_elementwise(*o); };
});

}  // namespace
}  // namespace kiln::tools
