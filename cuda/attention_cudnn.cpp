// Scaled-dot-product attention (forward and backward) through cuDNN 9's fused
// flash-attention engines, built with the C backend (graph) API. CPU twin:
// the fused attention of core/cpu/ (Note [Fused attention], ops/fused.cpp).
// This file: the per-device handle and its lock, the plan cache, the per-call
// arguments, execution, and the entry points of cuda/attention_cudnn.h; the
// graphs themselves are built in cuda/attention_cudnn_graph.cpp.
//
// Note [cuDNN attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// cuDNN has no single "attention" call for this case: its runtime fusion
// engines recognise an operation graph of a known shape and compile it into
// one flash-attention kernel. The graphs below (built in
// cuda/attention_cudnn_graph.cpp) are that shape, as the cuDNN frontend
// library lowers its SDPA nodes for cuDNN 9.x (composite softmax, dQ
// accumulated in float32), Tb and Sb the graph's query and key lengths (Note
// [cuDNN attention buckets]):
//
//   forward   S  = (Q @ K^T) * scale + bias [padded] [causal]   (B, NH, Tb, Sb) float32, virtual
//             M  = rowmax(S);  E = exp(S - M);  Z = rowsum(E)
//             stats = M + log(Z)                          (B, NH, Tb, 1) float32, saved
//             P  = E / Z  [* bernoulli(1-p) * 1/(1-p)]    cast to the io dtype
//             O  = P @ V                                  (B, NH, Tb, HS) io dtype
//
//   backward  sum = rowsum(dO * O) * (1-p)                (B, NH, Tb, 1) float32, workspace
//             E  = exp((Q @ K^T) * scale + bias [padded] [causal] - stats)  (the probabilities again)
//             dV = (E [* mask / (1-p)])^T @ dO
//             dS = ((dO @ V^T) [* mask] - sum) * E [/ (1-p)] * scale
//             dK = dS^T @ Q;   dQ = dS @ K                (dQ through a float32 accumulator)
//
// [padded]: the padding mask, every score outside the per-batch lengths
// seq_len_q x seq_len_kv set to the float lowest; the matmuls then stop at
// those lengths (GEMM M/N/K overrides). [causal]: the causal mask, every
// score above the (bottom-right aligned) diagonal set to the float lowest
// (Note [cuDNN causal masks] in cuda/attention_cudnn_rules.h). Q, O and their
// gradients are (B, NH, Tb, HS), K, V and theirs (B, NH, Sb, HS) strided views
// of kiln's (B, T, C) and (B, S, C) tensors (or of one packed (B, T, 3C)
// projection): strides (batch, HS, row, 1), the batch start of a bucketed
// graph from per-call ragged offsets; K^T and V^T are the same memory with
// the last two dims' strides swapped. The key bias is (B, 1, Tb, Sb) with
// stride 0 over queries. Scalars (scale, 1/(1-p), 1-p, 1, lowest) are
// by-value tensors; the dropout seed and offset, sequence lengths and ragged
// offsets are small device tensors (Note [cuDNN call arguments] in
// cuda/attention_cudnn_rules.h). cuDNN's version-specific workarounds are
// applied as the frontend applies them (Note [cuDNN version rules], there).
//
// Dropout: cuDNN's Philox draws the keep mask inside the kernel from (seed,
// offset); forward and backward with the same pair drop the same elements.
// kiln's generator state is (seed, call counter) (Note [Random numbers]); the
// counter is not a Philox element offset, so neighbouring calls would give
// shifted copies of one stream. Each call therefore hands cuDNN the seed
// philox4x32(counter = call, key = seed) and offset 0: independent streams
// per call that depend only on the generator state (exact resume holds). The
// mask differs from the CPU's bernoulli mask, so with dropout CUDA and CPU
// agree in distribution only.
//
// A problem (device, dtype, B, NH, Tb, Sb, HS, strides, mask, causal, p; pointers 16-byte
// aligned) builds both graphs once and caches their execution plans. When
// cuDNN finds no engine for either graph, or refuses either plan on its first
// run (Note [Declined at first run]), forward() says so (false) and the
// caller runs another path. Workspaces come from kiln's caching allocator on
// the current stream. float32 is not supported by these engines (ops/fused.cpp
// falls back).
//
// Note [Declined at first run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDNN can refuse a finalized plan when it first runs: cudnnBackendExecute
// validates the variant pack (pointers, their alignment, workspace). A refusal
// before anything ran is the same answer as "no engine", so the first use of
// a problem runs both of its plans once on scratch outputs -- forward into a
// scratch output and statistics, backward from those into scratch gradients
// -- and the problem is taken only if both run; otherwise it is declined for
// the process, and forward() returns false having written nothing. A problem
// thus runs on cuDNN both ways or not at all, which backward needs: with
// dropout, no other kernel could redraw cuDNN's mask. A plan that ran once
// and fails later is an error (kiln::Error). A bucketed problem that is
// declined is retried as a problem of the exact length before giving up.
//
// Note [cuDNN handle lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// One cuDNN handle per device, for the process. A handle is not safe to use
// from two threads at once, and cudnnSetStream + cudnnBackendExecute on a
// shared handle would let one thread's kernels run on the stream another
// thread just set. Every use of a device's handle (building plans, which may
// compile kernels; setting the stream and executing) holds that device's
// mutex. Executes only queue kernels, so the lock is held for microseconds;
// a plan build, once per bucket, holds it longer.
#include "cuda/attention_cudnn.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/random.h"
#include "cuda/attention_cudnn_graph.h"
#include "cuda/attention_cudnn_rules.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.cuh"

