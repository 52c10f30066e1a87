// The CUDA backend against its oracle, the CPU backend:
//  - every registry op (ops/op_registry.h; the same samples
//    tests/test_gradcheck.cpp uses), forward and backward, in float64,
//    float32, bfloat16 and float16, CUDA result vs CPU result;
//  - every kernel of the device interface (core/backend.h) on random shapes,
//    layouts (transposed, broadcast, sliced) and dtypes;
//  - tensors, streams, events, copies and the caching allocator on a device.
//
// Agreement is measured as the normalised error ||cuda - cpu||_2 / ||cpu||_2
// (NaN must meet NaN) against a per-dtype threshold (kTol below); casts,
// random fills, index_add (Note [Deterministic index_add]) and max/min/argmax
// must match bit for bit.
//
// Every test that needs a GPU skips when there is none (no device, no
// driver) or when kiln was built without CUDA, so CI stays green; the only
// test that runs everywhere checks the "built without CUDA" contract.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "cuda/cuda.h"
#include "ops/internal.h"
#include "ops/op_registry.h"
#include "cuda_test_util.h"
#include "test_util.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kGpu;
using testing::normalised_error;
using testing::tolerance;
const DType kFloatTypes[] = {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16};

::testing::AssertionResult matches(const Tensor& gpu, const Tensor& cpu, DType dtype, const std::string& what) {
  if (gpu.device() != kGpu && gpu.device().is_cpu())
    return ::testing::AssertionFailure() << what << ": result is on the CPU, expected CUDA";
  if (gpu.dtype() != cpu.dtype())
    return ::testing::AssertionFailure() << what << ": dtype " << dtype_name(gpu.dtype()) << " vs "
                                         << dtype_name(cpu.dtype());
  const double tol = tolerance(dtype);
  if (tol == 0.0) {
    ::testing::AssertionResult r = bitwise_equal(gpu, cpu);
    if (!r) return ::testing::AssertionFailure() << what << ": " << r.message();
    return r;
  }
  const double err = normalised_error(gpu, cpu);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name(dtype) << "): normalised error " << err
                                       << " > " << tol;
}

// A CPU tensor of `dtype` with values in [lo, hi) (integers: [lo, hi) whole numbers).
Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Tensor t = empty_tensor(shape, dtype, kCPU);
  if (is_floating(dtype)) {
    Tensor f = empty_tensor(shape, DType::Float64, kCPU);
    cpu_backend().uniform(f, lo, hi, PhiloxState{seed, 0});
    cpu_backend().copy(t, f);
  } else if (dtype == DType::Bool) {
    cpu_backend().bernoulli(t, 0.5, PhiloxState{seed, 0});
  } else {
    cpu_backend().randint(t, static_cast<int64_t>(lo), static_cast<int64_t>(hi), PhiloxState{seed, 0});
  }
  return t;
}

Tensor on_gpu(const Tensor& t) { return t.to(kGpu); }

Shape random_shape(std::mt19937& rng, int max_dims = 4, int64_t max_size = 9) {
  std::uniform_int_distribution<int> nd(1, max_dims);
  std::uniform_int_distribution<int64_t> sz(1, max_size);
  Shape s(static_cast<size_t>(nd(rng)));
  for (auto& d : s) d = sz(rng);
  return s;
}

// A transposed (last two dims swapped) view holding the values of x.
Tensor transposed_copy(const Tensor& x) {
  if (x.dim() < 2) return x;
  Shape s = x.sizes();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor base = empty_tensor(s, x.dtype(), x.device());
  Shape perm;
  for (int64_t i = 0; i < x.dim(); ++i) perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  Shape vs, vst;
  for (int64_t d : perm) { vs.push_back(base.size(d)); vst.push_back(base.stride(d)); }
  Tensor v = make_tensor(base.storage(), vs, vst, 0, x.dtype());
  backend(x.device()).copy(v, x);
  return v;
}

// ---------------------------------------------------------------------------
// Runs everywhere: the build's answer when there is no usable GPU.

TEST(CudaBuild, AnswersWithoutDevice) {
  if (!cuda_built()) {
    EXPECT_EQ(cuda::device_count(), 0);
    EXPECT_FALSE(cuda::is_available());
    EXPECT_KILN_ERROR(cuda::Stream::create(), "built without CUDA");
    EXPECT_KILN_ERROR(cuda::memory_stats(0), "built without CUDA");
    EXPECT_KILN_ERROR(cuda::pin_memory(zeros({2})), "built without CUDA");
    EXPECT_KILN_ERROR(zeros({2}).to(kGpu), "built without CUDA");
    return;
  }
  if (cuda::device_count() == 0) {
    EXPECT_KILN_ERROR(zeros({2}).to(kGpu), "no CUDA device");
    return;
  }
  EXPECT_KILN_ERROR(zeros({2}).to(Device(DeviceType::CUDA, cuda::device_count())), "does not exist");
}

