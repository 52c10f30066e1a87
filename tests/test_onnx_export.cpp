// ONNX export (export/, docs/onnx.md): the dynamic-size solver, the tracer,
// the op table against the op registry, and exported models run in ONNX
// Runtime (tests/reference/onnx_run.py) against kiln's own forward at batch
// sizes and sequence lengths other than the traced ones, with padding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "export/bert_export.h"
#include "export/tracer.h"
#include "ops/decoder_ops.h"
#include "ops/op_registry.h"
#include "test_util.h"
#include "train/task_util.h"
#include "train/tasks.h"
#include "train/trainer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using namespace kiln::onnx_export;
using kiln::testing::fresh_dir;
using kiln::testing::quoted;

// ---- the pieces -----------------------------------------------------------------

TEST(OnnxExport, SolvesSizesAsAxisExpressions) {
  // Two axes (batch, sequence) at the three traces' sizes.
  const std::vector<std::vector<int64_t>> sizes = {{2, 7}, {3, 11}, {5, 13}};
  auto solve = [&](std::vector<int64_t> v) {
    DimExpr e;
    EXPECT_TRUE(solve_dim(v, sizes, e)) << v[0] << " " << v[1] << " " << v[2];
    return e;
  };
  DimExpr e = solve({7, 11, 13});  // sequence
  EXPECT_EQ(e.c, 1);
  EXPECT_EQ(e.d, 0);
  EXPECT_EQ(e.exps, (std::vector<int>{0, 1}));
  e = solve({14, 33, 65});  // batch * sequence
  EXPECT_EQ(e.exps, (std::vector<int>{1, 1}));
  EXPECT_EQ(e.value({4, 9}), 36);
  e = solve({6, 10, 12});  // sequence - 1
  EXPECT_EQ(e.exps, (std::vector<int>{0, 1}));
  EXPECT_EQ(e.d, -1);
  e = solve({768, 1152, 1920});  // 384 * batch
  EXPECT_EQ(e.c, 384);
  EXPECT_EQ(e.exps, (std::vector<int>{1, 0}));
  e = solve({64, 64, 64});
  EXPECT_TRUE(e.is_static());
  EXPECT_EQ(e.value({100, 100}), 64);
  DimExpr none;
  EXPECT_FALSE(solve_dim({2, 5, 3}, sizes, none));  // no small expression fits
}

TEST(OnnxExport, TracerKeepsUserOpsAndNamesParameters) {
  Tensor w = ones({3, 2}), x = ones({4, 3}), k = scalar_tensor(2.0);
  Tracer tr({{"layer.weight", w}});
  tr.add_input("x", x);
  Tensor y = zeros({4, 2}), z = zeros({4, 2}), inner = zeros({4, 2});
  OpRecord r;
  r.name = "matmul";
  r.inputs = {x, w};
  r.outputs = {y};
  tr.op_finished(r);
  OpRecord nested;  // an op another op called: not a node
  nested.name = "mul";
  nested.depth = 1;
  nested.inputs = {y, y};
  nested.outputs = {inner};
  tr.op_finished(nested);
  OpRecord m;
  m.name = "mul";
  m.inputs = {y, k};
  m.outputs = {z};
  tr.op_finished(m);
  tr.add_output(z, "z");
  EXPECT_KILN_ERROR(tr.add_output(inner, "inner"), "output 'inner' was not made by a traced op");
  const Graph g = tr.take();
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, "matmul");
  EXPECT_EQ(g.nodes[1].op, "mul");
  const Value& param = g.values[static_cast<size_t>(g.nodes[0].inputs[1])];
  EXPECT_EQ(param.kind, ValueKind::Parameter);
  EXPECT_EQ(param.name, "layer.weight");
  EXPECT_EQ(g.values[static_cast<size_t>(g.nodes[0].inputs[0])].kind, ValueKind::Input);
  EXPECT_EQ(g.nodes[1].inputs[0], g.nodes[0].outputs[0]);
  const Value& cst = g.values[static_cast<size_t>(g.nodes[1].inputs[1])];
  EXPECT_EQ(cst.kind, ValueKind::Constant);
  EXPECT_EQ(cst.data.item<double>(), 2.0);
  EXPECT_EQ(g.outputs, std::vector<int>{g.nodes[1].outputs[0]});
}

