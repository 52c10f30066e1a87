// CUDA matmul through cuBLASLt: out(Bt, M, N) = a(Bt, M, K) @ b(Bt, K, N) for
// float32, float64, float16 and bfloat16 (16-bit operands with float32
// accumulation and one rounding on store, Note [Low-precision compute]);
// integers go to gemm_int.cu. CPU twin: matmul() in core/cpu/gemm.cpp.
//
// Note [cuBLASLt layout]
// ~~~~~~~~~~~~~~~~~~~~~~
// kiln is row-major, cuBLASLt column-major. A row-major (M, N) matrix with
// leading dim ld is the column-major (N, M) matrix with the same ld, so
//     C(M,N) = A(M,K) B(K,N)   is   C^T(N,M) = B^T(N,K) A^T(K,M)
// and cuBLASLt's first operand is kiln's b, its second kiln's a. A
// transposed view (unit stride along its rows) is handed over as a
// transposed operand, not copied, as the CPU does with BLAS; batches use the
// views' batch strides (0 for a broadcast operand). Only operands with no
// unit-stride dimension, or of another dtype than out, are copied first.
//
// float32 uses CUBLAS_COMPUTE_32F (exact float32 products, like the CPU)
// unless TF32 is allowed (kiln::cuda::set_allow_tf32 or KILN_ALLOW_TF32=1):
// then CUBLAS_COMPUTE_32F_FAST_TF32. The algorithm cuBLASLt's heuristic picks
// is cached per problem (shape, strides, dtype, alignment, TF32, epilogue).
//
// Note [cuBLASLt epilogues]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// addmm (out = a @ b + bias(N)) runs as one GEMM with CUBLASLT_EPILOGUE_BIAS:
// in the transposed view of Note [cuBLASLt layout] kiln's bias over the
// columns of out is cuBLASLt's bias over the rows of D, which is what the
// epilogue adds. linear_gelu_tanh asks for CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
// D = gelu(a @ b + bias) with a @ b + bias written to the aux matrix (the
// pre-activation that backward needs). cuBLASLt's GELU is the tanh form, so
// erf GELU (kiln's Gelu, BERT's "gelu") never takes it: there the GEMM uses
// the bias epilogue and kiln's own erf kernel follows (cuda/backend_cuda.cpp).
// Not every dtype and layout has an epilogue kernel (float64, odd leading
// dimensions of aux): when the heuristic finds none, the problem is
// remembered as unsupported and the caller composes the plain GEMM with
// elementwise kernels, so every call has an answer.
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cuda/cuda.h"
#include "cuda/kernels.cuh"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper

bool tf32_from_environment() {
  const char* v = std::getenv("KILN_ALLOW_TF32");
  return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "on") == 0);
}

std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{tf32_from_environment()};
  return flag;
}

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static std::array<cublasLtHandle_t, kMaxDevices> handles{};
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuBLASLt: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[static_cast<size_t>(device)]) KILN_CUBLAS_CHECK(cublasLtCreate(&handles[static_cast<size_t>(device)]));
  return handles[static_cast<size_t>(device)];  // kept for the process: destroying at exit races the driver
}

// A (rows, cols) matrix of batch entry i of a 3-D tensor as BLAS sees it.
struct MatView {
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;  // elements
};

// core/cpu/gemm.cpp's blas_view(): false when neither of the last two dims has unit stride.
bool lt_view(const Tensor& t, MatView& v) {
  const int64_t rows = t.size(1), cols = t.size(2), s_r = t.stride(1), s_c = t.stride(2);
  v.batch_stride = t.size(0) == 1 ? 0 : t.stride(0);
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

Tensor as_operand(const Tensor& t, DType dtype, MatView& v) {
  if (t.dtype() == dtype && lt_view(t, v)) return t;
  Tensor c = empty_tensor(t.sizes(), dtype, t.device());
  kernels::copy(c, t);
  lt_view(c, v);
  return c;
}

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// RAII holders so a failing call does not leak descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};

void make_layout(Layout& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                 int64_t batch_stride) {
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                       sizeof batch_stride));
  }
}

using PlanKey = std::array<int64_t, 18>;

