// LoRA adapters and frozen parameters (nn/lora.h, nn/freeze.h): the adapted
// layer's gradients in float64, which layers are selected, what is frozen
// (no gradient, no optimizer state), merge/unmerge, PEFT's names and files
// both ways inside kiln, and one clear error for each bad adapter.
// Parity with PEFT itself: test_lora_peft.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln.h"
#include "nn/models/gpt2.h"
#include "nn/name_pattern.h"
#include "test_util.h"
#include "tiny_models.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::bitwise_equal;
namespace fs = std::filesystem;

BertConfig tiny_bert() { return testing::tiny_bert_config(); }

nn::LoraConfig lora(std::vector<std::string> targets, int64_t r = 4) {
  nn::LoraConfig c;
  c.r = r;
  c.lora_alpha = 8;
  c.target_modules = std::move(targets);
  c.task_type = "SEQ_CLS";
  return c;
}

Tensor ids_of(int64_t B, int64_t T, uint64_t seed) {
  manual_seed(seed);
  return randint(0, 50, {B, T});
}

// B random (a fresh adapter's B is zero, which would hide the term).
void randomize_adapters(nn::Module& m, uint64_t seed) {
  manual_seed(seed);
  NoGradGuard g;
  for (auto& [name, l] : nn::adapted_layers(m)) l->adapter->B->weight.copy_(randn(l->adapter->B->weight.sizes()) * 0.3);
}

Tensor logits_of(const nn::BertForSequenceClassification& m, const Tensor& ids) {
  NoGradGuard g;
  return m.forward(ids).logits;
}

// Central differences in float64 on every element of `leaf`, for f = sum(y * v).
void expect_gradient_matches(const std::function<Tensor()>& f, Tensor leaf, const char* what) {
  SCOPED_TRACE(what);
  Tensor y = f();
  Tensor v = randn(y.sizes(), TensorOptions(DType::Float64));
  leaf.zero_grad();
  sum(mul(y, v)).backward();
  ASSERT_TRUE(leaf.grad().defined());
  const std::vector<double> analytic = leaf.grad().to_vector<double>();
  double* p = static_cast<double*>(leaf.raw_data());
  for (int64_t j = 0; j < leaf.numel(); ++j) {
    const double orig = p[j];
    NoGradGuard g;
    p[j] = orig + 1e-6;
    const double fp = sum(mul(f(), v)).item<double>();
    p[j] = orig - 1e-6;
    const double fm = sum(mul(f(), v)).item<double>();
    p[j] = orig;
    const double numeric = (fp - fm) / 2e-6;
    EXPECT_NEAR(analytic[static_cast<size_t>(j)], numeric, 1e-5 + 1e-3 * std::abs(numeric)) << "element " << j;
  }
}

TEST(Lora, AdaptedLinearGradcheckFloat64) {
  manual_seed(3);
  // query, value of a module tree as a user would build it
  struct Net : nn::Module {
    Net() {
      proj = register_module("proj", std::make_shared<nn::Linear>(5, 3));
      to(DType::Float64);
    }
    std::shared_ptr<nn::Linear> proj;
  } net;
  nn::LoraConfig c = lora({"proj"}, 2);
  c.bias = "lora_only";
  c.lora_dropout = 0.0;
  ASSERT_EQ(nn::add_lora(net, c), std::vector<std::string>{"proj"});
  randomize_adapters(net, 4);
  Tensor x = randn({4, 5}, TensorOptions(DType::Float64)).set_requires_grad(true);
  auto f = [&] { return net.proj->forward(x); };
  EXPECT_FALSE(net.proj->weight.requires_grad());  // frozen by add_lora
  EXPECT_TRUE(net.proj->bias.requires_grad());     // lora_only
  expect_gradient_matches(f, x, "x");
  expect_gradient_matches(f, net.proj->adapter->A->weight, "lora_A");
  expect_gradient_matches(f, net.proj->adapter->B->weight, "lora_B");
  expect_gradient_matches(f, net.proj->bias, "bias");
  expect_gradient_matches([&] { return net.proj->forward_gelu(x, "tanh"); }, net.proj->adapter->A->weight, "gelu");
  // the term: y = x W^T + b + scale x A^T B^T, scale = alpha / r
  NoGradGuard g;
  const nn::LoraAdapter& a = *net.proj->adapter;
  Tensor want = add(linear(x, net.proj->weight, net.proj->bias),
                    mul(matmul(matmul(x, a.A->weight.t()), a.B->weight.t()), 8.0 / 2.0));
  EXPECT_TRUE(all_close(f(), want, 1e-12));
}