// Every op the registry lists has an exporter or a reason it has none.
TEST(OnnxExport, EveryRegisteredOpIsExportableOrRefusedWithAReason) {
  const std::vector<std::string> table = exportable_ops();
  const std::map<std::string, std::string> refused = unexportable_ops();
  auto in_table = [&](const std::string& n) { return std::find(table.begin(), table.end(), n) != table.end(); };
  ASSERT_GT(op_registry().size(), 50u);
  for (const OpInfo& op : op_registry()) {
    if (in_table(op.name) || refused.count(op.name)) continue;
    const auto alias = registry_aliases().find(op.name);
    ASSERT_NE(alias, registry_aliases().end()) << "op '" << op.name << "' has no ONNX exporter and is not in "
                                               << "unexportable_ops (export/onnx_ops.cpp)";
    for (const std::string& n : alias->second) EXPECT_TRUE(in_table(n)) << op.name << " -> " << n;
  }
  for (const auto& [name, why] : refused) {
    EXPECT_FALSE(in_table(name)) << name << " is both exported and refused";
    EXPECT_GT(why.size(), 20u) << name << ": the reason should say why";
  }
}

// ---- models in ONNX Runtime ---------------------------------------------------------

// The reference interpreter with onnxruntime, or "" (the test skips) when
// KILN_PYTHON is unset and the default .venv does not exist.
std::string ort_python() {
  const std::string py = kiln::testing::python();
  if (!std::getenv("KILN_PYTHON") && !fs::exists(py)) return "";
  return py;
}
#define REQUIRE_ORT()                                                                   \
  const std::string py = ort_python();                                                  \
  if (py.empty()) GTEST_SKIP() << "KILN_PYTHON unset and no .venv: ONNX Runtime needed"

// Runs `model` in ONNX Runtime on each input set; the outputs by name, per set.
std::vector<std::map<std::string, Tensor>> run_ort(const std::string& py, const fs::path& model,
                                                   const std::vector<std::string>& input_names,
                                                   const std::vector<std::vector<Tensor>>& sets) {
  nn::NamedTensors in;
  for (size_t s = 0; s < sets.size(); ++s)
    for (size_t i = 0; i < input_names.size(); ++i) in.emplace_back(std::to_string(s) + "." + input_names[i], sets[s][i]);
  const fs::path dir = model.parent_path();
  nn::save_safetensors((dir / "ort_in.safetensors").string(), in);
  const auto [rc, out] = kiln::testing::run_command(
      py + " " + quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/onnx_run.py") + " " + quoted(model.string()) +
      " " + quoted((dir / "ort_in.safetensors").string()) + " " + quoted((dir / "ort_out.safetensors").string()));
  EXPECT_EQ(rc, 0) << out;
  std::vector<std::map<std::string, Tensor>> res(sets.size());
  if (rc != 0) return res;
  for (auto& [key, t] : nn::load_safetensors((dir / "ort_out.safetensors").string())) {
    const size_t dot = key.find('.');
    res[std::stoul(key.substr(0, dot))][key.substr(dot + 1)] = t;
  }
  return res;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return 1e9;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Exports `spec`, then checks ONNX Runtime against spec.forward on inputs at
// each of `shapes` (axis sizes), all outputs within `tol` max-abs.
void expect_matches_ort(const std::string& py, const ExportSpec& spec, const fs::path& path,
                        const std::vector<AxisSizes>& shapes, const ExportOptions& opts = {}, double tol = 1e-4) {
  fs::create_directories(path.parent_path());
  const ExportReport r = export_onnx(spec, path.string(), opts);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));  // written beside it, then renamed
  EXPECT_GT(r.nodes, 0);
  EXPECT_GT(r.initializers, 0);
  std::vector<std::vector<Tensor>> sets;
  std::vector<std::vector<Tensor>> want;
  for (const AxisSizes& s : shapes) {
    sets.push_back(spec.example_inputs(s));
    NoGradGuard no_grad;
    want.push_back(spec.forward(sets.back()));
  }
  std::vector<std::string> names;
  for (const InputSpec& i : spec.inputs) names.push_back(i.name);
  const auto got = run_ort(py, path, names, sets);
  for (size_t s = 0; s < shapes.size(); ++s) {
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      const auto it = got[s].find(spec.outputs[o]);
      ASSERT_NE(it, got[s].end()) << spec.outputs[o];
      const Tensor w = want[s][o].to(DType::Float32);
      // Outputs near zero would make any tolerance meaningless.
      EXPECT_GT(amax(abs(w)).item<float>(), 100 * tol) << spec.outputs[o] << " is near zero";
      const double d = max_abs_diff(it->second, w);
      std::string at;
      for (const auto& [axis, n] : shapes[s]) at += " " + axis + "=" + std::to_string(n);
      EXPECT_LE(d, tol) << spec.outputs[o] << " at" << at;
      std::printf("  %s at%s: max |ort - kiln| = %.3g\n", spec.outputs[o].c_str(), at.c_str(), d);
    }
  }
}

