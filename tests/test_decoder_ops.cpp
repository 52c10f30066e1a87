// The decoder ops (ops/decoder_ops.h) against the compositions of public ops
// they replace, forward and gradients: rms_norm against transformers'
// LlamaRMSNorm as nn/models/llama.cpp composed it, rotary_embedding against
// apply_rotary's rotate_half form, gated_activation against act(a) * b with
// kiln's sigmoid and gelu. float32 and float64 (16-bit floats looser), odd
// widths, T = 1, empty batches, strided views; bad arguments; the same bits
// on 1 and 2 threads (Note [Deterministic chunking]).
#include <gtest/gtest.h>

#include <string>

#include "ops/decoder_ops.h"
#include "tests/grad_compare.h"
#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::all_close;
using testing::bitwise_equal;
using testing::expect_bitwise;
using testing::GradResult;
using testing::rnd;
using testing::run_with_grads;

// ---- the composites (copied from nn/models/llama.cpp before the switch) -------

Tensor rms_norm_composite(const Tensor& x, const Tensor& weight, double eps) {
  const Tensor x32 = x.dtype() == DType::Float64 ? x : x.to(DType::Float32);
  const Tensor normed = mul(x32, rsqrt(add(mean(mul(x32, x32), {-1}, true), eps)));
  return weight.defined() ? mul(weight, normed.to(x.dtype())) : normed.to(x.dtype());
}

Tensor rotary_composite(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / heads;
  const Tensor x4 = x.reshape({B, T, heads, D});
  const Tensor half = cat({neg(x4.narrow(3, D / 2, D / 2)), x4.narrow(3, 0, D / 2)}, 3);  // rotate_half
  const Tensor c = cos.reshape({1, T, 1, D}), s = sin.reshape({1, T, 1, D});
  return add(mul(x4, c), mul(half, s)).reshape({B, T, heads * D});
}

// transformers' names for each activation, written out here (not read from
// the op's table): a name the op accepts that is not listed fails the test.
Tensor gated_composite(const Tensor& a, const Tensor& b, const std::string& act) {
  if (act == "silu" || act == "swish") return mul(mul(a, sigmoid(a)), b);
  if (act == "gelu" || act == "gelu_python") return mul(gelu(a), b);
  if (act == "gelu_tanh" || act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast")
    return mul(gelu(a, "tanh"), b);
  ADD_FAILURE() << "no composite for activation '" << act << "'";
  return Tensor();
}

double tol_for(DType dt) {
  switch (dt) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 2e-6;
    case DType::BFloat16: return 3e-2;
    default: return 4e-3;  // float16
  }
}

// Forward and gradients of f and g on the same inputs, within tol (relative and absolute).
void expect_same(const testing::Fn& f, const testing::Fn& g, const TensorList& in, double tol) {
  const GradResult a = run_with_grads(f, in), b = run_with_grads(g, in);
  EXPECT_EQ(a.out.dtype(), b.out.dtype());
  EXPECT_TRUE(a.out.is_contiguous());
  EXPECT_TRUE(all_close(a.out, b.out, tol, tol)) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i].dtype(), b.grads[i].dtype());
    EXPECT_TRUE(all_close(a.grads[i], b.grads[i], tol, tol)) << "gradient of input " << i;
  }
}

// ---- rms_norm --------------------------------------------------------------------

TEST(DecoderOps, RmsNormMatchesComposite) {
  const std::vector<Shape> shapes = {{2, 3, 8}, {4, 7}, {1, 1, 13}, {3, 33}, {2, 1, 768}, {5, 1}};
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (const Shape& s : shapes)
      for (bool with_weight : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s) + (with_weight ? " weight" : ""));
        TensorList in = {rnd(s, 1, dt)};
        if (with_weight) in.push_back(rnd({s.back()}, 2, dt));
        auto w = [&](const TensorList& x) { return with_weight ? x[1] : Tensor(); };
        expect_same([&](const TensorList& x) { return rms_norm(x[0], w(x), 1e-6); },
                    [&](const TensorList& x) { return rms_norm_composite(x[0], w(x), 1e-6); }, in, tol_for(dt));
      }
}

TEST(DecoderOps, RmsNormMixedDtypesPromoteAsTheComposite) {
  // float32 weights on bfloat16 activations give float32, as transformers
  for (auto [xd, wd] : {std::pair{DType::BFloat16, DType::Float32}, std::pair{DType::Float32, DType::Float64}}) {
    SCOPED_TRACE(std::string(dtype_name(xd)) + " x, " + dtype_name(wd) + " weight");
    const TensorList in = {rnd({3, 10}, 3, xd), rnd({10}, 4, wd)};
    expect_same([](const TensorList& x) { return rms_norm(x[0], x[1], 1e-5); },
                [](const TensorList& x) { return rms_norm_composite(x[0], x[1], 1e-5); }, in, tol_for(xd));
    EXPECT_EQ(rms_norm(in[0], in[1], 1e-5).dtype(), promote_types(xd, wd));
  }
}

