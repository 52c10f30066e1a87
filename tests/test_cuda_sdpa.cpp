// Attention through cuDNN's fused scaled-dot-product attention (Note [cuDNN
// attention], cuda/attention_cudnn.cpp) against its oracle, the CPU's float32
// fused attention on the same (16-bit-rounded) inputs:
//  - forward, logsumexp statistics and gradients in bfloat16 and float16,
//    packed (B, T, 3C) and separate q/k/v, with padding masks, dropout p = 0;
//  - dropout p = 0.1: unbiased on average, drops about p of the weights, the
//    same mask for the same generator state (bit-identical forwards) and in
//    backward as in forward;
//  - cases cuDNN does not take (float32, head size not a multiple of 8) fall
//    back to the other paths and still match the CPU;
//  - lengths inside a bucket (Note [cuDNN attention buckets]): T = 37 and
//    other lengths off cuDNN's 128-tile with and without a key mask, the
//    padded keys getting no weight, several T served by one cached problem;
//  - two threads running attention at once on their own streams (Note [cuDNN
//    handle lock]);
//  - causal attention on cuDNN (Note [cuDNN causal masks]), keys of their own
//    length S (T = 1, 3, 40 against S = 7, 100; causal bottom-right where
//    cuDNN takes it, the composite on the device where not), and full masks
//    (always the composite), against the CPU.
// The CPU-side tests check the pure rules of cuda/attention_cudnn_rules.h:
// the cuDNN version rules, the causal mask forms, the buckets, the argument
// buffer's alignment.
// Agreement is the normalised error ||cuda - cpu|| / ||cpu|| against the
// per-dtype thresholds of tests/cuda_test_util.h. Every GPU test skips
// without a device (or without CUDA), so CI stays green.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/random.h"
#include "cuda/attention_cudnn.h"
#include "cuda/attention_cudnn_rules.h"
#include "cuda/cuda.h"
#include "ops/fused.h"
#include "ops/internal.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kGpu;
using testing::normalised_error;
using testing::tolerance;

::testing::AssertionResult close(const Tensor& gpu, const Tensor& cpu, DType dtype, const std::string& what) {
  if (!gpu.device().is_cuda()) return ::testing::AssertionFailure() << what << ": result is not on CUDA";
  const double err = normalised_error(gpu, cpu), tol = tolerance(dtype);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name(dtype) << "): normalised error " << err << " > "
                                       << tol;
}

// A CPU float32 tensor with values in [lo, hi), rounded through `dtype`.
Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor f = empty_tensor(shape, DType::Float64, kCPU);
  cpu_backend().uniform(f, lo, hi, PhiloxState{seed, 0});
  return f.to(dtype).to(DType::Float32);
}

// BERT's additive key mask (nn/bert.cpp): 0 for kept keys, float32 lowest for
// padding; batch b keeps its first valid[b] keys.
Tensor padding_mask(const std::vector<int64_t>& valid, int64_t T) {
  std::vector<double> v;
  for (int64_t n : valid)
    for (int64_t t = 0; t < T; ++t) v.push_back(t < n ? 0.0 : static_cast<double>(std::numeric_limits<float>::lowest()));
  return tensor(v, {static_cast<int64_t>(valid.size()), 1, 1, T}, TensorOptions(DType::Float32));
}

struct AttentionRun {
  Tensor out;
  TensorList grads;
};

// Attention of `dtype` on `device` over the given float32 CPU inputs, then the
// gradients of sum(out * w).
AttentionRun attend(const TensorList& inputs, bool packed, int64_t heads, const Tensor& mask, double p, bool training,
           DType dtype, Device device, const Tensor& w, uint64_t seed = 7, bool causal = false) {
  TensorList xs;
  for (const Tensor& x : inputs) xs.push_back(x.detach().to(device, dtype).set_requires_grad(true));
  Generator gen(seed);
  const Tensor m = mask.defined() ? mask.to(device) : Tensor();
  Tensor out = packed ? multi_head_attention_qkv(xs[0], heads, m, p, training, &gen, causal)
                      : multi_head_attention(xs[0], xs[1], xs[2], heads, m, p, training, &gen, causal);
  sum(mul(out, w.to(device, dtype))).backward();
  AttentionRun r{out.detach(), {}};
  for (const Tensor& x : xs) r.grads.push_back(x.grad());
  return r;
}

// Whether the backend call itself runs this problem on cuDNN (no silent
// fallback): sdpa_forward on random inputs of the shape, q, k, v separate or
// the column blocks of one (B, T, 3C) projection; S keys (0: S = T).
bool cudnn_takes(DType dt, int64_t B, int64_t T, int64_t heads, int64_t hs, bool masked, double p,
                 bool packed = false, int64_t S = 0, bool causal = false) {
  const int64_t C = heads * hs;
  if (S == 0) S = T;
  const Tensor x = random_cpu({B, T, packed ? 3 * C : C}, dt, 91).to(kGpu, dt);
  const Tensor kv = S == T ? x : random_cpu({B, S, C}, dt, 92).to(kGpu, dt);
  const Tensor q = packed ? x.narrow(2, 0, C) : x, k = packed ? x.narrow(2, C, C) : kv;
  const Tensor v = packed ? x.narrow(2, 2 * C, C) : kv;
  const Tensor mask = masked ? zeros({B, S}, TensorOptions(dt, kGpu)) : Tensor();
  Tensor out = empty_tensor({B, T, C}, dt, kGpu), stats = empty_tensor({B, heads, T}, DType::Float32, kGpu);
  return backend(kGpu).sdpa_forward(out, stats, q, k, v, mask, heads, 1.0 / std::sqrt(static_cast<double>(hs)), p,
                                    PhiloxState{5, 0}, causal);
}

