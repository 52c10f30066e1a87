// Tensors past 2^31 elements and launches over more than 65,535 rows (the
// grid's y limit): the int64 indexing of the elementwise engine
// (cuda/device_utils.cuh), the reductions (cuda/reduce.cu) and the row
// kernels (cuda/nn_kernels.cu), and the gridDim.y clamps of the column sums
// and the layer-norm weight gradient, against the CPU: expected values in
// closed form, or the CPU kernels run on sampled rows. Up to about 18 GB of
// device memory; skips without a GPU, or when that much is not free.
#include <climits>

#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/internal.h"
#include "test_util.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

using testing::kGpu;
using testing::matches;
using testing::on_gpu;
using testing::random_cpu;
using testing::values;

constexpr int64_t k2e31 = int64_t{1} << 31;

// After giving the caching allocator's idle segments (earlier tests') back.
bool has_free_device_memory(double gib) {
#ifdef KILN_WITH_CUDA
  cuda::empty_cache(0);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return false;
  return static_cast<double>(free) >= gib * (1 << 30);
#else
  (void)gib;
  return false;
#endif
}

// Under KILN_REQUIRE_CUDA=1 (the GPU check) too little memory fails the test
// instead of skipping it, as a missing device does (tests/cuda_test_util.h).
#define KILN_REQUIRE_FREE_GIB(gib) \
  KILN_REQUIRE_GPU_PART(has_free_device_memory(gib), "needs " + std::to_string(gib) + " GiB of free memory")

// Elements [start, start + len) of a contiguous tensor, read on the CPU.
std::vector<double> flat(const Tensor& t, int64_t start, int64_t len) {
  return values(detail::raw_view(t, {t.numel()}).narrow(0, start, len));
}

TEST(CudaLarge, ElementwisePastInt32Elements) {
  KILN_REQUIRE_CUDA();
  KILN_REQUIRE_FREE_GIB(16);
  Backend& gpu = backend(kGpu);
  const int64_t P = 1021, rows = k2e31 / P + 2, n = rows * P;  // n > 2^31, x[i] = i % P
  const Tensor pattern = on_gpu(arange(static_cast<double>(P)).to(DType::Float16)).reshape({1, P});
  Tensor x = empty_tensor({rows, P}, DType::Float16, kGpu);
  gpu.copy(x, detail::raw_expand(pattern, {rows, P}));  // the strided engine: a broadcast source
  const Tensor xf = detail::raw_view(x, {n});
  Tensor neg = empty_tensor({n}, DType::Float16, kGpu), twice = empty_tensor({n}, DType::Float16, kGpu);
  Tensor is7 = empty_tensor({n}, DType::Bool, kGpu);
  gpu.unary(UnaryOp::Neg, neg, xf);  // contiguous: the vectorised engine
  const Tensor two = full({}, 2.0, TensorOptions(DType::Float16, kGpu));
  const Tensor seven = full({}, 7.0, TensorOptions(DType::Float16, kGpu));
  gpu.binary(BinaryOp::Mul, twice, xf, detail::raw_expand(two, {n}));  // a stride-0 operand: strided
  gpu.binary(BinaryOp::Eq, is7, xf, detail::raw_expand(seven, {n}));
  const int64_t starts[] = {0, P - 5, k2e31 / 2, k2e31 - 9, k2e31 - 1, k2e31 + 3 * P, n - 16};
  for (int64_t s : starts) {
    SCOPED_TRACE("elements from " + std::to_string(s));
    const std::vector<double> vx = flat(x, s, 16), vn = flat(neg, s, 16), vt = flat(twice, s, 16),
                              vb = flat(is7, s, 16);
    for (int64_t j = 0; j < 16; ++j) {
      const double want = static_cast<double>((s + j) % P);
      ASSERT_EQ(vx[j], want) << "copy at " << s + j;
      ASSERT_EQ(vn[j], -want) << "neg at " << s + j;
      ASSERT_EQ(vt[j], 2 * want) << "mul at " << s + j;
      ASSERT_EQ(vb[j], want == 7 ? 1.0 : 0.0) << "eq at " << s + j;
    }
  }
}