// Shapes unlike the traced ones (2/3/5 x 7/11/13): batch 1, long and short sequences.
const std::vector<AxisSizes> kBertShapes = {
    {{"batch", 1}, {"sequence", 5}}, {{"batch", 4}, {"sequence", 16}}, {{"batch", 6}, {"sequence", 33}}};

TEST(OnnxExport, MiniLmMatchesOnnxRuntime) {
  REQUIRE_ORT();
  std::string task = "embed";
  auto model = load_bert_for_export(kiln::testing::minilm_dir(), task);
  const ExportSpec spec = bert_export_spec(*model, task);
  const fs::path dir = fresh_dir("onnx", "minilm");
  // Rows 1.. of each batch are padded (bert_inputs: attention_mask zeros at the end).
  const Tensor mask = spec.example_inputs(kBertShapes[1])[1];
  EXPECT_LT(mask.sum().item<int64_t>(), 4 * 16);
  expect_matches_ort(py, spec, dir / "minilm.onnx", kBertShapes);
  EXPECT_FALSE(fs::exists(dir / "minilm.onnx.data"));
  // sentence_embedding L2-normalised, as kiln embed --normalize.
  expect_matches_ort(py, bert_export_spec(*model, task, /*normalize=*/true), dir / "minilm-normalized.onnx",
                     {kBertShapes[1]});
  fs::remove_all(dir);
}

// Masked LM: the decoder shares the word embeddings (one initializer under its first name).
TEST(OnnxExport, MaskedLmMatchesOnnxRuntime) {
  REQUIRE_ORT();
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = 200;
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.15;  // logits of order 1
  manual_seed(11);
  nn::BertForMaskedLM m(c);
  m.eval();
  const fs::path dir = fresh_dir("onnx", "mlm");
  expect_matches_ort(py, bert_export_spec(m, "masked-lm"), dir / "mlm.onnx", kBertShapes);
  fs::remove_all(dir);
}

// A small random BERT classifier saved as kiln finetune saves one, loaded as `kiln export` loads it.
std::string save_random_classifier(const fs::path& dir, const std::string& task) {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = 120;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.3;  // logits of order 1 (at 0.02 they are tiny and any tolerance is loose)
  manual_seed(7);
  const std::vector<std::string> labels{"neg", "neu", "pos"};
  if (task == "sequence-classification") {
    auto m = std::make_shared<nn::BertForSequenceClassification>(c, 3);
    train::set_label_maps(c, "BertForSequenceClassification", labels);
    nn::save_pretrained(*m, c, dir.string());
  } else {
    auto m = std::make_shared<nn::BertForTokenClassification>(c, 3);
    train::set_label_maps(c, "BertForTokenClassification", labels);
    nn::save_pretrained(*m, c, dir.string());
  }
  return dir.string();
}

TEST(OnnxExport, FineTunedClassifiersMatchOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "classifiers");
  for (const std::string kind : {"sequence-classification", "token-classification"}) {
    SCOPED_TRACE(kind);
    std::string task;  // from config.json, as `kiln export` without --task
    auto model = load_bert_for_export(save_random_classifier(root / kind, kind), task);
    EXPECT_EQ(task, kind);
    const ExportSpec spec = bert_export_spec(*model, task);
    expect_matches_ort(py, spec, root / (kind + ".onnx"), kBertShapes);
    // Opset 14: LayerNormalization decomposed.
    ExportOptions o14;
    o14.opset = 14;
    expect_matches_ort(py, spec, root / (kind + "-14.onnx"), kBertShapes, o14);
  }
  fs::remove_all(root);
}