// ---------------------------------------------------------------------------
// Tensors, copies, streams, events.

TEST(CudaTensor, RoundTripEveryDtype) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                   DType::Bool}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_cpu({37, 5}, dt, 1, -100, 100);
    const Tensor g = on_gpu(x);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_TRUE(bitwise_equal(g.cpu(), x));
    EXPECT_TRUE(bitwise_equal(g.t().contiguous().cpu(), x.t().contiguous()));  // strided copy on the device
    EXPECT_TRUE(bitwise_equal(on_gpu(x.t()).cpu(), x.t().contiguous()));      // non-contiguous upload
  }
  EXPECT_EQ(on_gpu(zeros({0, 3})).numel(), 0);
}

TEST(CudaTensor, InPlaceOpsAndItem) {
  KILN_REQUIRE_CUDA();
  Tensor g = zeros({4, 6}, TensorOptions(DType::Float32, kGpu));
  g.slice(1, 1, 5, 2).fill_(3.0);
  Tensor c = zeros({4, 6});
  c.slice(1, 1, 5, 2).fill_(3.0);
  EXPECT_TRUE(bitwise_equal(g.cpu(), c));
  g.add_(ones({6}, TensorOptions(DType::Float32, kGpu)));
  EXPECT_EQ(g.sum().item<float>(), c.sum().item<float>() + 24.0f);
}

TEST(CudaStream, CurrentStreamGuardAndEvents) {
  KILN_REQUIRE_CUDA();
  const cuda::Stream def = cuda::current_stream(0);
  EXPECT_EQ(def.handle(), nullptr);
  cuda::Stream s = cuda::Stream::create(0);
  EXPECT_NE(s.handle(), nullptr);
  {
    cuda::StreamGuard guard(s);
    EXPECT_EQ(cuda::current_stream(0), s);
    // Work on s: fill, then a copy on a second stream that waits for it.
    Tensor a = full({1 << 20}, 2.5, TensorOptions(DType::Float32, kGpu));
    cuda::Event done(true);
    done.record(s);
    cuda::Stream s2 = cuda::Stream::create(0);
    s2.wait(done);
    Tensor b;
    {
      cuda::StreamGuard g2(s2);
      b = a.clone();
      cuda::record_stream(a, s2);
    }
    s2.synchronize();
    EXPECT_TRUE(done.query());
    EXPECT_EQ(b.sum().item<double>(), 2.5 * (1 << 20));
    cuda::Event end(true);
    end.record(s);
    end.synchronize();
    EXPECT_GE(done.elapsed_ms(end), 0.0f);
  }
  EXPECT_EQ(cuda::current_stream(0), def);
  EXPECT_TRUE(s.query());
  EXPECT_TRUE(cuda::Event().query());  // never recorded: complete
}

TEST(CudaCopy, SyncAndAsyncInEveryDirection) {
  KILN_REQUIRE_CUDA();
  const Tensor x = random_cpu({1000, 33}, DType::Float32, 7);
  // pinned host -> device, asynchronous
  Tensor pinned = cuda::pin_memory(x);
  EXPECT_TRUE(cuda::is_pinned(pinned));
  EXPECT_FALSE(cuda::is_pinned(x));
  Tensor d = empty({1000, 33}, TensorOptions(DType::Float32, kGpu));
  cuda::copy(d, pinned, /*non_blocking=*/true);
  // device -> pinned host, asynchronous, then wait on the stream
  Tensor back = cuda::empty_pinned({1000, 33}, DType::Float32);
  cuda::copy(back, d, true);
  cuda::current_stream(0).synchronize();
  EXPECT_TRUE(bitwise_equal(back, x));
  // device -> device, synchronous
  Tensor d2 = empty({1000, 33}, TensorOptions(DType::Float32, kGpu));
  cuda::copy(d2, d);
  EXPECT_TRUE(bitwise_equal(d2.cpu(), x));
  // pageable memory cannot take part in a non-blocking copy
  EXPECT_KILN_ERROR(cuda::copy(d, x, true), "pinned");
  EXPECT_KILN_ERROR(cuda::copy(d, random_cpu({3}, DType::Float32, 1)), "same shape");
  if (cuda::device_count() > 1) {
    Tensor other = empty({1000, 33}, TensorOptions(DType::Float32, Device(DeviceType::CUDA, 1)));
    cuda::copy(other, d);
    EXPECT_TRUE(bitwise_equal(other.cpu(), x));
  }
  EXPECT_GT(cuda::pinned_memory_stats().allocations, 0u);
}

TEST(CudaErrors, FailuresNameCallFileAndLine) {
  KILN_REQUIRE_CUDA();
  EXPECT_KILN_ERROR(cuda::set_device(cuda::device_count() + 7), "CUDA error", "cudaSetDevice", "stream.cpp:");
}

// ---------------------------------------------------------------------------
// The caching allocator on the device.

