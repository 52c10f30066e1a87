// ProcessGroup collectives on every rank: all_reduce (each op and dtype, in
// place, through views, async), broadcast from every root, all_gather,
// barrier, the argument errors, the timeout setting, and the NCCL stub.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "../cuda_test_util.h"
#include "../test_util.h"
#include "cuda/cuda.h"
#include "dist/process_group.h"
#include "tests/dist/dist_test_util.h"

namespace kiln::dist {
namespace {

using testing::pg;

// Rank r's value at element i: small integers, so every op is exact.
double value(int r, int64_t i) { return (r + 1) * static_cast<double>(i % 5 + 1) - 2.0 * static_cast<double>(i % 2); }

Tensor rank_tensor(int r, int64_t n, DType dtype) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(value(r, i));
  return tensor(v, {n}, dtype);
}

double expected(ReduceOp op, int64_t i, int world) {
  double acc = value(0, i);
  for (int r = 1; r < world; ++r) {
    const double x = value(r, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += x; break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Product: acc *= x; break;
    }
  }
  return op == ReduceOp::Avg ? acc / world : acc;
}

TEST(Collectives, AllReduceEveryOpAndDtype) {
  const int64_t n = 37;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      Tensor t = rank_tensor(pg().rank(), n, dtype);
      const uint32_t version = t.version();
      pg().all_reduce(t, op);
      EXPECT_GT(t.version(), version) << "all_reduce writes in place";
      const std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], expected(op, i, pg().size())) << dtype_name(dtype) << " " << reduce_op_name(op) << " at " << i;
    }
  }
}

TEST(Collectives, AllReduceThroughANonContiguousView) {
  Tensor base = rank_tensor(pg().rank(), 12, DType::Float64).view({3, 4});
  Tensor view = base.t();  // [4, 3], strided
  ASSERT_FALSE(view.is_contiguous());
  pg().all_reduce(view, ReduceOp::Sum);
  const std::vector<double> got = base.to_vector<double>();  // written back into base's storage
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], expected(ReduceOp::Sum, i, pg().size())) << i;
}

TEST(Collectives, FloatSumIsBitwiseRepeatable) {
  Generator gen(100 + pg().rank());
  Tensor x = randn({1000}, {}, &gen);
  Tensor a = x.clone(), b = x.clone();
  pg().all_reduce(a);
  pg().all_reduce(b);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), 1000 * sizeof(float)), 0);
  EXPECT_TRUE(testing::same_on_all_ranks(a));
  // And it is the sum of the ranks' tensors.
  Tensor rows = pg().all_gather(x);
  Tensor ref = sum(to_dtype(rows, DType::Float64), {0});
  EXPECT_LT(amax(abs(sub(to_dtype(a, DType::Float64), ref))).item<double>(), 1e-5);
}

TEST(Collectives, AsyncAllReduceCompletesThroughTest) {
  Tensor t = rank_tensor(pg().rank(), 1 << 16, DType::Float32);
  WorkPtr w = pg().all_reduce_async(t, ReduceOp::Max);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!w->test()) ASSERT_LT(std::chrono::steady_clock::now(), deadline) << w->description();
  EXPECT_TRUE(w->completed());
  w->wait();  // a no-op once complete
  EXPECT_EQ(t.to_vector<double>()[3], expected(ReduceOp::Max, 3, pg().size()));
  EXPECT_NE(w->description().find("all_reduce(max) of 262144 bytes float32"), std::string::npos) << w->description();
}

TEST(Collectives, BroadcastFromEveryRootAnyDtype) {
  for (int root = 0; root < pg().size(); ++root) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                        DType::Bool}) {
      Tensor t = dtype == DType::Bool ? gt(rank_tensor(pg().rank(), 9, DType::Float32), 2.0)
                                      : rank_tensor(pg().rank(), 9, dtype);
      Tensor want = dtype == DType::Bool ? gt(rank_tensor(root, 9, DType::Float32), 2.0) : rank_tensor(root, 9, dtype);
      pg().broadcast(t, root);
      EXPECT_EQ(t.to_vector<double>(), want.to_vector<double>()) << "root " << root << " " << dtype_name(dtype);
    }
  }
}

TEST(Collectives, AllGatherStacksTheRanks) {
  Tensor mine = rank_tensor(pg().rank(), 6, DType::Int64).view({3, 2});
  Tensor all = pg().all_gather(mine.t());  // a strided input is fine
  ASSERT_EQ(all.sizes(), (Shape{pg().size(), 2, 3}));
  for (int r = 0; r < pg().size(); ++r)
    EXPECT_EQ(all.select(0, r).to_vector<int64_t>(), rank_tensor(r, 6, DType::Int64).view({3, 2}).t().to_vector<int64_t>())
        << "row " << r;
}

