// Note [Emulated CUDA device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// No GPU runs in kiln's CI, so the build flavour KILN_CUDA=EMU compiles the
// CUDA backend (cuda/*.cu and cuda/*.cpp, the same files nvcc compiles) as
// plain C++ against this emulation and runs every kernel on the CPU, the way
// numba carries a CUDA simulator. It aims to be strict rather than
// forgiving: it finds the bugs that a short lease on a real GPU cannot
// (a wrong index, a barrier not every thread reaches, a shuffle after a lane
// left, a launch past a grid limit, a stream nobody waited on).
//
//  - Execution (cuda/emu/executor.cpp): a launch runs its blocks one after
//    another; each CUDA thread of a block is a fiber (Boost.Context's
//    fcontext: its own stack, a switch of a few nanoseconds), so
//    __syncthreads and the warp shuffles block the calling thread until its
//    block (or warp) arrives. threadIdx, blockIdx, blockDim and gridDim have
//    CUDA's unsigned 32-bit types, warpSize is 32. Errors, each naming the
//    kernel and the block: a __syncthreads that some threads of the block
//    never reach (they exited or wait at another barrier), a full-mask
//    shuffle with an exited or absent lane, a deadlock.
//  - Launch (KILN_LAUNCH in cuda/launch.cuh, emu::launch below): sm_90's
//    limits are checked first (1,024 threads per block, blockDim.z <= 64,
//    gridDim.x < 2^31, gridDim.y/z <= 65,535, at most 48 KiB of dynamic shared
//    memory; static shared memory is checked on the real build's figures); a violation is cudaErrorInvalidConfiguration, whose
//    message names the kernel and the limit.
//  - Runtime (cuda/emu/runtime.cpp): one H200-like device. Device memory is
//    separate host allocations (so AddressSanitizer's redzones catch a read
//    past any allocation, and freed memory is poisoned) filled with 0xff
//    bytes (NaN for floats) on allocation; streams are queues whose work
//    runs deferred, in order, only when something waits on the stream
//    (synchronize, an event wait, a blocking copy), so a missing wait or
//    event gives a wrong answer instead of passing by luck. Copies from
//    pageable host memory snapshot the source at the call, as CUDA does;
//    copies to it wait; pinned memory is read and written when the copy
//    runs. A kernel's fault is sticky, as on a device.
//  - Options (environment): KILN_EMU_SCHEDULE=shuffle:SEED runs the threads
//    of a block in a seeded random order between barriers (races that rely
//    on warp-synchronous luck); KILN_EMU_STREAMS=random:SEED interleaves
//    independent streams' work at random while draining; KILN_EMU_ABORT=1
//    aborts at the first fault; KILN_EMU_DEVICE_MEMORY=bytes caps device
//    memory (default 4 GiB); KILN_EMU_COVERAGE=file appends which kernels and
//    runtime calls ran (tools/emu_coverage.py sums them for docs/gpu.md).
//  - Stand-ins where a library cannot run on the CPU: CUB's device sorts (a
//    host stable sort with the same contract, include/cub/), cuBLASLt (a
//    reference GEMM with the same transposes, strides, batches, dtypes and
//    epilogues, include/cublasLt.h), cuDNN fused attention declines
//    (sdpa_decline.cpp: the composite path runs), NCCL is absent.
//  - What it cannot see: timing and occupancy (tools/cuda_resources.sh reads
//    those from the real build), memory-model reorderings between threads
//    (a thread runs without interruption from one barrier to the next),
//    warp-synchronous code without a barrier or shuffle (kiln's kernels
//    keep to the documented rules instead; docs/gpu.md lists each finding),
//    uninitialised shared memory (a block's __shared__ arrays are host
//    thread-local statics, left as the previous block wrote them), and the
//    device math library's last-ulp differences (host libm runs instead).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- the language's qualifiers ---------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
// A block's shared memory: all threads of a block run on one host thread.
#define __shared__ static thread_local
#define __constant__ static