TEST(Lora, RsLoraScalesByTheRootOfTheRank) {
  nn::LoraConfig c = lora({"query"}, 16);
  EXPECT_DOUBLE_EQ(c.scaling(), 0.5);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
}

TEST(Lora, SelectsLayersAsPeftAndFreezesTheRest) {
  manual_seed(1);
  nn::BertForSequenceClassification m(tiny_bert(), 3);
  const Tensor ids = ids_of(2, 7, 2);
  const Tensor before = logits_of(m, ids);
  const std::vector<std::string> layers = nn::add_lora(m, lora({"query", "value"}));
  EXPECT_EQ(layers, (std::vector<std::string>{"bert.encoder.layer.0.attention.self.query",
                                              "bert.encoder.layer.0.attention.self.value",
                                              "bert.encoder.layer.1.attention.self.query",
                                              "bert.encoder.layer.1.attention.self.value"}));
  // B starts at zero: the adapted model computes what the base did
  EXPECT_TRUE(bitwise_equal(logits_of(m, ids), before));
  std::set<std::string> trainable;
  for (auto& [n, p] : nn::trainable_parameters(m)) trainable.insert(n);
  std::set<std::string> want{"classifier.weight", "classifier.bias"};  // SEQ_CLS: the head is a module to save
  for (const std::string& l : layers) {
    want.insert(l + ".lora_A.weight");
    want.insert(l + ".lora_B.weight");
  }
  EXPECT_EQ(trainable, want);
  // shapes: A (r, in), B (out, r); A as torch.nn.Linear initialises, within 1/sqrt(in)
  const nn::LoraAdapter& a = *m.bert->encoder->layer->items[0]->attention->self->query->adapter;
  EXPECT_EQ(a.A->weight.sizes(), (Shape{4, 16}));
  EXPECT_EQ(a.B->weight.sizes(), (Shape{16, 4}));
  EXPECT_LE(amax(abs(a.A->weight)).item<double>(), 0.25);
  EXPECT_GT(amax(abs(a.A->weight)).item<double>(), 0.0);
  // the regex form and all-linear
  nn::BertForSequenceClassification m2(tiny_bert(), 3);
  nn::LoraConfig rx = lora({});
  rx.target_regex = R"(.*layer\.1\.(attention\.self\.key|output\.dense))";
  EXPECT_EQ(nn::add_lora(m2, rx), (std::vector<std::string>{"bert.encoder.layer.1.attention.self.key",
                                                            "bert.encoder.layer.1.output.dense"}));
  nn::BertForSequenceClassification m3(tiny_bert(), 3);
  const std::vector<std::string> all = nn::add_lora(m3, lora({"all-linear"}));
  EXPECT_EQ(all.size(), 2u * 6u + 1u);  // q k v, attention output, intermediate, output per layer; the pooler
  EXPECT_EQ(std::count(all.begin(), all.end(), "classifier"), 0);
}