namespace kiln::cuda::sdpa {

// The graph pieces shared with cuda/attention_cudnn_graph.cpp (Problem, Plan, Desc, the uids).
using namespace internal;

namespace {

constexpr int kMaxDevices = 64;

// The loaded library's version (not the headers'; Note [cuDNN version rules]).
int64_t cudnn_runtime_version() {
  static const int64_t v = static_cast<int64_t>(cudnnGetVersion());
  return v;
}

// Compute capability major of `device`, read once for all devices (0: unknown).
int device_major(int device) {
  static std::once_flag once;
  static std::array<int, kMaxDevices> major{};
  std::call_once(once, [] {
    for (int d = 0; d < std::min(device_count(), kMaxDevices); ++d) {
      int m = 0;
      if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess)
        major[static_cast<size_t>(d)] = m;
    }
  });
  return device >= 0 && device < kMaxDevices ? major[static_cast<size_t>(device)] : 0;
}

// A device's handle and the mutex every use of it holds (Note [cuDNN handle lock]).
struct HandleSlot {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;  // created on first use, kept for the process like the cuBLASLt handles
};

HandleSlot& handle_slot(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuDNN: device index ", device, " out of range");
  static auto* slots = new std::array<HandleSlot, kMaxDevices>();  // never destroyed
  return (*slots)[static_cast<size_t>(device)];
}

// The slot's handle; the caller holds slot.mutex and a DeviceGuard for its device.
cudnnHandle_t locked_handle(HandleSlot& slot) {
  if (!slot.handle) KILN_CUDNN_CHECK(cudnnCreate(&slot.handle));
  return slot.handle;
}

// ---- the cache --------------------------------------------------------------------

enum class State : int { Untried, Works, Declined };  // Note [Declined at first run]

struct Entry {
  std::unique_ptr<Plan> fwd, bwd;  // both null: cuDNN has no engine for this problem
  std::atomic<State> state{State::Untried};
  std::mutex first_run;  // held by the one thread that runs the first run
};

std::mutex cache_mutex;
std::map<std::pair<int, Problem>, std::shared_ptr<Entry>>& cache() {
  static auto* c = new std::map<std::pair<int, Problem>, std::shared_ptr<Entry>>();  // never destroyed
  return *c;
}

void report_declined(const Problem& pr, const std::string& why) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  std::fprintf(stderr,
               "kiln: cuDNN attention declined (B=%lld, heads=%lld, %s=%lld, S=%lld, head size=%lld, %s, mask %d, "
               "causal %d, p %g): %s%s%s; using %s\n",
               static_cast<long long>(pr.B), static_cast<long long>(pr.NH), pr.ragged ? "T bucket" : "T",
               static_cast<long long>(pr.T), static_cast<long long>(pr.S), static_cast<long long>(pr.HS),
               pr.io == CUDNN_DATA_HALF ? "float16" : "bfloat16", pr.mask ? 1 : 0, static_cast<int>(pr.causal), pr.p,
               why.c_str(), last[0] ? ": " : "", last,
               pr.ragged ? "a plan for the exact length" : "the other attention kernels");
}

