// Tensor basics: factories, random numbers, views aliasing storage,
// broadcasting, type promotion, 16-bit float formats, casts, printing, and
// every user-facing error path (type and message).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::all_close;
using testing::values;
using F32 = std::vector<double>;

// ---- factories -----------------------------------------------------------------

TEST(TensorFactory, ConstantsShapesAndDtypes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_EQ(values(z), F32(6, 0.0));
  EXPECT_EQ(ones({4}, DType::Int32).to_vector<int32_t>(), std::vector<int32_t>(4, 1));
  Tensor f = full({3, 1}, -2.5, DType::Float64);
  EXPECT_EQ(f.dtype(), DType::Float64);
  EXPECT_EQ(values(f), F32(3, -2.5));
  EXPECT_EQ(scalar_tensor(7.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(7.0).item<float>(), 7.0f);
  EXPECT_EQ(values(full_like(f, 4.0)), F32(3, 4.0));
  EXPECT_EQ(zeros({0, 5}).numel(), 0);
}

TEST(TensorFactory, ArangeInfersIntegerOrFloat) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor b = arange(1, 10, 3);
  EXPECT_EQ(b.dtype(), DType::Int64);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 7}));
  Tensor c = arange(0.5, 2.5, 0.5);
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_EQ(values(c), (F32{0.5, 1.0, 1.5, 2.0}));
  EXPECT_EQ(arange(0, 1, 0.25).numel(), 4);
  EXPECT_EQ(arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  Tensor d = arange(3, DType::Float64);
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(values(d), (F32{0, 1, 2}));
  EXPECT_KILN_ERROR(arange(0, 5, -1), "arange", "wrong sign");
  EXPECT_KILN_ERROR(arange(0, 5, 0), "arange", "invalid range");
}

TEST(TensorFactory, TensorFromValues) {
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(t.select(0, 1).select(0, 2).item<float>(), 6.0f);
  EXPECT_EQ(tensor({3.5}).dim(), 0);  // one value, no shape: a scalar
  EXPECT_EQ(tensor({3.5}, {1}).dim(), 1);
  EXPECT_EQ(tensor({1, 2}, {}, DType::Float64).dtype(), DType::Float64);
  Tensor i = tensor_from({-4, 9, 1LL << 40});
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{-4, 9, 1LL << 40}));
  EXPECT_EQ(tensor_from({1, 2}, {2, 1}, DType::Int32).dtype(), DType::Int32);
  EXPECT_KILN_ERROR(tensor({1, 2, 3}, {2, 2}), "tensor", "3 values", "[2, 2]");
}

TEST(TensorRandom, RangesAndStatistics) {
  Generator gen(123);
  const int64_t n = 200000;
  const F32 u = values(rand({n}, {}, &gen));
  double mean = 0, m2 = 0;
  for (double v : u) {
    ASSERT_TRUE(v >= 0.0 && v < 1.0) << v;
    mean += v;
    m2 += v * v;
  }
  mean /= n;
  EXPECT_NEAR(mean, 0.5, 0.005);
  EXPECT_NEAR(m2 / n - mean * mean, 1.0 / 12, 0.003);

  const F32 g = values(randn({n}, {}, &gen));
  double gm = 0, gv = 0, within1 = 0;
  for (double v : g) { gm += v; within1 += std::abs(v) < 1.0; }
  gm /= n;
  for (double v : g) gv += (v - gm) * (v - gm);
  EXPECT_NEAR(gm, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(gv / n), 1.0, 0.01);
  EXPECT_NEAR(within1 / n, 0.6827, 0.005);

  Tensor ri = randint(-3, 4, {n}, {}, &gen);
  EXPECT_EQ(ri.dtype(), DType::Int64);
  std::vector<int64_t> counts(7, 0);
  for (int64_t v : ri.to_vector<int64_t>()) {
    ASSERT_TRUE(v >= -3 && v < 4) << v;
    ++counts[static_cast<size_t>(v + 3)];
  }
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c) / n, 1.0 / 7, 0.005);

  double ones_seen = 0;
  for (double v : values(bernoulli({n}, 0.3, {}, &gen))) {
    ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
    ones_seen += v;
  }
  EXPECT_NEAR(ones_seen / n, 0.3, 0.005);
  EXPECT_EQ(values(bernoulli({100}, 0.0, {}, &gen)), F32(100, 0.0));
  EXPECT_EQ(values(bernoulli({100}, 1.0, {}, &gen)), F32(100, 1.0));
  EXPECT_KILN_ERROR(rand({2}, DType::Int64), "rand", "floating-point");
  EXPECT_KILN_ERROR(randint(3, 3, {2}), "randint", "empty range");
  EXPECT_KILN_ERROR(bernoulli({2}, 1.5), "bernoulli", "1.5");
}

