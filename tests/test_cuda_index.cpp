// The CUDA index kernels (cuda/index.cu) against the CPU: index_add's fixed
// order for long groups of equal targets (Note [Deterministic index_add]),
// replayed on the CPU and expected bit for bit; out-of-range entries dropped
// or zeroed instead of read; and the deferred index checks of embedding and
// cross_entropy (Note [Lazy index checks]). Skips without a GPU; the CPU side
// of the checks is in tests/test_nn_ops.cpp.
#include <algorithm>
#include <climits>
#include <random>
#include <type_traits>

#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/internal.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kGpu;
using testing::matches;
using testing::on_gpu;
using testing::random_cpu;

constexpr int64_t kChunk = 128;  // cuda/index.cu: longer groups are summed in chunks

template <typename T>
using Acc = std::conditional_t<std::is_integral_v<T> || std::is_same_v<T, double>, T, float>;

// out.index_add_(dim, idx, src) in the device's order (Note [Deterministic
// index_add]), entries outside [0, rows) dropped; CPU tensors, contiguous.
template <typename T>
Tensor chunked_index_add(const Tensor& out_in, int64_t dim, const std::vector<int64_t>& idx, const Tensor& src) {
  using A = Acc<T>;
  Tensor out = out_in.clone();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t n_out = out.size(dim), n_idx = static_cast<int64_t>(idx.size());
  T* o = out.data_ptr<T>();
  const T* s = src.data_ptr<T>();
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n_idx; ++i)
    if (idx[i] >= 0 && idx[i] < n_out) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  for (size_t g0 = 0, g1 = 0; g0 < order.size(); g0 = g1) {
    const int64_t key = idx[order[g0]];
    while (g1 < order.size() && idx[order[g1]] == key) ++g1;
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t c = 0; c < inner; ++c) {
        T& dst = o[(b * n_out + key) * inner + c];
        auto at = [&](size_t q) { return static_cast<A>(s[(b * n_idx + order[q]) * inner + c]); };
        if (g1 - g0 <= static_cast<size_t>(kChunk)) {  // the CPU twin's order and rounding
          T v = dst;
          for (size_t q = g0; q < g1; ++q) v = static_cast<T>(static_cast<A>(v) + at(q));
          dst = v;
          continue;
        }
        A a = static_cast<A>(dst);
        for (size_t q0 = g0; q0 < g1; q0 += kChunk) {
          A part = A(0);
          for (size_t q = q0; q < std::min(g1, q0 + kChunk); ++q) part = part + at(q);
          a = a + part;
        }
        dst = static_cast<T>(a);
      }
  }
  return out;
}

struct IndexCase {
  std::string name;
  Shape out_shape;
  int64_t dim;
  std::vector<int64_t> idx;
};

std::vector<IndexCase> long_group_cases() {
  std::mt19937 rng(42);
  std::vector<IndexCase> cases;
  cases.push_back({"all zeros, BERT's token_type_ids (B*T = 4096)", {2, 768}, 0, std::vector<int64_t>(4096, 0)});
  // groups either side of the chunk size, shuffled together
  std::vector<int64_t> mixed;
  const int64_t sizes[] = {kChunk - 1, kChunk, kChunk + 1, 2 * kChunk, 2 * kChunk + 1, 1, 600, 3 * kChunk + 7};
  for (int64_t k = 0; k < 8; ++k) mixed.insert(mixed.end(), static_cast<size_t>(sizes[k]), k);
  std::shuffle(mixed.begin(), mixed.end(), rng);
  cases.push_back({"groups of 127 to 391 entries", {10, 33}, 0, mixed});
  std::vector<int64_t> few(1000);
  for (auto& v : few) v = static_cast<int64_t>(rng() % 7);
  cases.push_back({"dim 1 of 3, 7 targets", {3, 7, 5}, 1, few});
  std::vector<int64_t> sixty(4096);
  for (auto& v : sixty) v = static_cast<int64_t>(rng() % 60);
  cases.push_back({"4096 over 60 targets", {60, 77}, 0, sixty});
  std::vector<int64_t> bad = std::vector<int64_t>(300, 2);
  for (int k = 0; k < 50; ++k) bad.insert(bad.begin() + k * 6, k % 2 ? -1 : 99);  // outside [0, 4): dropped
  cases.push_back({"a long group among out-of-range entries", {4, 16}, 0, bad});
  return cases;
}

