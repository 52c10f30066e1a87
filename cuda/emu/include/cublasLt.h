// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): a
// stand-in for the part of cuBLASLt that cuda/gemm_lt.cpp (and the version
// query in cuda/runtime.cpp) calls, with the toolkit's names and attribute
// values. cublasLtMatmul queues a reference GEMM on the stream
// (kiln::emu::enqueue, cuda/emu/queue.h) with cuBLASLt's semantics:
//
//   D = epilogue(alpha * op(A) op(B) + beta * C [+ bias]), column-major,
//
// op = N or T (C, of real data, is T), each matrix with its own leading
// dimension, BATCH_COUNT entries each STRIDED_BATCH_OFFSET elements apart
// (0: the same matrix for every entry). When beta == 0, C is not read.
// alpha and beta are host values (float for the 32F compute types, double
// for 64F), read at the call; the descriptors too are read at the call,
// the matrices, bias and aux when the work runs.
//
// Supported (anything else: NOT_SUPPORTED from the heuristic and the call):
//  - COMPUTE_32F / 32F_PEDANTIC / 32F_FAST_TF32 with scale 32F and A, B, C, D
//    all 16F, all 16BF or all 32F (FAST_TF32: 32F only, computed as exact
//    float32, which TF32 permits); COMPUTE_64F / 64F_PEDANTIC, scale 64F,
//    all 64F. Products are summed over k in increasing order in float
//    (double for 64F), and each 16-bit result is rounded once, to nearest
//    even, on store (kiln::Half / kiln::BFloat16, core/dtype.h).
//  - Epilogues DEFAULT, BIAS (a packed vector of D's type over the rows of D,
//    BIAS_BATCH_STRIDE apart, default 0) and GELU_AUX_BIAS (aux = the biased
//    result, D = its tanh GELU; aux has D's type, EPILOGUE_AUX_LD >= rows of D
//    and a multiple of 8, EPILOGUE_AUX_BATCH_STRIDE apart). No epilogue for
//    64F; bias and aux must be 16-byte aligned.
// Not here: other epilogues, FP8 and scaling pointers, device pointer mode,
// row-major or tiled orders, the Get/Algo-config API, matrix transforms.
//
// Strictness: a dimension that does not match, a leading dimension under the
// rows, unequal batch counts, C == D with another layout, a missing pointer,
// an attribute buffer of the wrong size: CUBLAS_STATUS_INVALID_VALUE. An
// algorithm remembers the preference's MIN_ALIGNMENT_{A,B,C,D}_BYTES
// (default 256) and cublasLtMatmul refuses (INVALID_VALUE) pointers less
// aligned than that, as a kernel using wider loads could not take them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/dtype.h"
#include "cuda/emu/queue.h"  // cudaStream_t, kiln::emu::enqueue
#include "cublas_api.h"
#include "library_types.h"

enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
};

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,  // int32_t (cublasComputeType_t)
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,    // int32_t (cudaDataType_t)
  CUBLASLT_MATMUL_DESC_TRANSA = 3,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,      // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,  // const void*
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,         // int64_t, elements
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,      // void*
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,           // int64_t
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13, // int64_t, elements
};

enum cublasLtMatrixLayoutAttribute_t {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                  // uint32_t (cudaDataType_t)
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                  // uint64_t
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,                  // uint64_t
  CUBLASLT_MATRIX_LAYOUT_LD = 4,                    // int64_t
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,           // int32_t
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,  // int64_t, elements
};

enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,            // uint32_t (ignored)
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext {
  uint64_t magic;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

// data[0]: a tag saying the heuristic made it; data[1..4]: the alignments (A,
// B, C, D) it was chosen for.
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

namespace kiln::emu::cublaslt {

inline constexpr uint64_t kHandleTag = 0x6b696c6e4c74ull;  // "kilnLt"
inline constexpr uint64_t kAlgoTag = 0x6b696c6e416c67ull;  // "kilnAlg"

// Copies an attribute value of exactly sizeof(T) bytes.
template <typename T>
cublasStatus_t read_attr(T& out, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&out, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

inline size_t element_size(cudaDataType_t t) {
  return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2;
}

inline uint64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256 : static_cast<uint64_t>(a & (~a + 1));  // lowest set bit
}

// One GEMM with every value it needs, taken at the call (Note above).
struct Gemm {
  cudaDataType_t type;
  bool f64;
  int64_t m, n, k, batch;
  bool ta, tb;
  const void* A;
  int64_t lda, sa;
  const void* B;
  int64_t ldb, sb;
  const void* C;
  int64_t ldc, sc;
  void* D;
  int64_t ldd, sd;
  double alpha, beta;  // a float alpha or beta converts to double and back exactly
  cublasLtEpilogue_t epilogue;
  const void* bias;
  int64_t bias_stride;
  void* aux;
  int64_t aux_ld, aux_stride;
};

// Shapes and types of a problem: INVALID_VALUE, NOT_SUPPORTED or SUCCESS
// with g's dimensions, types, transposes, strides and epilogue filled in.
inline cublasStatus_t check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, Gemm& g) {
  if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
  g.ta = d->transa != CUBLAS_OP_N;
  g.tb = d->transb != CUBLAS_OP_N;
  g.m = static_cast<int64_t>(dd->rows);
  g.n = static_cast<int64_t>(dd->cols);
  g.k = static_cast<int64_t>(g.ta ? a->rows : a->cols);
  const auto dims = [](cublasLtMatrixLayout_t l, int64_t r, int64_t cl) {
    return static_cast<int64_t>(l->rows) == r && static_cast<int64_t>(l->cols) == cl;
  };
  if (!(g.ta ? dims(a, g.k, g.m) : dims(a, g.m, g.k)) || !(g.tb ? dims(b, g.n, g.k) : dims(b, g.k, g.n)) ||
      !dims(c, g.m, g.n))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (cublasLtMatrixLayout_t l : {a, b, c, dd})
    if (l->ld < 1 || l->ld < static_cast<int64_t>(l->rows) || l->batch_count < 1 ||
        l->batch_count != dd->batch_count)
      return CUBLAS_STATUS_INVALID_VALUE;
  g.batch = dd->batch_count;
  g.lda = a->ld, g.sa = a->batch_stride, g.ldb = b->ld, g.sb = b->batch_stride;
  g.ldc = c->ld, g.sc = c->batch_stride, g.ldd = dd->ld, g.sd = dd->batch_stride;

  const cudaDataType_t t = dd->type;
  if (a->type != t || b->type != t || c->type != t) return CUBLAS_STATUS_NOT_SUPPORTED;
  switch (d->compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (d->scale != CUDA_R_32F || (t != CUDA_R_32F && t != CUDA_R_16F && t != CUDA_R_16BF))
        return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (d->scale != CUDA_R_32F || t != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      if (d->scale != CUDA_R_64F || t != CUDA_R_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  g.type = t;
  g.f64 = t == CUDA_R_64F;

  g.epilogue = d->epilogue;
  g.bias = d->bias, g.bias_stride = d->bias_batch_stride;
  g.aux = d->aux, g.aux_ld = d->aux_ld, g.aux_stride = d->aux_batch_stride;
  switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      if (g.f64 || alignment_of(d->bias) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;
      if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) break;
      if (d->aux_ld < g.m) return CUBLAS_STATUS_INVALID_VALUE;
      if (d->aux_ld % 8 != 0 || alignment_of(d->aux) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
T load(cudaDataType_t t, const void* p, int64_t i) {
  switch (t) {
    case CUDA_R_16F: return static_cast<T>(kiln::Half::to_float(static_cast<const uint16_t*>(p)[i]));
    case CUDA_R_16BF: {
      kiln::BFloat16 h;
      h.bits = static_cast<const uint16_t*>(p)[i];
      return static_cast<T>(static_cast<float>(h));
    }
    case CUDA_R_32F: return static_cast<T>(static_cast<const float*>(p)[i]);
    default: return static_cast<T>(static_cast<const double*>(p)[i]);
  }
}

template <typename T>
void store(cudaDataType_t t, void* p, int64_t i, T v) {
  switch (t) {
    case CUDA_R_16F: static_cast<uint16_t*>(p)[i] = kiln::Half::from_float(static_cast<float>(v)); break;
    case CUDA_R_16BF: static_cast<uint16_t*>(p)[i] = kiln::BFloat16::from_float(static_cast<float>(v)); break;
    case CUDA_R_32F: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    default: static_cast<double*>(p)[i] = static_cast<double>(v); break;
  }
}

// Batch entry `e` of a matrix `stride` elements apart.
inline const void* entry(const void* p, cudaDataType_t t, int64_t e, int64_t stride) {
  return static_cast<const char*>(p) + e * stride * static_cast<int64_t>(element_size(t));
}

template <typename T>
T gelu_tanh(T x) {  // kiln's GeluTanh (core/cpu/elementwise.cpp)
  const T k = T(0.79788456080286535588), c = T(0.044715);
  return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
}

// The queued work: T is the accumulation type.
template <typename T>
void run(const Gemm& g) {
  const size_t m = static_cast<size_t>(g.m), n = static_cast<size_t>(g.n), k = static_cast<size_t>(g.k);
  std::vector<T> a(m * k), b(k * n), acc(m);  // op(A) (m, k) and op(B) (k, n), column-major
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  const bool bias = g.epilogue != CUBLASLT_EPILOGUE_DEFAULT, gelu = g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  for (int64_t e = 0; e < g.batch; ++e) {
    const void* A = entry(g.A, g.type, e, g.sa);
    const void* B = entry(g.B, g.type, e, g.sb);
    for (int64_t p = 0; p < g.k; ++p)
      for (int64_t i = 0; i < g.m; ++i)
        a[static_cast<size_t>(i + p * g.m)] = load<T>(g.type, A, g.ta ? p + i * g.lda : i + p * g.lda);
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t p = 0; p < g.k; ++p)
        b[static_cast<size_t>(p + j * g.k)] = load<T>(g.type, B, g.tb ? j + p * g.ldb : p + j * g.ldb);
    void* D = const_cast<void*>(entry(g.D, g.type, e, g.sd));
    const void* C = g.beta != 0 ? entry(g.C, g.type, e, g.sc) : nullptr;
    const void* bv = bias ? entry(g.bias, g.type, e, g.bias_stride) : nullptr;
    void* aux = gelu ? const_cast<void*>(entry(g.aux, g.type, e, g.aux_stride)) : nullptr;
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < m; ++i) acc[i] = T(0);
      for (size_t p = 0; p < k; ++p) {  // each acc[i] sums over p in increasing order
        const T bpj = b[p + j * k];
        const T* ap = a.data() + p * m;
        for (size_t i = 0; i < m; ++i) acc[i] += ap[i] * bpj;
      }
      const auto jj = static_cast<int64_t>(j);
      for (size_t i = 0; i < m; ++i) {
        const auto ii = static_cast<int64_t>(i);
        T v = alpha * acc[i];
        if (C) v += beta * load<T>(g.type, C, ii + jj * g.ldc);
        if (bv) v += load<T>(g.type, bv, ii);
        if (aux) {
          store<T>(g.type, aux, ii + jj * g.aux_ld, v);
          v = gelu_tanh(v);
        }
        store<T>(g.type, D, ii + jj * g.ldd, v);
      }
    }
  }
}

}  // namespace kiln::emu::cublaslt

inline size_t cublasLtGetVersion() { return 0; }  // "0.0.0": no real cuBLASLt

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{kiln::emu::cublaslt::kHandleTag};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t size) {
  using kiln::emu::cublaslt::read_attr;
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  int32_t i32 = 0;
  uint32_t u32 = 0;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if ((st = read_attr(i32, buf, size)) == CUBLAS_STATUS_SUCCESS) desc->compute = static_cast<cublasComputeType_t>(i32);
      return st;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if ((st = read_attr(i32, buf, size)) == CUBLAS_STATUS_SUCCESS) desc->scale = static_cast<cudaDataType_t>(i32);
      return st;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if ((st = read_attr(i32, buf, size)) != CUBLAS_STATUS_SUCCESS) return st;
      if (i32 < CUBLAS_OP_N || i32 > CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) = static_cast<cublasOperation_t>(i32);
      return st;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if ((st = read_attr(u32, buf, size)) == CUBLAS_STATUS_SUCCESS) desc->epilogue = static_cast<cublasLtEpilogue_t>(u32);
      return st;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attr(desc->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return read_attr(desc->bias_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return read_attr(desc->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return read_attr(desc->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return read_attr(desc->aux_batch_stride, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                       cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                       size_t size) {
  using kiln::emu::cublaslt::read_attr;
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t u32 = 0;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      if ((st = read_attr(u32, buf, size)) == CUBLAS_STATUS_SUCCESS) layout->type = static_cast<cudaDataType_t>(u32);
      return st;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return read_attr(layout->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return read_attr(layout->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD: return read_attr(layout->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return read_attr(layout->batch_count, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return read_attr(layout->batch_stride, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                           size_t size) {
  using kiln::emu::cublaslt::read_attr;
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t u32 = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return read_attr(u32, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attr(pref->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attr(pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm (the reference GEMM) when the problem is supported;
// NOT_SUPPORTED with *returnAlgoCount = 0 when it is not.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                     cublasLtMatmulPreference_t pref, int requestedAlgoCount,
                                                     cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                     int* returnAlgoCount) {
  namespace lt = kiln::emu::cublaslt;
  if (returnAlgoCount) *returnAlgoCount = 0;
  if (!handle || handle->magic != lt::kHandleTag) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!pref || !heuristicResultsArray || !returnAlgoCount || requestedAlgoCount < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  lt::Gemm g{};
  if (const cublasStatus_t st = lt::check(desc, a, b, c, d, g); st != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  r = cublasLtMatmulHeuristicResult_t{};
  r.algo.data[0] = lt::kAlgoTag;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = pref->min_alignment[i];
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// Checks and queues D = epilogue(alpha op(A) op(B) + beta C) on `stream`.
// algo: one from the heuristic, or null (the reference GEMM, no alignment
// requirement); the workspace is not used.
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                     cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                     const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                                     cudaStream_t stream) {
  namespace lt = kiln::emu::cublaslt;
  (void)workspace;
  (void)workspaceSizeInBytes;
  if (!handle || handle->magic != lt::kHandleTag) return CUBLAS_STATUS_NOT_INITIALIZED;
  lt::Gemm g{};
  if (const cublasStatus_t st = lt::check(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, g); st != CUBLAS_STATUS_SUCCESS)
    return st;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.f64) {
    g.alpha = *static_cast<const double*>(alpha);
    g.beta = *static_cast<const double*>(beta);
  } else {
    g.alpha = *static_cast<const float*>(alpha);
    g.beta = *static_cast<const float*>(beta);
  }
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!D || (g.k > 0 && (!A || !B)) || (g.beta != 0 && !C)) return CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && (g.ldc != g.ldd || g.sc != g.sd)) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !g.bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS && !g.aux) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) {
    if (algo->data[0] != lt::kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; ++i)
      if (ptrs[i] && lt::alignment_of(ptrs[i]) < algo->data[1 + i]) return CUBLAS_STATUS_INVALID_VALUE;
  }
  g.A = A, g.B = B, g.C = C, g.D = D;
  if (g.f64) kiln::emu::enqueue(stream, "cublasLtMatmul", [g] { lt::run<double>(g); });
  else kiln::emu::enqueue(stream, "cublasLtMatmul", [g] { lt::run<float>(g); });
  return CUBLAS_STATUS_SUCCESS;
}