// reduce_scatter against the MPI reference: all_reduce of the whole tensor,
// then this rank's row; bitwise, every op and dtype.
TEST(Collectives, ReduceScatterIsTheAllReducedRowOfThisRank) {
  const int world = pg().size();
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + reduce_op_name(op));
      Tensor t = rank_tensor(pg().rank(), world * 13, dtype).view({world, 13});
      Tensor reference = t.clone();
      pg().all_reduce(reference, op);
      Tensor mine = pg().reduce_scatter(t, op);
      ASSERT_EQ(mine.sizes(), (Shape{13}));
      EXPECT_EQ(mine.to_vector<double>(), reference.select(0, pg().rank()).to_vector<double>());
    }
  }
  EXPECT_KILN_ERROR(pg().reduce_scatter(ones({world + 1, 2})), "one chunk per rank");
}

// The uneven forms: rank r gets (or gives) r + 2 elements (and rank 1 none,
// when there are two ranks or more); float sums over two ranks are bitwise
// the all_reduce's.
TEST(Collectives, UnevenReduceScatterAndAllGatherv) {
  const int world = pg().size();
  std::vector<int64_t> counts;
  for (int r = 0; r < world; ++r) counts.push_back(r == 1 ? 0 : r + 2);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const std::vector<int64_t> offsets = detail::segment_offsets(counts);
  Tensor in = mul(rand({total}), pg().rank() + 1.0);
  Tensor reference = in.clone();
  pg().all_reduce(reference, ReduceOp::Sum);
  const int64_t mine = counts[static_cast<size_t>(pg().rank())];
  Tensor out = empty_tensor({mine}, DType::Float32, kCPU);
  pg().reduce_scatter_raw(in.raw_data(), out.raw_data(), counts, DType::Float32, ReduceOp::Sum)->wait();
  const std::vector<float> want = reference.narrow(0, offsets[static_cast<size_t>(pg().rank())], mine).to_vector<float>();
  const std::vector<float> got_sum = out.to_vector<float>();
  for (int64_t i = 0; i < mine; ++i) {
    if (world <= 2) ASSERT_EQ(got_sum[i], want[i]) << i;
    else ASSERT_NEAR(got_sum[i], want[i], 1e-5 * world) << i;
  }

  Tensor piece = add(zeros({mine}, DType::Int64), 100 * pg().rank());
  Tensor gathered = zeros({total}, DType::Int64);
  pg().all_gatherv_raw(piece.raw_data(), gathered.raw_data(), counts, DType::Int64)->wait();
  const std::vector<int64_t> got = gathered.to_vector<int64_t>();
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i)
      ASSERT_EQ(got[static_cast<size_t>(offsets[static_cast<size_t>(r)] + i)], 100 * r) << "segment " << r;
  EXPECT_KILN_ERROR(pg().all_gatherv_raw(piece.raw_data(), gathered.raw_data(), std::vector<int64_t>(world + 1, 1),
                                        DType::Int64),
                    "counts for a group of size");
  EXPECT_KILN_ERROR(pg().reduce_scatter_raw(in.raw_data(), out.raw_data(), std::vector<int64_t>(world, -1),
                                           DType::Float32, ReduceOp::Sum),
                    "negative count");
}

TEST(Collectives, BarrierWaitsForTheSlowestRank) {
  if (pg().size() == 1) GTEST_SKIP() << "needs two ranks";
  pg().barrier();  // line up
  const auto t0 = std::chrono::steady_clock::now();
  if (pg().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  pg().barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.3) << "rank " << pg().rank() << " left the barrier before rank 0 entered it";
}

TEST(Collectives, BadArgumentsAreErrors) {
  EXPECT_KILN_ERROR(pg().all_reduce(ones({3}, DType::Int64), ReduceOp::Avg), "avg needs a floating-point");
  EXPECT_KILN_ERROR(pg().all_reduce(ones({3}, DType::Bool)), "bool");
  EXPECT_KILN_ERROR(pg().broadcast(ones({3}), pg().size()), "root");
  EXPECT_KILN_ERROR(pg().all_reduce(Tensor()), "undefined");
  Tensor w = ones({2}).requires_grad_();
  EXPECT_KILN_ERROR(pg().all_reduce(w), "requires grad", "NoGradGuard");
  {
    NoGradGuard no_grad;
    pg().all_reduce(w);  // allowed under NoGradGuard
    EXPECT_EQ(w.to_vector<double>()[0], pg().size());
  }
  if (pg().backend() == "mpi") {
    EXPECT_KILN_ERROR(pg().all_reduce(ones({3}, DType::Float16)), "float16", "convert to float32");
  }
  EXPECT_KILN_ERROR(pg().set_timeout_seconds(0), "timeout must be > 0");
  EXPECT_KILN_ERROR(init_process_group(), "already initialised");
}