TEST(CudaIndex, IndexAddSumsLongGroupsInChunksInOneFixedOrder) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 700;
  for (const IndexCase& ic : long_group_cases())
    for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int64}) {
      SCOPED_TRACE(ic.name + " " + dtype_name(dt));
      Shape src_shape = ic.out_shape;
      src_shape[static_cast<size_t>(ic.dim)] = static_cast<int64_t>(ic.idx.size());
      const Tensor out0 = random_cpu(ic.out_shape, dt, ++seed, -4, 4), src = random_cpu(src_shape, dt, ++seed, -4, 4);
      const Tensor idx = tensor_from(ic.idx);
      const Tensor want = dispatch_all(dt, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int32_t>) return Tensor();
        else return chunked_index_add<T>(out0, ic.dim, ic.idx, src);
      });
      Tensor g1 = on_gpu(out0), g2 = on_gpu(out0);
      backend(kGpu).index_add(g1, ic.dim, on_gpu(idx), on_gpu(src));
      backend(kGpu).index_add(g2, ic.dim, on_gpu(idx), on_gpu(src));
      EXPECT_TRUE(bitwise_equal(g1.cpu(), want));
      EXPECT_TRUE(bitwise_equal(g1.cpu(), g2.cpu()));  // the same bits on every run
      // and close to the CPU twin's serial sums (the same bits for integers).
      // 16-bit types round after every add there: thousands of adds drift
      // further than the tolerance, so only the replay above holds for them.
      if (dt == DType::BFloat16 || dt == DType::Float16) continue;
      Tensor cpu = out0.clone();
      std::vector<int64_t> valid_idx;
      std::vector<int64_t> rows;
      for (size_t i = 0; i < ic.idx.size(); ++i)
        if (ic.idx[i] >= 0 && ic.idx[i] < ic.out_shape[static_cast<size_t>(ic.dim)]) {
          valid_idx.push_back(ic.idx[i]);
          rows.push_back(static_cast<int64_t>(i));
        }
      const Tensor src_valid = index_select(src, ic.dim, tensor_from(rows));
      cpu_backend().index_add(cpu, ic.dim, tensor_from(valid_idx), src_valid);
      EXPECT_TRUE(matches(g1, cpu, dt, "index_add vs the CPU twin"));
    }
}

TEST(CudaIndex, IndexAddGroupsUpToAChunkKeepTheCpuBits) {
  KILN_REQUIRE_CUDA();
  std::vector<int64_t> idx(4096);
  std::mt19937 rng(7);
  for (auto& v : idx) v = static_cast<int64_t>(rng() % 1000);  // groups of about 4
  idx.insert(idx.end(), static_cast<size_t>(kChunk), 1000);     // and one of exactly kChunk
  const Tensor index = tensor_from(idx);
  uint64_t seed = 800;
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor out0 = random_cpu({1001, 24}, dt, ++seed), src = random_cpu({index.numel(), 24}, dt, ++seed);
    Tensor want = out0.clone(), got = on_gpu(out0);
    cpu_backend().index_add(want, 0, index, src);
    backend(kGpu).index_add(got, 0, on_gpu(index), on_gpu(src));
    EXPECT_TRUE(bitwise_equal(got.cpu(), want));
  }
}

TEST(CudaIndex, OutOfRangeEntriesAreDroppedOrZeroedNeverRead) {
  KILN_REQUIRE_CUDA();
  const std::vector<int64_t> idx = {3, -1, 0, 5, 3, int64_t{1} << 40, 2, INT64_MIN, 4};
  const Tensor index = on_gpu(tensor_from(idx));
  const Tensor in = random_cpu({5, 4}, DType::Float32, 900), src = random_cpu({9, 4}, DType::Float32, 901);
  // index_select: zero rows for the offending entries
  Tensor sel = empty_tensor({9, 4}, DType::Float32, kGpu);
  backend(kGpu).index_select(sel, on_gpu(in), 0, index);
  const Tensor sc = sel.cpu();
  for (size_t i = 0; i < idx.size(); ++i) {
    const bool ok = idx[i] >= 0 && idx[i] < 5;
    const Tensor want = ok ? in.select(0, idx[i]) : zeros({4});
    EXPECT_TRUE(bitwise_equal(sc.select(0, static_cast<int64_t>(i)), want)) << "entry " << i;
  }
  // index_add: the valid entries only, in order
  Tensor got = on_gpu(in);
  backend(kGpu).index_add(got, 0, index, on_gpu(src));
  Tensor want = in.clone();
  cpu_backend().index_add(want, 0, tensor_from({3, 0, 3, 2, 4}), index_select(src, 0, tensor_from({0, 2, 4, 6, 8})));
  EXPECT_TRUE(bitwise_equal(got.cpu(), want));
}

// ---- Note [Lazy index checks] ---------------------------------------------------