// x[k, r] = a[k] * b[r], a[k] = k % 3 - 1, b[r] = r % 5 - 2, and one spike
// of 100 in the last row (where a = -1); the answers in closed form.
struct Grid {
  int64_t K = 65539, R = 32771;  // K > 65535 rows; K * R > 2^31
  int64_t spike_r = R - 5, spike = (K - 1) * R + spike_r;
  double a(int64_t k) const { return static_cast<double>(k % 3 - 1); }
  double b(int64_t r) const { return static_cast<double>(r % 5 - 2); }
  double spike_gain() const { return 100.0 - a(K - 1) * b(spike_r); }
};

TEST(CudaLarge, ReductionsPastInt32ElementsAndOver65535Rows) {
  KILN_REQUIRE_CUDA();
  KILN_REQUIRE_FREE_GIB(10);
  const Grid g;
  const DType h = DType::Float16;
  ASSERT_EQ(g.a(g.K - 1), -1.0);
  std::vector<int64_t> av(static_cast<size_t>(g.K)), bv(static_cast<size_t>(g.R));
  for (int64_t k = 0; k < g.K; ++k) av[static_cast<size_t>(k)] = k % 3 - 1;
  for (int64_t r = 0; r < g.R; ++r) bv[static_cast<size_t>(r)] = r % 5 - 2;
  const Tensor a = on_gpu(tensor_from(av, {g.K, 1}).to(h)), b = on_gpu(tensor_from(bv, {1, g.R}).to(h));
  Tensor x = empty_tensor({g.K, g.R}, h, kGpu);
  backend(kGpu).binary(BinaryOp::Mul, x, detail::raw_expand(a, {g.K, g.R}), detail::raw_expand(b, {g.K, g.R}));
  detail::raw_view(x, {x.numel()}).narrow(0, g.spike, 1).fill_(100.0);  // a fill at an offset past 2^31
  auto reduce = [&](ReduceOp op, const Shape& dims, const Shape& out_shape) {
    Tensor out = empty_tensor(out_shape, op == ReduceOp::Argmax ? DType::Int64 : h, kGpu);
    backend(kGpu).reduce(op, out, x, dims);
    return values(out);
  };
  double sum_a = 0, sum_b = 0;
  for (int64_t k = 0; k < g.K; ++k) sum_a += g.a(k);
  for (int64_t r = 0; r < g.R; ++r) sum_b += g.b(r);
  // Rows (65,539 blocks): every partial sum is a small integer, so all is exact.
  const std::vector<double> row_sum = reduce(ReduceOp::Sum, {1}, {g.K, 1});
  const std::vector<double> row_max = reduce(ReduceOp::Max, {1}, {g.K, 1});
  const std::vector<double> row_arg = reduce(ReduceOp::Argmax, {1}, {g.K, 1});
  for (int64_t k = 0; k < g.K; ++k) {
    const size_t i = static_cast<size_t>(k);
    const bool last = k == g.K - 1;
    // a = 1: max 2 first at r = 4 (r % 5 == 4); a = -1: 2 at r = 0; a = 0: 0 at r = 0
    const double mx = last ? 100.0 : (g.a(k) == 0 ? 0.0 : 2.0);
    const int64_t arg = last ? g.spike_r : (g.a(k) == 1 ? 4 : 0);
    ASSERT_EQ(row_sum[i], g.a(k) * sum_b + (last ? g.spike_gain() : 0.0)) << "row " << k;
    ASSERT_EQ(row_max[i], mx) << "row " << k;
    ASSERT_EQ(row_arg[i], static_cast<double>(arg)) << "row " << k;
  }
  // Columns: the outer layout (sum over 65,539 leading rows in chunks), and
  // min through a permuting copy of the whole tensor.
  const std::vector<double> col_sum = reduce(ReduceOp::Sum, {0}, {1, g.R});
  const std::vector<double> col_min = reduce(ReduceOp::Min, {0}, {1, g.R});
  for (int64_t r = 0; r < g.R; ++r) {
    const size_t i = static_cast<size_t>(r);
    ASSERT_EQ(col_sum[i], sum_a * g.b(r) + (r == g.spike_r ? g.spike_gain() : 0.0)) << "column " << r;
    ASSERT_EQ(col_min[i], -std::abs(g.b(r))) << "column " << r;  // a takes -1, 0 and 1 in every column
  }
  // The whole tensor as one row of K * R elements (chunks with int64 offsets).
  EXPECT_EQ(reduce(ReduceOp::Sum, {0, 1}, {1, 1})[0], sum_a * sum_b + g.spike_gain());
  EXPECT_EQ(reduce(ReduceOp::Max, {0, 1}, {1, 1})[0], 100.0);
  EXPECT_EQ(reduce(ReduceOp::Argmax, {0, 1}, {1, 1})[0], static_cast<double>(g.spike));
}