// The cached entry of a problem, its plans built on first sight.
std::shared_ptr<Entry> plans_for(int device, const Problem& pr) {
  const auto key = std::make_pair(device, pr);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  // Built outside the cache lock, under the handle's (Note [cuDNN handle lock]); a thread that waited for the
  // handle while another built the same problem finds it in the cache.
  auto entry = std::make_shared<Entry>();
  std::string why;
  {
    HandleSlot& slot = handle_slot(device);
    std::lock_guard<std::mutex> lock(slot.mutex);
    {
      std::lock_guard<std::mutex> cache_lock(cache_mutex);  // built while this thread waited for the handle?
      auto it = cache().find(key);
      if (it != cache().end()) return it->second;
    }
    cudnnHandle_t h = locked_handle(slot);
    try {
      entry->fwd = build_forward(h, pr);
      if (!entry->fwd) why = "no engine for the forward graph";
      if (entry->fwd) entry->bwd = build_backward(h, pr);
      if (entry->fwd && !entry->bwd) why = "no engine for the backward graph";
    } catch (const Error& e) {  // a descriptor cuDNN refuses to build: the same answer, said once below
      entry->bwd.reset();
      why = e.what();
    }
  }
  if (!entry->bwd) {
    entry->fwd.reset();  // a problem runs on cuDNN both ways or not at all
    entry->state = State::Declined;
    report_declined(pr, why);
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  return cache().emplace(key, entry).first->second;
}

// ---- one call -----------------------------------------------------------------------

// A (B, T, C) operand's batch and row strides, with those of size-1 dims made
// canonical (they address nothing, and kiln may give them any value).
std::pair<int64_t, int64_t> layout(const Tensor& t) {
  const int64_t st = t.size(1) == 1 ? t.size(2) : t.stride(1);
  const int64_t sb = t.size(0) == 1 ? t.size(1) * st : t.stride(0);
  return {sb, st};
}

bool aligned_ptr(const void* p) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(kAlignment) == 0; }
bool aligned(const Tensor& t) { return !t.defined() || aligned_ptr(t.raw_data()); }

// What a call has beyond its problem: the lengths and the operands' batch strides (elements).
struct CallShape {
  int64_t T = 0, S = 0;
  int64_t q_b = 0, k_b = 0, v_b = 0, o_b = 0;  // o_b: out and dout, (B, T, C) contiguous
};

