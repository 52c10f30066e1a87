// The CUDA backend's memory and execution on a device: tensors in every dtype,
// streams, events, synchronous and asynchronous copies, error reporting, and
// the caching allocator (reuse, out of memory, record_stream). Skips without
// a GPU (tests/cuda_test_util.h).
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "core/memory/device_memory.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "test_util.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kGpu;
using testing::on_gpu;
using testing::random_cpu;

// The CUDA memory factories (core/memory/device_memory.h) are libkiln's
// calls into the CUDA backend (core/cuda_hooks.h): errors without it. (Here,
// not in test_caching_allocator.cpp, which kiln_alloc_tsan_tests builds
// with core/memory/ alone.)
TEST(CudaMemory, FactoriesMatchTheBuild) {
#ifndef KILN_WITH_CUDA
  EXPECT_THROW(memory::make_cuda_device_memory(0), Error);
  EXPECT_THROW(memory::make_cuda_pinned_host_memory(), Error);
#else
  SUCCEED() << "CUDA build: exercised on a GPU machine";
#endif
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

// KILN_CACHING_ALLOCATOR=0/false/off (the sanitizer build) turns caching off.
static bool caching_from_environment() {
  const char* env = std::getenv("KILN_CACHING_ALLOCATOR");
  return !(env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "false") == 0 || std::strcmp(env, "off") == 0));
}

TEST(CudaAllocator, CachesReusesAndReleases) {
  KILN_REQUIRE_CUDA();
  const bool caching = caching_from_environment();
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
  // Without caching every free is a cudaFree, which synchronises the device:
  // with stream B held it would never return (found on the emulated device,
  // docs/gpu.md "Findings").
  if (!caching_from_environment()) GTEST_SKIP() << "needs the caching allocator (KILN_CACHING_ALLOCATOR is off)";
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

// Holds `stream` with a host function that spins until `flag` is set; the
// guard sets it and waits for the stream, whatever way the test ends.
struct StreamHold {
  StreamHold(const cuda::Stream& s, int device) : stream(s) {
    int previous = 0;
    EXPECT_EQ(cudaGetDevice(&previous), cudaSuccess);
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);  // handle 0 is the current device's legacy stream
    launched = cudaLaunchHostFunc(
                   static_cast<cudaStream_t>(stream.handle()),
                   [](void* p) {
                     while (!static_cast<std::atomic<bool>*>(p)->load()) std::this_thread::yield();
                   },
                   &flag) == cudaSuccess;
    EXPECT_EQ(cudaSetDevice(previous), cudaSuccess);
  }
  ~StreamHold() {
    flag = true;
    stream.synchronize();
  }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  std::atomic<bool> flag{false};
  cuda::Stream stream;
  bool launched = false;
};

// A peer copy reads src on dst's stream, so src's allocator records the
// free() event of src's block on that stream: the event must be made and
// recorded on dst's device (before, the record failed and free() threw in the
// tensor's destructor: std::terminate), and the block must not be handed out
// again before the copy ran. Both dst streams are tried: a stream made for
// the test, and cuda:0's legacy default stream, whose handle (0) is also
// cuda:1's - the allocator's memory::Stream tells them apart by device.
TEST(CudaAllocator, PeerCopyRecordsTheFreeEventOnTheDestinationDevice) {
  KILN_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const Device d1(DeviceType::CUDA, 1);
  for (const bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "dst on cuda:0's legacy default stream" : "dst on a stream of its own");
    cuda::synchronize(0);
    cuda::synchronize(1);
    const cuda::Stream dst_stream = legacy ? cuda::Stream::default_stream(0) : cuda::Stream::create(0);
    cuda::StreamGuard on_dst_stream(dst_stream);
    const Tensor x = random_cpu({1 << 18}, DType::Float32, 11);  // 1 MiB
    Tensor dst = empty({1 << 18}, TensorOptions(DType::Float32, kGpu));
    Tensor src = x.to(d1);
    void* p = src.raw_data();
    const memory::AllocatorStats before = cuda::memory_stats(1);
    {
      StreamHold hold(dst_stream, 0);
      ASSERT_TRUE(hold.launched);
      cuda::copy(dst, src, /*non_blocking=*/true);  // queued behind the host function
      src = Tensor();                               // freed while the copy waits
      const memory::AllocatorStats freed = cuda::memory_stats(1);
      EXPECT_EQ(freed.device_errors, before.device_errors);
      EXPECT_EQ(freed.quarantined_blocks, before.quarantined_blocks);
      EXPECT_EQ(freed.pending_blocks, before.pending_blocks + 1);
      {
        Tensor again = empty({1 << 18}, TensorOptions(DType::Float32, d1));
        EXPECT_NE(again.raw_data(), p) << "src's block was reused before the peer copy read it";
      }
    }  // the copy runs
    Tensor w = empty({16}, TensorOptions(DType::Float32, d1));  // allocation checks the events
    EXPECT_EQ(cuda::memory_stats(1).pending_blocks, before.pending_blocks);
    EXPECT_TRUE(bitwise_equal(dst.cpu(), x));
  }
}

// Note [Out-of-memory retry], step 1 on the device: a block freed while a
// stream that is held still uses it (record_stream) is waited for and reused
// when the device has no room for a second one, instead of OutOfMemoryError;
// while the allocation waits, the allocator's mutex is free.
TEST(CudaAllocator, OutOfMemoryRetryWaitsForARecordStreamBlock) {
  KILN_REQUIRE_CUDA();
  const bool caching = caching_from_environment();
  cuda::synchronize(0);
  cuda::empty_cache(0);
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const int64_t n = static_cast<int64_t>(free_bytes / 10 * 6 / sizeof(float));  // 60%: two do not fit
  cuda::Stream b = cuda::Stream::create(0);
  const memory::AllocatorStats before = cuda::memory_stats(0);
  void* p = nullptr;
  {
    StreamHold hold(b, 0);
    ASSERT_TRUE(hold.launched);
    {
      Tensor t = empty({n}, TensorOptions(DType::Float32, kGpu));
      p = t.raw_data();
      cuda::record_stream(t, b);
    }
    EXPECT_EQ(cuda::memory_stats(0).pending_blocks, before.pending_blocks + 1);
    // B is let go after a while, by a thread that first checks the allocator
    // answers meanwhile (memory_stats takes its mutex).
    std::atomic<bool> answered{false};
    std::thread letgo([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      auto stats = std::async(std::launch::async, [] { return cuda::memory_stats(0); });
      answered = stats.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
      hold.flag = true;
    });
    {
      Tensor u;
      EXPECT_NO_THROW(u = empty({n}, TensorOptions(DType::Float32, kGpu)));
      if (caching) {
        EXPECT_EQ(u.raw_data(), p) << "the waited-for block was not reused";
      }
    }
    letgo.join();
    EXPECT_TRUE(answered) << "the allocator's mutex was held while waiting for stream B";
  }
  const memory::AllocatorStats s = cuda::memory_stats(0);
  EXPECT_EQ(s.oom_errors, before.oom_errors);
  EXPECT_EQ(s.alloc_retries, before.alloc_retries + 1);
  EXPECT_EQ(s.event_syncs, before.event_syncs + 1);
  EXPECT_EQ(s.device_errors, before.device_errors);
  if (caching) {
    EXPECT_EQ(s.cache_flushes, before.cache_flushes);
    EXPECT_EQ(s.device_releases, before.device_releases);  // no cudaFree was needed
  }
  cuda::empty_cache(0);  // give the 60% back for the other tests
}
#endif

}  // namespace
}  // namespace kiln