// RoBERTa-family models (padding-offset positions: a cumulative sum over the
// mask of non-padding ids) export through the same task interfaces, and ONNX
// Runtime gives kiln's outputs with padded rows.
TEST(OnnxExport, RobertaFamilyMatchesOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "roberta");
  BertConfig c = BertConfig::preset("bert-tiny");
  c.model_type = "xlm-roberta";
  c.vocab_size = 120;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.max_position_embeddings = 66;
  c.type_vocab_size = 1;
  c.pad_token_id = 1;
  c.initializer_range = 0.3;
  manual_seed(9);
  c.architectures = {"XLMRobertaForSequenceClassification"};
  auto clf = nn::AutoModelForSequenceClassification::from_config(c, 3);
  train::set_label_maps(c, "XLMRobertaForSequenceClassification", {"neg", "neu", "pos"});
  nn::save_pretrained(*clf, c, (root / "clf").string());
  std::string task;
  auto model = load_bert_for_export((root / "clf").string(), task);
  EXPECT_EQ(task, "sequence-classification");
  const Tensor ids = bert_export_spec(*model, task).example_inputs(kBertShapes[1])[0];
  EXPECT_GT(sum(eq(ids, 1.0)).item<int64_t>(), 0);  // rows padded with <pad> = 1
  expect_matches_ort(py, bert_export_spec(*model, task), root / "clf.onnx", kBertShapes);
  std::string embed = "embed";
  auto base = load_bert_for_export((root / "clf").string(), embed);  // the encoder of the same directory
  expect_matches_ort(py, bert_export_spec(*base, embed), root / "embed.onnx", kBertShapes);
  fs::remove_all(root);
}

// Saves `model` with `mc` as `dir`, loads it back for export as `kiln export
// --model dir [--task task]` would ("" = the task the directory names, which
// must be `want_task`), and checks the exported graph against ONNX Runtime.
void expect_saved_model_matches_ort(const std::string& py, const nn::Module& model, const ModelConfig& mc,
                                    const fs::path& dir, std::string task, const std::string& want_task) {
  nn::save_pretrained(model, mc, dir.string());
  auto loaded = load_bert_for_export(dir.string(), task);
  EXPECT_EQ(task, want_task);
  expect_matches_ort(py, bert_export_spec(*loaded, task), dir.string() + ".onnx", kBertShapes);
}

// DistilBERT: no token types (the exported graph's token_type_ids input is
// unused), no pooler; its token classifier and masked-LM head match ONNX Runtime.
TEST(OnnxExport, DistilBertFamilyMatchesOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "distilbert");
  DistilBertConfig c;
  c.vocab_size = 120;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.hidden_dim = 128;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.3;
  manual_seed(10);
  ModelConfig mc = ModelConfig::from_json_string(c.to_json_string());
  auto ner = nn::AutoModelForTokenClassification::from_config(mc, 3);
  train::set_label_maps(mc, "DistilBertForTokenClassification", {"O", "B-PER", "I-PER"});
  expect_saved_model_matches_ort(py, *ner, mc, root / "ner", "", "token-classification");
  auto mlm = nn::AutoModelForMaskedLM::from_config(mc);
  expect_saved_model_matches_ort(py, *mlm, mc, root / "mlm", "masked-lm", "masked-lm");
  fs::remove_all(root);
}

// GPT-2: its causal-LM head (the default for a GPT2LMHeadModel directory)
// and its base model's embeddings match ONNX Runtime, padding included.
TEST(OnnxExport, Gpt2FamilyMatchesOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "gpt2");
  GPT2Config c;
  c.vocab_size = 120;
  c.n_positions = 64;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.initializer_range = 0.3;
  c.bos_token_id = c.eos_token_id = 119;
  manual_seed(11);
  const ModelConfig mc = ModelConfig::from_json_string(c.to_json_string());
  auto lm = nn::AutoModelForCausalLM::from_config(mc);
  nn::save_pretrained(*lm, mc, (root / "lm").string());
  std::string task;
  auto model = load_bert_for_export((root / "lm").string(), task);
  EXPECT_EQ(task, "causal-lm");
  expect_matches_ort(py, bert_export_spec(*model, task), root / "lm.onnx", kBertShapes);
  std::string embed = "embed";
  auto base = load_bert_for_export((root / "lm").string(), embed);
  expect_matches_ort(py, bert_export_spec(*base, embed), root / "embed.onnx", kBertShapes);
  fs::remove_all(root);
}