// The problem of a call, bucketed (ragged) or of the exact length; false when
// the layouts are not what the graphs describe or the rules refuse the graphs.
bool describe(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, int64_t heads, double p,
              bool causal, bool ragged, Problem& pr, CallShape& cs) {
  if (q.dtype() != DType::Float16 && q.dtype() != DType::BFloat16) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (t->dim() != 3 || t->stride(2) != 1 || !aligned(*t)) return false;
  if (mask.defined() && (!mask.is_contiguous() || !aligned(mask))) return false;
  const int64_t version = cudnn_runtime_version();
  const CausalRules cr = causal_rules(version, q.size(1), k.size(1), causal, mask.defined(), p > 0.0);
  if (!cr.supported) return false;
  pr = Problem();
  pr.io = q.dtype() == DType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  pr.B = q.size(0);
  pr.NH = heads;
  pr.HS = q.size(2) / heads;
  pr.mask = mask.defined();
  pr.causal = cr.mask;
  pr.p = p;
  cs.T = q.size(1);
  cs.S = k.size(1);
  cs.o_b = cs.T * q.size(2);
  std::tie(cs.q_b, pr.q_t) = layout(q);
  std::tie(cs.k_b, pr.k_t) = layout(k);
  std::tie(cs.v_b, pr.v_t) = layout(v);
  pr.ragged = ragged;
  if (ragged) {
    pr.offset_bytes = ragged_offset_bytes(version, pr.B * std::max({cs.q_b, cs.k_b, cs.v_b, cs.o_b}));
    if (pr.offset_bytes == 0) return false;
    pr.T = bucket_length(cs.T);
    pr.S = bucket_length(cs.S);
    pr.q_b = pr.T * pr.q_t, pr.k_b = pr.S * pr.k_t, pr.v_b = pr.S * pr.v_t;
  } else {
    pr.T = cs.T;
    pr.S = cs.S;
    pr.q_b = cs.q_b, pr.k_b = cs.k_b, pr.v_b = cs.v_b;
  }
  const bool padded = ragged || cr.needs_padding;
  const GraphRules fwd = graph_rules(version, q.dtype(), Pass::Forward, pr.T, pr.S, padded);
  const GraphRules bwd = graph_rules(version, q.dtype(), Pass::Backward, pr.T, pr.S, padded);
  if (!fwd.supported || !bwd.supported) return false;
  pr.fwd_padding = padded || fwd.add_padding_mask;
  pr.bwd_padding = padded || bwd.add_padding_mask;
  pr.bwd_repad = bwd.repad_after_stats;
  return true;
}

// cuDNN's (seed, offset) for kiln's Philox state (Note [cuDNN attention]).
std::array<int64_t, 2> cudnn_seed(PhiloxState st) {
  const std::array<uint32_t, 4> w = philox_words(st, 0);
  const uint64_t seed = (static_cast<uint64_t>(w[0]) << 32) | w[1];
  return {static_cast<int64_t>(seed & 0x7fffffffffffffffull), 0};
}

// A call's small device arguments in one allocation (Note [cuDNN call arguments]).
struct Args {
  Tensor buffer;
  ArgsLayout layout;
  void* at(int64_t byte_offset) const { return static_cast<unsigned char*>(buffer.raw_data()) + byte_offset; }
};

// Writes the arguments of one run (padded: the graph has a padding mask) on the current stream.
Args upload_args(int device, const Problem& pr, const CallShape& cs, bool padded, PhiloxState st) {
  Args a;
  a.layout = args_layout(pr.B, pr.dropout(), padded, pr.ragged, pr.offset_bytes);
  if (a.layout.bytes == 0) return a;
  // Staged in pinned memory so the copy is asynchronous (a pageable source may
  // make the driver wait for the stream); the pinned block is kept until the
  // copy is done (cuda::copy, non-blocking).
  Tensor host = empty_pinned({a.layout.bytes / 8}, DType::Int64);
  auto* bytes_at = static_cast<unsigned char*>(host.raw_data());
  std::memset(bytes_at, 0, static_cast<size_t>(a.layout.bytes));
  auto put = [&](int64_t at, const void* value, size_t bytes) { std::memcpy(bytes_at + at, value, bytes); };
  if (pr.dropout()) {
    const std::array<int64_t, 2> seed = cudnn_seed(st);
    put(a.layout.seed, &seed[0], 8);
    put(a.layout.offset, &seed[1], 8);
  }
  if (padded) {  // every batch entry is T and S long; the graph may be longer
    const auto len_q = static_cast<int32_t>(cs.T), len_kv = static_cast<int32_t>(cs.S);
    for (int64_t b = 0; b < pr.B; ++b) {
      put(a.layout.seq_len_q + 4 * b, &len_q, 4);
      put(a.layout.seq_len_kv + 4 * b, &len_kv, 4);
    }
  }
  if (pr.ragged) {
    const std::array<int64_t, 4> batch = {cs.q_b, cs.k_b, cs.v_b, cs.o_b};
    for (size_t i = 0; i < batch.size(); ++i)
      for (int64_t b = 0; b <= pr.B; ++b) {
        const int64_t off = b * batch[i];
        const auto off32 = static_cast<int32_t>(off);
        put(a.layout.ragged[i] + b * pr.offset_bytes, pr.offset_bytes == 8 ? static_cast<const void*>(&off) : &off32,
            static_cast<size_t>(pr.offset_bytes));
      }
  }
  a.buffer = empty_tensor({a.layout.bytes / 8}, DType::Int64, Device(DeviceType::CUDA, device));
  KILN_CHECK(aligned(a.buffer), "internal: cuDNN attention arguments not 16-byte aligned");
  cuda::copy(a.buffer, host, /*non_blocking=*/true);  // on the current stream
  return a;
}