TEST(Collectives, TimeoutComesFromTheEnvironment) {
  const char* old = std::getenv("KILN_DIST_TIMEOUT");
  const std::string saved = old ? old : "";
  ::setenv("KILN_DIST_TIMEOUT", "2.5", 1);
  EXPECT_EQ(default_timeout_seconds(), 2.5);
  ::setenv("KILN_DIST_TIMEOUT", "ten", 1);
  EXPECT_KILN_ERROR(default_timeout_seconds(), "KILN_DIST_TIMEOUT='ten'");
  ::setenv("KILN_DIST_TIMEOUT", "-1", 1);
  EXPECT_KILN_ERROR(default_timeout_seconds(), "> 0");
  ::unsetenv("KILN_DIST_TIMEOUT");
  EXPECT_EQ(default_timeout_seconds(), 300.0);
  if (old) ::setenv("KILN_DIST_TIMEOUT", saved.c_str(), 1);
  EXPECT_EQ(pg().timeout_seconds(), default_timeout_seconds()) << "the group took the launch-time setting";
}

TEST(Collectives, NcclNeedsACudaBuild) {
  if (nccl_built()) GTEST_SKIP() << "built with NCCL";
  ProcessGroupPtr self = default_process_group();
  EXPECT_KILN_ERROR(new_nccl_group(self, -1, 10), cuda_built() ? "built without NCCL" : "built without CUDA");
}

// A build with KILN_MPI=OFF (the GPU kit's, tools/gpu_bundle_check.sh): the
// mpi group is a clear error, the one-process groups work.
TEST(Collectives, MpiNeedsAnMpiBuild) {
  if (built_with_mpi()) GTEST_SKIP() << "built with MPI";
  EXPECT_KILN_ERROR(new_mpi_group(10), "built without MPI", "KILN_MPI=ON");
  EXPECT_EQ(new_single_group(10)->size(), 1);
}

// The one-rank NCCL path on a GPU (tools/gpu_check.sh; skipped without NCCL
// or a GPU): every collective runs and, over one rank, leaves the values as
// they are; a CPU tensor is refused with the group's device in the message.
TEST(CudaNccl, OneRankGroupRunsEveryCollectiveOnTheGpu) {
  KILN_REQUIRE_GPU_PART(nccl_built() && cuda::is_available(), "needs NCCL and a GPU");
  ProcessGroupPtr nccl = new_nccl_group(new_single_group(30), 0, 30);
  EXPECT_EQ(nccl->backend(), "nccl");
  EXPECT_EQ(nccl->size(), 1);
  const Device gpu(DeviceType::CUDA, 0);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor t = rank_tensor(0, 1000, dtype).to(gpu);
    const std::vector<double> before = t.to_vector<double>();
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) nccl->all_reduce(t, op);
    nccl->all_reduce_async(t, ReduceOp::Avg)->wait();
    nccl->broadcast(t, 0);
    EXPECT_EQ(t.to_vector<double>(), before);
    EXPECT_EQ(nccl->all_gather(t).select(0, 0).to_vector<double>(), before);
    EXPECT_EQ(nccl->reduce_scatter(t.view({1, 1000}), ReduceOp::Avg).to_vector<double>(), before);
    Tensor out = empty_tensor({1000}, dtype, gpu);
    nccl->all_gatherv_raw(t.raw_data(), out.raw_data(), {1000}, dtype)->wait();
    EXPECT_EQ(out.to_vector<double>(), before);
  }
  nccl->barrier();
  Tensor cpu = rank_tensor(0, 4, DType::Float32);
  EXPECT_KILN_ERROR(nccl->all_reduce(cpu), "cuda");
}

TEST(Collectives, SingleGroupIsTheIdentity) {
  ProcessGroupPtr one = new_single_group(5);
  EXPECT_EQ(one->rank(), 0);
  EXPECT_EQ(one->size(), 1);
  Tensor t = rank_tensor(3, 8, DType::Float32);
  const std::vector<double> before = t.to_vector<double>();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Product}) one->all_reduce(t, op);
  one->broadcast(t, 0);
  EXPECT_EQ(t.to_vector<double>(), before);
  EXPECT_EQ(one->all_gather(t).sizes(), (Shape{1, 8}));
  EXPECT_EQ(one->all_gather(t).select(0, 0).to_vector<double>(), before);
  EXPECT_EQ(one->reduce_scatter(t.view({1, 8}), ReduceOp::Avg).to_vector<double>(), before);
  one->barrier();
  EXPECT_KILN_ERROR(one->broadcast(t, 1), "root 1");
}

}  // namespace
}  // namespace kiln::dist