#ifdef KILN_WITH_CUDA
int64_t cached_problems() { return cuda::sdpa::cached_problems(); }
bool buckets_enabled() { return cuda::sdpa::buckets_enabled(0); }
#else
int64_t cached_problems() { return 0; }  // never reached: KILN_REQUIRE_CUDA skips first
bool buckets_enabled() { return false; }
#endif

TEST(CudaSdpa, CpuBackendDeclines) {
  // The contract that keeps the CPU paths exactly as they were.
  EXPECT_FALSE(cpu_backend().sdpa_supported(DType::BFloat16, 128, 64, true, 0.1));
  EXPECT_FALSE(cpu_backend().sdpa_supported(DType::Float16, 128, 64, false, 0.0));
}

TEST(CudaSdpa, ForwardAndBackwardMatchCpuWithPaddingMask) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, T = 37, heads = 4, hs = 64, C = heads * hs;
  const Tensor mask = padding_mask({T, 29}, T);
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    ASSERT_TRUE(backend(kGpu).sdpa_supported(dt, T, hs, true, 0.0)) << dtype_name(dt);
    for (bool packed : {true, false}) {
      for (bool training : {false, true}) {  // training with p = 0: no dropout graph
        SCOPED_TRACE(std::string(dtype_name(dt)) + (packed ? " packed" : " separate") + (training ? " train" : ""));
        const TensorList in = packed ? TensorList{random_cpu({B, T, 3 * C}, dt, 1)}
                                     : TensorList{random_cpu({B, T, C}, dt, 2), random_cpu({B, T, C}, dt, 3),
                                                  random_cpu({B, T, C}, dt, 4)};
        const Tensor w = random_cpu({B, T, C}, dt, 5);
        const AttentionRun cpu = attend(in, packed, heads, mask, 0.0, training, DType::Float32, kCPU, w);
        const AttentionRun gpu = attend(in, packed, heads, mask, 0.0, training, dt, kGpu, w);
        EXPECT_EQ(gpu.out.dtype(), dt);
        EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
        ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
        for (size_t i = 0; i < gpu.grads.size(); ++i)
          EXPECT_TRUE(close(gpu.grads[i], cpu.grads[i], dt, "grad " + std::to_string(i)));
      }
    }
  }
}

// The backend call itself: cuDNN must take the graph (not a silent fallback),
// and the saved statistics are the logsumexp of the scaled, masked scores.
// T = 37 runs in the 64 bucket: the statistics come back through the (.., Tb) scratch.
TEST(CudaSdpa, BackendForwardRunsOnCudnnWithLogsumexpStats) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 3, heads = 2, hs = 32, C = heads * hs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (const int64_t T : {64, 37})
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T));
    const Tensor q = random_cpu({B, T, C}, dt, 11), k = random_cpu({B, T, C}, dt, 12), v = random_cpu({B, T, C}, dt, 13);
    const Tensor mask = padding_mask({T, 20, 1}, T).reshape({B, T});
    // CPU reference in float32, composed from primitives.
    auto split = [&](const Tensor& x) { return x.reshape({B, T, heads, hs}).transpose(1, 2); };
    Tensor s = add(mul(matmul(split(q), split(k).transpose(-1, -2)), scale), mask.reshape({B, 1, 1, T}));
    const Tensor mx = amax(s, {-1}, true);
    const Tensor lse = add(log(sum(exp(add(s, mul(mx, -1.0))), {-1}, true)), mx).reshape({B, heads, T});
    const Tensor ref = matmul(softmax(s, -1), split(v)).transpose(1, 2).reshape({B, T, C});

    Tensor out = empty_tensor({B, T, C}, dt, kGpu), stats = empty_tensor({B, heads, T}, DType::Float32, kGpu);
    // The kernel takes the mask in q's dtype (ops/fused.cpp clamps -inf to the lowest finite value first).
    const double lowest = dt == DType::Float16 ? -65504.0 : -3.3895313892515355e38;
    const Tensor gmask = clamp(mask, lowest, std::nullopt).to(kGpu, dt);
    ASSERT_TRUE(backend(kGpu).sdpa_forward(out, stats, q.to(kGpu, dt), k.to(kGpu, dt), v.to(kGpu, dt), gmask, heads,
                                           scale, 0.0, PhiloxState{}, false))
        << "cuDNN found no engine for the SDPA forward/backward graphs";
    EXPECT_TRUE(close(out, ref, dt, "backend output"));
    const double stats_err = normalised_error(stats, lse);  // float32 statistics of the same 16-bit inputs
    EXPECT_LT(stats_err, 1e-3) << "logsumexp stats";
  }
}

