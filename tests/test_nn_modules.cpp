// nn/ modules as a user writes with them: containers (nn/containers.h), the
// m(x) call convention (Note [Module call], nn/module.h), and layer defaults
// that are PyTorch's while BERT keeps its own initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "nn/models/bert.h"
#include "nn/containers.h"
#include "nn/layers.h"
#include "optim/sgd.h"
#include "test_util.h"
#include "tiny_models.h"

namespace kiln {
namespace {
using testing::bitwise_equal;

double mean_of(const Tensor& t) { return mean(t).item<double>(); }
double var_of(const Tensor& t) { return var(t).item<double>(); }

TEST(NnModules, SequentialRunsItsModulesInOrderWithTorchNames) {
  manual_seed(3);
  nn::Sequential mlp;
  auto fc1 = mlp.push_back(std::make_shared<nn::Linear>(6, 12));
  mlp.push_back(std::make_shared<nn::GELU>("tanh"));
  auto fc2 = mlp.push_back(std::make_shared<nn::Linear>(12, 6));
  EXPECT_EQ(mlp.size(), 3u);
  std::vector<std::string> names;
  for (const auto& [name, t] : mlp.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));

  const Tensor x = randn({2, 5, 6});
  const Tensor want = fc2->forward(gelu(fc1->forward(x), "tanh"));
  EXPECT_TRUE(bitwise_equal(mlp.forward(x), want));
  EXPECT_TRUE(bitwise_equal(mlp(x), want));
  nn::Sequential empty;
  EXPECT_TRUE(bitwise_equal(empty(x), x));
  EXPECT_KILN_ERROR(mlp.push_back(std::shared_ptr<nn::ReLU>()), "Sequential::push_back: null module");
}

TEST(NnModules, ModuleListIndexesAndIterates) {
  nn::ModuleList<nn::Linear> list;
  for (int i = 0; i < 3; ++i) list.push_back(std::make_shared<nn::Linear>(4, 4));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_FALSE(list.empty());
  size_t n = 0;
  for (const auto& m : list) EXPECT_EQ(m.get(), list[n++].get());
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(list.named_parameters()[2].first, "1.weight");
  EXPECT_KILN_ERROR(list[3], "ModuleList: index 3 out of range for 3 modules");
}

TEST(NnModules, ModulesAreCalledLikeForward) {
  manual_seed(5);
  nn::Linear lin(3, 2);
  nn::LayerNorm norm(3);
  nn::Embedding emb(10, 3);
  const Tensor x = randn({4, 3});
  const Tensor ids = tensor_from({1, 2, 9}, {3});
  EXPECT_TRUE(bitwise_equal(lin(x), lin.forward(x)));
  EXPECT_TRUE(bitwise_equal(norm(x), norm.forward(x)));
  EXPECT_TRUE(bitwise_equal(emb(ids), emb.forward(ids)));
  // BERT's modules too, with their own arguments and defaults.
  nn::BertModel bert(BertConfig::preset("bert-tiny"));
  bert.eval();
  const Tensor tokens = tensor_from({2, 7, 9, 3}, {1, 4});
  EXPECT_TRUE(bitwise_equal(bert(tokens).last_hidden_state, bert.forward(tokens).last_hidden_state));
}

// torch.nn's defaults: Linear U(-1/sqrt(in), 1/sqrt(in)) for weight and bias,
// Embedding N(0, 1), LayerNorm eps 1e-5; checked by bound and moments.
TEST(NnModules, LayerDefaultsArePyTorchs) {
  manual_seed(11);
  const int64_t in = 64, out = 512;
  nn::Linear lin(in, out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  EXPECT_LE(amax(abs(lin.weight)).item<double>(), bound);
  EXPECT_LE(amax(abs(lin.bias)).item<double>(), bound);
  EXPECT_NEAR(mean_of(lin.weight), 0.0, 0.002);
  EXPECT_NEAR(var_of(lin.weight), bound * bound / 3.0, 0.05 * bound * bound / 3.0);  // U(-b, b): b^2 / 3
  EXPECT_GT(var_of(lin.bias), 0.5 * bound * bound / 3.0);  // not zero as BERT's
  nn::Embedding emb(1000, 32, 0);
  EXPECT_NEAR(var_of(emb.weight.slice(0, 1, 1000)), 1.0, 0.03);
  EXPECT_EQ(amax(abs(emb.weight.select(0, 0))).item<double>(), 0.0);
  EXPECT_EQ(nn::LayerNorm(8).eps, 1e-5);
  EXPECT_EQ(nn::Dropout().p, 0.5);
  EXPECT_KILN_ERROR(nn::Dropout(1.5), "Dropout: probability must be in [0, 1], got 1.5");
  EXPECT_KILN_ERROR(nn::GELU("fast"), "GELU: approximate must be \"none\" or \"tanh\", got \"fast\"");
  EXPECT_KILN_ERROR(nn::LayerNorm(8, 0.0), "LayerNorm: eps must be positive and finite");
}

// BERT makes its own choices in nn/bert.cpp: N(0, initializer_range) weights,
// zero biases, its config's layer_norm_eps.
TEST(NnModules, BertKeepsItsOwnInitialisation) {
  manual_seed(13);
  BertConfig c = BertConfig::preset("bert-mini");
  nn::BertModel bert(c);
  for (const auto& [name, p] : bert.named_parameters()) {
    SCOPED_TRACE(name);
    if (name.find("LayerNorm.weight") != std::string::npos) {
      EXPECT_EQ(mean_of(p), 1.0);
    } else if (p.dim() == 1) {
      EXPECT_EQ(amax(abs(p)).item<double>(), 0.0);
    } else if (p.numel() >= 10000) {
      EXPECT_NEAR(std::sqrt(var_of(p)), c.initializer_range, 0.05 * c.initializer_range);
    }
  }
  EXPECT_EQ(bert.embeddings->norm->eps, c.layer_norm_eps);
}

// Note [Fused projection weights]: the kept concatenation is the layers'
// weights of this moment, whatever changed them, and grad still flows.
TEST(NnModules, FusedProjectionKeepsItsWeightsOnlyWhileTheyAreUnchanged) {
  manual_seed(4);
  nn::Linear a(8, 4), b(8, 6);
  nn::FusedWeights kept;
  const Tensor x = randn({2, 3, 8});
  auto separate = [&] { return cat({a.forward(x), b.forward(x)}, -1); };  // (2, 3, 10)
  auto fused = [&] { return nn::fused_projection(x, {&a, &b}, &kept); };
  {
    NoGradGuard g;
    EXPECT_TRUE(testing::all_close(fused(), separate(), 1e-6));
    const auto w1 = kept.get({&a, &b}).first, w2 = kept.get({&a, &b}).first;
    EXPECT_EQ(w1.impl_ptr(), w2.impl_ptr()) << "no grad, no change: one concatenation kept";
    b.weight.mul_(2.0);  // in place
    EXPECT_TRUE(testing::all_close(fused(), separate(), 1e-6));
    a.bias.add_(ones({4}));
    EXPECT_TRUE(testing::all_close(fused(), separate(), 1e-6));
    a.load_state_dict({{"weight", randn({4, 8})}, {"bias", randn({4})}});
    EXPECT_TRUE(testing::all_close(fused(), separate(), 1e-6));
    a.weight = randn({4, 8});  // the member replaced
    a.weight.set_requires_grad(true);
    EXPECT_TRUE(testing::all_close(fused(), separate(), 1e-6));
  }
  // With grad recorded: an op of the graph, the gradient reaches each layer.
  Tensor y = fused();
  sum(y * y).backward();
  ASSERT_TRUE(a.weight.grad().defined() && b.bias.grad().defined());
  const Tensor ga = a.weight.grad().clone(), gb = b.bias.grad().clone();
  a.weight.zero_grad();
  b.bias.zero_grad();
  Tensor z = separate();
  sum(z * z).backward();
  EXPECT_TRUE(testing::all_close(ga, a.weight.grad(), 1e-5));
  EXPECT_TRUE(testing::all_close(gb, b.bias.grad(), 1e-5));
}

// A BERT model evaluated between optimizer steps sees each step's weights.
TEST(NnModules, BertNoGradForwardFollowsTheOptimizer) {
  manual_seed(5);
  nn::BertModel m(testing::tiny_bert_config(), false);
  m.eval();
  const Tensor ids = randint(0, m.config.vocab_size, {2, 5});
  const Tensor mask = ones({2, 5}, TensorOptions(DType::Int64));
  auto no_grad_out = [&] {
    NoGradGuard g;
    return m.forward(ids, mask).last_hidden_state;
  };
  const Tensor before = no_grad_out();
  optim::SGDOptions so;
  so.lr = 0.5;
  optim::SGD opt(m.parameters(), so);
  Tensor h = m.forward(ids, mask).last_hidden_state;
  EXPECT_TRUE(bitwise_equal(h.detach(), before));
  sum(h * h).backward();
  opt.step();
  const Tensor after = no_grad_out();
  const Tensor with_grad = m.forward(ids, mask).last_hidden_state.detach();
  EXPECT_TRUE(bitwise_equal(after, with_grad));
  EXPECT_FALSE(bitwise_equal(after, before));
}

}  // namespace
}  // namespace kiln