TEST(CudaLazyIndexCheck, EmbeddingReportsAtTheNextHostRead) {
  KILN_REQUIRE_CUDA();
  backend(kGpu).raise_deferred_errors();  // start from a clean record
  const Tensor wc = random_cpu({10, 4}, DType::Float32, 1);
  const Tensor w = on_gpu(wc).set_requires_grad(true);
  const std::vector<int64_t> ids = {1, 2, 12, 3, 40, 10, 0};
  Tensor e;
  EXPECT_NO_THROW(e = embedding(w, on_gpu(tensor_from(ids))));  // queued: nothing read back yet
  EXPECT_KILN_ERROR(e.cpu(), "embedding: 3 ids out of range for 10 embeddings on cuda:0: values in [10, 40], the "
                             "first at position 2", "Note [Lazy index checks]");
  const Tensor ec = e.cpu();  // reported once: this read is clean
  for (size_t i = 0; i < ids.size(); ++i) {
    const Tensor want = ids[i] < 10 ? wc.select(0, ids[i]) : zeros({4});
    EXPECT_TRUE(bitwise_equal(ec.select(0, static_cast<int64_t>(i)), want)) << "row " << i;
  }
  // backward drops the offending entries
  sum(e).backward();
  std::vector<double> grad(40, 0.0);
  for (int64_t id : ids)
    if (id < 10)
      for (int c = 0; c < 4; ++c) grad[static_cast<size_t>(id * 4 + c)] += 1.0;
  EXPECT_EQ(testing::values(w.grad()), grad);
  // one offender: the CPU's wording, then where it was found
  const Tensor e2 = embedding(w.detach(), on_gpu(tensor_from({0, -5})));
  EXPECT_KILN_ERROR(sum(e2).item<float>(),
                    "embedding: id -5 at position 1 is out of range for 10 embeddings on cuda:0");
  EXPECT_NO_THROW(sum(e2).item<float>());
}

TEST(CudaLazyIndexCheck, CrossEntropyReportsAtItemAndCountsOnTheDevice) {
  KILN_REQUIRE_CUDA();
  backend(kGpu).raise_deferred_errors();
  const Tensor lc = random_cpu({6, 5}, DType::Float32, 2, -3, 3);
  const Tensor lg = on_gpu(lc);
  const Tensor bad = tensor_from({0, 9, -100, 4, -1, 2});
  const Tensor loss = cross_entropy(lg, on_gpu(bad), -100);
  EXPECT_KILN_ERROR(loss.item<float>(), "cross_entropy: 2 targets out of range for 5 classes on cuda:0: values in "
                                        "[-1, 9], the first at position 1");
  // the rows of the offending targets are NaN, an ignored row 0
  const Tensor rows = cross_entropy(lg, on_gpu(bad), -100, 0.0, "none");
  EXPECT_KILN_ERROR(rows.cpu(), "cross_entropy: 2 targets");
  const std::vector<double> rv = testing::values(rows);
  EXPECT_TRUE(std::isnan(rv[1]) && std::isnan(rv[4]));
  EXPECT_EQ(rv[2], 0.0);
  // valid targets: the mean over the 4 counted rows, as on the CPU
  const Tensor good = tensor_from({0, 3, -100, 4, -100, 2});
  for (double smoothing : {0.0, 0.1}) {
    const Tensor want = cross_entropy(lc, good, -100, smoothing);
    EXPECT_TRUE(matches(cross_entropy(lg, on_gpu(good), -100, smoothing), want, DType::Float32, "cross_entropy mean"));
  }
  EXPECT_TRUE(std::isnan(cross_entropy(lg, on_gpu(tensor_from({-100, -100, -100, -100, -100, -100})), -100)
                             .item<float>()));
}

TEST(CudaLazyIndexCheck, ChecksCountLikeTheCpuAndReportOnDemand) {
  KILN_REQUIRE_CUDA();
  Backend& gpu = backend(kGpu);
  gpu.raise_deferred_errors();
  Tensor idx = empty_tensor({100003}, DType::Int64, kCPU);
  cpu_backend().randint(idx, -1, 50, PhiloxState{5, 0});  // -1: ignored
  Tensor cc = zeros({}, DType::Int64), cg = zeros({}, TensorOptions(DType::Int64, kGpu));
  cpu_backend().check_index(idx, 50, int64_t{-1}, {"probe", "entry", "slots"}, cc);
  gpu.check_index(on_gpu(idx), 50, int64_t{-1}, {"probe", "entry", "slots"}, cg);
  EXPECT_GT(cc.item<int64_t>(), 90000);
  EXPECT_EQ(cg.item<int64_t>(), cc.item<int64_t>());
  // reported without any read by raise_deferred_errors, on another stream too
  const cuda::Stream side = cuda::Stream::create(0);
  {
    cuda::StreamGuard guard(side);
    gpu.check_index(on_gpu(tensor_from({0, 7})), 5, std::nullopt, {"first", "entry", "slots"}, Tensor());
    gpu.check_index(on_gpu(tensor_from({9})), 5, std::nullopt, {"second", "entry", "slots"}, Tensor());
    // the first failing check holds the record until it is reported
    EXPECT_KILN_ERROR(gpu.raise_deferred_errors(), "first: entry 7 at position 1 is out of range for 5 slots");
    EXPECT_NO_THROW(gpu.raise_deferred_errors());
  }
  // and a later failure is reported in its turn
  gpu.check_index(on_gpu(tensor_from({3, 3, 8})), 5, std::nullopt, {"second", "entry", "slots"}, Tensor());
  EXPECT_KILN_ERROR(gpu.raise_deferred_errors(), "second: entry 8 at position 2");
}

}  // namespace
}  // namespace kiln