struct AlgoCache {
  std::mutex mutex;
  std::map<PlanKey, cublasLtMatmulAlgo_t> algos;
  std::set<PlanKey> unsupported;  // epilogue problems with no algorithm
};

// What an epilogue adds to the plain GEMM (Note [cuBLASLt epilogues]).
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (N) contiguous, out's dtype
  void* aux = nullptr;         // (M, N) contiguous, out's dtype (GELU_AUX)
};

AlgoCache& algo_cache() {
  static AlgoCache* cache = new AlgoCache;  // never destroyed (used until exit)
  return *cache;
}

}  // namespace

void set_allow_tf32(bool allow) { tf32_flag().store(allow); }
bool allow_tf32() { return tf32_flag().load(); }

namespace kernels {
namespace {

// The GEMM with an optional epilogue; false when cuBLASLt has no algorithm
// for that epilogue (nothing was queued then). Without one it always runs.
bool lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Epilogue& ep) {
  const int64_t Bt = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const bool epilogue = ep.kind != CUBLASLT_EPILOGUE_DEFAULT;
  const DType dt = out.dtype();
  KILN_CHECK(is_floating(dt), "matmul: not defined for ", dtype_name(dt), " tensors");
  KILN_CHECK(out.is_contiguous(), "internal: matmul output must be contiguous");
  KILN_CHECK(M < (int64_t{1} << 31) && N < (int64_t{1} << 31) && K < (int64_t{1} << 31) && Bt < (int64_t{1} << 31),
             "matmul: dimensions too large for cuBLASLt: ", shape_str(out.sizes()), " with K=", K);

  MatView va, vb;
  const Tensor ta = as_operand(a, dt, va), tb = as_operand(b, dt, vb);

  cudaDataType_t data_type = CUDA_R_32F, scale_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const bool tf32 = dt == DType::Float32 && allow_tf32();
  switch (dt) {
    case DType::Float32: compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case DType::Float64: data_type = CUDA_R_64F; scale_type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case DType::Float16: data_type = CUDA_R_16F; break;
    case DType::BFloat16: data_type = CUDA_R_16BF; break;
    default: fail("matmul: unsupported dtype ", dtype_name(dt));
  }

  // Note [cuBLASLt layout]: cuBLASLt's A is kiln's b, its B kiln's a.
  const cublasOperation_t op_a = vb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = va.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  MatmulDesc desc;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, compute, scale_type));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  if (epilogue) {
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep.kind, sizeof ep.kind));
    KILN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep.bias, sizeof ep.bias));
    if (ep.aux) {
      const int64_t aux_ld = N;  // aux is (M, N) row-major: column-major (N, M) with ld N
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux, sizeof ep.aux));
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
  }
  Layout la, lb, lc;
  if (vb.trans) make_layout(la, data_type, K, N, vb.ld, Bt, vb.batch_stride);
  else make_layout(la, data_type, N, K, vb.ld, Bt, vb.batch_stride);
  if (va.trans) make_layout(lb, data_type, M, K, va.ld, Bt, va.batch_stride);
  else make_layout(lb, data_type, K, M, va.ld, Bt, va.batch_stride);
  make_layout(lc, data_type, N, M, N, Bt, M * N);

  const int device = out.device().index;
  const cudaStream_t stream = detail::current_cuda_stream(device);
  const uint32_t align_a = alignment_of(tb.raw_data()), align_b = alignment_of(ta.raw_data()),
                 align_c = alignment_of(out.raw_data());
  const PlanKey key{device, static_cast<int64_t>(dt), tf32, op_a, op_b, M, N, K, vb.ld, va.ld, Bt,
                    vb.batch_stride, va.batch_stride, align_a, align_b, align_c, static_cast<int64_t>(ep.kind),
                    (epilogue ? alignment_of(ep.bias) : 0) * 1024 + (ep.aux ? alignment_of(ep.aux) : 0)};
  cublasLtMatmulAlgo_t algo{};
  bool cached = false;
  {
    AlgoCache& cache = algo_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.algos.find(key);
    if (it != cache.algos.end()) {
      algo = it->second;
      cached = true;
    } else if (cache.unsupported.count(key)) {
      return false;
    }
  }
  const cublasLtHandle_t handle = lt_handle(device);
  if (!cached) {
    Preference pref;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
    const uint64_t ws = kWorkspaceBytes;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof ws));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           &align_a, sizeof align_a));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           &align_b, sizeof align_b));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                           &align_c, sizeof align_c));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                           &align_c, sizeof align_c));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, desc.d, la.d, lb.d, lc.d, lc.d, pref.d, 1, &result, &found);
    if (epilogue && (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))) {
      AlgoCache& cache = algo_cache();
      std::lock_guard<std::mutex> lock(cache.mutex);
      cache.unsupported.insert(key);
      return false;
    }
    if (st != CUBLAS_STATUS_SUCCESS) cublas_fail(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    KILN_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for ", dtype_name(dt), " (", Bt, " x ", M, "x", K,
               " @ ", K, "x", N, ")");
    algo = result.algo;
    AlgoCache& cache = algo_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.algos.emplace(key, algo);
  }
  Tensor workspace = empty_tensor({static_cast<int64_t>(kWorkspaceBytes)}, DType::Bool, out.device());
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = dt == DType::Float64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = dt == DType::Float64 ? static_cast<const void*>(&zero_d) : &zero_f;
  KILN_CUBLAS_CHECK(cublasLtMatmul(handle, desc.d, alpha, tb.raw_data(), la.d, ta.raw_data(), lb.d, beta,
                                   out.raw_data(), lc.d, out.raw_data(), lc.d, &algo, workspace.raw_data(),
                                   kWorkspaceBytes, stream));
  return true;
}