// Dropout from cuDNN's Philox. q = k = 0 makes every weight 1/T; with T == hs
// and v the identity per head, out[b, i, h, j] = keep(b, h, i, j) / (T (1-p)),
// so the output shows the keep mask; backward with dO = the identity gives
// dV[b, j, h, i] = the same mask transposed. T = 40 runs in the 64 bucket: a
// weight of 1/40 (not about 1/64) shows the 24 padded keys get none.
TEST(CudaSdpa, DropoutMaskIsUnbiasedReproducibleAndSharedWithBackward) {
  KILN_REQUIRE_CUDNN();
  const double p = 0.1;
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{2, 64}, std::pair<int64_t, int64_t>{4, 40}})
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    const int64_t heads = 4, hs = T, C = heads * hs;
    SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T));
    ASSERT_TRUE(backend(kGpu).sdpa_supported(dt, T, hs, false, p));
    ASSERT_TRUE(cudnn_takes(dt, B, T, heads, hs, false, p));  // not the composite's dropout
    std::vector<double> eye(static_cast<size_t>(B * T * C), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < heads; ++h) eye[static_cast<size_t>((b * T + t) * C + h * hs + t)] = 1.0;
    const Tensor ident = tensor(eye, {B, T, C}, TensorOptions(DType::Float32));
    const Tensor zero = zeros({B, T, C});
    const AttentionRun run = attend({zero, zero, ident}, false, heads, Tensor(), p, true, dt, kGpu, ident, 21);

    const std::vector<double> o = run.out.to(DType::Float64).cpu().to_vector<double>();
    const std::vector<double> dv = run.grads[2].to(DType::Float64).cpu().to_vector<double>();
    const double kept_value = 1.0 / (static_cast<double>(T) * (1.0 - p));
    int64_t dropped = 0, mismatched = 0;
    double total = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < hs; ++j) {
            const double oi = o[static_cast<size_t>((b * T + i) * C + h * hs + j)];
            const double dvi = dv[static_cast<size_t>((b * T + j) * C + h * hs + i)];
            dropped += oi == 0.0;
            total += oi;
            mismatched += (oi == 0.0) != (dvi == 0.0) || std::abs(oi - dvi) > 1e-2 * kept_value;
            EXPECT_TRUE(oi == 0.0 || std::abs(oi - kept_value) < 1e-2 * kept_value) << oi;
          }
    const double n = static_cast<double>(B * T * heads * hs);
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.01);  // std about 0.0017 (T 64), 0.0019 (T 40)
    // Unbiased: the mean output equals the no-dropout mean 1/T (ratio 1 within 1%).
    EXPECT_NEAR(total / n * static_cast<double>(T), 1.0, 0.01);
    EXPECT_EQ(mismatched, 0) << "backward dropped other elements than forward";

    // Same generator state: bit-identical; the next call on one generator: another mask.
    const AttentionRun again = attend({zero, zero, ident}, false, heads, Tensor(), p, true, dt, kGpu, ident, 21);
    EXPECT_TRUE(bitwise_equal(again.out, run.out));
    EXPECT_TRUE(bitwise_equal(again.grads[2], run.grads[2]));
    Generator gen(21);
    const Tensor z = zero.to(kGpu, dt), vi = ident.to(kGpu, dt);
    const Tensor first = multi_head_attention(z, z, vi, heads, Tensor(), p, true, &gen);
    const Tensor second = multi_head_attention(z, z, vi, heads, Tensor(), p, true, &gen);
    EXPECT_TRUE(bitwise_equal(first, run.out));
    EXPECT_GT(normalised_error(second, first), 0.1);
  }
}

// Statistically the same attention as the CPU's with dropout: on random
// inputs the mean output over many draws matches the no-dropout output.
TEST(CudaSdpa, DropoutOutputMeanMatchesNoDropout) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, T = 128, heads = 4, hs = 64, C = heads * hs;
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    const TensorList in = {random_cpu({B, T, 3 * C}, dt, 31, -1.0, 1.0)};
    Tensor v_pos = random_cpu({B, T, 3 * C}, dt, 32, 0.5, 1.5);  // positive values: no cancellation in the ratio
    Tensor qkv = in[0].clone();
    qkv.narrow(2, 2 * C, C).copy_(v_pos.narrow(2, 2 * C, C));
    const Tensor w = ones({B, T, C});
    const AttentionRun plain = attend({qkv}, true, heads, Tensor(), 0.0, true, dt, kGpu, w);
    const AttentionRun dropped = attend({qkv}, true, heads, Tensor(), 0.1, true, dt, kGpu, w);
    const double ratio = sum(dropped.out.to(DType::Float64)).item<double>() / sum(plain.out.to(DType::Float64)).item<double>();
    EXPECT_NEAR(ratio, 1.0, 0.01);
    EXPECT_GT(normalised_error(dropped.out, plain.out), 1e-2);  // dropout did happen
  }
}