namespace kiln::emu {

// ---- the thread and block being run (executor.cpp) ------------------------------
struct ThreadIndex {
  uint3 thread_idx;
};
struct BlockIndex {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const ThreadIndex& current_thread();
const BlockIndex& current_block();

// Blocks the calling CUDA thread until every thread of its block arrives at
// the same barrier; `site` tells barriers apart.
void sync_threads(const char* site);
// Warp shuffles on 64-bit payloads; op: 0 down, 1 up, 2 xor, 3 idx.
uint64_t warp_shuffle(int op, unsigned mask, uint64_t value, int arg, int width, const char* site);

// ---- launches (KILN_LAUNCH, cuda/launch.cuh) ---------------------------------
struct LaunchConfig {
  const char* kernel;
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
};
// Checks the configuration against sm_90's limits; false after setting the
// last error (cudaErrorInvalidConfiguration) with a message naming the limit.
bool check_launch(const LaunchConfig& cfg);
// Queues `body`, to be run once by every thread of the grid, on cfg.stream.
void queue_kernel(const LaunchConfig& cfg, std::function<void()> body);

template <typename... P>
class Launcher {
 public:
  Launcher(const LaunchConfig& cfg, void (*fn)(P...)) : cfg_(cfg), fn_(fn) {}
  // Copies the arguments (converted to the kernel's parameter types, as a
  // real launch does) for the deferred run.
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    if (!check_launch(cfg_)) return;
    auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    void (*fn)(P...) = fn_;
    queue_kernel(cfg_, [fn, params] { std::apply(fn, *params); });
  }

 private:
  LaunchConfig cfg_;
  void (*fn_)(P...);
};

template <typename... P>
Launcher<P...> launch(const char* kernel, void (*fn)(P...), dim3 grid, dim3 block, size_t shared_bytes,
                      cudaStream_t stream) {
  return Launcher<P...>(LaunchConfig{kernel, grid, block, shared_bytes, stream}, fn);
}

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of an unsupported type");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace kiln::emu

// ---- built-in variables --------------------------------------------------------
#define threadIdx (::kiln::emu::current_thread().thread_idx)
#define blockIdx (::kiln::emu::current_block().block_idx)
#define blockDim (::kiln::emu::current_block().block_dim)
#define gridDim (::kiln::emu::current_block().grid_dim)
inline constexpr int warpSize = 32;

#define KILN_EMU_STR2(x) #x
#define KILN_EMU_STR(x) KILN_EMU_STR2(x)
#define KILN_EMU_SITE __FILE__ ":" KILN_EMU_STR(__LINE__)

// ---- barriers and warp shuffles --------------------------------------------------
#define __syncthreads() ::kiln::emu::sync_threads(KILN_EMU_SITE)
#define __shfl_down_sync(mask, v, d, ...) ::kiln::emu::shfl(0, (mask), (v), (d), KILN_EMU_SITE __VA_OPT__(,) __VA_ARGS__)
#define __shfl_up_sync(mask, v, d, ...) ::kiln::emu::shfl(1, (mask), (v), (d), KILN_EMU_SITE __VA_OPT__(,) __VA_ARGS__)
#define __shfl_xor_sync(mask, v, d, ...) ::kiln::emu::shfl(2, (mask), (v), (d), KILN_EMU_SITE __VA_OPT__(,) __VA_ARGS__)
#define __shfl_sync(mask, v, d, ...) ::kiln::emu::shfl(3, (mask), (v), (d), KILN_EMU_SITE __VA_OPT__(,) __VA_ARGS__)

namespace kiln::emu {
template <typename T>
T shfl(int op, unsigned mask, T v, int arg, const char* site, int width = warpSize) {
  return from_bits<T>(warp_shuffle(op, mask, to_bits(v), arg, width, site));
}
}  // namespace kiln::emu

// ---- atomics (device-wide; blocks may one day run on several host threads) ----
template <typename T>
inline T atomicAdd(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (!a.compare_exchange_weak(old, old + v)) {
    }
    return old;
  } else {
    return std::atomic_ref<T>(*p).fetch_add(v);
  }
}
template <typename T>
inline T atomicCAS(T* p, T compare, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);
  return compare;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v > old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// ---- arithmetic intrinsics: IEEE round-to-nearest, never contracted to FMA -----
// (the emulated build compiles with -ffp-contract=off)
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline long long __double_as_longlong(double d) {
  long long v;
  std::memcpy(&v, &d, sizeof v);
  return v;
}

// CUDA's global min/max overloads for device code.
#define KILN_EMU_MINMAX(T)                           \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
KILN_EMU_MINMAX(int)
KILN_EMU_MINMAX(unsigned int)
KILN_EMU_MINMAX(long)
KILN_EMU_MINMAX(unsigned long)
KILN_EMU_MINMAX(long long)
KILN_EMU_MINMAX(unsigned long long)
#undef KILN_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
using std::isfinite;
using std::isinf;
using std::isnan;
