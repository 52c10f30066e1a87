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
// then CUBLAS_COMPUTE_32F_FAST_TF32.
//
// Note [cuBLASLt plan cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Setting a GEMM up costs more host time than launching a small one: a matmul
// descriptor, three matrix layouts, a preference and a heuristic query. A Plan
// keeps the descriptor, the layouts and the algorithm the heuristic chose (or
// the answer that an epilogue has none), keyed by everything they encode
// (PlanKey: device, dtype, TF32, transposes, M, N, K, leading dims, batch count
// and strides, operand alignments, epilogue). The preference only feeds the
// heuristic, so it is made on a miss and dropped. The bias and aux pointers
// change from call to call: they are set on the plan's descriptor under the
// plan's mutex, held until cublasLtMatmul has returned (it reads the
// descriptor on the host), so threads may share plans. kMaxPlans plans are
// kept, the least recently used going first (a call that holds one keeps it
// alive until it is done).
//
// The workspace is one kWorkspaceBytes buffer per (device, stream), allocated
// on that stream from the caching allocator. GEMMs queued on one stream run in
// order and share it safely; one buffer shared by two streams would let two
// GEMMs write it at once, so each stream gets its own. At most kMaxWorkspaces
// are kept; dropping one is safe at any time, because the allocator reuses
// its block only in the order of the stream it was allocated on.
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
#include <memory>
#include <mutex>

#include "core/gemm_plan.h"
#include "cuda/cuda.h"
#include "cuda/kernels.cuh"
#include "cuda/lru_cache.h"
#include "cuda/runtime.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper
constexpr size_t kMaxPlans = 1024;                     // Note [cuBLASLt plan cache]
constexpr size_t kMaxWorkspaces = 64;

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

// An operand as cuBLASLt takes it (core/gemm_plan.h, shared with the CPU's BLAS).
Tensor as_operand(const Tensor& t, DType dtype, GemmOperand& v) {
  return gemm_operand(t, dtype, v, [](const Tensor& d, const Tensor& s) { kernels::copy(d, s); });
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
  MatmulDesc() = default;
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
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

// What an epilogue adds to the plain GEMM (Note [cuBLASLt epilogues]).
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (N) contiguous, out's dtype
  void* aux = nullptr;         // (M, N) contiguous, out's dtype (GELU_AUX)
};

// One GEMM problem as cuBLASLt takes it (Note [cuBLASLt layout]): its A is
// kiln's b, its B kiln's a; C and D are out.
struct Problem {
  int device = 0;
  DType dt = DType::Float32;
  bool tf32 = false;
  int64_t Bt = 1, M = 0, N = 0, K = 0;
  GemmOperand va, vb;  // kiln's a and b
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  Epilogue ep;
};

using PlanKey = std::array<int64_t, 18>;

PlanKey plan_key(const Problem& p) {
  const bool epilogue = p.ep.kind != CUBLASLT_EPILOGUE_DEFAULT;
  return PlanKey{p.device, static_cast<int64_t>(p.dt), p.tf32, p.vb.trans, p.va.trans, p.M, p.N, p.K, p.vb.ld,
                 p.va.ld, p.Bt, p.vb.batch_stride, p.va.batch_stride, p.align_a, p.align_b, p.align_c,
                 static_cast<int64_t>(p.ep.kind),
                 (epilogue ? alignment_of(p.ep.bias) : 0) * 1024 + (p.ep.aux ? alignment_of(p.ep.aux) : 0)};
}

// Note [cuBLASLt plan cache]: everything a GEMM of one PlanKey needs but its pointers.
struct Plan {
  std::mutex mutex;  // the descriptor's pointer attributes, set per call
  MatmulDesc desc;
  Layout la, lb, lc;
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;  // false: cuBLASLt has no algorithm for this epilogue problem
};

detail::LruCache<PlanKey, std::shared_ptr<Plan>>& plan_cache() {
  static auto* cache = new detail::LruCache<PlanKey, std::shared_ptr<Plan>>(kMaxPlans);  // never destroyed
  return *cache;
}

// (device, stream handle) -> that stream's workspace.
using WorkspaceKey = std::pair<int, uintptr_t>;

detail::LruCache<WorkspaceKey, Tensor>& workspace_cache() {
  static auto* cache = new detail::LruCache<WorkspaceKey, Tensor>(kMaxWorkspaces);  // never destroyed
  return *cache;
}

// The workspace of the current stream of `device` (Note [cuBLASLt plan cache]).
Tensor workspace(int device, cudaStream_t stream) {
  const WorkspaceKey key{device, reinterpret_cast<uintptr_t>(stream)};
  if (std::optional<Tensor> w = workspace_cache().find(key)) return *w;
  // Allocated on `stream`, the current stream: its block follows that stream's order.
  Tensor w = empty_tensor({static_cast<int64_t>(kWorkspaceBytes)}, DType::Bool, Device(DeviceType::CUDA, device));
  return workspace_cache().insert(key, std::move(w));
}

void set_pointers(const Plan& plan, const Epilogue& ep) {
  if (ep.kind == CUBLASLT_EPILOGUE_DEFAULT) return;
  KILN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep.bias, sizeof ep.bias));
  if (ep.aux)
    KILN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux, sizeof ep.aux));
}