// What cuDNN does not take runs the other paths and still matches the CPU.
TEST(CudaSdpa, UnsupportedCasesFallBackAndMatchCpu) {
  KILN_REQUIRE_CUDA();
  const Tensor mask = padding_mask({16, 9}, 16);
  struct Case {
    DType dt;
    int64_t heads, hs;
  };
  for (const Case& c : {Case{DType::Float32, 2, 64}, Case{DType::Float16, 2, 12}, Case{DType::BFloat16, 3, 20}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dt)) + " head size " + std::to_string(c.hs));
    EXPECT_FALSE(backend(kGpu).sdpa_supported(c.dt, 16, c.hs, true, 0.0));
    const int64_t C = c.heads * c.hs;
    const TensorList in = {random_cpu({2, 16, 3 * C}, c.dt, 41)};
    const Tensor w = random_cpu({2, 16, C}, c.dt, 42);
    const AttentionRun cpu = attend(in, true, c.heads, mask, 0.0, false, DType::Float32, kCPU, w);
    const AttentionRun gpu = attend(in, true, c.heads, mask, 0.0, false, c.dt, kGpu, w);
    EXPECT_TRUE(close(gpu.out, cpu.out, c.dt, "output"));
    EXPECT_TRUE(close(gpu.grads[0], cpu.grads[0], c.dt, "grad"));
  }
}

// T = 37 and other lengths off cuDNN's 128-row tile, without a key mask (the
// case cuDNN <= 9.15 gets wrong without a padding mask, Note [cuDNN version
// rules]), in a bucket or not: outputs and gradients match the CPU.
TEST(CudaSdpa, GradientsMatchCpuWithoutMaskAtLengthsOffTheTile) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, heads = 2, hs = 32, C = heads * hs;
  for (const int64_t T : {37, 100, 130})
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (bool packed : {true, false})
      ASSERT_TRUE(cudnn_takes(dt, B, T, heads, hs, false, 0.0, packed)) << dtype_name(dt) << " T " << T;
    for (bool packed : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T) + (packed ? " packed" : " separate"));
      const TensorList in = packed ? TensorList{random_cpu({B, T, 3 * C}, dt, 51)}
                                   : TensorList{random_cpu({B, T, C}, dt, 52), random_cpu({B, T, C}, dt, 53),
                                                random_cpu({B, T, C}, dt, 54)};
      const Tensor w = random_cpu({B, T, C}, dt, 55);
      const AttentionRun cpu = attend(in, packed, heads, Tensor(), 0.0, true, DType::Float32, kCPU, w);
      const AttentionRun gpu = attend(in, packed, heads, Tensor(), 0.0, true, dt, kGpu, w);
      EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
      ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
      for (size_t i = 0; i < gpu.grads.size(); ++i)
        EXPECT_TRUE(close(gpu.grads[i], cpu.grads[i], dt, "grad " + std::to_string(i)));
    }
  }
}

// Training with attention dropout through cuDNN at T = 37 with a key mask
// (the case whose dropout seed/offset pair was misaligned): forward and
// backward run, are finite, repeat bit for bit for the same generator state
// (dQ, accumulated with atomics, to rounding), differ from the p = 0 run,
// which matches the CPU.
TEST(CudaSdpa, DropoutTrainingStepIsFiniteDeterministicAndPZeroMatchesCpu) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, T = 37, heads = 4, hs = 64, C = heads * hs;
  const Tensor mask = padding_mask({T, 30}, T);
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    ASSERT_TRUE(cudnn_takes(dt, B, T, heads, hs, true, 0.1));
    const TensorList in = {random_cpu({B, T, C}, dt, 61), random_cpu({B, T, C}, dt, 62), random_cpu({B, T, C}, dt, 63)};
    const Tensor w = random_cpu({B, T, C}, dt, 64);
    const AttentionRun a = attend(in, false, heads, mask, 0.1, true, dt, kGpu, w, 3);
    const AttentionRun b = attend(in, false, heads, mask, 0.1, true, dt, kGpu, w, 3);
    for (const Tensor& t : {a.out, a.grads[0], a.grads[1], a.grads[2]}) {
      const std::vector<double> x = t.to(DType::Float64).cpu().to_vector<double>();
      EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](double e) { return std::isfinite(e); }));
    }
    EXPECT_TRUE(bitwise_equal(a.out, b.out));
    EXPECT_TRUE(bitwise_equal(a.grads[1], b.grads[1]));
    EXPECT_TRUE(bitwise_equal(a.grads[2], b.grads[2]));
    EXPECT_LT(normalised_error(a.grads[0], b.grads[0]), 1e-3);
    const AttentionRun plain = attend(in, false, heads, mask, 0.0, true, dt, kGpu, w, 3);
    const AttentionRun cpu = attend(in, false, heads, mask, 0.0, true, DType::Float32, kCPU, w, 3);
    EXPECT_GT(normalised_error(a.out, plain.out), 1e-2);  // dropout did happen
    EXPECT_TRUE(close(plain.out, cpu.out, dt, "p = 0 output"));
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_TRUE(close(plain.grads[i], cpu.grads[i], dt, "p = 0 grad " + std::to_string(i)));
  }
}

