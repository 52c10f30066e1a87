// Note [GEMM library per shape]: kiln's float32 CPU GEMM runs in oneDNN or
// OpenBLAS, chosen per product by the measurements in docs/performance.md
// ("GEMM libraries per shape", bench/gemm_libs/):
//  - oneDNN (libdnnl, its JIT sgemm for the CPU it finds) for every product
//    with at least kOneDnnMinRows rows of C: equal to OpenBLAS's right
//    kernels on the training step's large shapes (0.94-1.06x) and 1.3-1.5x
//    faster on the skinny 32-row shapes of batch-1 inference and attention;
//  - OpenBLAS below that (the one-row head and generation's GEMVs: 1.28x
//    faster than oneDNN), unless OpenBLAS loaded its generic Prescott
//    kernels: Debian's OpenBLAS 0.3.21 does not know recent Xeons and falls
//    back to them (4.7-5.3x slower than oneDNN on every shape), and OpenBLAS
//    reads OPENBLAS_CORETYPE only as it loads, before kiln runs. Then oneDNN
//    runs every shape.
// float64 (the gradient checks) stays in OpenBLAS. Both libraries run
// single-threaded inside kiln's pool (Note [GEMM threading], gemm.cpp):
// Debian's oneDNN uses OpenMP, so each calling thread sets its own OpenMP
// thread count to 1 before its first oneDNN call. The choice depends only on
// (M, N, K) and the process's libraries, never on the thread count, so
// Note [Deterministic chunking] holds.
//
// Note [Signals in oneDNN's kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// oneDNN's JIT sgemm kernels (AVX2 and AVX-512; fixed upstream in 3.11.x,
// uxlfoundation/oneDNN#4845, after Debian 12's 2.6.3) point rsp into their
// heap workspace while they run. A signal handled on that thread meanwhile
// (kiln's own SIGTERM/SIGINT of Note [Preemption], a sampling profiler's
// SIGPROF, a user's handler) has its frame written there: the packed operands
// and the heap's metadata are overwritten, so the product comes out wrong and
// glibc aborts later ("corrupted size vs. prev_size"; 133 of 400 products
// wrong in CpuGemm.SignalsDuringOneDnnKernelsLeaveTheHeapAndResultsIntact
// without the guard). Each oneDNN call therefore runs with the calling
// thread's asynchronous signals blocked (two rt_sigprocmask calls, well under
// a microsecond, beside products of >= 16 rows); a signal sent meanwhile
// waits the length of one GEMM, or goes to another thread. Fault signals
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP) stay unblocked, so a crash
// still reports itself.
#include "core/cpu/gemm_library.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
extern "C" void omp_set_num_threads(int);  // libgomp, which Debian's oneDNN runs on

namespace kiln::cpu {
namespace {

constexpr int64_t kOneDnnMinRows = 16;

GemmPolicy policy_from_env() {
  const char* env = std::getenv("KILN_CPU_GEMM");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return GemmPolicy::Auto;
  if (std::strcmp(env, "openblas") == 0) return GemmPolicy::OpenBLAS;
  if (std::strcmp(env, "onednn") == 0) return GemmPolicy::OneDNN;
  fail("KILN_CPU_GEMM=", env, ": expected auto, openblas or onednn");
}

std::atomic<int>& policy_slot() {
  static std::atomic<int> slot{static_cast<int>(policy_from_env())};
  return slot;
}

}  // namespace

bool openblas_uses_generic_kernels() {
  static const bool generic = [] {
    const char* core = openblas_get_corename();
    return core != nullptr && std::strcmp(core, "Prescott") == 0 && __builtin_cpu_supports("avx2");
  }();
  return generic;
}

namespace {

void onednn_single_threaded() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// Note [Signals in oneDNN's kernels]: the calling thread's asynchronous
// signals blocked for one scope.
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked() {
    static const sigset_t blocked = [] {
      sigset_t set;
      sigfillset(&set);
      for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&set, fault);
      return set;
    }();
    ::pthread_sigmask(SIG_BLOCK, &blocked, &saved_);
  }
  ~AsyncSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace

GemmPolicy gemm_policy() { return static_cast<GemmPolicy>(policy_slot().load(std::memory_order_relaxed)); }

GemmPolicy set_gemm_policy(GemmPolicy p) {
  return static_cast<GemmPolicy>(policy_slot().exchange(static_cast<int>(p), std::memory_order_relaxed));
}

GemmLibrary gemm_library_for(int64_t M, int64_t /*N*/, int64_t /*K*/) {
  switch (gemm_policy()) {
    case GemmPolicy::OpenBLAS: return GemmLibrary::OpenBLAS;
    case GemmPolicy::OneDNN: return GemmLibrary::OneDNN;
    case GemmPolicy::Auto: break;
  }
  return M >= kOneDnnMinRows || openblas_uses_generic_kernels() ? GemmLibrary::OneDNN : GemmLibrary::OpenBLAS;
}

void sgemm_in(GemmLibrary lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, float beta) {
  if (lib == GemmLibrary::OneDNN) {
    onednn_single_threaded();
    dnnl_status_t s;
    {
      const AsyncSignalsBlocked hold;
      s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    }
    KILN_CHECK(s == dnnl_success, "matmul: oneDNN's sgemm failed (status ", static_cast<int>(s), ") on ", M,
               "x", N, "x", K);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

const char* gemm_library_name(GemmLibrary lib) { return lib == GemmLibrary::OneDNN ? "oneDNN" : "OpenBLAS"; }

std::string gemm_libraries_description() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = detail::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."; its first two words.
  std::string openblas = openblas_get_config() != nullptr ? openblas_get_config() : "OpenBLAS";
  if (const size_t sp = openblas.find(' '); sp != std::string::npos) openblas = openblas.substr(0, openblas.find(' ', sp + 1));
  openblas += detail::str_cat(" (", openblas_get_corename(), " kernels)");
  switch (gemm_policy()) {
    case GemmPolicy::OpenBLAS: return openblas + " for every shape (KILN_CPU_GEMM=openblas)";
    case GemmPolicy::OneDNN: return onednn + " for every shape (KILN_CPU_GEMM=onednn)";
    case GemmPolicy::Auto: break;
  }
  if (openblas_uses_generic_kernels()) return onednn + " for every shape; " + openblas + " for float64 (its generic kernels)";
  return detail::str_cat(onednn, " for >= ", kOneDnnMinRows, " rows, ", openblas, " below and for float64");
}

}  // namespace kiln::cpu