// Adds the arguments' uids and pointers; `lowest` is the padding and causal masks' value, by value.
void bind_args(const Args& a, const Problem& pr, bool padded, const float* lowest, std::vector<int64_t>& uids,
               std::vector<void*>& ptrs) {
  if (pr.dropout()) {
    uids.insert(uids.end(), {kSeed, kOffset});
    ptrs.insert(ptrs.end(), {a.at(a.layout.seed), a.at(a.layout.offset)});
  }
  if (padded) {
    uids.insert(uids.end(), {kSeqQ, kSeqKV});
    ptrs.insert(ptrs.end(), {a.at(a.layout.seq_len_q), a.at(a.layout.seq_len_kv)});
  }
  if (padded || pr.causal != CausalMask::None) {
    uids.push_back(kLowest);
    ptrs.push_back(const_cast<float*>(lowest));
  }
  if (pr.ragged) {
    uids.insert(uids.end(), {kRaggedQ, kRaggedK, kRaggedV, kRaggedO});
    for (int64_t r : a.layout.ragged) ptrs.push_back(a.at(r));
  }
}

// (rows, T) elements of `dtype` at src, copied to a new (rows, Tb) tensor whose columns >= T are zero.
Tensor widen_rows(int device, const void* src, int64_t rows, int64_t T, int64_t Tb, DType dtype) {
  const auto elt = element_size(dtype);
  cudaStream_t stream = detail::current_cuda_stream(device);
  Tensor t = empty_tensor({rows, Tb}, dtype, Device(DeviceType::CUDA, device));
  KILN_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, static_cast<size_t>(rows * Tb) * elt, stream));
  KILN_CUDA_CHECK(cudaMemcpy2DAsync(t.raw_data(), static_cast<size_t>(Tb) * elt, src, static_cast<size_t>(T) * elt,
                                    static_cast<size_t>(T) * elt, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                    stream));
  return t;
}

// The first T columns of (rows, Tb) float32 at src, to (rows, T) at dst.
void narrow_rows(int device, void* dst, const void* src, int64_t rows, int64_t T, int64_t Tb) {
  KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(T) * sizeof(float), src,
                                    static_cast<size_t>(Tb) * sizeof(float), static_cast<size_t>(T) * sizeof(float),
                                    static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                    detail::current_cuda_stream(device)));
}

// Runs a plan: binds the variant pack (uids -> pointers) and a workspace. The
// status is the caller's to judge (Note [Declined at first run]).
cudnnStatus_t execute(int device, const Plan& plan, std::vector<int64_t> uids, std::vector<void*> ptrs) {
  // The workspace lives until the end of this call; the caching allocator
  // reuses it only in stream order (Note [Current stream]).
  Tensor ws = plan.workspace > 0
                  ? empty_tensor({(plan.workspace + 7) / 8}, DType::Int64, Device(DeviceType::CUDA, device))
                  : Tensor();
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ws_ptr = ws.defined() ? ws.raw_data() : nullptr;
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
           ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
  pack.finalize();
  HandleSlot& slot = handle_slot(device);
  std::lock_guard<std::mutex> lock(slot.mutex);  // Note [cuDNN handle lock]
  cudnnHandle_t h = locked_handle(slot);
  KILN_CUDNN_CHECK(cudnnSetStream(h, detail::current_cuda_stream(device)));
  return cudnnBackendExecute(h, plan.plan->get(), pack.get());
}