TEST(Lora, FrozenParametersGetNoGradientAndNoOptimizerState) {
  manual_seed(5);
  nn::BertForSequenceClassification m(tiny_bert(), 2);
  nn::add_lora(m, lora({"query", "value"}));
  randomize_adapters(m, 6);
  m.to(kiln::Device());  // to() keeps requires_grad
  EXPECT_FALSE(m.bert->embeddings->word_embeddings->weight.requires_grad());
  optim::AdamW opt(optim::param_groups_no_decay(m, 0.01), optim::AdamWOptions{.lr = 1e-2});
  const Tensor ids = ids_of(2, 6, 7);
  const Tensor labels = to_dtype(tensor({0.0, 1.0}), DType::Int64);
  m.forward(ids, Tensor(), Tensor(), labels).loss.backward();
  for (auto& [n, p] : m.named_parameters()) {
    const bool trains = n.find("lora_") != std::string::npos || n.rfind("classifier.", 0) == 0;
    EXPECT_EQ(p.grad().defined(), trains) << n;
  }
  const Tensor frozen_before = m.bert->encoder->layer->items[0]->attention->self->query->weight.clone();
  opt.step();
  size_t states = 0;
  for (auto& [k, v] : opt.state_dict())
    if (k.rfind("state.", 0) == 0 && k.find(".exp_avg_sq") != std::string::npos) ++states;
  EXPECT_EQ(states, 4u * 2u + 2u);  // A and B of four layers, the head's weight and bias
  EXPECT_TRUE(bitwise_equal(m.bert->encoder->layer->items[0]->attention->self->query->weight, frozen_before));
  // --freeze's function: a pattern that finds nothing is an error, not a no-op
  nn::BertForSequenceClassification f(tiny_bert(), 2);
  EXPECT_EQ(nn::freeze(f, {"^bert\\.embeddings\\."}).size(), 5u);
  EXPECT_FALSE(f.bert->embeddings->norm->weight.requires_grad());
  EXPECT_TRUE(f.bert->encoder->layer->items[0]->output->dense->weight.requires_grad());
  EXPECT_KILN_ERROR(nn::freeze(f, {"embedings"}, "--freeze"), "--freeze", "embedings", "matches no parameter");
  EXPECT_KILN_ERROR(nn::freeze(f, {"(unclosed"}, "--freeze"), "--freeze", "does not compile");
  nn::freeze(f, {"."});
  EXPECT_KILN_ERROR(optim::param_groups_no_decay(f, 0.0), "every parameter of the model is frozen");
}