// Dynamic padding: lengths 65 to 128 share the 128 bucket, so the first adds
// one problem to the plan cache and the others none, and every length still
// matches the CPU (Note [cuDNN attention buckets]).
TEST(CudaSdpa, LengthsInOneBucketShareOnePlan) {
  KILN_REQUIRE_CUDNN();
  if (!buckets_enabled()) GTEST_SKIP() << "this device/cuDNN has no ragged tensors: one plan per length";
  const int64_t B = 3, heads = 3, hs = 24, C = heads * hs;  // a shape no other test uses: a fresh problem
  const DType dt = DType::BFloat16;
  const int64_t before = cached_problems();
  for (const int64_t T : {77, 65, 100, 128}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const Tensor mask = padding_mask({T, T - 9, 5}, T);
    const TensorList in = {random_cpu({B, T, 3 * C}, dt, 70 + static_cast<uint64_t>(T))};
    const Tensor w = random_cpu({B, T, C}, dt, 71);
    const AttentionRun cpu = attend(in, true, heads, mask, 0.0, true, DType::Float32, kCPU, w);
    const AttentionRun gpu = attend(in, true, heads, mask, 0.0, true, dt, kGpu, w);
    EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
    EXPECT_TRUE(close(gpu.grads[0], cpu.grads[0], dt, "grad"));
    EXPECT_EQ(cached_problems(), before + 1) << "a length in the bucket built a problem of its own";
  }
  EXPECT_TRUE(cudnn_takes(dt, B, 90, heads, hs, true, 0.0, true));  // the cached problem is one cuDNN runs
  EXPECT_EQ(cached_problems(), before + 1);
}

// Two threads, each on its own stream, run the same fresh problem's forward
// and backward through the backend at once (the first run racing too), and
// agree with the same calls made from one thread afterwards.
TEST(CudaSdpa, TwoThreadsOnTheirOwnStreams) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, T = 50, heads = 5, hs = 16, C = heads * hs;
  const DType dt = DType::Float16;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const Tensor q = random_cpu({B, T, C}, dt, 81).to(kGpu, dt), k = random_cpu({B, T, C}, dt, 82).to(kGpu, dt);
  const Tensor v = random_cpu({B, T, C}, dt, 83).to(kGpu, dt), dout = random_cpu({B, T, C}, dt, 84).to(kGpu, dt);
  const Tensor mask = clamp(padding_mask({T, 31}, T).reshape({B, T}), -65504.0, std::nullopt).to(kGpu, dt);
  cuda::synchronize(0);
  struct Result {
    TensorList got;  // out, dq, dk, dv, read back to the CPU on the thread's stream
    bool ran = true;
    std::string error;
  };
  auto run = [&](Result& r, int iterations) {
    try {
      Tensor out, dq, dk, dv;
      for (int it = 0; it < iterations && r.ran; ++it) {
        Tensor stats = empty_tensor({B, heads, T}, DType::Float32, kGpu);
        out = empty_tensor({B, T, C}, dt, kGpu);
        r.ran = backend(kGpu).sdpa_forward(out, stats, q, k, v, mask, heads, scale, 0.0, PhiloxState{}, false);
        if (!r.ran) break;
        dq = empty_tensor({B, T, C}, dt, kGpu), dk = empty_tensor({B, T, C}, dt, kGpu);
        dv = empty_tensor({B, T, C}, dt, kGpu);
        backend(kGpu).sdpa_backward(dq, dk, dv, dout, q, k, v, out, stats, mask, heads, scale, 0.0, PhiloxState{},
                                    false);
      }
      if (r.ran) r.got = {out.cpu(), dq.cpu(), dk.cpu(), dv.cpu()};
      cuda::current_stream(0).synchronize();
    } catch (const Error& e) {
      r.error = e.what();
    }
  };
  std::vector<Result> results(2);
  {
    std::vector<std::thread> threads;
    for (Result& r : results)
      threads.emplace_back([&run, &r] {
        const cuda::Stream stream = cuda::Stream::create(0);
        cuda::StreamGuard guard(stream);
        run(r, 20);
      });
    for (std::thread& t : threads) t.join();
  }
  Result single;
  run(single, 1);
  ASSERT_TRUE(single.error.empty()) << single.error;
  ASSERT_TRUE(single.ran) << "cuDNN declined the problem";
  ASSERT_EQ(single.got.size(), 4u);
  for (const Result& r : results) {
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_TRUE(r.ran);
    ASSERT_EQ(r.got.size(), 4u);
    for (size_t i = 0; i < r.got.size(); ++i)  // out, dq, dk, dv; dq is accumulated with atomics
      EXPECT_LT(normalised_error(r.got[i], single.got[i]), 1e-3) << i;
  }
}

// Causal self-attention (the top-left form of Note [cuDNN causal masks]) runs
// on cuDNN, with and without a key mask, in a bucket and at its edge, with the
// dropout graph too, and matches the CPU's causal attention (which a
// non-causal result would not).
TEST(CudaSdpa, CausalSelfAttentionRunsOnCudnnAndMatchesCpu) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, heads = 2, hs = 32, C = heads * hs;
  for (const int64_t T : {37, 64, 130})
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T));
    ASSERT_TRUE(backend(kGpu).sdpa_supported(dt, T, T, hs, true, 0.1, true));
    for (bool packed : {true, false}) ASSERT_TRUE(cudnn_takes(dt, B, T, heads, hs, true, 0.0, packed, T, true));
    ASSERT_TRUE(cudnn_takes(dt, B, T, heads, hs, true, 0.1, false, T, true));  // causal with dropout
    for (bool packed : {true, false})
      for (bool masked : {false, true}) {
        SCOPED_TRACE(std::string(packed ? "packed" : "separate") + (masked ? " masked" : ""));
        const Tensor mask = masked ? padding_mask({T, T - 5}, T) : Tensor();
        const TensorList in = packed ? TensorList{random_cpu({B, T, 3 * C}, dt, 101)}
                                     : TensorList{random_cpu({B, T, C}, dt, 102), random_cpu({B, T, C}, dt, 103),
                                                  random_cpu({B, T, C}, dt, 104)};
        const Tensor w = random_cpu({B, T, C}, dt, 105);
        const AttentionRun cpu = attend(in, packed, heads, mask, 0.0, true, DType::Float32, kCPU, w, 7, true);
        const AttentionRun gpu = attend(in, packed, heads, mask, 0.0, true, dt, kGpu, w, 7, true);
        EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
        ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
        for (size_t i = 0; i < gpu.grads.size(); ++i)
          EXPECT_TRUE(close(gpu.grads[i], cpu.grads[i], dt, "grad " + std::to_string(i)));
      }
  }
}

