// CPU matrix multiply. float32 and float64 go to OpenBLAS (measured faster
// than Eigen's own product on these machines: docs/performance.md); float16 and
// bfloat16 are widened to float32, multiplied, and rounded once; integers use
// Eigen. sgemm() is the single place that decides how float32 GEMM runs.
#include <cblas.h>

#include <Eigen/Core>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"

extern "C" void openblas_set_num_threads(int);

namespace kiln::cpu {
namespace {

// A (M, K) matrix view of batch entry `b` of a 3-D tensor, as BLAS sees it:
// row-major with leading dim ld, or transposed (column-major) when trans.
struct MatView {
  const char* base;
  int64_t batch_stride;  // bytes
  bool trans;
  int64_t ld;
};

// Returns false when neither of the last two dims has unit stride.
bool blas_view(const Tensor& t, MatView& v) {
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t s_r = t.stride(1), s_c = t.stride(2);
  v.base = static_cast<const char*>(t.raw_data());
  v.batch_stride = t.stride(0) * static_cast<int64_t>(t.element_size());
  if ((s_c == 1 || cols == 1) && s_r >= std::max<int64_t>(cols, 1)) {
    v.trans = false;
    v.ld = std::max<int64_t>(s_r, 1);
    return true;
  }
  if ((s_r == 1 || rows == 1) && s_c >= std::max<int64_t>(rows, 1)) {
    v.trans = true;
    v.ld = std::max<int64_t>(s_c, 1);
    return true;
  }
  return false;
}

Tensor as_blas_operand(const Tensor& t, DType dtype, MatView& v) {
  if (t.dtype() == dtype && blas_view(t, v)) return t;
  Tensor c = empty_tensor(t.sizes(), dtype, t.device());
  copy(c, t);
  blas_view(c, v);
  return c;
}

template <typename T>
void blas_batched(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t Bt = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  MatView va{}, vb{};
  Tensor ta = as_blas_operand(a, dtype_of<T>(), va);
  Tensor tb = as_blas_operand(b, dtype_of<T>(), vb);
  T* c = out.data_ptr<T>();
  for (int64_t i = 0; i < Bt; ++i) {
    const T* A = reinterpret_cast<const T*>(va.base + i * va.batch_stride);
    const T* B = reinterpret_cast<const T*>(vb.base + i * vb.batch_stride);
    T* C = c + i * M * N;
    if constexpr (std::is_same_v<T, float>) {
      sgemm(va.trans, vb.trans, M, N, K, A, va.ld, B, vb.ld, C, N);
    } else {
      cblas_dgemm(CblasRowMajor, va.trans ? CblasTrans : CblasNoTrans, vb.trans ? CblasTrans : CblasNoTrans,
                  static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0, A,
                  static_cast<int>(va.ld), B, static_cast<int>(vb.ld), 0.0, C, static_cast<int>(N));
    }
  }
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

void set_blas_threads(int n) { openblas_set_num_threads(n); }

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(lda),
              B, static_cast<int>(ldb), 0.0f, C, static_cast<int>(ldc));
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
