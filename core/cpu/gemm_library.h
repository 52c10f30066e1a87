// Which library runs a float32 CPU GEMM (Note [GEMM library per shape]):
// internal to core/cpu/gemm.cpp, the tests and `kiln bench gemm`.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cpu {

enum class GemmLibrary { OpenBLAS, OneDNN };

// What picks the library: `Auto` (the measured rule below), or one library
// for every shape (benchmarks and the tests that compare the two). The
// default comes from KILN_CPU_GEMM (auto, openblas or onednn; anything else
// is a kiln::Error naming the variable), read once.
enum class GemmPolicy { Auto, OpenBLAS, OneDNN };
GemmPolicy gemm_policy();
GemmPolicy set_gemm_policy(GemmPolicy p);  // returns the previous one

// Whether OpenBLAS loaded its generic Prescott kernels on a CPU with AVX2
// (Debian's 0.3.21 on CPUs it does not know).
bool openblas_uses_generic_kernels();

// The library that runs C(M, N) = A(M, K) B(K, N) under the current policy.
GemmLibrary gemm_library_for(int64_t M, int64_t N, int64_t K);

// One float32 product in `lib` on the calling thread (the library itself
// single-threaded: Note [GEMM threading]); row-major, C = A B + beta C.
void sgemm_in(GemmLibrary lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, float beta);

// "oneDNN 2.6.3 for M >= 16, OpenBLAS 0.3.21 (Prescott kernels) below" and
// the like: the rule this process runs (`kiln info`).
std::string gemm_libraries_description();
const char* gemm_library_name(GemmLibrary lib);

}  // namespace kiln::cpu
