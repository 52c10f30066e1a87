// Multi-tensor kernels for the optimizer step on CUDA: AdamW and LAMB
// updates, the global gradient norm (clip_grad_norm) and the non-finite check
// (GradScaler::unscale_), each over a whole list of tensors in a few
// launches. Host API in cuda/cuda.h; CPU twins in optim/adamw.cpp,
// optim/lamb.cpp, optim/clip_grad.cpp and optim/grad_scaler.cpp.
//
// Note [Multi-tensor launches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A BERT step updates a few hundred parameters, many of them small (biases,
// LayerNorm weights): one launch per statement per parameter (the generic
// path) is thousands of launches. Here the host cuts every tensor into chunks
// of kChunk elements and uploads two tables in one copy:
//   TensorRec[T]  pointers, element count, per-tensor scalars, its chunk range
//   ChunkRec[C]   (tensor index, first element) for each chunk
// and one block of kThreads threads handles one chunk (grid = C). Thread t of
// a block visits elements begin + t, begin + t + kThreads, ... of its chunk.
//
// Determinism: reductions (LAMB's norms, the gradient norm) accumulate in
// float64 per thread in that fixed visiting order, combine a block's threads
// in a fixed shared-memory tree into one partial per chunk, and sum a
// tensor's (or the list's) chunk partials sequentially in chunk order in a
// second kernel. No atomics; the result depends only on the data and the
// tensor sizes. The non-finite check stores 1 to a flag from any thread that
// sees an inf or NaN: every store writes the same value, so the outcome does
// not depend on which thread wins.
//
// Rounding: the elementwise statements use the _rn intrinsics (no FMA
// contraction), in the CPU loops' order with the CPU's scalars rounded to T
// on the host, so AdamW matches the CPU loop bit for bit and LAMB up to the
// order of its float64 norm sums.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/runtime.h"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block

struct TensorRec {
  void* ptr[4];       // param, grad, exp_avg, exp_avg_sq (or just the tensor)
  int64_t n;          // elements
  double scalar[4];   // per-tensor scalars, already rounded to the tensor's dtype
  int64_t first_chunk;
  int64_t num_chunks;
};

struct ChunkRec {
  int64_t tensor;
  int64_t begin;
};

// ---- rounding-exact arithmetic (no contraction) -------------------------------
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// Fixed-tree sum of one value per thread; thread 0 gets the block's total.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// max that keeps a NaN once seen (clip_grad.cpp's combine_max)
__device__ __forceinline__ double max_nan(double a, double b) { return isnan(a) || a > b ? a : b; }