// Adapters under --gradient-checkpointing: the layers' inputs need no
// gradient (frozen embeddings), yet the adapters train, bit for bit as without.
TEST(Lora, GradientCheckpointingGivesTheSameAdapterGradients) {
  std::vector<std::vector<double>> grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    manual_seed(21);
    BertConfig c = tiny_bert();
    c.hidden_dropout_prob = 0.1;
    nn::BertForSequenceClassification m(c, 2);
    nn::LoraConfig lc = lora({"query", "value"});
    lc.lora_dropout = 0.1;
    nn::add_lora(m, lc);
    randomize_adapters(m, 22);
    m.train();
    m.set_gradient_checkpointing(ckpt == 1);
    manual_seed(23);
    m.forward(ids_of(2, 6, 24), Tensor(), Tensor(), to_dtype(tensor({0.0, 1.0}), DType::Int64)).loss.backward();
    for (auto& [n, p] : nn::trainable_parameters(m)) {
      ASSERT_TRUE(p.grad().defined()) << n << (ckpt ? " with" : " without") << " checkpointing";
      grads[ckpt].push_back(p.grad().to_vector<double>());
    }
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(Lora, MergeMatchesAndUnmergeRestoresBitForBit) {
  manual_seed(8);
  nn::BertForSequenceClassification m(tiny_bert(), 2);
  m.eval();
  nn::add_lora(m, lora({"query", "key", "intermediate.dense"}));
  randomize_adapters(m, 9);
  const Tensor ids = ids_of(3, 5, 10);
  const Tensor w = m.bert->encoder->layer->items[1]->intermediate->dense->weight.clone();
  const Tensor adapted = logits_of(m, ids);
  nn::merge_adapters(m);
  EXPECT_FALSE(bitwise_equal(m.bert->encoder->layer->items[1]->intermediate->dense->weight, w));
  EXPECT_TRUE(all_close(logits_of(m, ids), adapted, 1e-5));
  nn::unmerge_adapters(m);
  EXPECT_TRUE(bitwise_equal(m.bert->encoder->layer->items[1]->intermediate->dense->weight, w));
  EXPECT_TRUE(bitwise_equal(logits_of(m, ids), adapted));
  nn::merge_and_unload(m);
  EXPECT_TRUE(nn::adapted_layers(m).empty());
  for (auto& [n, t] : m.state_dict()) EXPECT_EQ(n.find("lora_"), std::string::npos) << n;
  EXPECT_TRUE(all_close(logits_of(m, ids), adapted, 1e-5));
}

TEST(Lora, Gpt2Conv1DAdapterMergesTransposed) {
  GPT2Config c;
  c.vocab_size = 40;
  c.n_positions = 16;
  c.n_embd = 16;
  c.n_layer = 1;
  c.n_head = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.bos_token_id = c.eos_token_id = 39;
  manual_seed(12);
  nn::GPT2LMHeadModel m(c);
  m.eval();
  nn::LoraConfig lc = lora({"c_attn", "c_fc"});
  lc.task_type = "CAUSAL_LM";
  EXPECT_EQ(nn::add_lora(m, lc).size(), 2u);
  randomize_adapters(m, 13);
  const Tensor ids = randint(0, 40, {2, 6});
  NoGradGuard g;
  const Tensor adapted = m.forward(ids).logits;
  nn::merge_and_unload(m);
  EXPECT_TRUE(all_close(m.forward(ids).logits, adapted, 1e-5));
}

TEST(Lora, AdapterFilesRoundTripWithPeftNames) {
  const fs::path dir = testing::fresh_dir("lora", "roundtrip");
  manual_seed(14);
  nn::BertForSequenceClassification base(tiny_bert(), 2);
  const nn::NamedTensors base_state = base.state_dict();
  nn::LoraConfig c = lora({"query", "value"});
  c.bias = "all";
  c.use_rslora = true;
  nn::add_lora(base, c);
  randomize_adapters(base, 15);
  nn::save_adapter(base, c, dir.string());
  const std::map<std::string, Tensor> file = nn::load_safetensors((dir / "adapter_model.safetensors").string());
  EXPECT_TRUE(file.count("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight"));
  EXPECT_TRUE(file.count("base_model.model.bert.encoder.layer.1.attention.self.value.lora_B.weight"));
  EXPECT_TRUE(file.count("base_model.model.bert.encoder.layer.0.attention.self.query.base_layer.bias"));
  EXPECT_TRUE(file.count("base_model.model.bert.encoder.layer.0.attention.self.key.bias"));
  EXPECT_TRUE(file.count("base_model.model.classifier.weight"));
  EXPECT_FALSE(file.count("base_model.model.bert.encoder.layer.0.attention.self.query.weight"));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "adapter_config.json"));
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["use_rslora"], true);
  EXPECT_EQ(j["task_type"], "SEQ_CLS");
  // onto the same base weights: the same model
  nn::BertForSequenceClassification other(tiny_bert(), 2);
  std::map<std::string, Tensor> s(base_state.begin(), base_state.end());
  other.load_state_dict(s);
  const nn::LoraConfig read = nn::load_adapter(other, dir.string());
  EXPECT_EQ(read.r, 4);
  EXPECT_TRUE(read.use_rslora);
  EXPECT_EQ(read.bias, "all");
  const Tensor ids = ids_of(2, 8, 16);
  EXPECT_TRUE(bitwise_equal(logits_of(other, ids), logits_of(base, ids)));
}