// ModernBERT: rotary tables (one constant per theta, rows sliced to the
// sequence), the local layers' window mask built from the sequence length
// at run time, GeGLU; its mean-pooled classifier and masked-LM head match
// ONNX Runtime with padding.
TEST(OnnxExport, ModernBertFamilyMatchesOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "modernbert");
  ModernBertConfig c;
  c.vocab_size = 120;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.max_position_embeddings = 64;
  c.global_attn_every_n_layers = 2;
  c.local_attention = 4;
  c.initializer_range = 0.3;
  c.classifier_pooling = "mean";
  c.norm_bias = true;
  c.pad_token_id = 0;
  c.bos_token_id = c.cls_token_id = 1;
  c.eos_token_id = c.sep_token_id = 2;
  manual_seed(12);
  ModelConfig mc = ModelConfig::from_json_string(c.to_json_string());
  auto clf = nn::AutoModelForSequenceClassification::from_config(mc, 3);
  train::set_label_maps(mc, "ModernBertForSequenceClassification", {"a", "b", "c"});
  expect_saved_model_matches_ort(py, *clf, mc, root / "clf", "", "sequence-classification");
  auto mlm = nn::AutoModelForMaskedLM::from_config(mc);
  expect_saved_model_matches_ort(py, *mlm, mc, root / "mlm", "masked-lm", "masked-lm");
  fs::remove_all(root);
}

// A classifier kiln really fine-tuned (all-MiniLM-L6-v2 on SST-2 sentences,
// through train::train as `kiln finetune` runs it): its output directory
// exports as `kiln export --model DIR` would, and ONNX Runtime gives kiln's
// logits.
TEST(OnnxExport, MiniLmFineTunedOnSst2MatchesOnnxRuntime) {
  REQUIRE_ORT();
  const fs::path root = fresh_dir("onnx", "finetuned");
  fs::create_directories(root);
  std::ifstream in(kiln::testing::data_file("sst2/train.tsv"));
  std::ofstream head(root / "train.tsv");
  std::string line;
  for (int i = 0; i < 49 && std::getline(in, line); ++i) head << line << "\n";  // header + 48 sentences
  head.close();
  train::TrainingArguments a;
  a.model = kiln::testing::minilm_dir();
  a.output_dir = (root / "out").string();
  a.train_file = (root / "train.tsv").string();
  a.max_seq_length = 32;
  a.batch_size = 16;
  a.lr = 1e-4;
  a.epochs = 1;
  a.save_steps = 0;
  std::ostringstream log;
  auto task = train::make_finetune_task(a, log);
  const train::TrainResult r = train::train(a, *task, log);
  ASSERT_TRUE(r.finished) << log.str();
  ASSERT_EQ(r.step, 3) << log.str();  // 48 sentences in batches of 16
  std::string kind;  // from the saved config.json
  auto model = load_bert_for_export(a.output_dir, kind);
  EXPECT_EQ(kind, "sequence-classification");
  expect_matches_ort(py, bert_export_spec(*model, kind), root / "sst2.onnx", kBertShapes);
  fs::remove_all(root);
}

// A model written against the public API, not BERT: (B, T, 8) -> per-token
// probabilities and a pooled (B, 4) vector, through Linear, layer_norm, gelu
// (both forms), softmax, views with dynamic sizes, transpose, matmul, slicing.
class TinyMixer : public nn::Module {
 public:
  explicit TinyMixer(int64_t width = 16) : width(width) {
    a = register_module("a", std::make_shared<nn::Linear>(8, width));
    b = register_module("b", std::make_shared<nn::Linear>(width, 4));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(width));
  }
  std::vector<Tensor> forward(const Tensor& x) const {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor h = gelu(norm->forward(a->forward(x)));                       // (B, T, width)
    Tensor mix = softmax(matmul(h, h.transpose(1, 2)) * 0.25, -1);      // (B, T, T)
    h = add(matmul(mix, h), gelu(h, "tanh"));
    Tensor flat = h.reshape({B * T, width});                             // a size the tracer must solve
    Tensor y = b->forward(flat).view({B, T, 4});
    Tensor first = slice(y, 1, 0, T - 1);                                // end T - 1
    Tensor pooled = div(sum(first, {1}), static_cast<double>(1));
    return {softmax(y, -1), tanh(pooled)};
  }
  int64_t width;
  std::shared_ptr<nn::Linear> a, b;
  std::shared_ptr<nn::LayerNorm> norm;
};