__device__ double block_max(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] = max_nan(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// ---- AdamW (optim/adamw.cpp adamw_update) ------------------------------------
// scalar = {decay, neg_step_size, bc2_sqrt, decay != 1}
template <typename T>
__global__ void adamw_kernel(const TensorRec* tensors, const ChunkRec* chunks, T b1, T c1, T b2, T c2, T eps) {
  const ChunkRec c = chunks[blockIdx.x];
  const TensorRec& t = tensors[c.tensor];
  T* p = static_cast<T*>(t.ptr[0]);
  const T* g = static_cast<const T*>(t.ptr[1]);
  T* m = static_cast<T*>(t.ptr[2]);
  T* v = static_cast<T*>(t.ptr[3]);
  const T decay = static_cast<T>(t.scalar[0]), neg_step = static_cast<T>(t.scalar[1]),
          bc2_sqrt = static_cast<T>(t.scalar[2]);
  const bool apply_decay = t.scalar[3] != 0.0;
  const int64_t end = min(c.begin + kChunk, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) {
    const T gi = g[i];
    T pi = p[i];
    if (apply_decay) pi = mul_rn(pi, decay);
    const T mi = add_rn(mul_rn(m[i], b1), mul_rn(gi, c1));
    const T vi = add_rn(mul_rn(v[i], b2), mul_rn(mul_rn(gi, c2), gi));
    pi = add_rn(pi, div_rn(mul_rn(mi, neg_step), add_rn(div_rn(sqrt_rn(vi), bc2_sqrt), eps)));
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

// ---- LAMB (optim/lamb.cpp lamb_update) ---------------------------------------
// scalar = {bc1, bc2, -lr (unused here), 0}
template <typename T>
__device__ __noinline__ T lamb_direction(T p, T m, T v, T bc1, T bc2, T eps, T wd) {
  // u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p
  return add_rn(div_rn(div_rn(m, bc1), add_rn(sqrt_rn(div_rn(v, bc2)), eps)), mul_rn(wd, p));
}

// Pass 1: moments, and per chunk the float64 sums of p^2 and u^2.
template <typename T>
__global__ void lamb_moments_kernel(const TensorRec* tensors, const ChunkRec* chunks, double* partials, T b1, T c1,
                                    T b2, T c2, T eps, T wd) {
  __shared__ double shared[kThreads];
  const ChunkRec c = chunks[blockIdx.x];
  const TensorRec& t = tensors[c.tensor];
  const T* p = static_cast<const T*>(t.ptr[0]);
  const T* g = static_cast<const T*>(t.ptr[1]);
  T* m = static_cast<T*>(t.ptr[2]);
  T* v = static_cast<T*>(t.ptr[3]);
  const T bc1 = static_cast<T>(t.scalar[0]), bc2 = static_cast<T>(t.scalar[1]);
  const int64_t end = min(c.begin + kChunk, t.n);
  double sp = 0.0, su = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) {
    const T gi = g[i];
    const T mi = add_rn(mul_rn(m[i], b1), mul_rn(gi, c1));
    const T vi = add_rn(mul_rn(v[i], b2), mul_rn(mul_rn(gi, c2), gi));
    m[i] = mi;
    v[i] = vi;
    const double pd = static_cast<double>(p[i]);
    const double ud = static_cast<double>(lamb_direction(p[i], mi, vi, bc1, bc2, eps, wd));
    sp = __dadd_rn(sp, __dmul_rn(pd, pd));
    su = __dadd_rn(su, __dmul_rn(ud, ud));
  }
  sp = block_sum(sp, shared);
  su = block_sum(su, shared);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = sp;
    partials[2 * blockIdx.x + 1] = su;
  }
}

// Pass 2: one thread per tensor sums its chunk partials in order and forms
// -(lr * trust ratio), rounded to T and kept as a double.
template <typename T>
__global__ void lamb_ratio_kernel(const TensorRec* tensors, int64_t num_tensors, const double* partials,
                                  double* scales, double lr) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= num_tensors) return;
  const TensorRec& t = tensors[k];
  double sp = 0.0, su = 0.0;
  for (int64_t j = t.first_chunk; j < t.first_chunk + t.num_chunks; ++j) {
    sp += partials[2 * j];
    su += partials[2 * j + 1];
  }
  const double p_norm = sqrt(sp), u_norm = sqrt(su);
  const double ratio = p_norm > 0 && u_norm > 0 ? p_norm / u_norm : 1.0;
  scales[k] = static_cast<double>(static_cast<T>(-(lr * ratio)));
}

// Pass 3: p += scale * u, u recomputed by the same function from the same values.
template <typename T>
__global__ void lamb_apply_kernel(const TensorRec* tensors, const ChunkRec* chunks, const double* scales, T eps,
                                  T wd) {
  const ChunkRec c = chunks[blockIdx.x];
  const TensorRec& t = tensors[c.tensor];
  T* p = static_cast<T*>(t.ptr[0]);
  const T* m = static_cast<const T*>(t.ptr[2]);
  const T* v = static_cast<const T*>(t.ptr[3]);
  const T bc1 = static_cast<T>(t.scalar[0]), bc2 = static_cast<T>(t.scalar[1]);
  const T scale = static_cast<T>(scales[c.tensor]);
  const int64_t end = min(c.begin + kChunk, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads)
    p[i] = add_rn(p[i], mul_rn(scale, lamb_direction(p[i], m[i], v[i], bc1, bc2, eps, wd)));
}

// ---- gradient norm (optim/clip_grad.cpp) --------------------------------------
template <typename T, bool kMax>
__global__ void norm_partials_kernel(const TensorRec* tensors, const ChunkRec* chunks, double* partials) {
  __shared__ double shared[kThreads];
  const ChunkRec c = chunks[blockIdx.x];
  const TensorRec& t = tensors[c.tensor];
  const T* x = static_cast<const T*>(t.ptr[0]);
  const int64_t end = min(c.begin + kChunk, t.n);
  double acc = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) {
    const double xi = static_cast<double>(x[i]);
    if constexpr (kMax) acc = max_nan(acc, fabs(xi));
    else acc = __dadd_rn(acc, __dmul_rn(xi, xi));
  }
  acc = kMax ? block_max(acc, shared) : block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One thread: the chunk partials in chunk order.
template <bool kMax>
__global__ void norm_final_kernel(const double* partials, int64_t n, double* out) {
  double acc = 0.0;
  for (int64_t j = 0; j < n; ++j) acc = kMax ? max_nan(acc, partials[j]) : acc + partials[j];
  *out = acc;
}

