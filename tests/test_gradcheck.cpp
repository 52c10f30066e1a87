// Registry-wide gradient check: every differentiable op in the registry, in
// float64, by central differences (eps 1e-6, atol 1e-5, rtol 1e-3 unless a
// sample states otherwise), on contiguous, transposed-strided and
// sliced-strided copies of every sample input.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/record.h"
#include "kiln.h"
#include "ops/internal.h"
#include "ops/op_registry.h"

namespace kiln {
namespace {

enum class Layout { Contiguous, Transposed, Sliced };
const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "sliced";
}

// A leaf with the same values as x whose memory layout is `layout`.
Tensor with_layout(const Tensor& x, Layout layout) {
  NoGradGuard ng;
  if (layout == Layout::Contiguous || x.dim() == 0) return x.clone().detach();
  if (layout == Layout::Transposed && x.dim() >= 2) {
    Shape s = x.sizes();
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    Tensor base = zeros(s, TensorOptions(x.dtype()));
    Tensor v = base.transpose(-1, -2);
    v.copy_(x);
    return v.detach();
  }
  Shape s = x.sizes();
  s.back() *= 2;
  Tensor base = full(s, 7.0, TensorOptions(x.dtype()));
  Tensor v = base.slice(-1, 0, s.back(), 2);
  v.copy_(x);
  return v.detach();
}

// Address of logical element `flat` of a strided float64 tensor.
double* element(const Tensor& t, int64_t flat) {
  double* base = static_cast<double*>(t.storage()->data()) + t.offset();
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.size(d)) * t.stride(d);
    flat /= t.size(d);
  }
  return base + off;
}

double projected(const OpSample& s, const TensorList& in, const Tensor& v) {
  NoGradGuard ng;
  return sum(mul(s.fn(in), v)).item<double>();
}

void check_sample(const OpInfo& op, const OpSample& s, Layout layout) {
  SCOPED_TRACE(op.name + " / " + s.desc + " / " + layout_name(layout));
  TensorList in;
  for (const Tensor& x : s.inputs) {
    if (!is_floating(x.dtype())) { in.push_back(x); continue; }
    ASSERT_EQ(x.dtype(), DType::Float64) << "gradcheck samples must be float64";
    Tensor leaf = with_layout(x, layout);
    leaf.set_requires_grad(true);
    in.push_back(leaf);
  }
  Tensor y = s.fn(in);
  ASSERT_TRUE(y.requires_grad()) << "output does not require grad";
  Tensor v = detail::sample_tensor(y.sizes(), 999, -1.0, 1.0);
  sum(mul(y, v)).backward();
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].requires_grad()) continue;
    // No gradient means zero (e.g. an input that only feeds a condition).
    const Tensor g = in[i].grad().defined() ? in[i].grad() : zeros_like(in[i]);
    ASSERT_EQ(g.sizes(), in[i].sizes()) << "input " << i;
    const std::vector<double> analytic = g.to_vector<double>();
    for (int64_t j = 0; j < in[i].numel(); ++j) {
      double* p = element(in[i], j);
      const double orig = *p;
      *p = orig + s.eps;
      const double fp = projected(s, in, v);
      *p = orig - s.eps;
      const double fm = projected(s, in, v);
      *p = orig;
      const double numeric = (fp - fm) / (2 * s.eps);
      const double a = analytic[static_cast<size_t>(j)];
      EXPECT_LE(std::abs(a - numeric), s.atol + s.rtol * std::abs(numeric))
          << "input " << i << " element " << j << ": analytic " << a << " numeric " << numeric;
    }
  }
}

TEST(GradCheck, EveryRegisteredOp) {
  ASSERT_GT(op_registry().size(), 40u);
  for (const OpInfo& op : op_registry()) {
    const std::vector<OpSample> samples = op.samples();
    EXPECT_FALSE(samples.empty()) << "op '" << op.name << "' is registered without samples";
    for (const OpSample& s : samples) {
      if (!op.differentiable) {
        TensorList in;
        for (const Tensor& x : s.inputs) {
          Tensor leaf = x.clone().detach();
          if (is_floating(leaf.dtype())) leaf.set_requires_grad(true);
          in.push_back(leaf);
        }
        Tensor y = s.fn(in);
        EXPECT_FALSE(y.requires_grad()) << op.name << " is not differentiable but its output requires grad";
        EXPECT_THROW(y.backward(ones_like(y)), Error) << op.name;
        continue;
      }
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) check_sample(op, s, l);
    }
  }
}

// Every name an op recorded while the samples ran must be a registered op, so
// a new differentiable op cannot skip the gradient check.
TEST(GradCheck, RecordedOpsAreRegistered) {
  for (const OpInfo& op : op_registry())
    for (const OpSample& s : op.samples()) {
      TensorList in;
      for (const Tensor& x : s.inputs) {
        Tensor leaf = x.clone().detach();
        if (is_floating(leaf.dtype())) leaf.set_requires_grad(true);
        in.push_back(leaf);
      }
      s.fn(in);
    }
  for (const std::string& name : recorded_op_names())
    EXPECT_NE(find_op(name), nullptr) << "op '" << name << "' records autograd history but is not in the registry";
}

}  // namespace
}  // namespace kiln
