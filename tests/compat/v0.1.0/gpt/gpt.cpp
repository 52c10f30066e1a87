// Trains the small GPT of gpt_model.h on the bytes of a real text (WikiText-2),
// then samples from it: the tutorial's model (docs/tutorial.md), built against
// the installed package.
//
//   gpt TEXT_FILE [--steps N] [--device cpu|cuda] [--amp bf16] [--out DIR]
//
// The text's first 90% trains, the rest validates. It exits non-zero unless
// the validation loss ends at least 0.3 nats below the unigram baseline (the
// cross-entropy of the training bytes' frequencies on the validation bytes),
// the saved weights load back to the same logits, and cached generation gives
// the uncached tokens.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gpt_model.h"

using kiln::Tensor;
namespace nn = kiln::nn;
namespace optim = kiln::optim;

namespace {

struct Options {
  std::string text;
  int64_t steps = 300;
  std::string device = "cpu";
  std::string amp = "none";
  std::string out = "gpt-out";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw kiln::Error("gpt: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::stoll(value());
    else if (a == "--device") o.device = value();
    else if (a == "--amp") o.amp = value();
    else if (a == "--out") o.out = value();
    else if (!a.empty() && a[0] == '-') throw kiln::Error("gpt: unknown flag " + a);
    else o.text = a;
  }
  if (o.text.empty()) throw kiln::Error("usage: gpt TEXT_FILE [--steps N] [--device cpu|cuda] [--amp bf16] [--out DIR]");
  if (o.amp != "none" && o.amp != "bf16") throw kiln::Error("gpt: --amp takes none or bf16, got " + o.amp);
  return o;
}

std::vector<int64_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw kiln::Error("gpt: cannot read " + path);
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<int64_t> ids(s.size());
  for (size_t i = 0; i < s.size(); ++i) ids[i] = static_cast<unsigned char>(s[i]);
  return ids;
}

// Windows of T + 1 bytes starting at `starts`: inputs (B, T) and next-byte targets (B, T).
std::pair<Tensor, Tensor> batch(const std::vector<int64_t>& data, const std::vector<int64_t>& starts, int64_t T,
                                kiln::Device device) {
  std::vector<int64_t> x, y;
  for (int64_t s : starts)
    for (int64_t t = 0; t < T; ++t) {
      x.push_back(data[static_cast<size_t>(s + t)]);
      y.push_back(data[static_cast<size_t>(s + t + 1)]);
    }
  const int64_t B = static_cast<int64_t>(starts.size());
  return {kiln::tensor_from(x, {B, T}).to(device), kiln::tensor_from(y, {B, T}).to(device)};
}

// Mean next-byte cross-entropy of the model on disjoint windows of `data`.
double evaluate(const gpt::GPT& model, const std::vector<int64_t>& data, int64_t T, kiln::Device device) {
  kiln::NoGradGuard no_grad;
  double total = 0;
  int64_t windows = 0;
  for (int64_t s = 0; s + T + 1 <= static_cast<int64_t>(data.size()) && windows < 256; s += T, ++windows) {
    auto [x, y] = batch(data, {s}, T, device);
    total += kiln::cross_entropy(model(x).reshape({T, -1}), y.reshape({T})).item<double>();
  }
  return total / static_cast<double>(windows);
}

// Cross-entropy of the training bytes' frequencies (add-one) on `valid`.
double unigram_baseline(const std::vector<int64_t>& train, const std::vector<int64_t>& valid) {
  std::vector<double> count(256, 1.0);
  for (int64_t b : train) count[static_cast<size_t>(b)] += 1;
  const double total = static_cast<double>(train.size()) + 256;
  double ce = 0;
  for (int64_t b : valid) ce -= std::log(count[static_cast<size_t>(b)] / total);
  return ce / static_cast<double>(valid.size());
}

// Bit-identical tensors (same shape and values).
template <typename T>
bool same_values(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.to(kiln::kCPU).to_vector<T>() == b.to(kiln::kCPU).to_vector<T>();
}