// The spec docs/onnx.md shows (tools/check_snippets.py keeps the two equal).
ExportSpec mixer_spec(const TinyMixer& model) {
  // [export-spec]
  ExportSpec spec;
  spec.module = &model;  // names the initializers after its parameters and buffers
  spec.inputs = {{"x", {{0, "batch"}, {1, "tokens"}}}};  // dimension -> dynamic axis
  spec.outputs = {"probs", "pooled"};
  spec.example_inputs = [](const AxisSizes& s) {  // inputs for one trace at these sizes
    return std::vector<Tensor>{randn({s.at("batch"), s.at("tokens"), 8})};
  };
  spec.forward = [&model](const std::vector<Tensor>& in) { return model.forward(in[0]); };
  // [export-spec]
  return spec;
}

const std::vector<AxisSizes> kMixerShapes = {{{"batch", 1}, {"tokens", 4}}, {{"batch", 4}, {"tokens", 9}},
                                             {{"batch", 7}, {"tokens", 2}}};

TEST(OnnxExport, ModelOnThePublicApiMatchesOnnxRuntime) {
  REQUIRE_ORT();
  manual_seed(3);
  TinyMixer m;
  m.eval();
  const fs::path dir = fresh_dir("onnx", "mixer");
  expect_matches_ort(py, mixer_spec(m), dir / "mixer.onnx", kMixerShapes);
  fs::remove_all(dir);
}

TEST(OnnxExport, ExternalDataLoadsInOnnxRuntime) {
  REQUIRE_ORT();
  manual_seed(4);
  TinyMixer m(64);
  m.eval();
  const fs::path dir = fresh_dir("onnx", "external");
  ExportOptions o;
  o.force_external_data = true;
  expect_matches_ort(py, mixer_spec(m), dir / "mixer.onnx", kMixerShapes, o);
  // The weights of 1 KiB or more (a.weight 64 x 8 and b.weight 4 x 64 floats) are in the side file.
  ASSERT_TRUE(fs::exists(dir / "mixer.onnx.data"));
  EXPECT_GE(fs::file_size(dir / "mixer.onnx.data"), (64u * 8 + 4 * 64) * 4);
  const std::string onnx_bytes = kiln::testing::read_bytes(dir / "mixer.onnx");
  EXPECT_NE(onnx_bytes.find("mixer.onnx.data"), std::string::npos);
  // Unforced, the weights go outside once their bytes pass the threshold (2 GiB by default).
  ExportOptions small;
  small.external_data_threshold = 1000;
  EXPECT_TRUE(export_onnx(mixer_spec(m), (dir / "auto.onnx").string(), small).external_data);
  EXPECT_TRUE(fs::exists(dir / "auto.onnx.data"));
  EXPECT_FALSE(export_onnx(mixer_spec(m), (dir / "inline.onnx").string()).external_data);
  EXPECT_FALSE(fs::exists(dir / "inline.onnx.data"));
  fs::remove_all(dir);
}

