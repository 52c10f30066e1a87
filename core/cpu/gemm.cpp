// CPU matrix multiply. float32 goes to oneDNN or OpenBLAS, per shape (Note
// [GEMM library per shape], core/cpu/gemm_library.cpp), float64 to OpenBLAS
// (both measured faster than Eigen's own product: docs/performance.md);
// float16 and bfloat16 are widened to float32, multiplied, and rounded once;
// integers use Eigen. sgemm() is the single place that decides how float32
// GEMM runs.
// Operands reach BLAS through gemm_operand (core/gemm_plan.h, shared with
// cuBLASLt): transposed views as transposed operands, copies only when needed.
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/gemm_library.h"
#include "core/gemm_plan.h"
#include "core/parallel.h"

extern "C" void openblas_set_num_threads(int);

namespace kiln::cpu {
namespace {

// An operand as BLAS takes it (core/gemm_plan.h), with the CPU's copy kernel.
Tensor blas_operand(const Tensor& t, DType dtype, GemmOperand& v) {
  return gemm_operand(t, dtype, v, [](const Tensor& d, const Tensor& s) { copy(d, s); });
}

// Note [GEMM threading] (below): OpenBLAS itself always runs single-threaded.
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

template <typename T>
void blas_batched(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t Bt = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  GemmOperand va, vb;
  const Tensor ta = blas_operand(a, dtype_of<T>(), va);
  const Tensor tb = blas_operand(b, dtype_of<T>(), vb);
  const T* a_data = static_cast<const T*>(ta.raw_data());
  const T* b_data = static_cast<const T*>(tb.raw_data());
  T* c = out.data_ptr<T>();
  blas_single_threaded();
  // Batch entries are independent products: run them side by side (each one
  // single-threaded inside, Note [GEMM threading]).
  parallel_for(Bt, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      const T* A = a_data + i * va.batch_stride;
      const T* B = b_data + i * vb.batch_stride;
      T* C = c + i * M * N;
      if constexpr (std::is_same_v<T, float>) {
        sgemm(va.trans, vb.trans, M, N, K, A, va.ld, B, vb.ld, C, N);
      } else {
        cblas_dgemm(CblasRowMajor, va.trans ? CblasTrans : CblasNoTrans, vb.trans ? CblasTrans : CblasNoTrans,
                    static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0, A,
                    static_cast<int>(va.ld), B, static_cast<int>(vb.ld), 0.0, C, static_cast<int>(N));
      }
    }
  });
}

template <typename T>
void eigen_batched(const Tensor& out, const Tensor& a, const Tensor& b) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t Bt = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  Tensor ca = a.is_contiguous() ? a : empty_tensor(a.sizes(), a.dtype(), a.device());
  if (!a.is_contiguous()) copy(ca, a);
  Tensor cb = b.is_contiguous() ? b : empty_tensor(b.sizes(), b.dtype(), b.device());
  if (!b.is_contiguous()) copy(cb, b);
  parallel_for(Bt, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      Eigen::Map<const Mat> A(ca.data_ptr<T>() + i * M * K, M, K);
      Eigen::Map<const Mat> B(cb.data_ptr<T>() + i * K * N, K, N);
      Eigen::Map<Mat> C(out.data_ptr<T>() + i * M * N, M, N);
      C.noalias() = A * B;
    }
  });
}

}  // namespace

// Note [GEMM threading]: OpenBLAS and oneDNN run single-threaded, and kiln
// splits a large product into blocks that its own pool runs. OpenBLAS's threads spin
// (sched_yield) for a long while after every call, which starves kiln's
// elementwise kernels on small machines, and its pool cannot run the many
// small per-head products of attention side by side. The split:
//  - K much longer than M and N (a weight gradient over many rows, the MLM
//    decoder's input gradient): blocks of K, each a full BLAS call into its
//    own (M, N) partial, then the partials added in block order;
//  - otherwise blocks of rows of A and C, or of columns of B and C, whichever
//    side is longer. Each block packs the other operand again, so blocks are
//    at least as long as the other side, between kMinSkinnyBlock and
//    kMinGemmBlock: a 32-row product of batch-1 inference (q | k | v:
//    32 x 1152, the attention output: 32 x 384) repacks only its 32 rows of
//    A per block of 64 columns, and splits into 6-8 blocks that keep two
//    threads equally busy, where blocks of 256 left one idle (384 columns:
//    one block) or ran 3 blocks against 2 (1152).
// Blocks depend only on (M, N, K) (Note [Deterministic chunking]), so every
// output element is computed the same way whatever the thread count.
namespace {

constexpr double kParallelGemmFlops = 1 << 21;  // below this one call is cheaper than a split
constexpr int64_t kMinGemmBlock = 256;           // rows, columns or depth per block at least
constexpr int64_t kMinSkinnyBlock = 64;          // ... when the other side is this short or shorter
constexpr int64_t kGemmBlocks = 8;               // blocks per product at most

// The shortest block when splitting a side whose other side is `other` long.
int64_t min_gemm_block(int64_t other) { return std::clamp<int64_t>((other + 15) / 16 * 16, kMinSkinnyBlock, kMinGemmBlock); }

// Block length for splitting `n`: at least `min_block`, a multiple of 16,
// at most kGemmBlocks blocks.
int64_t gemm_block(int64_t n, int64_t min_block = kMinGemmBlock) {
  const int64_t per = (n + kGemmBlocks - 1) / kGemmBlocks;
  return std::max<int64_t>(min_block, (per + 15) / 16 * 16);
}

}  // namespace