// A PEFT classifier adapter has no config.json: its head's rows give the labels.
TEST(Lora, PeftClassifierAdapterNamesItsTaskModel) {
  const fs::path dir = testing::fresh_dir("lora", "task");
  manual_seed(18);
  nn::BertForSequenceClassification m(tiny_bert(), 3);
  nn::add_lora(m, lora({"query"}));
  nn::save_adapter(m, lora({"query"}), dir.string());
  const ModelConfig base(tiny_bert());
  const ModelConfig task = nn::adapter_task_config(base, dir.string());
  EXPECT_EQ(task.architectures(), std::vector<std::string>{"BertForSequenceClassification"});
  EXPECT_EQ(task.id2label(), (std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"}));
  nn::LoraConfig plain = lora({"query"});
  plain.task_type = "";
  nn::save_adapter(m, plain, (dir / "plain").string());
  EXPECT_EQ(nn::adapter_task_config(base, (dir / "plain").string()).architectures(), base.architectures());
}

TEST(Lora, BadAdaptersAreOneClearErrorAndChangeNothing) {
  const fs::path root = testing::fresh_dir("lora", "bad");
  manual_seed(17);
  nn::BertForSequenceClassification m(tiny_bert(), 2);
  EXPECT_KILN_ERROR(nn::add_lora(m, lora({"qkv"})), "target module 'qkv' is not in the model");
  EXPECT_KILN_ERROR(nn::add_lora(m, lora({"LayerNorm"})), "'bert.embeddings.LayerNorm' is not a linear layer");
  EXPECT_KILN_ERROR(nn::add_lora(m, lora({"query"}, 0)), "r = 0 must be a positive integer");
  EXPECT_KILN_ERROR(nn::add_lora(m, lora({"query"}, 17)), "LoRA r = 17 exceeds the size of layer");
  nn::LoraConfig bias = lora({"query"});
  bias.bias = "some";
  EXPECT_KILN_ERROR(nn::add_lora(m, bias), "bias 'some'");
  EXPECT_TRUE(nn::adapted_layers(m).empty());
  for (auto& [n, p] : m.named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;

  auto config_with = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = lora({"query", "value"}).to_json();
    edit(j);
    const fs::path d = root / name;
    fs::create_directories(d);
    std::ofstream(d / "adapter_config.json") << j.dump();
    return d;
  };
  EXPECT_KILN_ERROR(nn::LoraConfig::from_file((config_with("ia3", [](auto& j) { j["peft_type"] = "IA3"; }) /
                                               "adapter_config.json").string()),
                    "peft_type 'IA3' is not supported");
  EXPECT_KILN_ERROR(nn::LoraConfig::from_file((config_with("dora", [](auto& j) { j["use_dora"] = true; }) /
                                               "adapter_config.json").string()),
                    "'use_dora' = true is not supported");
  EXPECT_KILN_ERROR(nn::LoraConfig::from_file((config_with("pissa", [](auto& j) { j["init_lora_weights"] = "pissa"; }) /
                                               "adapter_config.json").string()),
                    "init_lora_weights 'pissa'");
  EXPECT_KILN_ERROR(nn::LoraConfig::from_file((config_with("rank", [](auto& j) { j["r"] = -2; }) /
                                               "adapter_config.json").string()),
                    "r = -2");
  // an adapter of a wider model: shapes named, the model untouched
  BertConfig wide = tiny_bert();
  wide.hidden_size = 32;
  nn::BertForSequenceClassification w(wide, 2);
  nn::add_lora(w, lora({"query", "value"}));
  nn::save_adapter(w, lora({"query", "value"}), (root / "wide").string());
  EXPECT_KILN_ERROR(nn::load_adapter(m, (root / "wide").string()), "does not fit this model", "shapes differ",
                    "query.lora_A.weight (adapter [4, 32], model [4, 16])");
  EXPECT_TRUE(nn::adapted_layers(m).empty());
  // an adapter of other layer names (a decoder's)
  nn::LoraConfig other = lora({"q_proj"});
  const fs::path odir = config_with("other", [&](auto& j) { j = other.to_json(); });
  nn::save_safetensors((odir / "adapter_model.safetensors").string(), {{"base_model.model.x.lora_A.weight", zeros({1})}});
  EXPECT_KILN_ERROR(nn::load_adapter(m, odir.string()), "target module 'q_proj' is not in the model");
  EXPECT_KILN_ERROR(nn::load_adapter(m, (root / "none").string()), "no such directory");
  EXPECT_TRUE(nn::adapted_layers(m).empty());
}

TEST(Lora, NamePatternsMatchAsPythonRe) {
  const nn::NamePattern p(R"(.*\.(query|value))", "test");
  EXPECT_TRUE(p.full_match("bert.encoder.layer.0.attention.self.query"));
  EXPECT_FALSE(p.full_match("bert.encoder.layer.0.attention.self.query.lora_A"));
  EXPECT_TRUE(p.search("a.value.b"));
  const nn::NamePattern alt("query|key", "test");  // fullmatch of an alternation: either whole
  EXPECT_TRUE(alt.full_match("key"));
  EXPECT_FALSE(alt.full_match("querykey"));
}

}  // namespace
}  // namespace kiln