// Keys of their own length (a KV cache): T = 1, 3 and 40 new queries against
// S = 7 and 100 keys, causal (bottom-right aligned) or not, with and without a
// key bias. cuDNN takes plain attention of any lengths and a causal T = 1
// (which masks nothing); bottom-right causal masks where Note [cuDNN causal
// masks] allows (no bias, cuDNN 9.6 on); the rest runs the composite on the
// device. Every case matches the CPU.
TEST(CudaSdpa, KeysOfTheirOwnLengthMatchCpu) {
  KILN_REQUIRE_CUDNN();
  const int64_t B = 2, heads = 2, hs = 32, C = heads * hs;
  for (const auto& [T, S] : {std::pair<int64_t, int64_t>{1, 7}, {3, 7}, {40, 100}})
  for (DType dt : {DType::BFloat16, DType::Float16})
  for (bool causal : {false, true})
  for (bool masked : {false, true}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T) + " S " + std::to_string(S) +
                 (causal ? " causal" : "") + (masked ? " masked" : ""));
    if (!causal || T == 1) {
      EXPECT_TRUE(backend(kGpu).sdpa_supported(dt, T, S, hs, masked, 0.0, causal));
      EXPECT_TRUE(cudnn_takes(dt, B, T, heads, hs, masked, 0.0, false, S, causal));
    }
    if (causal && T > 1 && masked) {  // bottom-right with a bias
      EXPECT_FALSE(backend(kGpu).sdpa_supported(dt, T, S, hs, masked, 0.0, causal));
    }
    const Tensor mask = masked ? padding_mask({S, S - 2}, S) : Tensor();
    const TensorList in = {random_cpu({B, T, C}, dt, 111), random_cpu({B, S, C}, dt, 112),
                           random_cpu({B, S, C}, dt, 113)};
    const Tensor w = random_cpu({B, T, C}, dt, 114);
    const AttentionRun cpu = attend(in, false, heads, mask, 0.0, true, DType::Float32, kCPU, w, 7, causal);
    const AttentionRun gpu = attend(in, false, heads, mask, 0.0, true, dt, kGpu, w, 7, causal);
    EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
    for (size_t i = 0; i < gpu.grads.size(); ++i)
      EXPECT_TRUE(close(gpu.grads[i], cpu.grads[i], dt, "grad " + std::to_string(i)));
  }
}

// Full masks, (1, 1, T, S) and (B, heads, T, S), never go to cuDNN: the
// composite runs on the device (its scaled_masked_softmax; with causal,
// masked_fill and softmax) and matches the CPU, in 16-bit and float32.
TEST(CudaSdpa, FullMasksRunTheCompositeAndMatchCpu) {
  KILN_REQUIRE_CUDA();
  const int64_t B = 2, T = 24, S = 40, heads = 2, hs = 32, C = heads * hs;
  for (DType dt : {DType::BFloat16, DType::Float16, DType::Float32})
  for (bool causal : {false, true})
  for (const Shape& ms : {Shape{1, 1, T, S}, Shape{B, heads, T, S}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " mask " + shape_str(ms) + (causal ? " causal" : ""));
    const Tensor mask = random_cpu(ms, dt, 121, -2.0, 2.0);
    const TensorList in = {random_cpu({B, T, C}, dt, 122), random_cpu({B, S, C}, dt, 123),
                           random_cpu({B, S, C}, dt, 124)};
    const Tensor w = random_cpu({B, T, C}, dt, 125);
    const AttentionRun cpu = attend(in, false, heads, mask, 0.0, true, DType::Float32, kCPU, w, 7, causal);
    const AttentionRun gpu = attend(in, false, heads, mask.to(dt), 0.0, true, dt, kGpu, w, 7, causal);
    EXPECT_TRUE(close(gpu.out, cpu.out, dt, "output"));
    for (size_t i = 0; i < gpu.grads.size(); ++i)
      EXPECT_TRUE(close(gpu.grads[i], cpu.grads[i], dt, "grad " + std::to_string(i)));
  }
}

// ---- the rules, on the CPU (cuda/attention_cudnn_rules.h) ----------------------

using cuda::sdpa::args_layout;
using cuda::sdpa::ArgsLayout;
using cuda::sdpa::bucket_length;
using cuda::sdpa::cudnn_version_number;
using cuda::sdpa::graph_rules;
using cuda::sdpa::Pass;

TEST(CudnnRules, VersionNumbersAreCudnnGetVersions) {
  EXPECT_EQ(cudnn_version_number(9, 15, 0), 91500);
  EXPECT_EQ(cudnn_version_number(9, 10, 1), 91001);
  EXPECT_EQ(cudnn_version_number(9, 0, 0), 90000);
  EXPECT_EQ(cudnn_version_number(10, 2, 3), 100203);
}

