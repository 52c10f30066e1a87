// The emulated CUDA device itself (Note [Emulated CUDA device] in
// cuda/emu/emu.h; built with KILN_CUDA=EMU only): that it runs kernels as
// CUDA defines them (indices, barriers, shuffles, atomics, deferred streams)
// and that it is strict: each bug class it promises to catch is caught.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace {

// ---- kernels -------------------------------------------------------------------
__global__ void iota_kernel(unsigned* out, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

// Block sum through shared memory and a tree of barriers.
__global__ void block_sum_kernel(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void warp_sum_kernel(const int* in, int* out) {
  int v = in[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  int x = in[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
  out[8 + threadIdx.x] = x;  // every lane holds the warp's sum after the xor tree
}

__global__ void atomic_count_kernel(unsigned long long* count, double* sum) {
  atomicAdd(count, 1ull);
  atomicAdd(sum, 0.5);
}

// Bugs the emulator must find.
__global__ void early_exit_barrier_kernel(float* out, unsigned n) {
  const unsigned i = threadIdx.x;
  if (i >= n) return;  // threads past n leave, the rest wait at the barrier
  __syncthreads();
  out[i] = 1.0f;
}

__global__ void two_barriers_kernel(float* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 0.0f;
}

__global__ void shuffle_exited_lane_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void index_overflow_kernel(unsigned* out) {
  // blockIdx.x * blockDim.x is unsigned 32-bit arithmetic, as on the device.
  out[0] = (blockIdx.x + 4294967295u) * blockDim.x;
}

// A race: each thread reads its neighbour's shared slot with no barrier
// between the write and the read (1: the neighbour had written it).
__global__ void missing_barrier_kernel(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = 0;
  __syncthreads();
  s[threadIdx.x] = 1;
  out[blockIdx.x * 64 + threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

// A fault is sticky, as on a device: these run in a child process.
void expect_fault(void (*body)(), const std::string& message) {
  EXPECT_EXIT(
      {
        body();
        std::exit(0);
      },
      testing::ExitedWithCode(3), message);
}

void report_and_exit(cudaError_t e) {
  std::fprintf(stderr, "%s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(e == cudaSuccess ? 0 : 3);
}

}  // namespace

TEST(CudaEmu, IndicesAndBlocks) {
  const unsigned n = 1000;
  unsigned* d = device_alloc<unsigned>(n);
  KILN_LAUNCH((n + 127) / 128, 128, 0, nullptr, iota_kernel)(d, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<unsigned> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(h[i], i);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST(CudaEmu, BarriersSharedMemoryAndShuffles) {
  std::vector<float> in(4 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
  float* din = device_alloc<float>(in.size());
  float* dout = device_alloc<float>(4);
  ASSERT_EQ(cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  KILN_LAUNCH(4, 256, 0, nullptr, block_sum_kernel)(din, dout);
  std::vector<float> out(4);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int b = 0; b < 4; ++b) {
    float want = 0;
    for (int t = 0; t < 256; ++t) want += in[b * 256 + t];
    EXPECT_EQ(out[b], want) << "block " << b;
  }
  std::vector<int> iv(256);
  for (int i = 0; i < 256; ++i) iv[i] = i * 3 - 100;
  int* di = device_alloc<int>(256);
  int* dw = device_alloc<int>(8 + 256);
  ASSERT_EQ(cudaMemcpy(di, iv.data(), 256 * 4, cudaMemcpyHostToDevice), cudaSuccess);
  KILN_LAUNCH(1, 256, 0, nullptr, warp_sum_kernel)(di, dw);
  std::vector<int> w(8 + 256);
  ASSERT_EQ(cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int k = 0; k < 8; ++k) {
    int want = 0;
    for (int l = 0; l < 32; ++l) want += iv[k * 32 + l];
    EXPECT_EQ(w[k], want) << "warp " << k;
    for (int l = 0; l < 32; ++l) EXPECT_EQ(w[8 + k * 32 + l], want) << "xor lane " << l;
  }
  unsigned long long* dc = device_alloc<unsigned long long>(1);
  double* ds = device_alloc<double>(1);
  ASSERT_EQ(cudaMemsetAsync(dc, 0, 8, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(ds, 0, 8, nullptr), cudaSuccess);
  KILN_LAUNCH(dim3(3, 2), dim3(32, 2), 0, nullptr, atomic_count_kernel)(dc, ds);
  unsigned long long c = 0;
  double s = 0;
  ASSERT_EQ(cudaMemcpy(&c, dc, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&s, ds, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(c, 3u * 2 * 64);
  EXPECT_EQ(s, 0.5 * 3 * 2 * 64);
  for (void* p : {static_cast<void*>(din), static_cast<void*>(dout), static_cast<void*>(di), static_cast<void*>(dw),
                  static_cast<void*>(dc), static_cast<void*>(ds)})
    EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(CudaEmu, UnsignedIndexArithmeticWraps) {
  unsigned* d = device_alloc<unsigned>(1);
  KILN_LAUNCH(2, 64, 0, nullptr, index_overflow_kernel)(d);
  unsigned h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 0u);  // block 1: (1 + 2^32 - 1) * 64 wraps to 0
  cudaFree(d);
}

TEST(CudaEmu, LaunchLimitsAreChecked) {
  unsigned* d = device_alloc<unsigned>(1);
  KILN_LAUNCH(dim3(1, 65536), 32, 0, nullptr, iota_kernel)(d, 1u);
  const cudaError_t e = cudaGetLastError();
  EXPECT_EQ(e, cudaErrorInvalidConfiguration);
  EXPECT_NE(std::string(cudaGetErrorString(e)).find("gridDim.y = 65536"), std::string::npos) << cudaGetErrorString(e);
  KILN_LAUNCH(1, 1025, 0, nullptr, iota_kernel)(d, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  KILN_LAUNCH(1, dim3(1, 1, 65), 0, nullptr, iota_kernel)(d, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  KILN_LAUNCH(1, 32, 49 << 10, nullptr, iota_kernel)(d, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // a configuration error is not sticky
  cudaFree(d);
}

// A stream's work runs only when something waits for it: a read on another
// stream without an event sees the old data; with the event it sees the new.
TEST(CudaEmu, StreamsRunDeferredUntilWaitedOn) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithPriority(&a, cudaStreamNonBlocking, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&b, cudaStreamNonBlocking, 0), cudaSuccess);
  const unsigned n = 64;
  unsigned* x = device_alloc<unsigned>(n);
  unsigned* y = device_alloc<unsigned>(n);
  ASSERT_EQ(cudaMemsetAsync(x, 0, n * 4, a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(y, 0, n * 4, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  KILN_LAUNCH(1, n, 0, a, iota_kernel)(x, n);
  EXPECT_EQ(cudaStreamQuery(a), cudaErrorNotReady);
  ASSERT_EQ(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, b), cudaSuccess);  // no wait: a race
  std::vector<unsigned> h(n);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), y, n * 4, cudaMemcpyDeviceToHost, b), cudaSuccess);
  EXPECT_EQ(h[5], 0u) << "the copy on b ran after a's kernel without an event";
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, b), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), y, n * 4, cudaMemcpyDeviceToHost, b), cudaSuccess);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(h[i], i);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  // Pinned memory is written when the copy runs, not at the call.
  unsigned* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n * 4, cudaHostAllocDefault), cudaSuccess);
  std::memset(pinned, 0, n * 4);
  ASSERT_EQ(cudaMemcpyAsync(pinned, x, n * 4, cudaMemcpyDeviceToHost, a), cudaSuccess);
  EXPECT_EQ(pinned[7], 0u);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(pinned[7], 7u);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
  cudaFree(x);
  cudaFree(y);
}

// `kiln info` on the emulated device: the versions it reports, and that
// NVIDIA's libraries are stand-ins.
TEST(CudaEmu, LibraryVersionsNameTheStandIns) {
  std::string all;
  for (const auto& [k, v] : kiln::cuda::library_versions()) all += k + ": " + v + "\n";
  EXPECT_NE(all.find("CUDA runtime: 13.0"), std::string::npos) << all;
  EXPECT_NE(all.find("CUDA driver: 13.0"), std::string::npos) << all;
  EXPECT_NE(all.find("cuBLASLt: emulated"), std::string::npos) << all;
  EXPECT_NE(all.find("cuDNN: none (emulated device"), std::string::npos) << all;
  EXPECT_EQ(kiln::cuda::device_name(0).find("NVIDIA H200 (kiln emulated)"), 0u);
}

TEST(CudaEmu, CopiesPastAnAllocationAreRefused) {
  float* d = device_alloc<float>(10);
  std::vector<float> h(11);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 11 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 10 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  float first = 0;
  ASSERT_EQ(cudaMemcpy(&first, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(first)) << "fresh device memory reads as NaN, not zero";
  cudaFree(d);
}

TEST(CudaEmuDeathTest, BarrierAfterAnEarlyExitIsAFault) {
  expect_fault(
      [] {
        float* d = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&d), 64 * 4);
        KILN_LAUNCH(1, 64, 0, nullptr, early_exit_barrier_kernel)(d, 40u);
        report_and_exit(cudaDeviceSynchronize());
      },
      "early_exit_barrier_kernel, block \\(0,0,0\\): __syncthreads at .*test_cuda_emu.cpp:[0-9]+ is waited at by 40 "
      "of 64 threads, but thread \\(40,0,0\\)");
}

TEST(CudaEmuDeathTest, TwoBarriersInOneBlockAreAFault) {
  expect_fault(
      [] {
        float* d = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&d), 64 * 4);
        KILN_LAUNCH(1, 64, 0, nullptr, two_barriers_kernel)(d);
        report_and_exit(cudaDeviceSynchronize());
      },
      "two different barriers");
}

TEST(CudaEmuDeathTest, ShuffleWithAnExitedLaneIsAFault) {
  expect_fault(
      [] {
        int* d = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&d), 64 * 4);
        KILN_LAUNCH(1, 32, 0, nullptr, shuffle_exited_lane_kernel)(d);
        report_and_exit(cudaDeviceSynchronize());
      },
      "shuffle_exited_lane_kernel.*shuffle at .* waits for thread \\(16,0,0\\).*which has exited");
}

// In index order the race above reads 0 everywhere but at the last thread;
// KILN_EMU_SCHEDULE=shuffle:SEED runs threads in a seeded random order
// between barriers, so the same kernel reads 1 in some places: the order the
// kernel silently relied on is exposed.
TEST(CudaEmuDeathTest, ShuffledScheduleExposesAMissingBarrier) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process reads the option
  for (const char* mode : {"", "shuffle:5"}) {
    setenv("KILN_EMU_SCHEDULE", mode, 1);
    EXPECT_EXIT(
        {
          int* d = nullptr;
          cudaMalloc(reinterpret_cast<void**>(&d), 8 * 64 * 4);
          KILN_LAUNCH(8, 64, 0, nullptr, missing_barrier_kernel)(d);
          std::vector<int> h(8 * 64);
          cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost);
          int fresh = 0;
          for (int v : h) fresh += v;
          std::exit(fresh == 8 ? 4 : fresh > 8 && fresh < 8 * 64 ? 5 : 6);
        },
        testing::ExitedWithCode(*mode ? 5 : 4), "")
        << "KILN_EMU_SCHEDULE='" << mode << "'";
  }
  unsetenv("KILN_EMU_SCHEDULE");
}

TEST(CudaEmuDeathTest, ShuffleInAPartialWarpIsAFault) {
  expect_fault(
      [] {
        int* d = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&d), 64 * 4);
        KILN_LAUNCH(1, 40, 0, nullptr, warp_sum_kernel)(d, d);
        report_and_exit(cudaDeviceSynchronize());
      },
      "names lane 8 in mask 0xffffffff, which does not exist \\(block of 40 threads\\)");
}