// ---- non-finite check (optim/grad_scaler.cpp) ---------------------------------
// scalar[0] = element size in bytes (2, 4 or 8); scalar[1] = 1 for float16.
__global__ void nonfinite_kernel(const TensorRec* tensors, const ChunkRec* chunks, int* flag) {
  const ChunkRec c = chunks[blockIdx.x];
  const TensorRec& t = tensors[c.tensor];
  const int size = static_cast<int>(t.scalar[0]);
  const int64_t end = min(c.begin + kChunk, t.n);
  bool bad = false;
  if (size == 4) {
    const uint32_t* x = static_cast<const uint32_t*>(t.ptr[0]);
    for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) bad |= (x[i] & 0x7f800000u) == 0x7f800000u;
  } else if (size == 8) {
    const unsigned long long* x = static_cast<const unsigned long long*>(t.ptr[0]);
    for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads)
      bad |= (x[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  } else {
    const uint16_t mask = t.scalar[1] != 0.0 ? 0x7c00u : 0x7f80u;  // float16 : bfloat16
    const uint16_t* x = static_cast<const uint16_t*>(t.ptr[0]);
    for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) bad |= (x[i] & mask) == mask;
  }
  if (bad) *flag = 1;  // every writer stores the same value (Note [Multi-tensor launches])
}

// ---- host side ------------------------------------------------------------------

// The two tables of Note [Multi-tensor launches], on the device.
struct Plan {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<TensorRec> tensors;
  std::vector<ChunkRec> chunks;
  Tensor table;  // device bytes: TensorRec[T] then ChunkRec[C]

  const TensorRec* dev_tensors() const { return static_cast<const TensorRec*>(table.raw_data()); }
  const ChunkRec* dev_chunks() const {
    return reinterpret_cast<const ChunkRec*>(static_cast<const char*>(table.raw_data()) +
                                             tensors.size() * sizeof(TensorRec));
  }
};

void check_list(const std::vector<Tensor>& list, const Tensor& first, const char* fn, const char* what) {
  for (const Tensor& t : list) {
    KILN_CHECK(t.defined() && t.device() == first.device() && t.dtype() == first.dtype() && t.is_contiguous(), fn,
               ": every ", what, " must be a contiguous ", dtype_name(first.dtype()), " tensor on ",
               first.device().str(), ", got ", t.defined() ? t.str() : std::string("an undefined tensor"));
  }
}

// Adds one tensor (skipped when empty) and its chunks.
void add_tensor(Plan& plan, std::array<void*, 4> ptrs, int64_t n, std::array<double, 4> scalars) {
  if (n == 0) return;
  TensorRec r{};
  for (int k = 0; k < 4; ++k) {
    r.ptr[k] = ptrs[static_cast<size_t>(k)];
    r.scalar[k] = scalars[static_cast<size_t>(k)];
  }
  r.n = n;
  r.first_chunk = static_cast<int64_t>(plan.chunks.size());
  r.num_chunks = (n + kChunk - 1) / kChunk;
  const int64_t index = static_cast<int64_t>(plan.tensors.size());
  for (int64_t b = 0; b < n; b += kChunk) plan.chunks.push_back(ChunkRec{index, b});
  plan.tensors.push_back(r);
}

// Uploads the tables on the current stream (pageable source: staged before
// cudaMemcpyAsync returns, so the host vectors may go at once).
void upload(Plan& plan) {
  KILN_CHECK(plan.chunks.size() < (size_t{1} << 31), "multi-tensor kernel: too many chunks (", plan.chunks.size(), ")");
  const size_t tb = plan.tensors.size() * sizeof(TensorRec), cb = plan.chunks.size() * sizeof(ChunkRec);
  std::vector<char> host(tb + cb);
  std::memcpy(host.data(), plan.tensors.data(), tb);
  std::memcpy(host.data() + tb, plan.chunks.data(), cb);
  plan.table = empty_tensor({static_cast<int64_t>(host.size())}, DType::Bool, Device(DeviceType::CUDA, plan.device));
  KILN_CUDA_CHECK(cudaMemcpyAsync(plan.table.raw_data(), host.data(), host.size(), cudaMemcpyHostToDevice, plan.stream));
}

Plan start_plan(const Tensor& first) {
  Plan plan;
  plan.device = first.device().index;
  plan.stream = detail::current_cuda_stream(plan.device);
  return plan;
}

unsigned grid_of(const Plan& plan) { return static_cast<unsigned>(plan.chunks.size()); }

template <typename T>
double round_to(double x) { return static_cast<double>(static_cast<T>(x)); }