TEST(CudaAllocator, CachesReusesAndReleases) {
  KILN_REQUIRE_CUDA();
  const char* env = std::getenv("KILN_CACHING_ALLOCATOR");
  const bool caching = !(env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "false") == 0 ||
                                 std::strcmp(env, "off") == 0));
  cuda::synchronize(0);
  const int64_t n = (int64_t{37} << 18) + 128;  // 37 MiB + 512 B: a large segment of its own
  const memory::AllocatorStats before = cuda::memory_stats(0);
  {
    Tensor t = empty({n}, TensorOptions(DType::Float32, kGpu));
    const memory::AllocatorStats s = cuda::memory_stats(0);
    EXPECT_GE(s.allocated_bytes, before.allocated_bytes + static_cast<size_t>(n) * 4);
    EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
    EXPECT_GE(s.peak_allocated_bytes, s.allocated_bytes);
  }
  const memory::AllocatorStats freed = cuda::memory_stats(0);
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  if (caching) {
    Tensor again = empty({n}, TensorOptions(DType::Float32, kGpu));  // served from the cache
    EXPECT_EQ(cuda::memory_stats(0).device_reserves, freed.device_reserves);
  }
  cuda::empty_cache(0);
  const memory::AllocatorStats emptied = cuda::memory_stats(0);
  if (caching) {
    EXPECT_LE(emptied.reserved_bytes + static_cast<size_t>(n) * 4, freed.reserved_bytes);
  }
  EXPECT_EQ(emptied.allocated_bytes, before.allocated_bytes);
  const std::string summary = cuda::memory_summary(0);
  EXPECT_NE(summary.find("cuda:0"), std::string::npos) << summary;
}