TEST(CudnnRules, RefusesHalfAttentionOnCudnn9_10_0And9_10_1) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (int64_t v : {91000, 91001}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(v));
      const auto r = graph_rules(v, dt, Pass::Forward, 128, 128, false);
      EXPECT_FALSE(r.supported);
      EXPECT_NE(std::string(r.why).find("9.10"), std::string::npos) << r.why;
      EXPECT_FALSE(graph_rules(v, dt, Pass::Backward, 128, 128, false).supported);  // the frontend refuses it too
      EXPECT_FALSE(graph_rules(v, dt, Pass::Forward, 37, 37, true).supported);
    }
    for (int64_t v : {90000, 90900, 91002, 91100, 91500, 91900, 100000})
      EXPECT_TRUE(graph_rules(v, dt, Pass::Forward, 128, 128, false).supported) << v;
  }
  // The version bug is the half-precision engines'; float32 is not refused for it.
  EXPECT_TRUE(graph_rules(91000, DType::Float32, Pass::Forward, 128, 128, false).supported);
  EXPECT_TRUE(graph_rules(91001, DType::Float32, Pass::Forward, 128, 128, false).supported);
  EXPECT_FALSE(graph_rules(80906, DType::Float16, Pass::Forward, 128, 128, false).supported);  // cuDNN 8
}

TEST(CudnnRules, BackwardGetsPaddingMaskOffTheTileUpToCudnn9_15) {
  const DType dt = DType::BFloat16;
  for (int64_t v : {90000, 90600, 91200, 91500}) {
    SCOPED_TRACE(v);
    for (int64_t s : {37, 100, 129, 200}) {
      EXPECT_TRUE(graph_rules(v, dt, Pass::Backward, s, s, false).supported);
      EXPECT_TRUE(graph_rules(v, dt, Pass::Backward, s, s, false).add_padding_mask) << s;
      EXPECT_FALSE(graph_rules(v, dt, Pass::Backward, s, s, true).add_padding_mask) << s;  // already has one
      EXPECT_FALSE(graph_rules(v, dt, Pass::Forward, s, s, false).add_padding_mask) << s;  // backward only
    }
    for (int64_t s : {128, 256, 512})
      EXPECT_FALSE(graph_rules(v, dt, Pass::Backward, s, s, false).add_padding_mask) << s;
    // s_kv decides, not s_q.
    EXPECT_TRUE(graph_rules(v, dt, Pass::Backward, 128, 37, false).add_padding_mask);
    EXPECT_FALSE(graph_rules(v, dt, Pass::Backward, 37, 128, false).add_padding_mask);
  }
  for (int64_t v : {91501, 91600, 91900, 100000})
    EXPECT_FALSE(graph_rules(v, dt, Pass::Backward, 37, 37, false).add_padding_mask) << v;
}

TEST(CudnnRules, BackwardRepadsAfterStatsBeforeCudnn9_10) {
  const DType dt = DType::Float16;
  EXPECT_TRUE(graph_rules(90500, dt, Pass::Backward, 128, 128, true).repad_after_stats);
  EXPECT_TRUE(graph_rules(90900, dt, Pass::Backward, 37, 37, false).repad_after_stats);  // the added padding mask
  EXPECT_FALSE(graph_rules(90500, dt, Pass::Backward, 128, 128, false).repad_after_stats);  // no padding mask
  EXPECT_FALSE(graph_rules(91002, dt, Pass::Backward, 128, 128, true).repad_after_stats);
  EXPECT_FALSE(graph_rules(91900, dt, Pass::Backward, 37, 37, true).repad_after_stats);
  EXPECT_FALSE(graph_rules(90500, dt, Pass::Forward, 128, 128, true).repad_after_stats);
}

TEST(CudnnRules, BackwardOfOneByOneIsRefused) {
  EXPECT_FALSE(graph_rules(91900, DType::Float16, Pass::Backward, 1, 1, false).supported);
  EXPECT_TRUE(graph_rules(91900, DType::Float16, Pass::Forward, 1, 1, false).supported);
  EXPECT_TRUE(graph_rules(91900, DType::Float16, Pass::Backward, 64, 64, true).supported);  // T = 1 in a bucket
}

TEST(CudnnRules, RaggedTensorsByDeviceAndVersion) {
  using cuda::sdpa::ragged_offset_bytes;
  using cuda::sdpa::ragged_supported;
  EXPECT_TRUE(ragged_supported(90000, 9));
  EXPECT_TRUE(ragged_supported(91500, 10));
  EXPECT_FALSE(ragged_supported(91500, 8));
  EXPECT_FALSE(ragged_supported(91800, 8));
  EXPECT_TRUE(ragged_supported(91801, 8));
  EXPECT_EQ(ragged_offset_bytes(90000, 64 * 512 * 2304), 4);
  EXPECT_EQ(ragged_offset_bytes(90000, std::numeric_limits<int32_t>::max()), 4);
  EXPECT_EQ(ragged_offset_bytes(90500, int64_t{1} << 31), 8);
  EXPECT_EQ(ragged_offset_bytes(90400, int64_t{1} << 31), 0);  // needs int64, which this cuDNN lacks
}