void set_blas_threads(int n) { openblas_set_num_threads(n); }

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  blas_single_threaded();
  // One library for the whole product, whatever the blocks below.
  const GemmLibrary lib = gemm_library_for(M, N, K);
  const auto sgemm_call = [lib](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t la,
                                const float* b, int64_t lb, float* c, int64_t lc, float bt) {
    sgemm_in(lib, ta, tb, m, n, k, a, la, b, lb, c, lc, bt);
  };
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (flops < kParallelGemmFlops) {
    sgemm_call(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, beta);
    return;
  }
  if (K >= 4 * std::max(M, N) && K >= 2 * kMinGemmBlock) {  // blocks of K into partials
    const int64_t bk = gemm_block(K), blocks = num_chunks(K, bk), MN = M * N;
    std::vector<float> part(static_cast<size_t>(blocks * MN));
    parallel_for(blocks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t k0 = c * bk, kn = std::min(K, k0 + bk) - k0;
        const float* Ab = trans_a ? A + k0 * lda : A + k0;
        const float* Bb = trans_b ? B + k0 : B + k0 * ldb;
        sgemm_call(trans_a, trans_b, M, N, kn, Ab, lda, Bb, ldb, part.data() + c * MN, N, 0.0f);
      }
    });
    parallel_for(M, std::max<int64_t>(1, 16384 / N), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* out = C + r * ldc;
        const float* p0 = part.data() + r * N;
        if (accumulate)
          for (int64_t j = 0; j < N; ++j) out[j] += p0[j];
        else
          for (int64_t j = 0; j < N; ++j) out[j] = p0[j];
        for (int64_t c = 1; c < blocks; ++c) {
          const float* pc = part.data() + c * MN + r * N;
          for (int64_t j = 0; j < N; ++j) out[j] += pc[j];
        }
      }
    });
    return;
  }
  const int64_t min_block = min_gemm_block(std::min(M, N));  // for splitting the longer side
  if (std::max(M, N) < 2 * min_block) {
    sgemm_call(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, beta);
    return;
  }
  if (M >= N) {  // blocks of rows of A and C
    parallel_for(M, gemm_block(M, min_block), [&](int64_t r0, int64_t r1) {
      const float* Ab = trans_a ? A + r0 : A + r0 * lda;
      sgemm_call(trans_a, trans_b, r1 - r0, N, K, Ab, lda, B, ldb, C + r0 * ldc, ldc, beta);
    });
  } else {  // blocks of columns of B and C
    parallel_for(N, gemm_block(N, min_block), [&](int64_t c0, int64_t c1) {
      const float* Bb = trans_b ? B + c0 * ldb : B + c0;
      sgemm_call(trans_a, trans_b, M, c1 - c0, K, A, lda, Bb, ldb, C + c0, ldc, beta);
    });
  }
}

void dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
           const double* B, int64_t ldb, double* C, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.0;
    return;
  }
  blas_single_threaded();
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), accumulate ? 1.0 : 0.0, C, static_cast<int>(ldc));
}

void addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  const int64_t M = out.size(0), N = out.size(1), K = a.size(1);
  GemmOperand va, vb;
  const Tensor ta = blas_operand(matrix_as_batch(a), DType::Float32, va);
  const Tensor tb = blas_operand(matrix_as_batch(b), DType::Float32, vb);
  float* c = out.data_ptr<float>();
  const float* bi = bias.data_ptr<float>();
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < N; ++j) c[r * N + j] = bi[j];
  });
  sgemm(va.trans, vb.trans, M, N, K, static_cast<const float*>(ta.raw_data()), va.ld,
        static_cast<const float*>(tb.raw_data()), vb.ld, c, N, /*accumulate=*/true);
}

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (out.dtype()) {
    case DType::Float32: return blas_batched<float>(out, a, b);
    case DType::Float64: return blas_batched<double>(out, a, b);
    case DType::Float16:
    case DType::BFloat16: {
      Tensor wide = empty_tensor(out.sizes(), DType::Float32, out.device());
      blas_batched<float>(wide, a, b);
      copy(out, wide);
      return;
    }
    case DType::Int32: return eigen_batched<int32_t>(out, a, b);
    case DType::Int64: return eigen_batched<int64_t>(out, a, b);
    case DType::Bool: break;
  }
  fail("matmul: not defined for ", dtype_name(out.dtype()), " tensors");
}

}  // namespace kiln::cpu