TEST(CudaAllocator, OutOfMemoryIsAnErrorAndRecoverable) {
  KILN_REQUIRE_CUDA();
  const uint64_t ooms = cuda::memory_stats(0).oom_errors;
  try {
    Tensor huge = empty({int64_t{1} << 45}, TensorOptions(DType::Float32, kGpu));  // 128 TiB
    FAIL() << "allocated 128 TiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.requested(), size_t{1} << 47);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda::memory_stats(0).oom_errors, ooms + 1);
  Tensor ok = ones({1000}, TensorOptions(DType::Float32, kGpu));  // still usable
  EXPECT_EQ(ok.sum().item<float>(), 1000.0f);
}

#ifdef KILN_WITH_CUDA
// A block freed while another stream still uses it (record_stream) is not
// reused until that stream's work is done. Stream B is held by a host
// function that spins until the test releases it.
TEST(CudaAllocator, RecordStreamDefersReuse) {
  KILN_REQUIRE_CUDA();
  cuda::synchronize(0);
  cuda::Stream b = cuda::Stream::create(0);
  std::atomic<bool> release{false};
  struct Releaser {
    std::atomic<bool>& flag;
    cuda::Stream& stream;
    ~Releaser() {
      flag = true;
      stream.synchronize();
    }
  } releaser{release, b};
  ASSERT_EQ(cudaLaunchHostFunc(
                static_cast<cudaStream_t>(b.handle()),
                [](void* p) {
                  while (!static_cast<std::atomic<bool>*>(p)->load()) std::this_thread::yield();
                },
                &release),
            cudaSuccess);
  const size_t pending_before = cuda::memory_stats(0).pending_blocks;
  void* p = nullptr;
  {
    Tensor t = empty({3 << 18}, TensorOptions(DType::Float32, kGpu));
    p = t.raw_data();
    cuda::record_stream(t, b);
  }
  EXPECT_EQ(cuda::memory_stats(0).pending_blocks, pending_before + 1);
  {
    Tensor u = empty({3 << 18}, TensorOptions(DType::Float32, kGpu));
    EXPECT_NE(u.raw_data(), p) << "block reused while stream B may still read it";
  }
  release = true;
  b.synchronize();
  Tensor w = empty({16}, TensorOptions(DType::Float32, kGpu));  // allocation checks the events
  EXPECT_EQ(cuda::memory_stats(0).pending_blocks, pending_before);
}
#endif

// ---------------------------------------------------------------------------
// Every registry op, forward and backward, CUDA vs CPU.

struct OpRun {
  Tensor y;
  std::vector<Tensor> grads;
};

OpRun run_sample(const OpInfo& op, const OpSample& s, DType dtype, Device device) {
  TensorList in;
  for (const Tensor& x : s.inputs) {
    Tensor t = is_floating(x.dtype()) ? x.to(dtype) : x;
    t = t.to(device).clone().detach();
    if (op.differentiable && is_floating(t.dtype())) t.set_requires_grad(true);
    in.push_back(t);
  }
  OpRun r;
  r.y = s.fn(in);
  if (op.differentiable && r.y.requires_grad()) {
    Tensor v = detail::sample_tensor(r.y.sizes(), 999, -1.0, 1.0).to(r.y.dtype()).to(device);
    sum(mul(r.y, v)).backward();
    for (const Tensor& t : in)
      if (t.requires_grad()) r.grads.push_back(t.grad().defined() ? t.grad() : zeros_like(t));
  }
  return r;
}

TEST(CudaOps, EveryRegistryOpMatchesCpu) {
  KILN_REQUIRE_CUDA();
  int checked = 0;
  std::vector<std::string> pinned_to_cpu;
  for (const OpInfo& op : op_registry()) {
    for (const OpSample& s : op.samples()) {
      for (DType dt : kFloatTypes) {
        const std::string what = op.name + " / " + s.desc + " / " + dtype_name(dt);
        SCOPED_TRACE(what);
        OpRun cpu_run;
        try {
          cpu_run = run_sample(op, s, dt, kCPU);
        } catch (const Error& e) {
          continue;  // the op refuses this dtype on the CPU too (e.g. an integer-only path)
        }
        OpRun gpu_run;
        try {
          gpu_run = run_sample(op, s, dt, kGpu);
        } catch (const Error& e) {
          // A sample that builds CPU tensors inside its function (index
          // lists, targets) cannot run on CUDA as written; the kernel tests
          // below cover those ops with device inputs.
          if (std::string(e.what()).find("same device") != std::string::npos) {
            if (dt == DType::Float64) pinned_to_cpu.push_back(op.name + " / " + s.desc);
            continue;
          }
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        ++checked;
        EXPECT_EQ(gpu_run.y.device(), kGpu);
        EXPECT_TRUE(matches(gpu_run.y, cpu_run.y, gpu_run.y.dtype(), what + " forward"));
        ASSERT_EQ(gpu_run.grads.size(), cpu_run.grads.size());
        for (size_t i = 0; i < gpu_run.grads.size(); ++i)
          EXPECT_TRUE(matches(gpu_run.grads[i], cpu_run.grads[i], dt, what + " grad " + std::to_string(i)));
      }
    }
  }
  EXPECT_GT(checked, 150);
  for (const std::string& p : pinned_to_cpu) std::printf("  [cuda] sample builds CPU tensors, kernel-tested: %s\n", p.c_str());
}

// ---------------------------------------------------------------------------
// The device interface, kernel by kernel, on random shapes and layouts.

TEST(CudaKernels, CastsAreExact) {
  KILN_REQUIRE_CUDA();
  const DType all[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                       DType::Int32,   DType::Int64,   DType::Bool};
  uint64_t seed = 10;
  for (DType from : all)
    for (DType to : all) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const Tensor x = random_cpu({13, 7}, from, ++seed, -300, 300);
      Tensor want = empty_tensor({7, 13}, to, kCPU);
      cpu_backend().copy(want, x.t());  // strided source
      Tensor got = empty_tensor({7, 13}, to, kGpu);
      backend(kGpu).copy(got, on_gpu(x).t());
      EXPECT_TRUE(bitwise_equal(got.cpu(), want));
    }
}

TEST(CudaKernels, FillAndArange) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                   DType::Bool}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor g = empty_tensor({1001}, dt, kGpu), c = empty_tensor({1001}, dt, kCPU);
    backend(kGpu).fill(g, 1.75);
    cpu_backend().fill(c, 1.75);
    EXPECT_TRUE(bitwise_equal(g.cpu(), c));
    backend(kGpu).arange(g, -3.0, 0.25);
    cpu_backend().arange(c, -3.0, 0.25);
    EXPECT_TRUE(bitwise_equal(g.cpu(), c));
  }
}

TEST(CudaKernels, UnaryOnRandomShapesAndLayouts) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(1);
  const UnaryOp ops[] = {UnaryOp::Neg,  UnaryOp::Exp,     UnaryOp::Log,  UnaryOp::Sqrt, UnaryOp::Rsqrt,
                         UnaryOp::Tanh, UnaryOp::Erf,     UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Gelu,
                         UnaryOp::GeluTanh, UnaryOp::Abs, UnaryOp::LogicalNot};
  uint64_t seed = 100;
  for (DType dt : kFloatTypes)
    for (UnaryOp op : ops)
      for (int trial = 0; trial < 3; ++trial) {
        const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt;
        Shape shape = random_shape(rng);
        if (trial == 2) shape = {3, 50001};  // vectorised path with a tail
        const Tensor xc = random_cpu(shape, dt, ++seed, positive ? 0.05 : -3.0, 3.0);
        const Tensor x_cpu = trial == 1 ? transposed_copy(xc) : xc;
        const Tensor x_gpu = trial == 1 ? transposed_copy(on_gpu(xc)) : on_gpu(xc);
        const DType out_dt = op == UnaryOp::LogicalNot ? DType::Bool : dt;
        Tensor want = empty_tensor(x_cpu.sizes(), out_dt, kCPU), got = empty_tensor(x_cpu.sizes(), out_dt, kGpu);
        cpu_backend().unary(op, want, x_cpu);
        backend(kGpu).unary(op, got, x_gpu);
        EXPECT_TRUE(matches(got, want, out_dt, "unary " + std::to_string(static_cast<int>(op)) + " " +
                                                   shape_str(shape)));
      }
  for (DType dt : {DType::Int32, DType::Int64})
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
      const Tensor x = random_cpu({17, 9}, dt, ++seed, -50, 50);
      Tensor want = empty_tensor({17, 9}, dt, kCPU), got = empty_tensor({17, 9}, dt, kGpu);
      cpu_backend().unary(op, want, x);
      backend(kGpu).unary(op, got, on_gpu(x));
      EXPECT_TRUE(bitwise_equal(got.cpu(), want));
    }
}