TEST(DecoderOps, RmsNormEmptyAndStrided) {
  for (const Shape& s : {Shape{0, 6}, Shape{2, 0, 6}, Shape{3, 0}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = rnd(s, 5).requires_grad_(), w = rnd({s.back()}, 6).requires_grad_();
    Tensor y = rms_norm(x, w, 1e-6);
    EXPECT_EQ(y.sizes(), s);
    sum(y).backward();
    EXPECT_EQ(x.grad().sizes(), s);
    EXPECT_TRUE(all_close(w.grad(), zeros({s.back()}), 0.0)) << "no rows: a zero weight gradient";
  }
  // a transposed view reads as its values
  const Tensor base = rnd({6, 4}, 7);
  const Tensor w = rnd({6}, 8);
  EXPECT_TRUE(all_close(rms_norm(base.transpose(0, 1), w, 1e-6),
                        rms_norm(base.transpose(0, 1).contiguous(), w, 1e-6), 0.0));
}

TEST(DecoderOps, RmsNormRejectsBadArguments) {
  const Tensor x = rnd({2, 3, 8}, 9);
  EXPECT_KILN_ERROR(rms_norm(x, rnd({7}, 1), 1e-6), "rms_norm", "weight of shape [7]", "[2, 3, 8]");
  EXPECT_KILN_ERROR(rms_norm(x, rnd({8, 1}, 1), 1e-6), "rms_norm", "weight of shape [8, 1]");
  EXPECT_KILN_ERROR(rms_norm(x, Tensor(), -1.0), "rms_norm", "eps", "-1");
  EXPECT_KILN_ERROR(rms_norm(zeros({}), Tensor(), 1e-6), "rms_norm", "0-dim");
  EXPECT_KILN_ERROR(rms_norm(tensor_from({1, 2}, {2}), Tensor(), 1e-6), "rms_norm", "floating-point", "int64");
  EXPECT_KILN_ERROR(rms_norm(Tensor(), Tensor(), 1e-6), "rms_norm", "x");
}

// ---- rotary_embedding ------------------------------------------------------------------

// cos/sin tables (T, D) whose halves differ (the op must not assume they are equal).
std::pair<Tensor, Tensor> tables(int64_t T, int64_t D, DType dt, uint64_t seed) {
  return {rnd({T, D}, seed, dt), rnd({T, D}, seed + 1, dt)};
}

TEST(DecoderOps, RotaryMatchesComposite) {
  struct Case { int64_t B, T, heads, D; };
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (Case c : {Case{2, 5, 3, 8}, Case{1, 1, 4, 6}, Case{3, 7, 1, 2}, Case{2, 4, 2, 64}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
                   " heads=" + std::to_string(c.heads) + " D=" + std::to_string(c.D));
      const auto tab = tables(c.T, c.D, dt, 20);  // not a structured binding: clang 14 cannot capture one
      const Tensor &cs = tab.first, &sn = tab.second;
      expect_same([&](const TensorList& x) { return rotary_embedding(x[0], cs, sn, c.heads); },
                  [&](const TensorList& x) { return rotary_composite(x[0], cs, sn, c.heads); },
                  {rnd({c.B, c.T, c.heads * c.D}, 10, dt)}, tol_for(dt));
    }
}

TEST(DecoderOps, RotaryReadsStridedViews) {
  // q as a column slice of a fused (B, T, 3C) projection, and a (T, B)-major view
  const int64_t B = 2, T = 3, H = 2, D = 4, C = H * D;
  const auto tab = tables(T, D, DType::Float32, 30);  // not a structured binding: clang 14 cannot capture one
  const Tensor &cs = tab.first, &sn = tab.second;
  expect_same([&](const TensorList& x) { return rotary_embedding(narrow(x[0], 2, C, C), cs, sn, H); },
              [&](const TensorList& x) { return rotary_composite(narrow(x[0], 2, C, C), cs, sn, H); },
              {rnd({B, T, 3 * C}, 31)}, tol_for(DType::Float32));
  expect_same([&](const TensorList& x) { return rotary_embedding(x[0].transpose(0, 1), cs, sn, H); },
              [&](const TensorList& x) { return rotary_composite(x[0].transpose(0, 1), cs, sn, H); },
              {rnd({T, B, C}, 32)}, tol_for(DType::Float32));
}

TEST(DecoderOps, RotaryEmptyAndPromotion) {
  const auto tab = tables(4, 6, DType::Float32, 40);  // not a structured binding: clang 14 cannot capture one
  const Tensor &cs = tab.first, &sn = tab.second;
  for (const Shape& s : {Shape{0, 4, 12}}) {
    Tensor x = rnd(s, 41).requires_grad_();
    Tensor y = rotary_embedding(x, cs, sn, 2);
    EXPECT_EQ(y.sizes(), s);
    sum(y).backward();
    EXPECT_EQ(x.grad().sizes(), s);
  }
  const auto [c0, s0] = tables(0, 6, DType::Float32, 42);
  EXPECT_EQ(rotary_embedding(rnd({2, 0, 12}, 43), c0, s0, 2).sizes(), Shape({2, 0, 12}));
  // bfloat16 activations with float32 tables compute in float32, as the
  // composite's products: the forward to float32 rounding; the bfloat16
  // gradient within bfloat16's (the composite rounds its rotate_half branch's
  // gradient to bfloat16 before adding the other branch's)
  const TensorList in = {rnd({2, 4, 12}, 44, DType::BFloat16)};
  expect_same([&](const TensorList& x) { return rotary_embedding(x[0], cs, sn, 2); },
              [&](const TensorList& x) { return rotary_composite(x[0], cs, sn, 2); }, in, tol_for(DType::BFloat16));
  EXPECT_TRUE(all_close(rotary_embedding(in[0], cs, sn, 2), rotary_composite(in[0], cs, sn, 2), 2e-6, 2e-6));
  EXPECT_EQ(rotary_embedding(in[0], cs, sn, 2).dtype(), DType::Float32);
}

TEST(DecoderOps, RotaryRejectsBadArguments) {
  const Tensor x = rnd({2, 3, 12}, 50);
  const auto tab = tables(3, 6, DType::Float32, 51);  // not a structured binding: clang 14 cannot capture one
  const Tensor &cs = tab.first, &sn = tab.second;
  EXPECT_KILN_ERROR(rotary_embedding(x, cs, sn, 5), "rotary_embedding", "12", "5 heads");
  EXPECT_KILN_ERROR(rotary_embedding(x, cs, sn, 0), "rotary_embedding", "0 heads");
  const auto tab3 = tables(3, 3, DType::Float32, 52);  // not a structured binding: clang 14 cannot capture one
  const Tensor &c3 = tab3.first, &s3 = tab3.second;
  EXPECT_KILN_ERROR(rotary_embedding(rnd({2, 3, 12}, 53), c3, s3, 4), "rotary_embedding", "even", "3");
  EXPECT_KILN_ERROR(rotary_embedding(x, rnd({4, 6}, 54), sn, 2), "rotary_embedding", "[3, 6]", "[4, 6]");
  EXPECT_KILN_ERROR(rotary_embedding(x, cs, rnd({3, 4}, 55), 3), "rotary_embedding", "[3, 4]");
  EXPECT_KILN_ERROR(rotary_embedding(rnd({6, 12}, 56), cs, sn, 2), "rotary_embedding", "(batch, seq");
  EXPECT_KILN_ERROR(rotary_embedding(x, tensor_from({1, 2}, {1, 2}), sn, 2), "rotary_embedding", "floating-point");
  // cos and sin are tables: no gradient, and asking for one is an error, not a silent zero
  Tensor cg = cs.clone().requires_grad_();
  EXPECT_KILN_ERROR(rotary_embedding(x, cg, sn, 2), "rotary_embedding", "no gradient", "detached");
  NoGradGuard ng;
  EXPECT_TRUE(all_close(rotary_embedding(x, cg, sn, 2), rotary_embedding(x, cs, sn, 2), 0.0));
}

// ---- gated_activation -------------------------------------------------------------------

TEST(DecoderOps, GatedActivationMatchesComposite) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (const std::string& act : gated_activation_names())
      for (const Shape& s : {Shape{3, 7}, Shape{2, 5, 33}, Shape{1, 1}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + act + " " + shape_str(s));
        expect_same([&](const TensorList& x) { return gated_activation(x[0], x[1], act); },
                    [&](const TensorList& x) { return gated_composite(x[0], x[1], act); },
                    {rnd(s, 60, dt, 2.0), rnd(s, 61, dt)}, tol_for(dt));
      }
}