// Descriptors, layouts and the heuristic's algorithm for `p` (a miss).
std::shared_ptr<Plan> make_plan(const Problem& p) {
  cudaDataType_t data_type = CUDA_R_32F, scale_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (p.dt) {
    case DType::Float32: compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case DType::Float64: data_type = CUDA_R_64F; scale_type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case DType::Float16: data_type = CUDA_R_16F; break;
    case DType::BFloat16: data_type = CUDA_R_16BF; break;
    default: fail("matmul: unsupported dtype ", dtype_name(p.dt));
  }
  auto plan = std::make_shared<Plan>();
  // Note [cuBLASLt layout]: cuBLASLt's A is kiln's b, its B kiln's a.
  const cublasOperation_t op_a = p.vb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.va.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDesc_t desc = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, scale_type));
  plan->desc.d = desc;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  if (p.ep.kind != CUBLASLT_EPILOGUE_DEFAULT) {
    KILN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.ep.kind, sizeof p.ep.kind));
    if (p.ep.aux) {
      const int64_t aux_ld = p.N;  // aux is (M, N) row-major: column-major (N, M) with ld N
      KILN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    set_pointers(*plan, p.ep);  // the heuristic may look at them
  }
  if (p.vb.trans) make_layout(plan->la, data_type, p.K, p.N, p.vb.ld, p.Bt, p.vb.batch_stride);
  else make_layout(plan->la, data_type, p.N, p.K, p.vb.ld, p.Bt, p.vb.batch_stride);
  if (p.va.trans) make_layout(plan->lb, data_type, p.M, p.K, p.va.ld, p.Bt, p.va.batch_stride);
  else make_layout(plan->lb, data_type, p.K, p.M, p.va.ld, p.Bt, p.va.batch_stride);
  make_layout(plan->lc, data_type, p.N, p.M, p.N, p.Bt, p.M * p.N);

  Preference pref;
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
  const uint64_t ws = kWorkspaceBytes;
  KILN_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const uint32_t*> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p.align_c}};
  for (const auto& [attr, value] : aligns)
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, attr, value, sizeof *value));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle(p.device), desc, plan->la.d, plan->lb.d,
                                                           plan->lc.d, plan->lc.d, pref.d, 1, &result, &found);
  if (p.ep.kind != CUBLASLT_EPILOGUE_DEFAULT &&
      (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))) {
    plan->supported = false;
    return plan;
  }
  if (st != CUBLAS_STATUS_SUCCESS) cublas_fail(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  KILN_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for ", dtype_name(p.dt), " (", p.Bt, " x ", p.M, "x", p.K,
             " @ ", p.K, "x", p.N, ")");
  plan->algo = result.algo;
  return plan;
}

}  // namespace

void CudaRuntime::set_allow_tf32(bool allow) { tf32_flag().store(allow); }
bool CudaRuntime::allow_tf32() { return tf32_flag().load(); }

namespace kernels {
namespace {

// The GEMM with an optional epilogue; false when cuBLASLt has no algorithm
// for that epilogue (nothing was queued then). Without one it always runs.
bool lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Epilogue& ep) {
  Problem p;
  p.Bt = out.size(0);
  p.M = out.size(1);
  p.N = out.size(2);
  p.K = a.size(2);
  p.dt = out.dtype();
  KILN_CHECK(is_floating(p.dt), "matmul: not defined for ", dtype_name(p.dt), " tensors");
  KILN_CHECK(out.is_contiguous(), "internal: matmul output must be contiguous");
  constexpr int64_t kMax = int64_t{1} << 31;
  KILN_CHECK(p.M < kMax && p.N < kMax && p.K < kMax && p.Bt < kMax, "matmul: dimensions too large for cuBLASLt: ",
             shape_str(out.sizes()), " with K=", p.K);
  const Tensor ta = as_operand(a, p.dt, p.va), tb = as_operand(b, p.dt, p.vb);
  p.device = out.device().index;
  p.tf32 = p.dt == DType::Float32 && tf32_flag().load();
  p.align_a = alignment_of(tb.raw_data());
  p.align_b = alignment_of(ta.raw_data());
  p.align_c = alignment_of(out.raw_data());
  p.ep = ep;

  const PlanKey key = plan_key(p);
  std::shared_ptr<Plan> plan;
  if (std::optional<std::shared_ptr<Plan>> hit = plan_cache().find(key)) plan = *hit;
  else plan = plan_cache().insert(key, make_plan(p));
  if (!plan->supported) return false;

  const cudaStream_t stream = detail::current_cuda_stream(p.device);
  const Tensor ws = workspace(p.device, stream);
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = p.dt == DType::Float64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = p.dt == DType::Float64 ? static_cast<const void*>(&zero_d) : &zero_f;
  std::lock_guard<std::mutex> lock(plan->mutex);
  set_pointers(*plan, ep);
  KILN_CUBLAS_CHECK(cublasLtMatmul(lt_handle(p.device), plan->desc.d, alpha, tb.raw_data(), plan->la.d,
                                   ta.raw_data(), plan->lb.d, beta, out.raw_data(), plan->lc.d, out.raw_data(),
                                   plan->lc.d, &plan->algo, ws.raw_data(), kWorkspaceBytes, stream));
  return true;
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
  return lt_matmul(matrix_as_batch(out), matrix_as_batch(a), matrix_as_batch(b), ep);
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
  return lt_matmul(matrix_as_batch(out), matrix_as_batch(a), matrix_as_batch(b), ep);
}

}  // namespace kernels
}  // namespace kiln::cuda
