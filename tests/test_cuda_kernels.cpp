// The CUDA device interface (core/backend.h) kernel by kernel against the CPU
// backend, on random shapes, layouts (transposed, broadcast, sliced) and
// dtypes; casts, random fills and index_add bit for bit. Skips without a GPU
// (tests/cuda_test_util.h).
#include <cmath>

#include "ops/internal.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::kFloatTypes;
using testing::kGpu;
using testing::matches;
using testing::normalised_error;
using testing::on_gpu;
using testing::random_cpu;
using testing::random_shape;
using testing::transposed_copy;

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
      // index_add: groups of about 68, at most a chunk (Note [Deterministic index_add]), keep the CPU's
      // summation order: bit-identical, and the same every run
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
  // bernoulli's four elements per block (Note [Random numbers]): sizes that
  // end inside a block, and the edge probabilities
  for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{33}, int64_t{16387}})
    for (double p : {0.0, 0.1, 0.9, 1.0}) {
      const PhiloxState st{77, 5};
      Tensor c = empty_tensor({n}, DType::Bool, kCPU), g = empty_tensor({n}, DType::Bool, kGpu);
      cpu_backend().bernoulli(c, p, st);
      backend(kGpu).bernoulli(g, p, st);
      EXPECT_TRUE(bitwise_equal(g.cpu(), c)) << "bernoulli n=" << n << " p=" << p;
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