// (R, C) as a batch of one.
Tensor as3(const Tensor& t) {
  return make_tensor(t.storage(), {1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset(), t.dtype());
}

bool epilogue_dtype(DType dt) { return dt == DType::Float32 || dt == DType::Float16 || dt == DType::BFloat16; }

// Epilogue vectors and matrices read and written with 16-byte accesses.
bool aligned16(const Tensor& t) { return alignment_of(t.raw_data()) >= 16; }

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t K = a.size(2);
  if (out.numel() == 0) return;
  if (K == 0) return fill(out, 0.0);
  const DType dt = out.dtype();
  if (dt == DType::Int32 || dt == DType::Int64) {
    Tensor ta = a.dtype() == dt ? a : empty_tensor(a.sizes(), dt, a.device());
    if (a.dtype() != dt) copy(ta, a);
    Tensor tb = b.dtype() == dt ? b : empty_tensor(b.sizes(), dt, b.device());
    if (b.dtype() != dt) copy(tb, b);
    return matmul_integer(out, ta, tb);
  }
  lt_matmul(out, a, b, Epilogue{});
}

bool addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (out.numel() == 0 || a.size(1) == 0 || !epilogue_dtype(out.dtype()) || !aligned16(bias)) return false;
  KILN_CHECK(bias.is_contiguous() && bias.dtype() == out.dtype(), "internal: addmm bias must be contiguous ",
             dtype_name(out.dtype()));
  Epilogue ep;
  ep.kind = CUBLASLT_EPILOGUE_BIAS;
  ep.bias = bias.raw_data();
  return lt_matmul(as3(out), as3(a), as3(b), ep);
}

bool linear_gelu_tanh(const Tensor& out, const Tensor& preact, const Tensor& a, const Tensor& b, const Tensor& bias) {
  // cuBLASLt wants the aux leading dimension a multiple of 8 elements.
  if (out.numel() == 0 || a.size(1) == 0 || !epilogue_dtype(out.dtype()) || out.size(1) % 8 != 0 ||
      !aligned16(bias) || !aligned16(preact))
    return false;
  KILN_CHECK(bias.is_contiguous() && preact.is_contiguous() && bias.dtype() == out.dtype() &&
                 preact.dtype() == out.dtype(),
             "internal: linear_gelu_tanh bias and pre-activation must be contiguous ", dtype_name(out.dtype()));
  Epilogue ep;
  ep.kind = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  ep.bias = bias.raw_data();
  ep.aux = preact.raw_data();
  return lt_matmul(as3(out), as3(a), as3(b), ep);
}

}  // namespace kernels
}  // namespace kiln::cuda