TEST(TensorRandom, SameSeedSameValues) {
  manual_seed(42);
  const F32 a = values(randn({1000}));
  const F32 a2 = values(rand({10}));
  manual_seed(42);
  EXPECT_EQ(values(randn({1000})), a);
  EXPECT_EQ(values(rand({10})), a2);
  EXPECT_NE(values(randn({1000})), a);  // the next call draws a new stream

  Generator g1(7), g2(7), g3(8);
  const F32 x = values(randn({500}, {}, &g1));
  EXPECT_EQ(values(randn({500}, {}, &g2)), x);
  EXPECT_NE(values(randn({500}, {}, &g3)), x);
  const PhiloxState saved = g1.state();
  const F32 y = values(rand({64}, {}, &g1));
  g1.set_state(saved);
  EXPECT_EQ(values(rand({64}, {}, &g1)), y);
  g1.manual_seed(7);
  EXPECT_EQ(values(randn({500}, {}, &g1)), x);
  // A prefix of a larger draw equals the smaller draw (values depend on index only).
  Generator g4(7);
  const F32 big = values(randn({2000}, {}, &g4));
  EXPECT_EQ(F32(big.begin(), big.begin() + 500), x);
}

// ---- views ------------------------------------------------------------------------

TEST(TensorViews, WritesThroughViewsReachTheBase) {
  Tensor base = arange(12, DType::Float32);
  Tensor v = base.view({3, 4});
  EXPECT_TRUE(v.shares_storage_with(base));
  EXPECT_TRUE(v.is_view());
  v.select(0, 1).select(0, 2).fill_(100);
  EXPECT_EQ(values(base)[6], 100.0);

  Tensor p = base.view({2, 3, 2}).permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 6, 2}));
  p.select(0, 1).select(0, 1).select(0, 0).fill_(-7);  // element [1][0][1] of the 2x3x2 view = 7
  EXPECT_EQ(values(base)[7], -7.0);

  Tensor t = v.t();
  EXPECT_TRUE(t.shares_storage_with(base));
  EXPECT_FALSE(t.is_contiguous());
  t.select(0, 3).select(0, 0).fill_(55);  // v[0][3]
  EXPECT_EQ(values(base)[3], 55.0);

  Tensor n = v.narrow(1, 1, 2);
  EXPECT_EQ(n.sizes(), (Shape{3, 2}));
  EXPECT_EQ(n.offset(), 1);
  n.fill_(0);
  EXPECT_EQ(values(base), (F32{0, 0, 0, 55, 4, 0, 0, -7, 8, 0, 0, 11}));
  EXPECT_EQ(values(v.select(1, 1)), (F32{0, 0, 0}));
  EXPECT_EQ(values(v.select(1, 3)), (F32{55, -7, 11}));

  Tensor s = base.slice(0, 1, 12, 4);
  EXPECT_EQ(s.sizes(), (Shape{3}));
  s.fill_(9);
  EXPECT_EQ(values(base)[1], 9.0);
  EXPECT_EQ(values(base)[5], 9.0);
  EXPECT_EQ(values(base)[9], 9.0);
  EXPECT_EQ(values(base), (F32{0, 9, 0, 55, 4, 9, 0, -7, 8, 9, 0, 11}));
  EXPECT_EQ(values(base.slice(0, -3, 100)), (F32{9, 0, 11}));  // negative start, end clamped

  Tensor col = arange(3, DType::Float32).view({3, 1});
  Tensor e = col.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_TRUE(e.shares_storage_with(col));
  col.select(0, 2).fill_(5);
  EXPECT_EQ(values(e.select(0, 1).select(0, 2)), F32(4, 5.0));
  EXPECT_EQ(col.expand({-1, 2}).sizes(), (Shape{3, 2}));

  Tensor u = col.unsqueeze(0);
  EXPECT_EQ(u.sizes(), (Shape{1, 3, 1}));
  Tensor sq = u.squeeze();
  EXPECT_EQ(sq.sizes(), (Shape{3}));
  EXPECT_EQ(u.squeeze(0).sizes(), (Shape{3, 1}));
  EXPECT_EQ(u.squeeze(1).sizes(), (Shape{1, 3, 1}));  // size 3: unchanged
  sq.select(0, 0).fill_(-1);
  EXPECT_EQ(values(col)[0], -1.0);
  EXPECT_TRUE(u.shares_storage_with(col) && sq.shares_storage_with(col));
}