TEST(DecoderOps, GatedActivationReadsHalvesOfOneProjection) {
  // SwiGLU/GeGLU on a fused (R, 2I) projection: a and b are its column halves
  for (const char* act : {"silu", "gelu", "gelu_tanh"}) {
    SCOPED_TRACE(act);
    const std::string a = act;
    expect_same([&](const TensorList& x) { return gated_activation(narrow(x[0], -1, 0, 9), narrow(x[0], -1, 9, 9), a); },
                [&](const TensorList& x) { return gated_composite(narrow(x[0], -1, 0, 9), narrow(x[0], -1, 9, 9), a); },
                {rnd({2, 3, 18}, 62, DType::Float32, 2.0)}, tol_for(DType::Float32));
    // a transposed a against a contiguous b
    expect_same([&](const TensorList& x) { return gated_activation(x[0].transpose(0, 1), x[1], a); },
                [&](const TensorList& x) { return gated_composite(x[0].transpose(0, 1), x[1], a); },
                {rnd({5, 4}, 63, DType::Float32, 2.0), rnd({4, 5}, 64)}, tol_for(DType::Float32));
  }
}

TEST(DecoderOps, GatedActivationAliasesAndEmpty) {
  const Tensor a = rnd({4, 6}, 65, DType::Float32, 2.0), b = rnd({4, 6}, 66);
  EXPECT_TRUE(bitwise_equal(gated_activation(a, b, "swish"), gated_activation(a, b, "silu")));
  EXPECT_TRUE(bitwise_equal(gated_activation(a, b, "gelu_pytorch_tanh"), gated_activation(a, b, "gelu_tanh")));
  EXPECT_TRUE(bitwise_equal(gated_activation(a, b, "gelu_new"), gated_activation(a, b, "gelu_tanh")));
  EXPECT_TRUE(bitwise_equal(gated_activation(a, b, "gelu_fast"), gated_activation(a, b, "gelu_tanh")));
  EXPECT_TRUE(bitwise_equal(gated_activation(a, b, "gelu_python"), gated_activation(a, b, "gelu")));
  EXPECT_EQ(gated_activation_names().size(), 8u);
  for (const std::string& n : gated_activation_names()) {
    const std::string& c = gated_activation_canonical(n);
    EXPECT_TRUE(c == "silu" || c == "gelu" || c == "gelu_tanh") << n << " -> " << c;
  }
  EXPECT_KILN_ERROR(gated_activation_canonical("relu"), "unknown activation 'relu'");
  EXPECT_FALSE(bitwise_equal(gated_activation(a, b, "gelu"), gated_activation(a, b, "gelu_tanh")));
  Tensor e = rnd({0, 6}, 67).requires_grad_(), f = rnd({0, 6}, 68).requires_grad_();
  Tensor y = gated_activation(e, f, "silu");
  EXPECT_EQ(y.sizes(), Shape({0, 6}));
  sum(y).backward();
  EXPECT_EQ(e.grad().sizes(), Shape({0, 6}));
  EXPECT_EQ(f.grad().sizes(), Shape({0, 6}));
}

