// The GPT ops on CUDA against the CPU (test_ops_gather_scan.cpp pins the CPU
// to PyTorch's semantics): gather / scatter / scatter_add, sort / topk,
// cumsum and multinomial bit for bit (their kernels run the CPU's arithmetic
// in the CPU's order: Note [Deterministic scatter_add], Note [Sort keys],
// Note [Multinomial sampling]); tril / triu / causal_mask, softmax with an
// output dtype and where / masked_fill at the usual tolerances. The registry
// harness (test_cuda_ops.cpp) also runs every registered sample of these ops
// forward and backward. Skips without a GPU (tests/cuda_test_util.h).
#include <cmath>
#include <random>

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
using testing::random_shape;
using testing::transposed_copy;

constexpr DType kAllTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                               DType::Int32,   DType::Int64,   DType::Bool};

// An int64 index of `shape` with values in [0, n).
Tensor random_index(const Shape& shape, int64_t n, uint64_t seed) { return random_cpu(shape, DType::Int64, seed, 0, n); }

TEST(CudaGatherScan, GatherScatterMatchCpuBitForBit) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(11);
  uint64_t seed = 100;
  for (int trial = 0; trial < 12; ++trial) {
    const Shape xs = random_shape(rng, 4, 7);
    const int64_t dim = static_cast<int64_t>(rng() % xs.size());
    Shape is = xs;  // index no larger than x outside dim; any size along dim
    for (size_t d = 0; d < is.size(); ++d) is[d] = static_cast<int64_t>(d) == dim ? 1 + rng() % 9 : 1 + rng() % xs[d];
    const Tensor idx = random_index(is, xs[static_cast<size_t>(dim)], ++seed);
    for (DType dt : kAllTypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " x " + shape_str(xs) + " index " + shape_str(is) + " dim " +
                   std::to_string(dim));
      const Tensor x = random_cpu(xs, dt, ++seed, -5, 5), src = random_cpu(is, dt, ++seed, -5, 5);
      EXPECT_TRUE(bitwise_equal(gather(on_gpu(x), dim, on_gpu(idx)).cpu(), gather(x, dim, idx)));
      EXPECT_TRUE(bitwise_equal(gather(on_gpu(transposed_copy(x)), dim, on_gpu(idx)).cpu(), gather(x, dim, idx)));
      EXPECT_TRUE(bitwise_equal(scatter(on_gpu(x), dim, on_gpu(idx), on_gpu(src)).cpu(), scatter(x, dim, idx, src)));
      if (dt != DType::Bool) {
        EXPECT_TRUE(bitwise_equal(scatter_add(on_gpu(x), dim, on_gpu(idx), on_gpu(src)).cpu(),
                                  scatter_add(x, dim, idx, src)));
      }
    }
  }
}

TEST(CudaGatherScan, ScatterAddIsDeterministicWithHeavyDuplicates) {
  KILN_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    // 200k sources into 5 targets along a 1-D dim: one line, many duplicates
    const Tensor src = random_cpu({200000}, dt, 7, -1, 1), idx = random_index({200000}, 5, 8);
    const Tensor base = zeros({5}, TensorOptions(dt));
    const Tensor want = scatter_add(base, 0, idx, src);
    const Tensor got = scatter_add(on_gpu(base), 0, on_gpu(idx), on_gpu(src));
    EXPECT_TRUE(bitwise_equal(got.cpu(), want));
    EXPECT_TRUE(bitwise_equal(scatter_add(on_gpu(base), 0, on_gpu(idx), on_gpu(src)).cpu(), got.cpu()));
    // gather's backward is this scatter_add
    Tensor xg = on_gpu(random_cpu({5, 7}, DType::Float32, 9)).set_requires_grad(true);
    const Tensor gi = random_index({3000, 7}, 5, 10);
    sum(mul(gather(xg, 0, on_gpu(gi)), on_gpu(random_cpu({3000, 7}, DType::Float32, 11)))).backward();
    Tensor xc = random_cpu({5, 7}, DType::Float32, 9).set_requires_grad(true);
    sum(mul(gather(xc, 0, gi), random_cpu({3000, 7}, DType::Float32, 11))).backward();
    EXPECT_TRUE(bitwise_equal(xg.grad().cpu(), xc.grad()));
  }
}

TEST(CudaGatherScan, OutOfRangeIndexIsAnError) {
  KILN_REQUIRE_CUDA();
  const Tensor x = on_gpu(zeros({2, 3}));
  EXPECT_KILN_ERROR(gather(x, 1, on_gpu(tensor_from({0, 3}, {2, 1}))), "gather", "index 3 is out of bounds");
  EXPECT_KILN_ERROR(scatter_add(x, 0, on_gpu(tensor_from({-1}, {1, 1})), on_gpu(ones({1, 1}))), "scatter_add",
                    "index -1");
}