// The raw operands of one forward or backward run (device pointers).
struct ForwardIO {
  void *q, *k, *v, *mask, *out, *stats;
};
struct BackwardIO {
  void *q, *k, *v, *out, *dout, *stats, *mask, *dq, *dk, *dv;
};

cudnnStatus_t run_forward(int device, const Plan& plan, const Problem& pr, const CallShape& cs, const ForwardIO& io,
                          double scale, PhiloxState st) {
  const Args args = upload_args(device, pr, cs, pr.fwd_padding, st);
  // Buckets above T or S: statistics through (.., Tb), the key bias through (.., Sb) scratch.
  const bool widened = pr.T != cs.T, wide_bias = pr.mask && pr.S != cs.S;
  Tensor bias, stats;
  if (wide_bias) bias = widen_rows(device, io.mask, pr.B, cs.S, pr.S, pr.dtype());
  if (widened) stats = empty_tensor({pr.B, pr.NH, pr.T}, DType::Float32, Device(DeviceType::CUDA, device));
  void* stats_ptr = widened ? stats.raw_data() : io.stats;
  float scale_f = static_cast<float>(scale), lowest = std::numeric_limits<float>::lowest();
  float drop_scale = pr.dropout() ? static_cast<float>(1.0 / (1.0 - pr.p)) : 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {io.q, io.k, io.v, io.out, stats_ptr, &scale_f};
  if (pr.mask) uids.push_back(kBias), ptrs.push_back(wide_bias ? bias.raw_data() : io.mask);
  bind_args(args, pr, pr.fwd_padding, &lowest, uids, ptrs);
  if (pr.dropout()) uids.push_back(kDropScale), ptrs.push_back(&drop_scale);
  const cudnnStatus_t status = execute(device, plan, uids, ptrs);
  if (status == CUDNN_STATUS_SUCCESS && widened) narrow_rows(device, io.stats, stats_ptr, pr.B * pr.NH, cs.T, pr.T);
  return status;
}

cudnnStatus_t run_backward(int device, const Plan& plan, const Problem& pr, const CallShape& cs, const BackwardIO& io,
                           double scale, PhiloxState st) {
  const Device dev(DeviceType::CUDA, device);
  const Args args = upload_args(device, pr, cs, pr.bwd_padding, st);
  const bool widened = pr.T != cs.T, wide_bias = pr.mask && pr.S != cs.S;
  Tensor bias, stats;  // padded rows' statistics are 0: finite, and those rows are masked anyway
  if (wide_bias) bias = widen_rows(device, io.mask, pr.B, cs.S, pr.S, pr.dtype());
  if (widened) stats = widen_rows(device, io.stats, pr.B * pr.NH, cs.T, pr.T, DType::Float32);
  Tensor softmax_sum = empty_tensor({pr.B, pr.NH, pr.T}, DType::Float32, dev);
  Tensor dq_accum = empty_tensor({pr.B, pr.NH, pr.T, pr.HS}, DType::Float32, dev);
  // cuDNN >= 9.6 clears the accumulator itself; clearing it here costs one memset and holds for any 9.x.
  KILN_CUDA_CHECK(cudaMemsetAsync(dq_accum.raw_data(), 0, static_cast<size_t>(dq_accum.numel()) * sizeof(float),
                                  detail::current_cuda_stream(device)));
  float scale_f = static_cast<float>(scale), one = 1.f, lowest = std::numeric_limits<float>::lowest();
  float drop_scale = pr.dropout() ? static_cast<float>(1.0 / (1.0 - pr.p)) : 1.f;
  float drop_scale_inv = pr.dropout() ? static_cast<float>(1.0 - pr.p) : 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kSoftmaxSum, kDQAccum};
  std::vector<void*> ptrs = {io.q,  io.k,  io.v,  io.out,   io.dout,  widened ? stats.raw_data() : io.stats,
                             io.dq, io.dk, io.dv, &scale_f, softmax_sum.raw_data(), dq_accum.raw_data()};
  if (pr.mask) uids.push_back(kBias), ptrs.push_back(wide_bias ? bias.raw_data() : io.mask);
  bind_args(args, pr, pr.bwd_padding, &lowest, uids, ptrs);
  if (pr.dropout()) {
    uids.insert(uids.end(), {kDropScale, kDropScaleInv});
    ptrs.insert(ptrs.end(), {&drop_scale, &drop_scale_inv});
  } else {
    uids.push_back(kOne), ptrs.push_back(&one);
  }
  return execute(device, plan, uids, ptrs);
}