// Most of the op table on one (B, T, 6) input, every output compared: the
// exporters BERT and TinyMixer do not reach. Integer and bool results are
// cast to float so they are compared too.
std::vector<Tensor> op_zoo(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  auto f = [](const Tensor& t) { return to_dtype(t, DType::Float32); };
  std::vector<Tensor> out;
  Tensor pos = add(abs(x), 0.5);
  out.push_back(add(rsqrt(pos), log(pos)));                                      // rsqrt, log, abs
  out.push_back(add(pow(pos, 1.5), pow(pos, x)));                                // pow (scalar and tensor)
  out.push_back(sub(maximum(x, neg(x)), minimum(exp(x), sigmoid(x)), 0.5));     // sub's alpha
  out.push_back(clamp(tanh(x), -0.5, 0.75));
  out.push_back(f(add(add(gt(x, 0.1), le(x, -0.2)), ne(x, x.transpose(1, 2).transpose(1, 2)))));
  out.push_back(where(lt(x, 0.0), erf(x), relu(x)));
  out.push_back(masked_fill(x, ge(x, 0.3), -2.0));
  out.push_back(f(logical_not(eq(sqrt(pos), sqrt(pos)))) + 1.0);
  out.push_back(var(x, {2}, 1, true) + mean(x, {1}, false).unsqueeze(1));       // var, mean, unsqueeze
  out.push_back(amax(x, {1, 2}) + amin(x, {2}).sum({1}) + sum(x, {1, 2}));       // dims, sum over two
  out.push_back(f(argmax(x, 2, false)) + max(x, 1).values.sum({1}).unsqueeze(1) + f(max(x, 1).indices.sum({1}).unsqueeze(1)));
  out.push_back(log_softmax(x, 1) + softmax(x, 2, DType::Float32));
  out.push_back(scaled_masked_softmax(x.narrow(2, 0, 4), 0.5));                  // narrow
  Tensor y = x.permute({0, 2, 1});                                               // (B, 6, T)
  out.push_back(matmul(y, x));                                                   // (B, 6, 6)
  out.push_back(cat({x, x.slice(1, 1, T, 2).contiguous().sum({1}, true).expand({B, T, 6})}, 2));  // slice step, expand
  out.push_back(stack({x.select(1, 0), x.select(1, -1), x.select(2, 3).unsqueeze(2).expand({B, T, 6}).select(1, 1)}, 1));
  const std::vector<Tensor> parts = split(x, std::vector<int64_t>{2, 4}, 2);
  const std::vector<Tensor> halves = chunk(x, 3, 2);
  out.push_back(mul(parts[1].narrow(2, 0, 2), halves[0]) + halves[2]);
  Tensor idx = arange(0.0, 6.0, 2.0, TensorOptions(DType::Int64));               // (3)
  out.push_back(index_select(x, 2, idx) + f(arange(static_cast<double>(T))).view({1, T, 1}));  // arange(T): dynamic end
  Tensor order = argmax(x, 2, true);                                             // (B, T, 1)
  out.push_back(gather(x, 2, order) + scatter_add(zeros_like(x), 2, order, ones_like(order).to(DType::Float32)));
  out.push_back(scatter(x, 2, order, 5.0));
  ValuesIndices top = topk(x, 2, 2, true, true);
  out.push_back(top.values + f(top.indices));
  out.push_back(cumsum(x, 1));
  Tensor sq = matmul(x, x.transpose(1, 2));                                      // (B, T, T)
  out.push_back(tril(sq, 0) + triu(sq, 1) * 0.5 + clamp(causal_mask(T).squeeze(0).squeeze(0), -1.0, std::nullopt));
  out.push_back(full({B, 2}, 3.0) + ones({2}) + zeros_like(x).sum({1, 2}).unsqueeze(1));  // full: dynamic shape
  out.push_back(x.reshape({B, -1}).view({B * T, 6}).flatten(0, 1).reshape({B, T, 6}) * 2.0 / 3.0);
  return out;
}

TEST(OnnxExport, OpTableMatchesOnnxRuntime) {
  REQUIRE_ORT();
  ExportSpec spec;
  spec.inputs = {{"x", {{0, "batch"}, {1, "tokens"}}}};
  const size_t n = op_zoo(randn({2, 3, 6})).size();
  for (size_t i = 0; i < n; ++i) spec.outputs.push_back("out" + std::to_string(i));
  spec.example_inputs = [](const AxisSizes& s) { return std::vector<Tensor>{randn({s.at("batch"), s.at("tokens"), 6})}; };
  spec.forward = [](const std::vector<Tensor>& in) { return op_zoo(in[0]); };
  const fs::path dir = fresh_dir("onnx", "zoo");
  manual_seed(5);
  expect_matches_ort(py, spec, dir / "zoo.onnx", kMixerShapes);
  // Causal multi-head attention on separate q, k, v (BERT uses the packed form).
  ExportSpec att;
  att.inputs = {{"q", {{0, "batch"}, {1, "tokens"}}}, {"kv", {{0, "batch"}, {1, "tokens"}}}};
  att.outputs = {"y"};
  att.example_inputs = [](const AxisSizes& s) {
    return std::vector<Tensor>{randn({s.at("batch"), s.at("tokens"), 8}), randn({s.at("batch"), s.at("tokens"), 8})};
  };
  att.forward = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{multi_head_attention(in[0], in[1], mul(in[1], 0.5), 2, Tensor(), 0.0, false, nullptr, true)};
  };
  expect_matches_ort(py, att, dir / "attention.onnx", kMixerShapes);
  fs::remove_all(dir);
}