TEST(DecoderOps, GatedActivationRejectsBadArguments) {
  const Tensor a = rnd({3, 4}, 70);
  EXPECT_KILN_ERROR(gated_activation(a, a, "relu"), "gated_activation", "unknown activation 'relu'", "silu", "gelu",
                    "gelu_tanh", "gelu_pytorch_tanh");
  EXPECT_KILN_ERROR(gated_activation(a, rnd({4, 3}, 71), "silu"), "gated_activation", "[3, 4]", "[4, 3]");
  EXPECT_KILN_ERROR(gated_activation(a, rnd({3, 4}, 72, DType::Float64), "silu"), "gated_activation", "dtypes differ",
                    "float64");
  EXPECT_KILN_ERROR(gated_activation(tensor_from({1, 2}, {2}), tensor_from({1, 2}, {2}), "gelu"), "gated_activation",
                    "floating-point");
}

// ---- determinism --------------------------------------------------------------------------

TEST(DecoderOps, SameBitsOnAnyThreadCount) {
  const auto tab = tables(64, 32, DType::Float32, 80);  // not a structured binding: clang 14 cannot capture one
  const Tensor &cs = tab.first, &sn = tab.second;
  const std::vector<std::pair<testing::Fn, TensorList>> cases = {
      {[](const TensorList& x) { return rms_norm(x[0], x[1], 1e-6); }, {rnd({300, 768}, 81), rnd({768}, 82)}},
      {[&](const TensorList& x) { return rotary_embedding(x[0], cs, sn, 8); }, {rnd({4, 64, 256}, 83)}},
      {[](const TensorList& x) { return gated_activation(x[0], x[1], "silu"); }, {rnd({300, 1000}, 84), rnd({300, 1000}, 85)}},
      {[](const TensorList& x) { return gated_activation(x[0], x[1], "gelu"); }, {rnd({300, 1000}, 86), rnd({300, 1000}, 87)}},
  };
  testing::ThreadCountGuard guard;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    set_num_threads(1);
    const GradResult one = run_with_grads(cases[i].first, cases[i].second);
    set_num_threads(2);
    const GradResult two = run_with_grads(cases[i].first, cases[i].second);
    expect_bitwise(one, two);
  }
}

}  // namespace
}  // namespace kiln