std::string printable(const Tensor& ids) {
  std::string s;
  for (int64_t b : ids.to_vector<int64_t>()) s += (b == '\n' || (b >= 32 && b < 127)) ? static_cast<char>(b) : '?';
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const kiln::Device device = kiln::Device::parse(o.device);
  const std::vector<int64_t> text = read_bytes(o.text);
  const size_t split = text.size() * 9 / 10;
  const std::vector<int64_t> train(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(split));
  const std::vector<int64_t> valid(text.begin() + static_cast<std::ptrdiff_t>(split), text.end());

  // ---- the model and its optimizer ----
  kiln::manual_seed(1234);
  gpt::Config cfg;
  cfg.n_positions = 128;
  cfg.n_embd = 128;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  // [model]
  gpt::GPT model(cfg);
  model.to(device);
  // [model]
  std::printf("gpt: %lld parameters, %zu training bytes, %zu validation bytes\n",
              static_cast<long long>(model.num_parameters()), train.size(), valid.size());
  // [optimizer]
  optim::AdamWOptions adam;
  adam.lr = 3e-3;
  adam.weight_decay = 0.1;
  // No decay for biases and LayerNorm weights (1-D parameters), as GPT-2's recipe.
  optim::AdamW opt(optim::param_groups_no_decay(model, adam.weight_decay), adam);
  optim::Scheduler schedule(opt, optim::linear_schedule_with_warmup(o.steps / 10, o.steps));
  // [optimizer]

  // ---- training ----
  const int64_t B = 16, T = 64;
  kiln::Generator data_gen(7);
  for (int64_t step = 1; step <= o.steps; ++step) {
    const std::vector<int64_t> starts =
        kiln::randint(0, static_cast<int64_t>(train.size()) - T - 1, {B}, {}, &data_gen).to_vector<int64_t>();
    auto [x, y] = batch(train, starts, T, device);
    // [train-step]
    Tensor loss;
    {
      kiln::AutocastGuard autocast(kiln::DType::BFloat16, o.amp == "bf16");  // mixed precision when asked
      loss = kiln::cross_entropy(model(x).reshape({B * T, -1}), y.reshape({B * T}));
    }
    opt.zero_grad();
    loss.backward();
    const double norm = optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    schedule.step();
    // [train-step]
    if (step % 50 == 0 || step == 1)
      std::printf("step %4lld  loss %.4f  grad norm %.3f  lr %.2e\n", static_cast<long long>(step), loss.item<double>(),
                  norm, opt.lr(0));
  }

  // ---- validation against the unigram baseline ----
  model.eval();
  const double val = evaluate(model, valid, T, device), unigram = unigram_baseline(train, valid);
  std::printf("gpt: validation loss %.4f nats/byte, unigram baseline %.4f\n", val, unigram);
  bool ok = val < unigram - 0.3;

  // ---- save, load into a fresh model, same logits ----
  std::filesystem::create_directories(o.out);
  const std::string weights = o.out + "/gpt.safetensors";
  // [save-load]
  nn::save_safetensors(weights, model.state_dict());
  gpt::GPT loaded(cfg);
  loaded.load_state_dict(nn::load_safetensors(weights));
  // [save-load]
  loaded.to(device);
  loaded.eval();
  {
    kiln::NoGradGuard no_grad;
    auto [x, y] = batch(valid, {0, 100}, T, device);
    const bool same = same_values<float>(model(x), loaded(x));
    std::printf("gpt: %s reloads to %s logits\n", weights.c_str(), same ? "the same" : "DIFFERENT");
    ok = ok && same;
  }

  // ---- generation: sampled, and greedy with and without the KV cache ----
  const std::string prompt_text = " = The ";
  std::vector<int64_t> prompt_ids(prompt_text.begin(), prompt_text.end());
  const Tensor prompt = kiln::tensor_from(prompt_ids, {1, static_cast<int64_t>(prompt_ids.size())}).to(device);
  // [generate]
  const nn::DecoderStep step = [&](const Tensor& ids, nn::KVCache* cache) { return model(ids, cache); };
  nn::GenerationConfig sample;
  sample.max_new_tokens = 100;  // the prompt and these fit in n_positions (128)
  sample.do_sample = true;
  sample.temperature = 0.8;
  sample.top_k = 40;
  kiln::Generator gen(42);
  std::printf("gpt: sample:\n%s\n", printable(nn::generate(step, prompt, sample, &gen).to(kiln::kCPU)).c_str());
  // [generate]
  nn::GenerationConfig greedy;
  greedy.max_new_tokens = 60;
  const Tensor cached = nn::generate(step, prompt, greedy);
  greedy.use_cache = false;
  const bool same_tokens = same_values<int64_t>(cached, nn::generate(step, prompt, greedy));
  std::printf("gpt: greedy with the KV cache %s the uncached tokens\n", same_tokens ? "gives" : "DOES NOT give");
  ok = ok && same_tokens;
  std::printf("gpt: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