TEST(CudnnRules, BucketsCoverEveryLengthWithFewPlans) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {
      {1, 64}, {37, 64}, {64, 64}, {65, 128}, {128, 128}, {129, 256}, {300, 512}, {512, 512},
      {513, 1024}, {1024, 1024}, {1025, 1536}, {1536, 1536}, {1537, 2048}, {4097, 4608}};
  for (const auto& [T, b] : cases) EXPECT_EQ(bucket_length(T), b) << T;
  std::set<int64_t> upto512, upto4096;
  for (int64_t T = 1; T <= 4096; ++T) {
    const int64_t b = bucket_length(T);
    ASSERT_GE(b, T);
    ASSERT_EQ(bucket_length(b), b) << T;       // a bucket is its own bucket
    ASSERT_LE(b, std::max<int64_t>(64, 2 * T)) << T;  // never more than twice the length (or 64)
    ASSERT_GE(b, bucket_length(T - 1)) << T;    // monotone
    (T <= 512 ? upto512 : upto4096).insert(b);
  }
  EXPECT_EQ(upto512.size(), 4u);  // 64, 128, 256, 512: BERT's lengths in four plans
}

// Every slot of the argument buffer starts 16-byte aligned (cuDNN checks the
// pointers against the declared alignment); slots do not overlap. The dropout
// offset once sat 8 bytes after the seed.
TEST(CudnnRules, ArgumentSlotsAre16ByteAlignedAndDisjoint) {
  for (int64_t B : {1, 2, 3, 7, 64, 1000})
    for (bool dropout : {false, true})
      for (bool seq : {false, true})
        for (bool ragged : {false, true})
          for (int64_t rb : {4, 8}) {
            SCOPED_TRACE("B " + std::to_string(B) + " dropout " + std::to_string(dropout) + " seq " +
                         std::to_string(seq) + " ragged " + std::to_string(ragged) + " offset bytes " +
                         std::to_string(rb));
            const ArgsLayout l = args_layout(B, dropout, seq, ragged, rb);
            std::vector<std::pair<int64_t, int64_t>> slots;  // (start, size)
            if (dropout) {
              slots.insert(slots.end(), {{l.seed, 8}, {l.offset, 8}});
              EXPECT_GE(l.offset - l.seed, 16);
            } else {
              EXPECT_TRUE(l.seed == -1 && l.offset == -1);
            }
            if (seq) {
              slots.insert(slots.end(), {{l.seq_len_q, 4 * B}, {l.seq_len_kv, 4 * B}});
            } else {
              EXPECT_TRUE(l.seq_len_q == -1 && l.seq_len_kv == -1);
            }
            for (int64_t r : l.ragged) {
              if (ragged) {
                slots.emplace_back(r, (B + 1) * rb);
              } else {
                EXPECT_EQ(r, -1);
              }
            }
            EXPECT_EQ(l.bytes % 16, 0);
            std::sort(slots.begin(), slots.end());
            int64_t end = 0;
            for (const auto& [start, size] : slots) {
              EXPECT_EQ(start % 16, 0) << start;
              EXPECT_GE(start, end);
              end = start + size;
            }
            EXPECT_LE(end, l.bytes);
          }
}

// Note [cuDNN causal masks]: which causal form a call gets, and what is refused.
TEST(CudnnRules, CausalMaskFormsByLengthsBiasDropoutAndVersion) {
  using cuda::sdpa::causal_rules;
  using cuda::sdpa::CausalMask;
  for (bool bias : {false, true})
    for (bool dropout : {false, true}) {
      SCOPED_TRACE(std::string(bias ? "bias " : "") + (dropout ? "dropout" : ""));
      EXPECT_EQ(causal_rules(91900, 128, 128, false, bias, dropout).mask, CausalMask::None);  // not causal
      EXPECT_TRUE(causal_rules(91900, 7, 3, false, bias, dropout).supported);  // cross attention, T > S
      EXPECT_EQ(causal_rules(91900, 1, 300, true, bias, dropout).mask, CausalMask::None);  // a decode step
      EXPECT_TRUE(causal_rules(90000, 1, 300, true, bias, dropout).supported);
      const auto square = causal_rules(90000, 37, 37, true, bias, dropout);  // any cuDNN 9
      EXPECT_TRUE(square.supported);
      EXPECT_EQ(square.mask, CausalMask::TopLeft);
      EXPECT_FALSE(square.needs_padding);
      EXPECT_FALSE(causal_rules(91900, 8, 7, true, bias, dropout).supported);  // S < T
      const auto cache = causal_rules(91900, 3, 100, true, bias, dropout);
      EXPECT_EQ(cache.supported, !bias && !dropout);
      if (cache.supported) {
        EXPECT_EQ(cache.mask, CausalMask::BottomRight);
        EXPECT_TRUE(cache.needs_padding);
      }
    }
  EXPECT_FALSE(causal_rules(90500, 64, 128, true, false, false).supported);  // bottom-right before 9.6.0
  EXPECT_TRUE(causal_rules(90600, 64, 128, true, false, false).supported);
  EXPECT_NE(std::string(causal_rules(91900, 3, 100, true, true, false).why).find("bias"), std::string::npos);
}

}  // namespace
}  // namespace kiln