template <typename F>
void dispatch_f32_f64(DType dt, const char* fn, F&& f) {
  if (dt == DType::Float32) return f(float{});
  if (dt == DType::Float64) return f(double{});
  fail(fn, ": tensors must be float32 or float64, got ", dtype_name(dt));
}

}  // namespace

void CudaRuntime::multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                                     const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                                     double beta2, double eps) {
  const size_t n = params.size();
  KILN_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
             "multi_tensor_adamw: the lists differ in length");
  if (n == 0) return;
  const Tensor& first = params.front();
  KILN_CHECK(first.device().is_cuda(), "multi_tensor_adamw: parameters must be CUDA tensors, got ", first.str());
  for (const auto* list : {&params, &grads, &exp_avgs, &exp_avg_sqs}) check_list(*list, first, "multi_tensor_adamw", "tensor");
  detail::DeviceGuard guard(first.device().index);
  dispatch_f32_f64(first.dtype(), "multi_tensor_adamw", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    const double decay = round_to<T>(1.0 - lr * weight_decay);
    for (size_t i = 0; i < n; ++i) {
      KILN_CHECK(grads[i].numel() == params[i].numel() && exp_avgs[i].numel() == params[i].numel() &&
                     exp_avg_sqs[i].numel() == params[i].numel(),
                 "multi_tensor_adamw: tensor ", i, " has mismatched sizes");
      const double t = static_cast<double>(steps[i]);
      const double bc2_sqrt = round_to<T>(std::sqrt(1.0 - std::pow(beta2, t)));
      const double neg_step = round_to<T>(-(lr / (1.0 - std::pow(beta1, t))));
      add_tensor(plan, {params[i].raw_data(), grads[i].raw_data(), exp_avgs[i].raw_data(), exp_avg_sqs[i].raw_data()},
                 params[i].numel(), {decay, neg_step, bc2_sqrt, decay != 1.0 ? 1.0 : 0.0});
    }
    if (plan.chunks.empty()) return;
    upload(plan);
    KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, adamw_kernel<T>)(
        plan.dev_tensors(), plan.dev_chunks(), static_cast<T>(beta1), static_cast<T>(1.0 - beta1),
        static_cast<T>(beta2), static_cast<T>(1.0 - beta2), static_cast<T>(eps));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void CudaRuntime::multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                    const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                                    const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                                    double beta2, double eps, bool bias_correction) {
  const size_t n = params.size();
  KILN_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
             "multi_tensor_lamb: the lists differ in length");
  if (n == 0) return;
  const Tensor& first = params.front();
  KILN_CHECK(first.device().is_cuda(), "multi_tensor_lamb: parameters must be CUDA tensors, got ", first.str());
  for (const auto* list : {&params, &grads, &exp_avgs, &exp_avg_sqs}) check_list(*list, first, "multi_tensor_lamb", "tensor");
  detail::DeviceGuard guard(first.device().index);
  dispatch_f32_f64(first.dtype(), "multi_tensor_lamb", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    for (size_t i = 0; i < n; ++i) {
      KILN_CHECK(grads[i].numel() == params[i].numel() && exp_avgs[i].numel() == params[i].numel() &&
                     exp_avg_sqs[i].numel() == params[i].numel(),
                 "multi_tensor_lamb: tensor ", i, " has mismatched sizes");
      const double t = static_cast<double>(steps[i]);
      const double bc1 = bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
      const double bc2 = bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
      add_tensor(plan, {params[i].raw_data(), grads[i].raw_data(), exp_avgs[i].raw_data(), exp_avg_sqs[i].raw_data()},
                 params[i].numel(), {round_to<T>(bc1), round_to<T>(bc2), 0.0, 0.0});
    }
    if (plan.chunks.empty()) return;
    upload(plan);
    const Device dev = first.device();
    Tensor partials = empty_tensor({static_cast<int64_t>(2 * plan.chunks.size())}, DType::Float64, dev);
    Tensor scales = empty_tensor({static_cast<int64_t>(plan.tensors.size())}, DType::Float64, dev);
    const T b1 = static_cast<T>(beta1), c1 = static_cast<T>(1.0 - beta1), b2 = static_cast<T>(beta2),
            c2 = static_cast<T>(1.0 - beta2), eps_t = static_cast<T>(eps), wd = static_cast<T>(weight_decay);
    double* part = static_cast<double*>(partials.raw_data());
    double* sc = static_cast<double*>(scales.raw_data());
    KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, lamb_moments_kernel<T>)(plan.dev_tensors(), plan.dev_chunks(), part,
                                                                        b1, c1, b2, c2, eps_t, wd);
    KILN_CUDA_CHECK_LAUNCH();
    const int64_t nt = static_cast<int64_t>(plan.tensors.size());
    KILN_LAUNCH(static_cast<unsigned>((nt + 127) / 128), 128, 0, plan.stream, lamb_ratio_kernel<T>)(plan.dev_tensors(), nt, part,
                                                                                          sc, lr);
    KILN_CUDA_CHECK_LAUNCH();
    KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, lamb_apply_kernel<T>)(plan.dev_tensors(), plan.dev_chunks(), sc, eps_t,
                                                                      wd);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