TEST(CudaKernels, BinaryAndWhereWithBroadcasting) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(2);
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow,
                          BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt,
                          BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge, BinaryOp::ReluBackward,
                          BinaryOp::GeluBackward, BinaryOp::GeluTanhBackward, BinaryOp::TanhBackward,
                          BinaryOp::SigmoidBackward};
  uint64_t seed = 200;
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16, DType::Int32, DType::Int64})
    for (BinaryOp op : ops) {
      if (!is_floating(dt) && (op == BinaryOp::Pow || op >= BinaryOp::ReluBackward)) continue;
      for (int trial = 0; trial < 3; ++trial) {
        Shape shape = random_shape(rng);
        if (trial == 2) shape = {2, 40003};
        const bool pow = op == BinaryOp::Pow;
        const Tensor a = random_cpu(shape, dt, ++seed, pow ? 0.1 : -3.0, 3.0);
        // b broadcast along dim 0 (stride 0), or transposed when 2-D+
        Shape bs = shape;
        bs[0] = 1;
        const Tensor b_small = random_cpu(bs, dt, ++seed, is_floating(dt) ? -3.0 : 1.0, 3.0);
        const Tensor b_cpu = detail::raw_expand(b_small, shape);
        const Tensor b_gpu = detail::raw_expand(on_gpu(b_small), shape);
        const DType out_dt = is_comparison(op) ? DType::Bool : dt;
        Tensor want = empty_tensor(shape, out_dt, kCPU), got = empty_tensor(shape, out_dt, kGpu);
        cpu_backend().binary(op, want, a, b_cpu);
        backend(kGpu).binary(op, got, on_gpu(a), b_gpu);
        EXPECT_TRUE(matches(got, want, out_dt, "binary " + std::to_string(static_cast<int>(op)) + " " +
                                                   dtype_name(dt) + " " + shape_str(shape)));
      }
    }
  for (DType dt : kFloatTypes) {
    const Shape shape{5, 7, 11};
    const Tensor c = random_cpu(shape, DType::Bool, ++seed), a = random_cpu(shape, dt, ++seed),
                 b = random_cpu({11}, dt, ++seed);
    Tensor want = empty_tensor(shape, dt, kCPU), got = empty_tensor(shape, dt, kGpu);
    cpu_backend().where(want, c, a, detail::raw_expand(b, shape));
    backend(kGpu).where(got, on_gpu(c), on_gpu(a), detail::raw_expand(on_gpu(b), shape));
    EXPECT_TRUE(bitwise_equal(got.cpu(), want));
  }
}

TEST(CudaKernels, ReductionsOverRandomDims) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(3);
  uint64_t seed = 300;
  struct Case {
    Shape shape;
    Shape dims;
  };
  std::vector<Case> cases = {{{1 << 21}, {0}},          // one long row: split into chunks
                             {{70000, 3}, {0}},         // outer layout, few columns
                             {{3, 70000}, {1}},         // few long rows
                             {{64, 128, 96}, {0, 1}},   // outer layout
                             {{17, 33, 5}, {0, 2}}};    // permuted
  for (int i = 0; i < 12; ++i) {
    Case c{random_shape(rng, 4, 12), {}};
    for (int64_t d = 0; d < static_cast<int64_t>(c.shape.size()); ++d)
      if (rng() % 2) c.dims.push_back(d);
    if (c.dims.empty()) c.dims.push_back(0);
    cases.push_back(c);
  }
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16, DType::Int64, DType::Int32})
    for (const Case& c : cases)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Argmax}) {
        const Tensor x = is_floating(dt) ? random_cpu(c.shape, dt, ++seed, -1, 1) : random_cpu(c.shape, dt, ++seed, -100, 100);
        Shape out_shape = c.shape;
        for (int64_t d : c.dims) out_shape[static_cast<size_t>(d)] = 1;
        const DType out_dt = op == ReduceOp::Argmax ? DType::Int64 : dt;
        Tensor want = empty_tensor(out_shape, out_dt, kCPU), got = empty_tensor(out_shape, out_dt, kGpu);
        if (op == ReduceOp::Sum && is_floating(dt)) {
          // the CPU's float32 sum of 2M values carries more rounding than the
          // GPU's tree: compare both with the float64 sum, rounded once
          Tensor wide = empty_tensor(out_shape, DType::Float64, kCPU), xw = empty_tensor(c.shape, DType::Float64, kCPU);
          cpu_backend().copy(xw, x);
          cpu_backend().reduce(op, wide, xw, c.dims);
          cpu_backend().copy(want, wide);
        } else {
          cpu_backend().reduce(op, want, x, c.dims);
        }
        backend(kGpu).reduce(op, got, on_gpu(x), c.dims);
        // max/min/argmax and integer sums are exact; float sums within rounding
        const DType tol_dt = op == ReduceOp::Sum ? dt : DType::Int64;
        EXPECT_TRUE(matches(got, want, tol_dt, "reduce " + std::to_string(static_cast<int>(op)) + " " +
                                                   dtype_name(dt) + " " + shape_str(c.shape) + " dims " +
                                                   shape_str(c.dims)));
      }
}

