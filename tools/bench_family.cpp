// `kiln bench family --config CONFIG.json`: any model family kiln loads (by
// config.json's model_type, nn/auto.h), to set beside transformers on the
// same config in the same run (bench/family_torch.py; bench/family_vs_transformers.sh
// alternates the two; the configs in bench/families/).
//
// Prints:
//   bench family model_type=T task=masked-lm|causal-lm batch=B seq=S step_s=X train_tokens_per_s=N
//   bench family-generate model_type=T prompt=P new=N ms_per_token=X generate_tokens_per_s=N   (decoders)
// Training: one step of the family's masked-LM head (encoders: 15% of the
// positions labelled, the head run on those, as transformers' data collator
// gives) or causal-LM head (decoders: labels = ids), backward, AdamW (lr
// 1e-4, weight decay 0.01 on all parameters, as the peer); random tokens,
// all attended; step_s the median of --steps after 2 warm-up steps.
// Generation (decoders): greedy on the KV cache: one forward of the prompt
// (B = 1, P = seq - new tokens), then `new` one-token steps, each timed
// alone; ms_per_token is their median (no prompt cost in it).
// --gradient-checkpointing: every layer recomputes its activations in
// backward (Module::set_gradient_checkpointing); the training steps' memory
// is printed as `bench family-memory model_type=T gradient_checkpointing=0|1
// start_mib=... peak_mib=... step_peak_mib=... saved_mib=... peak_rss_mib=...` (tools/bench.h StepMemory).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln.h"
#include "nn/auto.h"
#include "optim/optim.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct FamilyBenchOptions {
  std::string config;
  int64_t batch = 8;
  int64_t seq = 128;
  int steps = 5;
  int64_t fresh = 32;  // new tokens of the generation run
  bool gradient_checkpointing = false;
  bool generate = true;
};

// Random ids in [first, vocab) (first: above the special ids every family
// keeps low), deterministic.
Tensor random_ids(int64_t vocab, Shape shape) { return randint(std::min<int64_t>(5, vocab - 1), vocab, shape); }

int run_family_bench(const FamilyBenchOptions& o) {
  std::ifstream in(o.config);
  KILN_CHECK(in, "--config ", o.config, ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  const ModelConfig mc = ModelConfig::from_json_string(text.str(), o.config);
  const nn::ModelFamily& family = nn::model_family(mc.model_type(), o.config);
  const bool decoder = family.has(nn::ModelTask::CausalLM);
  const int64_t V = mc.facts().vocab_size;
  KILN_CHECK(o.seq <= mc.facts().max_sequence_length, "--seq ", o.seq, " exceeds the ", mc.facts().max_sequence_length,
             " tokens ", o.config, " allows");
  manual_seed(0);
  const Tensor ids = random_ids(V, {o.batch, o.seq});
  const Tensor mask = ones({o.batch, o.seq}, TensorOptions(DType::Int64));

  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss;
  if (decoder) {
    auto lm = nn::AutoModelForCausalLM::from_config(mc);
    loss = [lm, ids, mask] { return lm->forward(ids, mask, ids).loss; };
    model = lm;
  } else {
    auto mlm = nn::AutoModelForMaskedLM::from_config(mc);
    const Tensor picked = lt(rand({o.batch, o.seq}), 0.15);  // (B, S) bool
    const Tensor labels = where(picked, ids, full({o.batch, o.seq}, -100.0, TensorOptions(DType::Int64)));
    loss = [mlm, ids, mask, labels] { return mlm->forward(ids, mask, Tensor(), labels).loss; };
    model = mlm;
  }
  model->train();
  model->set_gradient_checkpointing(o.gradient_checkpointing);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.01});
  StepMemory memory(kCPU);
  auto train_step = [&] {
    opt.zero_grad();
    memory.forward_begin();
    Tensor l = loss();
    memory.forward_end();
    l.backward();
    opt.step();
  };
  train_step();
  train_step();
  memory.start();
  const double step_s = median_seconds(train_step, o.steps, 0);
  const char* task = decoder ? "causal-lm" : "masked-lm";
  std::printf("bench family model_type=%s task=%s batch=%lld seq=%lld step_s=%.4f train_tokens_per_s=%.0f\n",
              mc.model_type().c_str(), task, static_cast<long long>(o.batch), static_cast<long long>(o.seq), step_s,
              static_cast<double>(o.batch * o.seq) / step_s);
  std::string keys = "model_type=";
  keys += mc.model_type();
  keys += o.gradient_checkpointing ? " gradient_checkpointing=1" : " gradient_checkpointing=0";
  memory.print("family", keys);
  if (!decoder || !o.generate) return 0;

  KILN_CHECK(o.fresh >= 1 && o.fresh < o.seq, "--new ", o.fresh, " must be in [1, --seq)");
  auto lm = std::dynamic_pointer_cast<nn::CausalLanguageModel>(model);
  lm->eval();
  NoGradGuard no_grad;
  const Tensor prompt = random_ids(V, {1, o.seq - o.fresh});
  std::vector<double> per_token;
  for (int round = 0; round < 2; ++round) {  // the first round warms up
    nn::KVCache cache;
    const Tensor first = lm->forward(prompt, Tensor(), Tensor(), &cache).logits;  // (1, P, V)
    Tensor next = argmax(first.select(1, first.size(1) - 1), -1, true);            // (1, 1)
    for (int64_t t = 0; t < o.fresh; ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      next = argmax(lm->forward(next, Tensor(), Tensor(), &cache).logits.select(1, 0), -1, true);
      (void)next.item<int64_t>();  // the token is known: the step is done
      if (round == 1) per_token.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(per_token.begin(), per_token.end());
  const double ms = per_token[per_token.size() / 2] * 1e3;
  std::printf("bench family-generate model_type=%s prompt=%lld new=%lld ms_per_token=%.3f generate_tokens_per_s=%.1f\n",
              mc.model_type().c_str(), static_cast<long long>(o.seq - o.fresh), static_cast<long long>(o.fresh), ms,
              1e3 / ms);
  return 0;
}

const BenchRegistrar reg("family", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "family", "A training step and cached generation of any family, from a config.json (beside bench/family_torch.py)");
  auto o = std::make_shared<FamilyBenchOptions>();
  cmd->add_option("--config", o->config, "config.json of the model (its model_type picks the family)")->required();
  cmd->add_option("--batch", o->batch, "training batch size")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seq", o->seq, "sequence length (generation: prompt + new)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed training steps (median)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--new", o->fresh, "generated tokens (decoders)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--gradient-checkpointing", o->gradient_checkpointing,
                "recompute each layer's activations in backward (less memory, more time)");
  cmd->add_flag("!--no-generate", o->generate, "decoders: skip the generation run");
  return [o] { return run_family_bench(*o); };
});

}  // namespace
}  // namespace kiln::tools
