// OpScope (Note [Op observers], core/op_scope.h): every public op reports its
// name, inputs, attributes, outputs and nesting depth to a thread's observer.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>

#include "kiln.h"
#include "ops/fused.h"
#include "ops/op_registry.h"

namespace kiln {
namespace {

// Collects what ops report on this thread while alive.
struct Collector : OpObserver {
  struct Seen {
    std::string name;
    int depth;
    std::vector<Shape> in, out;
    std::vector<std::string> attrs;
    const TensorImpl* out0 = nullptr;
  };
  std::vector<Seen> seen;
  OpObserver* prev;
  Collector() { prev = set_thread_op_observer(this); }
  ~Collector() override { set_thread_op_observer(prev); }
  void op_finished(const OpRecord& r) override {
    Seen s{r.name, r.depth, {}, {}, {}};
    for (const Tensor& t : r.inputs) s.in.push_back(t.defined() ? t.sizes() : Shape{-1});
    for (const Tensor& t : r.outputs) s.out.push_back(t.sizes());
    for (const OpAttr& a : r.attrs) s.attrs.push_back(a.name);
    if (!r.outputs.empty()) s.out0 = &r.outputs[0].impl();
    seen.push_back(std::move(s));
  }
  std::set<std::string> top_names() const {
    std::set<std::string> n;
    for (const Seen& s : seen)
      if (s.depth == 0) n.insert(s.name);
    return n;
  }
};

// The names a registry entry's samples must show at depth 0 (an entry that
// covers several functions lists them).
std::set<std::string> expected_names(const std::string& registry_name) {
  if (registry_name == "compare") return {"eq", "ne", "lt", "le", "gt", "ge"};
  if (registry_name == "gelu_tanh") return {"gelu"};
  return {registry_name};
}

TEST(OpScope, EveryRegisteredOpReportsItselfAtDepthZero) {
  for (const OpInfo& op : op_registry()) {
    SCOPED_TRACE(op.name);
    std::set<std::string> seen;
    for (const OpSample& s : op.samples()) {
      Collector c;
      Tensor out;
      {
        NoGradGuard ng;
        out = s.fn(s.inputs);
      }
      for (const auto& sn : c.seen) {
        if (sn.depth != 0) continue;
        seen.insert(sn.name);
        EXPECT_FALSE(sn.out.empty()) << sn.name << " reported no outputs";
      }
    }
    bool any = false;
    for (const std::string& n : expected_names(op.name)) any = any || seen.count(n);
    EXPECT_TRUE(any) << "no sample of '" << op.name << "' reported it to the op observer (saw " << seen.size()
                     << " other names): does the op open an OpScope under its own name?";
  }
}

TEST(OpScope, RecordsInputsAttributesOutputsAndDepth) {
  Tensor x = randn({2, 3, 4}), w = randn({5, 4});
  Collector c;
  Tensor y = linear(x, w, Tensor());
  Tensor s = softmax(y, -1);
  ASSERT_FALSE(c.seen.empty());
  // linear's parts report first (they finish first), nested one deeper.
  const auto& lin = c.seen[c.seen.size() - 2];
  EXPECT_EQ(lin.name, "linear");
  EXPECT_EQ(lin.depth, 0);
  ASSERT_EQ(lin.in.size(), 3u);
  EXPECT_EQ(lin.in[0], (Shape{2, 3, 4}));
  EXPECT_EQ(lin.in[2], (Shape{-1}));  // the absent bias keeps its slot
  EXPECT_EQ(lin.out0, &y.impl());
  bool nested_matmul = false;
  for (size_t i = 0; i + 2 < c.seen.size(); ++i) nested_matmul |= c.seen[i].name == "matmul" && c.seen[i].depth >= 1;
  EXPECT_TRUE(nested_matmul);
  const auto& sm = c.seen.back();
  EXPECT_EQ(sm.name, "softmax");
  EXPECT_EQ(sm.attrs, (std::vector<std::string>{"dim"}));
  EXPECT_EQ(sm.out0, &s.impl());
}

TEST(OpScope, AttributeValuesAndOptionals) {
  struct Last : OpObserver {
    OpRecord rec;
    void op_finished(const OpRecord& r) override {
      if (r.depth == 0) rec = r;
    }
  } last;
  OpObserver* prev = set_thread_op_observer(&last);
  Tensor x = randn({2, 3});
  clamp(x, 0.5, std::nullopt);
  EXPECT_EQ(std::string(last.rec.name), "clamp");
  ASSERT_NE(last.rec.attr("min"), nullptr);
  EXPECT_EQ(std::get<double>(*last.rec.attr("min")), 0.5);
  EXPECT_EQ(last.rec.attr("max"), nullptr);  // absent optional: no attribute
  x.view({3, 2});
  EXPECT_EQ(std::string(last.rec.name), "view");
  EXPECT_EQ(std::get<std::vector<int64_t>>(*last.rec.attr("shape")), (Shape{3, 2}));
  to_dtype(x, DType::Float64);
  EXPECT_EQ(std::get<int64_t>(*last.rec.attr("dtype")), static_cast<int64_t>(DType::Float64));
  gelu(x, "tanh");
  EXPECT_EQ(std::get<std::string>(*last.rec.attr("approximate")), "tanh");
  // A scalar overload reports the tensor op with a 0-dim constant operand.
  mul(x, 2.0);
  EXPECT_EQ(std::string(last.rec.name), "mul");
  ASSERT_EQ(last.rec.inputs.size(), 2u);
  EXPECT_EQ(last.rec.inputs[1].dim(), 0);
  EXPECT_EQ(last.rec.inputs[1].item<double>(), 2.0);
  EXPECT_EQ(set_thread_op_observer(prev), &last);
}

TEST(OpScope, AThrowingOpIsNotReportedAndDepthRecovers) {
  Tensor a = randn({2, 3}), b = randn({4, 5});
  Collector c;
  EXPECT_THROW(matmul(a, b), Error);
  for (const auto& s : c.seen) EXPECT_NE(s.name, "matmul");
  c.seen.clear();
  relu(a);
  ASSERT_EQ(c.seen.size(), 1u);
  EXPECT_EQ(c.seen[0].depth, 0);
}

TEST(OpScope, ObserversArePerThread) {
  Collector c;
  std::thread t([] { relu(randn({3})); });
  t.join();
  EXPECT_TRUE(c.seen.empty());
  {
    Collector inner;  // replaces c on this thread until it goes
    exp(randn({2}));
    EXPECT_EQ(inner.top_names(), (std::set<std::string>{"randn", "exp"}));
  }
  EXPECT_TRUE(c.seen.empty());
  neg(randn({2}));
  EXPECT_EQ(c.top_names(), (std::set<std::string>{"randn", "neg"}));
}

TEST(OpScope, FusedAttentionReportsItsArguments) {
  Tensor qkv = randn({2, 5, 12});
  Collector c;
  multi_head_attention_qkv(qkv, 2);
  ASSERT_FALSE(c.seen.empty());
  const auto& s = c.seen.back();
  EXPECT_EQ(s.name, "multi_head_attention_qkv");
  EXPECT_EQ(s.depth, 0);
  EXPECT_EQ(s.in.size(), 2u);
  EXPECT_EQ(s.attrs, (std::vector<std::string>{"heads", "p", "training", "causal"}));
  EXPECT_EQ(s.out[0], (Shape{2, 5, 4}));
}

}  // namespace
}  // namespace kiln