TEST(CudaKernels, MatmulThroughCublasLt) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(4);
  std::uniform_int_distribution<int64_t> dim(1, 96);
  uint64_t seed = 400;
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16, DType::Int64})
    for (int trial = 0; trial < 10; ++trial) {
      int64_t Bt = 1 + rng() % 3, M = dim(rng), K = dim(rng), N = dim(rng);
      if (trial == 9) { Bt = 2; M = 384; K = 768; N = 512; }
      const bool ta = trial % 2, tb = (trial / 2) % 2, broadcast_b = trial % 3 == 0;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(Bt) + "x" + std::to_string(M) + "x" +
                   std::to_string(K) + "x" + std::to_string(N) + (ta ? " a^T" : "") + (tb ? " b^T" : "") +
                   (broadcast_b ? " b broadcast" : ""));
      const Tensor a0 = random_cpu({Bt, M, K}, dt, ++seed, -4, 4);
      const Tensor b0 = random_cpu({broadcast_b ? 1 : Bt, K, N}, dt, ++seed, -4, 4);
      Tensor a_c = ta ? transposed_copy(a0) : a0, a_g = ta ? transposed_copy(on_gpu(a0)) : on_gpu(a0);
      Tensor b_c = tb ? transposed_copy(b0) : b0, b_g = tb ? transposed_copy(on_gpu(b0)) : on_gpu(b0);
      if (broadcast_b) {
        b_c = detail::raw_expand(b_c, {Bt, K, N});
        b_g = detail::raw_expand(b_g, {Bt, K, N});
      }
      Tensor want = empty_tensor({Bt, M, N}, dt, kCPU), got = empty_tensor({Bt, M, N}, dt, kGpu);
      cpu_backend().matmul(want, a_c, b_c);
      backend(kGpu).matmul(got, a_g, b_g);
      EXPECT_TRUE(matches(got, want, dt, "matmul"));
    }
  // TF32: close to float32, switchable, off by default.
  EXPECT_FALSE(cuda::allow_tf32() && std::getenv("KILN_ALLOW_TF32") == nullptr);
  const Tensor a = random_cpu({1, 256, 512}, DType::Float32, 1), b = random_cpu({1, 512, 128}, DType::Float32, 2);
  Tensor want = empty_tensor({1, 256, 128}, DType::Float32, kCPU), got = empty_tensor({1, 256, 128}, DType::Float32, kGpu);
  cpu_backend().matmul(want, a, b);
  const bool saved = cuda::allow_tf32();
  cuda::set_allow_tf32(true);
  backend(kGpu).matmul(got, on_gpu(a), on_gpu(b));
  cuda::set_allow_tf32(saved);
  EXPECT_LT(normalised_error(got, want), 5e-3);
}