// The first run of a problem's plans, on scratch outputs (Note [Declined at first run]).
cudnnStatus_t first_run(int device, const Entry& e, const Problem& pr, const CallShape& cs, const ForwardIO& in,
                        double scale) {
  const Device dev(DeviceType::CUDA, device);
  const int64_t C = pr.NH * pr.HS;
  Tensor out = empty_tensor({pr.B, cs.T, C}, pr.dtype(), dev);
  Tensor stats = empty_tensor({pr.B, pr.NH, cs.T}, DType::Float32, dev);
  ForwardIO f = in;
  f.out = out.raw_data(), f.stats = stats.raw_data();
  cudnnStatus_t status = run_forward(device, *e.fwd, pr, cs, f, scale, PhiloxState{});
  if (status != CUDNN_STATUS_SUCCESS) return status;
  // Gradients laid out as q, k, v: the column blocks of one buffer when those are (the packed projection).
  const bool packed = cs.T == cs.S && cs.q_b == cs.k_b && cs.k_b == cs.v_b && pr.q_t == pr.k_t &&
                      pr.k_t == pr.v_t && pr.q_t >= 3 * C;
  auto span = [&](int64_t sb, int64_t st, int64_t L) {
    return (pr.B - 1) * sb + (L - 1) * st + (packed ? 3 * C : C);
  };
  std::vector<Tensor> grads;
  for (const auto& [sb, st, L] : {std::tuple{cs.q_b, pr.q_t, cs.T}, std::tuple{cs.k_b, pr.k_t, cs.S},
                                  std::tuple{cs.v_b, pr.v_t, cs.S}})
    if (!packed || grads.empty()) grads.push_back(empty_tensor({span(sb, st, L)}, pr.dtype(), dev));
  auto grad = [&](size_t i) {
    return packed ? static_cast<void*>(static_cast<unsigned char*>(grads[0].raw_data()) +
                                       static_cast<int64_t>(i) * C * static_cast<int64_t>(element_size(pr.dtype())))
                  : grads[i].raw_data();
  };
  const BackwardIO b = {in.q, in.k, in.v, out.raw_data(), out.raw_data(), stats.raw_data(), in.mask,
                        grad(0), grad(1), grad(2)};
  return run_backward(device, *e.bwd, pr, cs, b, scale, PhiloxState{});
}

// A plan that ran before and now fails: an error (Note [Declined at first run]).
void check_ran(cudnnStatus_t status, const char* which) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  fail("cuDNN error: the attention ", which, " plan failed after running before: ", cudnnGetErrorString(status), " (",
       last, ")");
}

// The entry a call runs on: the bucketed problem if this device has buckets,
// else (or when that is declined) the exact one. `may_try`: run the first run
// of an untried problem (forward); backward only finds what forward took.
std::shared_ptr<Entry> usable_entry(int device, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    int64_t heads, double scale, double p, bool causal, bool may_try, Problem& pr,
                                    CallShape& cs) {
  for (bool ragged : {true, false}) {
    if (ragged && !buckets_enabled(device)) continue;
    if (!describe(q, k, v, mask, heads, p, causal, ragged, pr, cs)) continue;
    std::shared_ptr<Entry> e = plans_for(device, pr);
    if (e->state == State::Untried && may_try) {
      std::lock_guard<std::mutex> lock(e->first_run);
      if (e->state == State::Untried) {
        const ForwardIO in = {q.raw_data(), k.raw_data(), v.raw_data(), mask.defined() ? mask.raw_data() : nullptr,
                              nullptr, nullptr};
        const cudnnStatus_t status = first_run(device, *e, pr, cs, in, scale);
        e->state = status == CUDNN_STATUS_SUCCESS ? State::Works : State::Declined;
        if (status != CUDNN_STATUS_SUCCESS)
          report_declined(pr, std::string("its first run failed with ") + cudnnGetErrorString(status));
      }
    }
    if (e->state == State::Works) return e;
  }
  return nullptr;
}

}  // namespace