// Every row kernel over more than 65,535 rows, whole, against the CPU.
TEST(CudaLarge, RowKernelsOver65535Rows) {
  KILN_REQUIRE_CUDA();
  const int64_t R = 70007, C = 96;
  for (DType dt : {DType::Float32, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_cpu({R, C}, dt, 11, -4, 4), dy = random_cpu({R, C}, dt, 12);
    const Tensor xg = on_gpu(x), dyg = on_gpu(dy);
    for (bool log : {false, true}) {
      Tensor yc = empty_tensor({R, C}, dt, kCPU), yg = empty_tensor({R, C}, dt, kGpu);
      cpu_backend().softmax(yc, x, log);
      backend(kGpu).softmax(yg, xg, log);
      EXPECT_TRUE(matches(yg, yc, dt, "softmax"));
      Tensor dxc = empty_tensor({R, C}, dt, kCPU), dxg = empty_tensor({R, C}, dt, kGpu);
      cpu_backend().softmax_backward(dxc, yc, dy, log);
      backend(kGpu).softmax_backward(dxg, on_gpu(yc), dyg, log);
      EXPECT_TRUE(matches(dxg, dxc, dt, "softmax backward"));
    }
    const DType stat = DType::Float32;
    const Tensor w = random_cpu({C}, dt, 13), b = random_cpu({C}, dt, 14);
    Tensor yc = empty_tensor({R, C}, dt, kCPU), mc = empty_tensor({R}, stat, kCPU), rc = empty_tensor({R}, stat, kCPU);
    Tensor yg = empty_tensor({R, C}, dt, kGpu), mg = empty_tensor({R}, stat, kGpu), rg = empty_tensor({R}, stat, kGpu);
    cpu_backend().layer_norm(yc, mc, rc, x, w, b, 1e-5);
    backend(kGpu).layer_norm(yg, mg, rg, xg, on_gpu(w), on_gpu(b), 1e-5);
    EXPECT_TRUE(matches(yg, yc, dt, "layer_norm"));
    EXPECT_TRUE(matches(rg, rc, DType::Float32, "layer_norm rstd"));
    Tensor target = empty_tensor({R}, DType::Int64, kCPU);
    cpu_backend().randint(target, 0, C, PhiloxState{15, 0});
    target.narrow(0, R - 3, 2).fill_(-100.0);
    Tensor lc = empty_tensor({R}, dt, kCPU), sc = empty_tensor({R}, dt, kCPU);
    Tensor lg = empty_tensor({R}, dt, kGpu), sg = empty_tensor({R}, dt, kGpu);
    cpu_backend().cross_entropy(lc, sc, x, target, -100, 0.1);
    backend(kGpu).cross_entropy(lg, sg, xg, on_gpu(target), -100, 0.1);
    EXPECT_TRUE(matches(lg, lc, dt, "cross_entropy"));
    Tensor dc = empty_tensor({R, C}, dt, kCPU), dg = empty_tensor({R, C}, dt, kGpu);
    cpu_backend().cross_entropy_backward(dc, lc, x, sc, target, -100, 0.1);
    backend(kGpu).cross_entropy_backward(dg, on_gpu(lc), xg, on_gpu(sc), on_gpu(target), -100, 0.1);
    EXPECT_TRUE(matches(dg, dc, dt, "cross_entropy backward"));
  }
  // Attention's masked softmax over (B, NH, Tq, Tk) = 65,600 rows, key mask
  // (B, 1, 1, Tk) of 0 (kept) and -10000 (padding), as BERT makes it.
  const Tensor s = random_cpu({2, 4, 8200, 32}, DType::Float32, 16, -3, 3);
  std::vector<int64_t> mv(64, 0);
  for (size_t k = 20; k < 32; ++k) mv[k] = -10000;       // batch 0: 20 keys
  for (size_t k = 32; k < 64; k += 3) mv[k] = -10000;    // batch 1: every third key padded
  const Tensor mask = tensor_from(mv, {2, 1, 1, 32}).to(DType::Float32);
  EXPECT_TRUE(matches(scaled_masked_softmax(on_gpu(s), 0.125, on_gpu(mask)), scaled_masked_softmax(s, 0.125, mask),
                      DType::Float32, "scaled_masked_softmax"));
}

// The layer-norm weight gradient sums row blocks of at least 64 rows; past
// 65,535 * 64 rows the blocks grow to stay inside the grid's y limit.
TEST(CudaLarge, LayerNormWeightGradientPastTheGridYLimit) {
  KILN_REQUIRE_CUDA();
  // 4.2 million rows: the dx kernel alone launches a block per row, each a
  // fiber on the emulated device (13 minutes of CI under ASan). The clamp is
  // host arithmetic; the kernels themselves run emulated in every other
  // layer-norm test. Here it runs on a GPU (the GPU check's CudaLarge part).
  if (kEmulatedCuda) GTEST_SKIP() << "4.2M rows take about 13 minutes on the emulated device; runs on a GPU";
  const int64_t R = 65535 * 64 + 777, C = 4;
  const DType dt = DType::Float64;
  const Tensor x = random_cpu({R, C}, dt, 21, -3, 3), dy = random_cpu({R, C}, dt, 22), w = random_cpu({C}, dt, 23);
  Tensor mc = empty_tensor({R}, dt, kCPU), rc = empty_tensor({R}, dt, kCPU), yc = empty_tensor({R, C}, dt, kCPU);
  cpu_backend().layer_norm(yc, mc, rc, x, w, Tensor(), 1e-5);
  Tensor dxc = empty_tensor({R, C}, dt, kCPU), dwc = empty_tensor({C}, dt, kCPU), dbc = empty_tensor({C}, dt, kCPU);
  Tensor dxg = empty_tensor({R, C}, dt, kGpu), dwg = empty_tensor({C}, dt, kGpu), dbg = empty_tensor({C}, dt, kGpu);
  cpu_backend().layer_norm_backward(dxc, dwc, dbc, dy, x, mc, rc, w);
  backend(kGpu).layer_norm_backward(dxg, dwg, dbg, on_gpu(dy), on_gpu(x), on_gpu(mc), on_gpu(rc), on_gpu(w));
  EXPECT_TRUE(matches(dxg, dxc, dt, "layer_norm dx"));
  EXPECT_TRUE(matches(dwg, dwc, dt, "layer_norm dweight"));
  EXPECT_TRUE(matches(dbg, dbc, dt, "layer_norm dbias"));
}

// Row kernels over (70,001, 30,700) float16 = 2.149e9 elements: rows past
// 69,950 start beyond element 2^31. The CPU kernels run on sampled rows.
TEST(CudaLarge, RowKernelsPastInt32Elements) {
  KILN_REQUIRE_CUDA();
  KILN_REQUIRE_FREE_GIB(18);
  const int64_t R = 70001, C = 30700;
  const DType dt = DType::Float16;
  ASSERT_GT(R * C, k2e31);
  Backend& gpu = backend(kGpu);
  Tensor x = empty_tensor({R, C}, dt, kGpu), dy = empty_tensor({R, C}, dt, kGpu);
  gpu.uniform(x, -4, 4, PhiloxState{31, 0});
  gpu.uniform(dy, -1, 1, PhiloxState{32, 0});
  Tensor y = empty_tensor({R, C}, dt, kGpu), dx = empty_tensor({R, C}, dt, kGpu);
  gpu.softmax(y, x, false);
  gpu.softmax_backward(dx, y, dy, false);
  Tensor target = empty_tensor({R}, DType::Int64, kCPU);
  cpu_backend().randint(target, 0, C, PhiloxState{33, 0});
  Tensor loss = empty_tensor({R}, dt, kGpu), lse = empty_tensor({R}, dt, kGpu);
  gpu.cross_entropy(loss, lse, x, on_gpu(target), -100, 0.0);
  const Tensor rows[] = {tensor_from({0, 1, 34952, 69950}), tensor_from({69951, 69999, 70000})};
  for (const Tensor& pick : rows) {
    const std::vector<double> ids = values(pick);
    for (double r : ids) {
      const int64_t i = static_cast<int64_t>(r);
      SCOPED_TRACE("row " + std::to_string(i));
      const Tensor xr = x.narrow(0, i, 1).cpu(), yr = y.narrow(0, i, 1).cpu(), dyr = dy.narrow(0, i, 1).cpu();
      Tensor want = empty_tensor({1, C}, dt, kCPU);
      cpu_backend().softmax(want, xr, false);
      EXPECT_TRUE(matches(y.narrow(0, i, 1), want, dt, "softmax"));
      cpu_backend().softmax_backward(want, yr, dyr, false);
      EXPECT_TRUE(matches(dx.narrow(0, i, 1), want, dt, "softmax backward"));
      Tensor lc = empty_tensor({1}, dt, kCPU), sc = empty_tensor({1}, dt, kCPU);
      cpu_backend().cross_entropy(lc, sc, xr, target.narrow(0, i, 1), -100, 0.0);
      EXPECT_TRUE(matches(loss.narrow(0, i, 1), lc, dt, "cross_entropy"));
      EXPECT_TRUE(matches(lse.narrow(0, i, 1), sc, dt, "cross_entropy lse"));
    }
  }
  // Backward of the loss and layer norm into the same buffers.
  gpu.cross_entropy_backward(dx, on_gpu(full({R}, 1.0, TensorOptions(dt))), x, lse, on_gpu(target), -100, 0.0);
  Tensor mean = empty_tensor({R}, DType::Float32, kGpu), rstd = empty_tensor({R}, DType::Float32, kGpu);
  gpu.layer_norm(y, mean, rstd, x, Tensor(), Tensor(), 1e-5);
  for (int64_t i : {int64_t{2}, int64_t{69960}, R - 1}) {
    SCOPED_TRACE("row " + std::to_string(i));
    const Tensor xr = x.narrow(0, i, 1).cpu();
    Tensor want = empty_tensor({1, C}, dt, kCPU);
    cpu_backend().cross_entropy_backward(want, full({1}, 1.0, TensorOptions(dt)), xr, lse.narrow(0, i, 1).cpu(),
                                         target.narrow(0, i, 1), -100, 0.0);
    EXPECT_TRUE(matches(dx.narrow(0, i, 1), want, dt, "cross_entropy backward"));
    Tensor m = empty_tensor({1}, DType::Float32, kCPU), rs = empty_tensor({1}, DType::Float32, kCPU);
    cpu_backend().layer_norm(want, m, rs, xr, Tensor(), Tensor(), 1e-5);
    EXPECT_TRUE(matches(y.narrow(0, i, 1), want, dt, "layer_norm"));
    EXPECT_TRUE(matches(rstd.narrow(0, i, 1), rs, DType::Float32, "layer_norm rstd"));
  }
}

}  // namespace
}  // namespace kiln