TEST(CudaKernels, SoftmaxLayerNormCrossEntropy) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(5);
  uint64_t seed = 500;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 3}, {33, 128}, {5, 1000}, {3, 30522}, {300, 768}};
  for (DType dt : kFloatTypes)
    for (auto [R, C] : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(R) + "x" + std::to_string(C));
      const Tensor x = random_cpu({R, C}, dt, ++seed, -5, 5), dy = random_cpu({R, C}, dt, ++seed);
      const Tensor xg = on_gpu(x), dyg = on_gpu(dy);
      for (bool log : {false, true}) {
        Tensor yc = empty_tensor({R, C}, dt, kCPU), yg = empty_tensor({R, C}, dt, kGpu);
        cpu_backend().softmax(yc, x, log);
        backend(kGpu).softmax(yg, xg, log);
        EXPECT_TRUE(matches(yg, yc, dt, log ? "log_softmax" : "softmax"));
        Tensor dxc = empty_tensor({R, C}, dt, kCPU), dxg = empty_tensor({R, C}, dt, kGpu);
        cpu_backend().softmax_backward(dxc, yc, dy, log);
        backend(kGpu).softmax_backward(dxg, on_gpu(yc), dyg, log);
        EXPECT_TRUE(matches(dxg, dxc, dt, log ? "log_softmax backward" : "softmax backward"));
      }
      const DType stat = dt == DType::Float64 ? DType::Float64 : DType::Float32;
      for (bool affine : {true, false}) {
        const Tensor w = affine ? random_cpu({C}, dt, ++seed) : Tensor(), b = affine ? random_cpu({C}, dt, ++seed) : Tensor();
        Tensor yc = empty_tensor({R, C}, dt, kCPU), mc = empty_tensor({R}, stat, kCPU), rc = empty_tensor({R}, stat, kCPU);
        Tensor yg = empty_tensor({R, C}, dt, kGpu), mg = empty_tensor({R}, stat, kGpu), rg = empty_tensor({R}, stat, kGpu);
        cpu_backend().layer_norm(yc, mc, rc, x, w, b, 1e-5);
        backend(kGpu).layer_norm(yg, mg, rg, xg, affine ? on_gpu(w) : Tensor(), affine ? on_gpu(b) : Tensor(), 1e-5);
        EXPECT_TRUE(matches(yg, yc, dt, "layer_norm"));
        EXPECT_TRUE(matches(mg, mc, stat == DType::Float64 ? dt : DType::Float32, "layer_norm mean"));
        EXPECT_TRUE(matches(rg, rc, stat == DType::Float64 ? dt : DType::Float32, "layer_norm rstd"));
        Tensor dxc = empty_tensor({R, C}, dt, kCPU), dwc = empty_tensor({C}, dt, kCPU), dbc = empty_tensor({C}, dt, kCPU);
        Tensor dxg = empty_tensor({R, C}, dt, kGpu), dwg = empty_tensor({C}, dt, kGpu), dbg = empty_tensor({C}, dt, kGpu);
        cpu_backend().layer_norm_backward(dxc, dwc, dbc, dy, x, mc, rc, w);
        backend(kGpu).layer_norm_backward(dxg, dwg, dbg, dyg, xg, mg, rg, affine ? on_gpu(w) : Tensor());
        EXPECT_TRUE(matches(dxg, dxc, dt, "layer_norm dx"));
        EXPECT_TRUE(matches(dwg, dwc, dt, "layer_norm dweight"));
        EXPECT_TRUE(matches(dbg, dbc, dt, "layer_norm dbias"));
      }
      for (double smoothing : {0.0, 0.1}) {
        Tensor target = empty_tensor({R}, DType::Int64, kCPU);
        cpu_backend().randint(target, 0, C, PhiloxState{++seed, 0});
        if (R > 2) target.narrow(0, 1, 1).fill_(-100.0);  // an ignored row
        Tensor lc = empty_tensor({R}, dt, kCPU), sc = empty_tensor({R}, dt, kCPU);
        Tensor lg = empty_tensor({R}, dt, kGpu), sg = empty_tensor({R}, dt, kGpu);
        cpu_backend().cross_entropy(lc, sc, x, target, -100, smoothing);
        backend(kGpu).cross_entropy(lg, sg, xg, on_gpu(target), -100, smoothing);
        EXPECT_TRUE(matches(lg, lc, dt, "cross_entropy loss"));
        EXPECT_TRUE(matches(sg, sc, dt, "cross_entropy lse"));
        const Tensor dloss = random_cpu({R}, dt, ++seed);
        Tensor dc = empty_tensor({R, C}, dt, kCPU), dg = empty_tensor({R, C}, dt, kGpu);
        cpu_backend().cross_entropy_backward(dc, dloss, x, sc, target, -100, smoothing);
        backend(kGpu).cross_entropy_backward(dg, on_gpu(dloss), xg, on_gpu(sc), on_gpu(target), -100, smoothing);
        EXPECT_TRUE(matches(dg, dc, dt, "cross_entropy backward"));
      }
    }
}