double CudaRuntime::multi_tensor_norm(const std::vector<Tensor>& tensors, double norm_type) {
  KILN_CHECK(norm_type == 2.0 || std::isinf(norm_type), "multi_tensor_norm: norm_type must be 2 or infinity, got ",
             norm_type);
  if (tensors.empty()) return 0.0;
  const Tensor& first = tensors.front();
  KILN_CHECK(first.device().is_cuda(), "multi_tensor_norm: tensors must be CUDA tensors, got ", first.str());
  check_list(tensors, first, "multi_tensor_norm", "tensor");
  detail::DeviceGuard guard(first.device().index);
  double result = 0.0;
  dispatch_f32_f64(first.dtype(), "multi_tensor_norm", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    for (const Tensor& t : tensors) add_tensor(plan, {t.raw_data(), nullptr, nullptr, nullptr}, t.numel(), {0, 0, 0, 0});
    if (plan.chunks.empty()) return;
    upload(plan);
    const int64_t nc = static_cast<int64_t>(plan.chunks.size());
    Tensor partials = empty_tensor({nc + 1}, DType::Float64, first.device());  // [nc]: the total
    double* part = static_cast<double*>(partials.raw_data());
    const bool inf = std::isinf(norm_type);
    if (inf) KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, norm_partials_kernel<T, true>)(plan.dev_tensors(), plan.dev_chunks(), part);
    else KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, norm_partials_kernel<T, false>)(plan.dev_tensors(), plan.dev_chunks(), part);
    KILN_CUDA_CHECK_LAUNCH();
    if (inf) KILN_LAUNCH(1, 1, 0, plan.stream, norm_final_kernel<true>)(part, nc, part + nc);
    else KILN_LAUNCH(1, 1, 0, plan.stream, norm_final_kernel<false>)(part, nc, part + nc);
    KILN_CUDA_CHECK_LAUNCH();
    KILN_CUDA_CHECK(cudaMemcpyAsync(&result, part + nc, sizeof result, cudaMemcpyDeviceToHost, plan.stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(plan.stream));
  });
  return std::isinf(norm_type) ? result : std::sqrt(result);
}

bool CudaRuntime::multi_tensor_all_finite(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> floating;
  for (const Tensor& t : tensors)
    if (t.defined() && t.numel() > 0 && is_floating(t.dtype())) floating.push_back(t);
  if (floating.empty()) return true;
  const Tensor& first = floating.front();
  KILN_CHECK(first.device().is_cuda(), "multi_tensor_all_finite: tensors must be CUDA tensors, got ", first.str());
  for (const Tensor& t : floating)
    KILN_CHECK(t.device() == first.device() && t.is_contiguous(),
               "multi_tensor_all_finite: every tensor must be contiguous on ", first.device().str(), ", got ", t.str());
  detail::DeviceGuard guard(first.device().index);
  Plan plan = start_plan(first);
  for (const Tensor& t : floating)
    add_tensor(plan, {t.raw_data(), nullptr, nullptr, nullptr}, t.numel(),
               {static_cast<double>(element_size(t.dtype())), t.dtype() == DType::Float16 ? 1.0 : 0.0, 0, 0});
  upload(plan);
  Tensor flag = empty_tensor({1}, DType::Int32, first.device());
  KILN_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0, sizeof(int), plan.stream));
  KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, nonfinite_kernel)(plan.dev_tensors(), plan.dev_chunks(),
                                                                 static_cast<int*>(flag.raw_data()));
  KILN_CUDA_CHECK_LAUNCH();
  int found = 0;
  KILN_CUDA_CHECK(cudaMemcpyAsync(&found, flag.raw_data(), sizeof found, cudaMemcpyDeviceToHost, plan.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(plan.stream));
  // The grad scaler's check synchronises anyway: report a bad embedding id or
  // target of this step here too (Note [Lazy index checks], cuda/index.cu).
  kernels::raise_index_errors(first.device().index);
  return found == 0;
}

}  // namespace kiln::cuda
