// Multi-tensor kernels for the optimizer step on CUDA: AdamW and LAMB
// updates, the global gradient norm (clip_grad_norm) and the non-finite check
// (GradScaler::unscale_), each over a whole list of tensors in a few
// launches: the CUDA bodies of the multi-tensor ops (Note [Multi-tensor ops],
// ops/multi_tensor.h), reached through the Backend (cuda/backend_cuda.cpp),
// whose ops have checked every list. CPU twins in core/cpu/multi_tensor.cpp.
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

// max that keeps a NaN once seen (core/cpu/multi_tensor.cpp's combine_max)
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

// ---- AdamW (core/cpu/multi_tensor.cpp adamw_update) ------------------------
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

// ---- LAMB (core/cpu/multi_tensor.cpp lamb_update) --------------------------
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

// ---- norm of a list (core/cpu/multi_tensor.cpp) --------------------------------------
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

// ---- non-finite check (core/cpu/multi_tensor.cpp) ---------------------------------
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

// Entry points (cuda/kernels.cuh): the device is current (DeviceGuard in
// cuda/backend_cuda.cpp) and the op has checked the lists.
namespace kernels {

void multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps) {
  const Tensor& first = params.front();
  dispatch_f32_f64(first.dtype(), "multi_tensor_adamw_", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    const double decay = round_to<T>(1.0 - lr * weight_decay);
    for (size_t i = 0; i < params.size(); ++i) {
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

void multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                       double eps, bool bias_correction) {
  const Tensor& first = params.front();
  dispatch_f32_f64(first.dtype(), "multi_tensor_lamb_", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    for (size_t i = 0; i < params.size(); ++i) {
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

bool multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type) {
  const bool inf = std::isinf(norm_type);
  if (!(norm_type == 2.0 || inf)) return false;
  for (const Tensor& t : tensors)
    if (t.dtype() != tensors.front().dtype()) return false;
  if (tensors.empty()) {
    fill(out, 0.0);
    return true;
  }
  const Tensor& first = tensors.front();
  dispatch_f32_f64(first.dtype(), "multi_tensor_norm", [&](auto tag) {
    using T = decltype(tag);
    Plan plan = start_plan(first);
    for (const Tensor& t : tensors) add_tensor(plan, {t.raw_data(), nullptr, nullptr, nullptr}, t.numel(), {0, 0, 0, 0});
    if (plan.chunks.empty()) {
      fill(out, 0.0);
      return;
    }
    upload(plan);
    const int64_t nc = static_cast<int64_t>(plan.chunks.size());
    Tensor partials = empty_tensor({nc}, DType::Float64, first.device());
    double* part = static_cast<double*>(partials.raw_data());
    double* total = static_cast<double*>(out.raw_data());
    if (inf) KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, norm_partials_kernel<T, true>)(plan.dev_tensors(), plan.dev_chunks(), part);
    else KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, norm_partials_kernel<T, false>)(plan.dev_tensors(), plan.dev_chunks(), part);
    KILN_CUDA_CHECK_LAUNCH();
    if (inf) KILN_LAUNCH(1, 1, 0, plan.stream, norm_final_kernel<true>)(part, nc, total);
    else KILN_LAUNCH(1, 1, 0, plan.stream, norm_final_kernel<false>)(part, nc, total);
    KILN_CUDA_CHECK_LAUNCH();
  });
  // The root on the device (correctly rounded, as std::sqrt on the host), so
  // nothing is read back here.
  if (!inf) unary(UnaryOp::Sqrt, out, out);
  return true;
}

void multi_tensor_all_finite(const Tensor& out, const std::vector<Tensor>& tensors) {
  if (tensors.empty()) {
    fill(out, 1.0);
    return;
  }
  const Tensor& first = tensors.front();
  Plan plan = start_plan(first);
  for (const Tensor& t : tensors)
    add_tensor(plan, {t.raw_data(), nullptr, nullptr, nullptr}, t.numel(),
               {static_cast<double>(element_size(t.dtype())), t.dtype() == DType::Float16 ? 1.0 : 0.0, 0, 0});
  upload(plan);
  Tensor flag = empty_tensor({}, DType::Int32, first.device());  // 1: some inf or NaN
  KILN_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0, sizeof(int), plan.stream));
  KILN_LAUNCH(grid_of(plan), kThreads, 0, plan.stream, nonfinite_kernel)(plan.dev_tensors(), plan.dev_chunks(),
                                                                 static_cast<int*>(flag.raw_data()));
  KILN_CUDA_CHECK_LAUNCH();
  // out = !flag; the caller's read of out (copy_to_cpu) also reports a bad
  // embedding id or target of this step (Note [Lazy index checks], cuda/index.cu).
  unary(UnaryOp::LogicalNot, out, flag);
}

}  // namespace kernels
}  // namespace kiln::cuda