TEST(CudaKernels, IndexSelectAndDeterministicIndexAdd) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 600;
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int64})
    for (int64_t dim : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim));
      const Shape in_shape = dim == 0 ? Shape{1000, 77} : Shape{3, 1000, 5};
      const Tensor in = random_cpu(in_shape, dt, ++seed, -8, 8);
      Tensor idx = empty_tensor({4096}, DType::Int64, kCPU);
      cpu_backend().randint(idx, 0, 60, PhiloxState{++seed, 0});  // many repeats
      Shape out_shape = in_shape;
      out_shape[static_cast<size_t>(dim)] = 4096;
      Tensor want = empty_tensor(out_shape, dt, kCPU), got = empty_tensor(out_shape, dt, kGpu);
      cpu_backend().index_select(want, in, dim, idx);
      backend(kGpu).index_select(got, on_gpu(in), dim, on_gpu(idx));
      EXPECT_TRUE(bitwise_equal(got.cpu(), want));
      // index_add: the CPU's summation order, so bit-identical, and the same every run
      const Tensor src = random_cpu(out_shape, dt, ++seed, -8, 8);
      Tensor acc_c = in.clone(), acc_g1 = on_gpu(in), acc_g2 = on_gpu(in);
      cpu_backend().index_add(acc_c, dim, idx, src);
      backend(kGpu).index_add(acc_g1, dim, on_gpu(idx), on_gpu(src));
      backend(kGpu).index_add(acc_g2, dim, on_gpu(idx), on_gpu(src));
      EXPECT_TRUE(bitwise_equal(acc_g1.cpu(), acc_c));
      EXPECT_TRUE(bitwise_equal(acc_g1.cpu(), acc_g2.cpu()));
    }
}

TEST(CudaKernels, RandomMatchesCpuPhilox) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int32, DType::Int64,
                   DType::Bool}) {
    SCOPED_TRACE(dtype_name(dt));
    const PhiloxState st{0x1234567890abcdefull, 42};
    Tensor c = empty_tensor({100003}, dt, kCPU), g = empty_tensor({100003}, dt, kGpu);
    cpu_backend().uniform(c, -1.5, 2.5, st);
    backend(kGpu).uniform(g, -1.5, 2.5, st);
    EXPECT_TRUE(bitwise_equal(g.cpu(), c)) << "uniform";
    cpu_backend().bernoulli(c, 0.3, st);
    backend(kGpu).bernoulli(g, 0.3, st);
    EXPECT_TRUE(bitwise_equal(g.cpu(), c)) << "bernoulli";
    cpu_backend().randint(c, -7, 1000, st);
    backend(kGpu).randint(g, -7, 1000, st);
    EXPECT_TRUE(bitwise_equal(g.cpu(), c)) << "randint";
    if (is_floating(dt)) {
      cpu_backend().normal(c, 0.5, 2.0, st);
      backend(kGpu).normal(g, 0.5, 2.0, st);
      EXPECT_TRUE(matches(g, c, dt == DType::Float64 ? DType::Float64 : DType::Float16, "normal"));
    }
  }
}

TEST(CudaOpsEndToEnd, DropoutEmbeddingCrossEntropyOnDevice) {
  KILN_REQUIRE_CUDA();
  // Dropout masks equal the CPU's for the same generator state.
  const Tensor x = random_cpu({64, 300}, DType::Float32, 1);
  Generator g1(77), g2(77);
  const Tensor yc = dropout(x, 0.1, true, &g1), yg = dropout(on_gpu(x), 0.1, true, &g2);
  EXPECT_TRUE(bitwise_equal(ne(yg, 0.0).cpu(), ne(yc, 0.0)));
  // Embedding forward and (deterministic) backward with device ids.
  Tensor wc = random_cpu({1000, 64}, DType::Float32, 2).set_requires_grad(true);
  Tensor wg = on_gpu(wc.detach()).set_requires_grad(true);
  Tensor ids = empty_tensor({8, 128}, DType::Int64, kCPU);
  cpu_backend().randint(ids, 0, 50, PhiloxState{3, 0});
  const Tensor ec = embedding(wc, ids), eg = embedding(wg, on_gpu(ids));
  EXPECT_TRUE(bitwise_equal(eg.cpu(), ec));
  const Tensor v = random_cpu({8, 128, 64}, DType::Float32, 4);
  sum(mul(ec, v)).backward();
  sum(mul(eg, on_gpu(v))).backward();
  EXPECT_TRUE(bitwise_equal(wg.grad().cpu(), wc.grad()));
  // cross_entropy with device targets (mean over non-ignored rows).
  Tensor lc = random_cpu({256, 1000}, DType::Float32, 5).set_requires_grad(true);
  Tensor lg = on_gpu(lc.detach()).set_requires_grad(true);
  Tensor t = empty_tensor({256}, DType::Int64, kCPU);
  cpu_backend().randint(t, 0, 1000, PhiloxState{6, 0});
  t.narrow(0, 0, 10).fill_(-100.0);
  const Tensor loss_c = cross_entropy(lc, t, -100, 0.1), loss_g = cross_entropy(lg, on_gpu(t), -100, 0.1);
  EXPECT_TRUE(matches(loss_g, loss_c, DType::Float32, "cross_entropy"));
  loss_c.backward();
  loss_g.backward();
  EXPECT_TRUE(matches(lg.grad(), lc.grad(), DType::Float32, "cross_entropy grad"));
  // index_select op with a device index
  const Tensor idx = tensor_from({3, 0, 3, 1});
  EXPECT_TRUE(bitwise_equal(index_select(on_gpu(x), 1, on_gpu(idx)).cpu(), index_select(x, 1, idx)));
}

}  // namespace
}  // namespace kiln