bool buckets_enabled(int device) { return ragged_supported(cudnn_runtime_version(), device_major(device)); }

int64_t cached_problems() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return static_cast<int64_t>(cache().size());
}

bool supported(int device, DType dtype, int64_t T, int64_t S, int64_t head_size, bool has_mask, double p,
               bool causal) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  if (head_size % 8 != 0 || head_size > 128 || head_size <= 0 || T < 1 || S < 1 || p < 0.0 || p >= 1.0) return false;
  if (device_major(device) < 8) return false;
  // The rules of the graph a call would build first (describe() has the last word, and falls back to the exact
  // length when a bucket is refused).
  const int64_t version = cudnn_runtime_version();
  const CausalRules cr = causal_rules(version, T, S, causal, has_mask, p > 0.0);
  if (!cr.supported) return false;
  const bool ragged = buckets_enabled(device), padded = ragged || cr.needs_padding;
  const int64_t Tg = ragged ? bucket_length(T) : T, Sg = ragged ? bucket_length(S) : S;
  return graph_rules(version, dtype, Pass::Forward, Tg, Sg, padded).supported &&
         graph_rules(version, dtype, Pass::Backward, Tg, Sg, padded).supported;
}

bool forward(int device, const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& mask, int64_t heads, double scale, double p, PhiloxState st, bool causal) {
  if (!out.is_contiguous() || !stats.is_contiguous() || !aligned(out) || !aligned(stats)) return false;
  detail::DeviceGuard guard(device);
  Problem pr;
  CallShape cs;
  std::shared_ptr<Entry> entry = usable_entry(device, q, k, v, mask, heads, scale, p, causal, true, pr, cs);
  if (!entry) return false;
  const ForwardIO io = {q.raw_data(), k.raw_data(), v.raw_data(), mask.defined() ? mask.raw_data() : nullptr,
                        out.raw_data(), stats.raw_data()};
  check_ran(run_forward(device, *entry->fwd, pr, cs, io, scale, st), "forward");
  return true;
}

void backward(int device, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& stats, const Tensor& mask,
              int64_t heads, double scale, double p, PhiloxState st, bool causal) {
  KILN_CHECK(out.is_contiguous() && dout.is_contiguous() && stats.is_contiguous() && aligned(dout) && aligned(dq) &&
                 aligned(dk) && aligned(dv),
             "internal: cuDNN attention backward got operands its forward would not take");
  KILN_CHECK(layout(dq) == layout(q) && layout(dk) == layout(k) && layout(dv) == layout(v) && dq.stride(2) == 1 &&
                 dk.stride(2) == 1 && dv.stride(2) == 1,
             "internal: cuDNN attention backward needs dq, dk, dv laid out as q, k, v");
  detail::DeviceGuard guard(device);
  Problem pr;
  CallShape cs;
  std::shared_ptr<Entry> entry = usable_entry(device, q, k, v, mask, heads, scale, p, causal, false, pr, cs);
  KILN_CHECK(entry, "internal: cuDNN attention backward for a problem its forward did not run");
  const BackwardIO io = {q.raw_data(),     k.raw_data(),  v.raw_data(),  out.raw_data(),
                         dout.raw_data(),  stats.raw_data(), mask.defined() ? mask.raw_data() : nullptr,
                         dq.raw_data(),    dk.raw_data(), dv.raw_data()};
  check_ran(run_backward(device, *entry->bwd, pr, cs, io, scale, st), "backward");
}

}  // namespace kiln::cuda::sdpa