TEST(TensorViews, ReshapeCopiesOnlyWhenItMust) {
  Tensor x = arange(6, DType::Float32).view({2, 3});
  Tensor r = x.reshape({3, 2});
  EXPECT_TRUE(r.shares_storage_with(x));
  Tensor tr = x.t().reshape({6});
  EXPECT_FALSE(tr.shares_storage_with(x));
  EXPECT_EQ(values(tr), (F32{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(x.t().reshape({3, 2}).shares_storage_with(x));  // same layout: still a view
  EXPECT_EQ(x.flatten().sizes(), (Shape{6}));
  EXPECT_EQ(x.reshape({-1, 2}).sizes(), (Shape{3, 2}));

  Tensor c = x.contiguous();
  EXPECT_EQ(c.impl_ptr(), x.impl_ptr());  // already contiguous: same tensor, no copy
  Tensor ct = x.t().contiguous();
  EXPECT_FALSE(ct.shares_storage_with(x));
  EXPECT_TRUE(ct.is_contiguous());
  EXPECT_EQ(values(ct), (F32{0, 3, 1, 4, 2, 5}));
  Tensor cl = x.clone();
  EXPECT_FALSE(cl.shares_storage_with(x));
  EXPECT_EQ(values(cl), values(x));
}

// ---- broadcasting and promotion -------------------------------------------------------

TEST(TensorBroadcast, NumpyRules) {
  Tensor a = tensor({1, 2, 3}, {3, 1});
  Tensor b = tensor({10, 20, 30, 40}, {4});
  Tensor c = a + b;
  EXPECT_EQ(c.sizes(), (Shape{3, 4}));
  F32 want;
  for (double i : {1, 2, 3})
    for (double j : {10, 20, 30, 40}) want.push_back(i + j);
  EXPECT_EQ(values(c), want);
  EXPECT_EQ((ones({2, 1, 4}) * ones({3, 1})).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ((scalar_tensor(2) * ones({2, 3})).sizes(), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes({5, 1, 3}, {4, 1}, "t"), (Shape{5, 4, 3}));
  EXPECT_EQ(values(sub(tensor({5, 6}, {2, 1}), tensor({1, 2, 3}))), (F32{4, 3, 2, 5, 4, 3}));
  EXPECT_KILN_ERROR(broadcast_shapes({2, 3}, {3, 2}, "myop"), "myop", "[2, 3]", "[3, 2]");
}

TEST(TensorPromotion, PytorchRules) {
  Tensor i32 = tensor_from({1, 2}, {}, DType::Int32), i64 = tensor_from({3, 4});
  EXPECT_EQ((i32 + i64).dtype(), DType::Int64);
  EXPECT_EQ((i64 + ones({2})).dtype(), DType::Float32);
  EXPECT_EQ((ones({2}, DType::Float16) + ones({2}, DType::BFloat16)).dtype(), DType::Float32);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int32), DType::Int32);
  Tensor b1 = tensor({1, 0, 0}, {}, DType::Bool), b2 = tensor({1, 1, 0}, {}, DType::Bool);
  Tensor bb = b1 + b2;
  EXPECT_EQ(bb.dtype(), DType::Bool);
  EXPECT_EQ(bb.to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ((b1 * b2).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  Tensor h = i64 + 2.5;
  EXPECT_EQ(h.dtype(), DType::Float32);
  EXPECT_EQ(values(h), (F32{5.5, 6.5}));
  EXPECT_EQ((i32 * 3.0).dtype(), DType::Int32);  // an integral scalar keeps the int dtype
  EXPECT_EQ((ones({2}) + scalar_tensor(1.5, DType::Float64)).dtype(), DType::Float32);
  EXPECT_EQ((ones({2}, DType::Float16) + scalar_tensor(1.5, DType::Float64)).dtype(), DType::Float16);
  EXPECT_EQ((i32 + scalar_tensor(1.5, DType::Float64)).dtype(), DType::Float64);  // higher category wins
  Tensor lt_ = lt(i64, tensor({3.5, 3.5}));
  EXPECT_EQ(lt_.dtype(), DType::Bool);
  EXPECT_EQ(lt_.to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(eq(ones({2}), 1.0).dtype(), DType::Bool);
  Tensor q = tensor_from({7, -7}) / tensor_from({2, 2});
  EXPECT_EQ(q.dtype(), DType::Float32);
  EXPECT_EQ(values(q), (F32{3.5, -3.5}));
  EXPECT_EQ((tensor_from({7}) / 2.0).dtype(), DType::Float32);
  EXPECT_EQ(sum(b2).dtype(), DType::Int64);
  EXPECT_EQ(sum(b2).item<int64_t>(), 2);
  EXPECT_EQ(sum(i32).dtype(), DType::Int64);
}

TEST(TensorPromotion, BoolPlusScalarCounts) {
  // A number next to a bool tensor is arithmetic, not logical or: like b + 2
  // (int64 [3, 2]), b + 1 is [2, 1] (PyTorch: int64 for 1, float32 for 1.0).
  Tensor b = tensor({1, 0}, {}, DType::Bool);
  EXPECT_EQ(values(b + 2.0), (F32{3, 2}));
  EXPECT_NE((b + 1.0).dtype(), DType::Bool);
  EXPECT_EQ(values(b + 1.0), (F32{2, 1}));
}

// ---- 16-bit floats ----------------------------------------------------------------------

uint16_t half_bits(double v) { return tensor({v}, {}, DType::Float16).data_ptr<Half>()[0].bits; }
uint16_t bf16_bits(double v) { return tensor({v}, {}, DType::BFloat16).data_ptr<BFloat16>()[0].bits; }
float half_value(uint16_t bits) { return Half::to_float(bits); }

TEST(TensorLowPrecision, Float16BitPatterns) {
  EXPECT_EQ(half_bits(1.0), 0x3c00);
  EXPECT_EQ(half_bits(1.0 / 3.0), 0x3555);
  EXPECT_EQ(half_value(0x3555), 0.333251953125f);
  EXPECT_EQ(half_bits(65504.0), 0x7bff);
  EXPECT_EQ(half_bits(65519.0), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(half_bits(65520.0), 0x7c00);  // midpoint rounds (to even) to inf
  EXPECT_EQ(half_bits(1e-8), 0x0000);     // below half the smallest subnormal
  EXPECT_EQ(half_bits(1e-7), 0x0002);     // subnormal: round(1e-7 * 2^24) = 2
  EXPECT_EQ(half_bits(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(half_value(0x0001), static_cast<float>(std::ldexp(1.0, -24)));
  EXPECT_EQ(half_bits(1023 * std::ldexp(1.0, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(half_bits(std::ldexp(1.0, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(half_bits(1.0 + std::ldexp(1.0, -11)), 0x3c00);   // tie -> even
  EXPECT_EQ(half_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(half_bits(-0.0), 0x8000);
  EXPECT_EQ(half_bits(std::numeric_limits<double>::infinity()), 0x7c00);
  EXPECT_EQ(half_bits(-std::numeric_limits<double>::infinity()), 0xfc00);
  const uint16_t nan = half_bits(std::nan(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(half_value(nan)));
  EXPECT_TRUE(std::isinf(half_value(0x7c00)));
  // every finite half survives half -> float -> half
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(Half::from_float(Half::to_float(static_cast<uint16_t>(b))), b) << std::hex << b;
  }
}

TEST(TensorLowPrecision, BFloat16BitPatterns) {
  EXPECT_EQ(bf16_bits(1.0), 0x3f80);
  EXPECT_EQ(bf16_bits(1.0 / 3.0), 0x3eab);
  EXPECT_EQ(bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_bits(1.0 + 1.5 * std::ldexp(1.0, -8)), 0x3f81);
  EXPECT_EQ(bf16_bits(65504.0), 0x4780);  // 65536: bf16 has 8 mantissa bits
  EXPECT_EQ(bf16_bits(1e-8), 0x322c);
  EXPECT_EQ(bf16_bits(1e-40), 0x0001);    // float32 subnormal 0x000116c2 -> 0x0001
  EXPECT_EQ(bf16_bits(std::numeric_limits<double>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  const uint16_t nan = bf16_bits(std::nan(""));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  EXPECT_EQ(tensor({1.0 / 3.0}, {}, DType::BFloat16).item<float>(), 0.333984375f);
  EXPECT_EQ(tensor({1e-8}, {}, DType::BFloat16).to(DType::Float32).item<float>(), 1.00117176e-08f);
}

TEST(TensorCasts, AllPairs) {
  const std::vector<DType> all = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                  DType::Int32,   DType::Int64,   DType::Bool};
  const F32 src_vals = {0.0, 1.0, -2.0, 3.75, 100.0};
  for (DType from : all) {
    for (DType to : all) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor s = tensor(src_vals, {}, from);
      F32 want;
      for (double v : src_vals) {
        double held = from == DType::Bool ? (v != 0) : is_integral(from) ? std::trunc(v) : v;
        want.push_back(to == DType::Bool ? (held != 0) : is_integral(to) ? std::trunc(held) : held);
      }
      Tensor out = s.to(to);
      EXPECT_EQ(out.dtype(), to);
      EXPECT_EQ(values(out), want);
      // a strided source casts the same
      EXPECT_EQ(values(tensor(src_vals, {5, 1}, from).t().to(to)), want);
    }
  }
  EXPECT_EQ(values(tensor({-2.7, 2.7}).to(DType::Int32)), (F32{-2, 2}));  // truncation
}

TEST(TensorDevice, CudaUnavailableInCpuBuild) {
  Tensor x = tensor({1, 2});
  const Device cuda(DeviceType::CUDA, 0);
  if (!cuda_built()) {
    EXPECT_KILN_ERROR(x.to(cuda), "built without CUDA");
    EXPECT_KILN_ERROR(zeros({2}, cuda), "built without CUDA");
  } else {  // a CUDA build: either a GPU round trip or an error that names CUDA
    try {
      EXPECT_EQ(values(x.to(cuda).cpu()), values(x));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(Device::parse("cuda:1"), Device(DeviceType::CUDA, 1));
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_KILN_ERROR(Device::parse("tpu"), "invalid device", "tpu");
  EXPECT_EQ(x.to(kCPU).impl_ptr(), x.impl_ptr());
}

// ---- printing -------------------------------------------------------------------------------

std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

TEST(TensorPrint, ShapeDtypeDeviceAndValues) {
  const std::string s = printed(tensor({1.5, -2, 0.25, 4}, {2, 2}));
  EXPECT_NE(s.find("1.5000"), std::string::npos) << s;
  EXPECT_NE(s.find("-2.0000"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  EXPECT_EQ(s.find("..."), std::string::npos) << s;
  EXPECT_EQ(printed(tensor_from({1, 2, 3})), "tensor([1, 2, 3], shape=[3], dtype=int64, device=cpu)");
  EXPECT_NE(printed(gt(tensor({1, -1}), 0.0)).find("[True, False]"), std::string::npos);
  EXPECT_EQ(printed(arange(1000)).find("..."), std::string::npos);
  const std::string big = printed(arange(1001));
  EXPECT_NE(big.find("[0, 1, 2, ..., 998, 999, 1000]"), std::string::npos) << big;
  const std::string grid = printed(zeros({40, 40}));
  EXPECT_NE(grid.find("..."), std::string::npos);
  EXPECT_LT(grid.size(), 600u);
  Tensor r = ones({2});
  r.set_requires_grad();
  EXPECT_NE(printed(r).find("requires_grad"), std::string::npos);
  EXPECT_EQ(ones({2, 3}).str(), "Tensor[2, 3] float32 cpu");
  const std::string tr = printed(tensor({1, 2, 3, 4}, {2, 2}).t());  // logical order, not memory order
  EXPECT_NE(tr.find("[[1.0000, 3.0000],\n        [2.0000, 4.0000]]"), std::string::npos) << tr;
  EXPECT_EQ(printed(Tensor()), "tensor(undefined)");
}

TEST(TensorPrint, ScalarHasNoBrackets) {
  // A 0-dim tensor prints its value bare (like torch.tensor(3.5)), not as a 1-element list.
  EXPECT_EQ(printed(scalar_tensor(3.5)), "tensor(3.5000, shape=[], dtype=float32, device=cpu)");
  EXPECT_EQ(printed(scalar_tensor(7, DType::Int64)), "tensor(7, shape=[], dtype=int64, device=cpu)");
}

// ---- errors ---------------------------------------------------------------------------------

TEST(TensorErrors, ShapesAndSizes) {
  EXPECT_KILN_ERROR(add(zeros({2, 3}), zeros({4})), "add", "[2, 3]", "[4]");
  EXPECT_KILN_ERROR(mul(zeros({2, 3}), zeros({3, 2})), "mul", "[2, 3]", "[3, 2]");
  EXPECT_KILN_ERROR(matmul(zeros({2, 3}), zeros({4, 5})), "matmul", "[2, 3]", "[4, 5]");
  EXPECT_KILN_ERROR(matmul(zeros({3}), zeros({4})), "matmul", "3", "4");
  EXPECT_KILN_ERROR(matmul(scalar_tensor(1), zeros({4})), "matmul", "at least 1 dim");
  EXPECT_KILN_ERROR(zeros({2, 3}).view({5}), "view", "[5]", "[2, 3]");
  EXPECT_KILN_ERROR(zeros({2, 3}).view({-1, -1}), "view", "only one dimension can be -1");
  EXPECT_KILN_ERROR(zeros({2, 3}).t().view({6}), "view", "not compatible", "reshape");
  EXPECT_KILN_ERROR(zeros({2, 3}).reshape({4, -1}), "reshape", "[4, -1]", "[2, 3]");
  EXPECT_KILN_ERROR(zeros({2, 3}).expand({4, 3, 2}), "expand", "[2, 3]");
  EXPECT_KILN_ERROR(zeros({2, 3}).permute({0, 0}), "permute", "repeated");
  EXPECT_KILN_ERROR(zeros({2, -1}), "negative size", "[2, -1]");
  EXPECT_KILN_ERROR(empty({-3}), "empty", "negative size");
  EXPECT_KILN_ERROR(randn({4, -2}), "randn", "negative");
  EXPECT_KILN_ERROR(zeros({6}).view({-2, -3}), "view", "invalid size -2");
  EXPECT_KILN_ERROR(cat({zeros({2, 3}), zeros({2, 4})}, 0), "cat", "dimension 0", "[2, 4]", "[2, 3]");
  EXPECT_KILN_ERROR(cat({zeros({2, 3}), zeros({3})}, 0), "cat", "dims");
  EXPECT_KILN_ERROR(cat({}, 0), "cat", "non-empty");
  EXPECT_KILN_ERROR(stack({zeros({2}), zeros({3})}), "stack", "same shape");
  EXPECT_KILN_ERROR(split(zeros({5, 2}), std::vector<int64_t>{2, 2}, 0), "split", "sum to 4", "size 5");
  EXPECT_KILN_ERROR(split(zeros({5}), 0), "split", "positive");
  EXPECT_KILN_ERROR(zeros({2, 2}).item<float>(), "item", "one element", "[2, 2]");
  EXPECT_KILN_ERROR(zeros({2}).data_ptr<double>(), "data_ptr", "float32", "float64");
  EXPECT_KILN_ERROR(linear(zeros({2, 3}), zeros({4, 5})), "linear", "[2, 3]", "[4, 5]");
  EXPECT_KILN_ERROR(layer_norm(zeros({2, 3}), {4}), "layer_norm", "[4]", "[2, 3]");
}

TEST(TensorErrors, DimsAndIndices) {
  Tensor x = zeros({3, 4});
  EXPECT_KILN_ERROR(sum(x, {2}), "sum", "dimension 2 out of range", "2 dims", "-2 to 1");
  EXPECT_KILN_ERROR(sum(x, {1, -1}), "sum", "repeated");
  EXPECT_KILN_ERROR(softmax(x, -3), "softmax", "dimension -3 out of range");
  EXPECT_KILN_ERROR(x.transpose(0, 2), "transpose", "out of range");
  EXPECT_KILN_ERROR(x.unsqueeze(4), "unsqueeze", "out of range");
  EXPECT_KILN_ERROR(x.size(2), "size", "out of range");
  EXPECT_KILN_ERROR(argmax(x, 5), "argmax", "out of range");
  EXPECT_KILN_ERROR(x.select(0, 3), "select", "index 3", "size 3");
  EXPECT_KILN_ERROR(x.select(1, -5), "select", "index -5", "size 4");
  EXPECT_KILN_ERROR(x.narrow(1, 2, 3), "narrow", "[2, 5)", "size 4");
  EXPECT_KILN_ERROR(index_select(x, 0, tensor_from({0, 3})), "index_select", "index 3", "position 1", "size 3");
  EXPECT_KILN_ERROR(index_select(x, 1, tensor_from({-1})), "index_select", "index -1");
  EXPECT_KILN_ERROR(embedding(zeros({5, 2}), tensor_from({1, 5})), "embedding", "id 5", "5 embeddings");
  EXPECT_KILN_ERROR(embedding(zeros({5, 2}), tensor_from({-1})), "embedding", "id -1");
  EXPECT_KILN_ERROR(embedding(zeros({5, 2}), tensor_from({1}), 9), "embedding", "padding_idx 9");
}

// start + length, step * stride and stride products are checked before they
// are formed: signed overflow is undefined, and in a release build it wrapped
// into a wrong view without any error.
TEST(TensorErrors, OffsetsAndStridesDoNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor x = zeros({3, 4});
  EXPECT_KILN_ERROR(x.narrow(0, 1, kMax), "narrow: start 1 + length 9223372036854775807 overflows int64",
                    "size 3");
  EXPECT_KILN_ERROR(x.narrow(1, 4, kMax), "narrow", "overflows int64");
  EXPECT_KILN_ERROR(x.narrow(0, 5, 0), "narrow: start 5 out of bounds", "size 3");
  EXPECT_KILN_ERROR(x.narrow(0, 0, -1), "narrow: length -1 must be non-negative");
  EXPECT_EQ(x.narrow(0, 3, 0).sizes(), (Shape{0, 4}));
  EXPECT_EQ(x.narrow(1, -1, 1).sizes(), (Shape{3, 1}));
  // ceil(3 / step) without forming 3 + step - 1.
  EXPECT_EQ(x.slice(0, 0, 3, kMax).sizes(), (Shape{1, 4}));
  EXPECT_EQ(x.slice(0, 2, 3, kMax - 1).sizes(), (Shape{1, 4}));
  EXPECT_EQ(x.slice(1, 1, 4, kMax).strides(), (Shape{4, 1}));  // one element: the stride is kept
  // A zero size anywhere: few elements, yet strides are products of the other sizes.
  constexpr int64_t k32 = int64_t{1} << 32, k40 = int64_t{1} << 40;
  EXPECT_KILN_ERROR(empty_tensor({0, k32, k32}, DType::Float32, kCPU),
                    "contiguous_strides: the strides of shape [0, 4294967296, 4294967296] overflow int64");
  EXPECT_KILN_ERROR(contiguous_strides({2, k32, k32, 0}), "contiguous_strides", "overflow int64");
  EXPECT_EQ(contiguous_strides({k32, k32, 0, 1}), (Shape{k32, 1, 1, 1}));
  EXPECT_EQ(shape_numel({k40, k40, 0}), 0);  // was "element count overflows int64"
  const Tensor e = empty_tensor({k40, k40, 0}, DType::Float32, kCPU);  // the strides fit
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.strides(), (Shape{k40, 1, 1}));
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (Shape{3, 3, 1}));
  EXPECT_KILN_ERROR(e.select(0, k40 - 1), "select", "overflows int64");
  EXPECT_KILN_ERROR(e.slice(0, 0, k40, k40 / 2), "slice: step 549755813888 times stride 1099511627776");
  EXPECT_KILN_ERROR(zeros({4}).view({k32, k32, -1}), "view", "more elements than int64");
}

TEST(TensorErrors, ScalarTensorHasNoDimZero) {
  // 0-dim tensors accept dim -1/0 in reductions (wrap_dim), but have no size(0).
  // Isolated in a child process: indexing a missing dim must not crash the suite.
  EXPECT_KILN_ERROR_ISOLATED(scalar_tensor(1.0).size(0), "size");
  EXPECT_KILN_ERROR_ISOLATED(scalar_tensor(1.0).stride(-1), "stride");
}

TEST(TensorErrors, Dtypes) {
  Tensor ids = tensor_from({0, 1});
  EXPECT_KILN_ERROR(softmax(ids, 0), "softmax", "floating-point", "int64");
  EXPECT_KILN_ERROR(layer_norm(ids, {2}), "layer_norm", "int64");
  EXPECT_KILN_ERROR(mean(ids), "mean", "int64");
  EXPECT_KILN_ERROR(embedding(zeros({5, 2}), tensor({1, 2})), "embedding", "ids", "float32");
  EXPECT_KILN_ERROR(cross_entropy(zeros({2, 5}), tensor_from({1, 7})), "cross_entropy", "target 7",
                    "position 1", "5 classes");
  EXPECT_KILN_ERROR(cross_entropy(zeros({2, 5}), tensor_from({-3, 0})), "cross_entropy", "target -3");
  EXPECT_KILN_ERROR(cross_entropy(zeros({2, 5}), tensor({1, 2})), "cross_entropy", "target", "float32");
  EXPECT_KILN_ERROR(cross_entropy(zeros({2, 5}), tensor_from({1, 2, 3})), "cross_entropy", "[3]", "[2, 5]");
  EXPECT_KILN_ERROR(cross_entropy(zeros({2, 5}), ids, -100, 0.0, "avg"), "cross_entropy", "avg");
  EXPECT_KILN_ERROR(masked_fill(zeros({2}), tensor_from({1, 0}), 1.0), "masked_fill", "bool", "int64");
  EXPECT_KILN_ERROR(zeros({2}).masked_fill_(ones({2}), 1.0), "masked_fill_", "bool", "float32");
  EXPECT_KILN_ERROR(where(ones({2}), ones({2}), ones({2})), "where", "bool");
  EXPECT_KILN_ERROR(index_select(zeros({3}), 0, tensor({1})), "index_select", "float32");
  EXPECT_KILN_ERROR(ids.set_requires_grad(true), "requires_grad", "floating-point", "int64");
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)), "matmul", "bool");
  EXPECT_KILN_ERROR(gelu(ones({2}), "fast"), "gelu", "fast");
  EXPECT_KILN_ERROR(clamp(ones({2}), 2.0, 1.0), "clamp", "greater");
  EXPECT_KILN_ERROR(set_num_threads(0), "set_num_threads");
}

TEST(TensorErrors, BoolArithmeticNamesTheOp) {
  Tensor b = tensor({1, 0}, {}, DType::Bool);
  EXPECT_KILN_ERROR(neg(b), "neg", "bool");
  EXPECT_KILN_ERROR(sub(b, b), "sub", "bool");
}

TEST(TensorErrors, UndefinedTensors) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_KILN_ERROR(add(u, ones({2})), "add", "undefined");
  EXPECT_KILN_ERROR(sum(u), "sum", "undefined");
  EXPECT_KILN_ERROR(matmul(u, u), "matmul", "undefined");
  EXPECT_KILN_ERROR(softmax(u, 0), "softmax", "undefined");
  EXPECT_KILN_ERROR(u.view({1}), "view", "undefined");
  EXPECT_KILN_ERROR(u.dim(), "undefined tensor");
  EXPECT_KILN_ERROR(cat({ones({1}), u}), "cat", "tensor 1", "undefined");
  EXPECT_KILN_ERROR(ones({2}).copy_(u), "copy_", "undefined");
}

}  // namespace
}  // namespace kiln