// The decoder ops (ops/decoder_ops.h) lowered to standard ONNX ops: RMS norm
// with a weight, rotary embedding with (tokens, D) tables as inputs, and the
// three gated activations on the halves of one projection.
TEST(OnnxExport, DecoderOpsMatchOnnxRuntime) {
  REQUIRE_ORT();
  ExportSpec spec;
  spec.inputs = {{"x", {{0, "batch"}, {1, "tokens"}}}, {"cos", {{0, "tokens"}}}, {"sin", {{0, "tokens"}}}};
  spec.outputs = {"normed", "normed_plain", "rotated", "swiglu", "geglu", "geglu_tanh"};
  spec.example_inputs = [](const AxisSizes& s) {
    const int64_t T = s.at("tokens");
    return std::vector<Tensor>{randn({s.at("batch"), T, 8}), randn({T, 4}), randn({T, 4})};
  };
  manual_seed(6);
  const Tensor w = randn({8});
  spec.forward = [w](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const Tensor a = narrow(x, 2, 0, 4), b = narrow(x, 2, 4, 4);
    return std::vector<Tensor>{rms_norm(x, w, 1e-6), rms_norm(x, Tensor(), 1e-5), rotary_embedding(x, in[1], in[2], 2),
                               gated_activation(a, b, "silu"), gated_activation(a, b, "gelu"),
                               gated_activation(a, b, "gelu_pytorch_tanh")};
  };
  const fs::path dir = fresh_dir("onnx", "decoder_ops");
  expect_matches_ort(py, spec, dir / "decoder_ops.onnx", kMixerShapes);
  fs::remove_all(dir);
}

// ---- what cannot be exported ---------------------------------------------------

ExportSpec one_input_spec(std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fwd) {
  ExportSpec spec;
  spec.inputs = {{"x", {{0, "batch"}}}};
  spec.outputs = {"y"};
  spec.example_inputs = [](const AxisSizes& s) { return std::vector<Tensor>{randn({s.at("batch"), 5})}; };
  spec.forward = std::move(fwd);
  return spec;
}

TEST(OnnxExport, AnOpWithoutExporterIsAnErrorNamingIt) {
  const fs::path dir = fresh_dir("onnx", "refused");
  fs::create_directories(dir);
  const std::string path = (dir / "m.onnx").string();
  // Refused with a reason (export/onnx_ops.cpp).
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  return std::vector<Tensor>{add(sort(in[0], -1).values, 1.0)};
                                }),
                                path),
                    "op 'sort' cannot be exported", "stable order");
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  Tensor y = exp(in[0]);
                                  y.add_(in[0]);
                                  return std::vector<Tensor>{y};
                                }),
                                path),
                    "op 'add_' cannot be exported", "in-place");
  // An op nobody wrote an exporter for: opened here as any op opens its scope.
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  OpScope scope("frobnicate", in[0]);
                                  return std::vector<Tensor>{scope.out(mul(in[0], 2.0))};
                                }),
                                path),
                    "op 'frobnicate' has no ONNX exporter");
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(dir);
}

TEST(OnnxExport, ForwardsThatDependOnTheSizesAreRefused) {
  const std::string path = (fs::temp_directory_path() / "kiln_onnx_mismatch.onnx").string();
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  Tensor y = relu(in[0]);
                                  if (in[0].size(0) == 3) y = exp(y);  // an extra op in one trace
                                  return std::vector<Tensor>{y};
                                }),
                                path),
                    "traced forward graphs do not match");
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  // a size baked into a constant
                                  std::vector<double> v(static_cast<size_t>(in[0].size(0)), 1.0);
                                  return std::vector<Tensor>{mul(in[0], tensor(v, {in[0].size(0), 1}))};
                                }),
                                path),
                    "constant", "changes with the input sizes");
  // A strided slice of a dynamic axis (ceil(B / 2) rows) exports until something needs its size.
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) {
                                  return std::vector<Tensor>{in[0].slice(0, 0, in[0].size(0), 2).reshape({-1})};
                                }),
                                path),
                    "the shape of a result of op 'reshape'", "which op 'reshape' needs");
  ExportOptions o;
  o.opset = 11;
  EXPECT_KILN_ERROR(export_onnx(one_input_spec([](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(in[0])}; }),
                                path, o),
                    "opset 11 is not supported", "14 to 17");
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace kiln