TEST(CudaGatherScan, SortAndTopkMatchCpuWithTiesAndNan) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(12);
  uint64_t seed = 200;
  for (int trial = 0; trial < 8; ++trial) {
    const Shape xs = random_shape(rng, 3, 40);
    const int64_t dim = static_cast<int64_t>(rng() % xs.size());
    for (DType dt : kAllTypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(xs) + " dim " + std::to_string(dim));
      // whole numbers in [-4, 4): few distinct values, many ties
      Tensor x = dt == DType::Bool ? random_cpu(xs, dt, ++seed) : random_cpu(xs, DType::Int64, ++seed, -4, 4).to(dt);
      if (is_floating(dt) && x.numel() > 2) {  // a NaN, -0.0 and +0.0
        Tensor flat = x.contiguous().reshape({-1});
        flat.narrow(0, 0, 1).fill_(NAN);
        flat.narrow(0, 1, 1).fill_(-0.0);
        flat.narrow(0, 2, 1).fill_(0.0);
        x = flat.reshape(xs);
      }
      for (bool desc : {false, true}) {
        const ValuesIndices c = sort(x, dim, desc), g = sort(on_gpu(x), dim, desc);
        EXPECT_TRUE(bitwise_equal(g.values.cpu(), c.values));
        EXPECT_TRUE(bitwise_equal(g.indices.cpu(), c.indices));
      }
      const int64_t k = static_cast<int64_t>(rng() % (xs[static_cast<size_t>(dim)] + 1));
      for (bool largest : {true, false}) {
        const ValuesIndices c = topk(x, k, dim, largest), g = topk(on_gpu(x), k, dim, largest);
        EXPECT_TRUE(bitwise_equal(g.values.cpu(), c.values));
        EXPECT_TRUE(bitwise_equal(g.indices.cpu(), c.indices));
      }
    }
  }
  // a vocabulary-sized row
  const Tensor logits = random_cpu({3, 50257}, DType::Float32, 5);
  const ValuesIndices c = topk(logits, 50), g = topk(on_gpu(logits), 50);
  EXPECT_TRUE(bitwise_equal(g.indices.cpu(), c.indices));
}

TEST(CudaGatherScan, CumsumMatchesCpuBitForBit) {
  KILN_REQUIRE_CUDA();
  std::mt19937 rng(13);
  uint64_t seed = 300;
  for (int trial = 0; trial < 8; ++trial) {
    const Shape xs = random_shape(rng, 4, 30);
    const int64_t dim = static_cast<int64_t>(rng() % xs.size());
    for (DType dt : kAllTypes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(xs) + " dim " + std::to_string(dim));
      const Tensor x = random_cpu(xs, dt, ++seed, -3, 3);
      EXPECT_TRUE(bitwise_equal(cumsum(on_gpu(x), dim).cpu(), cumsum(x, dim)));
      EXPECT_TRUE(bitwise_equal(cumsum(on_gpu(transposed_copy(x)), dim).cpu(), cumsum(x, dim)));
    }
  }
  // backward: the reverse running sum, also bit for bit
  Tensor xc = random_cpu({4, 1000}, DType::Float32, 1).set_requires_grad(true);
  Tensor xg = on_gpu(xc.detach()).set_requires_grad(true);
  const Tensor w = random_cpu({4, 1000}, DType::Float32, 2);
  sum(mul(cumsum(xc, 1), w)).backward();
  sum(mul(cumsum(xg, 1), on_gpu(w))).backward();
  EXPECT_TRUE(bitwise_equal(xg.grad().cpu(), xc.grad()));
}

TEST(CudaGatherScan, MultinomialDrawsTheCpuSamples) {
  KILN_REQUIRE_CUDA();
  for (bool replacement : {true, false}) {
    for (const Shape& s : {Shape{7}, Shape{5, 13}, Shape{3, 50257}}) {
      SCOPED_TRACE(shape_str(s) + (replacement ? " with" : " without") + " replacement");
      const int64_t C = s.back();
      std::vector<double> every_third(static_cast<size_t>(C));
      for (int64_t j = 0; j < C; ++j) every_third[static_cast<size_t>(j)] = j % 3 == 1 ? 0.0 : 1.0;
      // zero weights at categories 1, 4, 7, ...: at least 5 positive ones per row
      const Tensor p = mul(random_cpu(s, DType::Float32, 21, 0.05, 1), tensor(every_third, {C}));
      const int64_t n = replacement ? 64 : 4;
      Generator gc(42), gg(42);
      const Tensor c = multinomial(p, n, replacement, &gc);
      const Tensor g = multinomial(on_gpu(p), n, replacement, &gg);
      EXPECT_EQ(g.device(), kGpu);
      EXPECT_TRUE(bitwise_equal(g.cpu(), c));
      EXPECT_EQ(gg.state().offset, gc.state().offset);
    }
  }
}

TEST(CudaGatherScan, TrianglesMasksSoftmaxDtypeWhere) {
  KILN_REQUIRE_CUDA();
  const Tensor x = random_cpu({2, 5, 7}, DType::Float32, 31);
  for (int64_t d : {-2, 0, 3}) {
    EXPECT_TRUE(bitwise_equal(tril(on_gpu(x), d).cpu(), tril(x, d)));
    EXPECT_TRUE(bitwise_equal(triu(on_gpu(transposed_copy(x)), d).cpu(), triu(transposed_copy(x), d)));
  }
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Bool})
    EXPECT_TRUE(bitwise_equal(causal_mask(9, TensorOptions(dt, kGpu)).cpu(), causal_mask(9, dt)));
  for (DType in : {DType::BFloat16, DType::Float16, DType::Float32}) {
    const Tensor xs = random_cpu({6, 33}, in, 32);
    EXPECT_TRUE(matches(softmax(on_gpu(xs), -1, DType::Float32), softmax(xs, -1, DType::Float32),
                        DType::Float32, "softmax"));
    EXPECT_TRUE(matches(log_softmax(on_gpu(xs), 0, DType::Float32), log_softmax(xs, 0, DType::Float32),
                        DType::Float32, "log_softmax"));
  }
  const Tensor c = random_cpu({3, 1}, DType::Bool, 33), a = random_cpu({1, 4}, DType::Float32, 34);
  const Tensor b = random_cpu({3, 1}, DType::Float32, 35);
  EXPECT_TRUE(bitwise_equal(where(on_gpu(c), on_gpu(a), on_gpu(b)).cpu(), where(c, a, b)));
  EXPECT_TRUE(bitwise_equal(masked_fill(on_gpu(a), on_gpu(c), -1.5).cpu(), masked_fill(a, c, -1.5)));
}

}  // namespace
}  // namespace kiln
