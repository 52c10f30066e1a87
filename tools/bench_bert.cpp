// `kiln bench forward`: BERT encoder forward (no grad) on CPU at a preset
// shape, to set beside bench/bert_forward_torch.py in the same run, or of a
// model directory (--model), to set beside ONNX Runtime on its export
// (bench/forward_vs_onnxruntime.sh).
// Prints: bench forward shape=NAME batch=B seq=S step_s=SECONDS tokens_per_s=N
// With --profile, then the op table of --steps more forwards (each a "step"
// span; self time per op, grouped by input shapes with --profile-shapes).
#include <cstdio>

#include "kiln.h"
#include "nn/models/bert.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct ForwardOptions {
  std::vector<std::string> shapes{"bert-base"};
  std::string model;  // a model directory instead of the preset shapes
  int64_t batch = 8, seq = 128;
  int steps = 5;
  int threads = 0;
  bool profile = false, profile_shapes = false;
};

int run_forward(const ForwardOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  for (const std::string& shape : o.model.empty() ? o.shapes : std::vector<std::string>{o.model}) {
    std::shared_ptr<nn::BertModel> model;
    manual_seed(0);
    if (o.model.empty()) {
      BertConfig c = BertConfig::preset(shape);
      c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
      model = std::make_shared<nn::BertModel>(c, false);
    } else {
      nn::check_model_dir(o.model, true, "--model");
      model = nn::from_pretrained<nn::BertModel>(o.model);
    }
    model->eval();
    Tensor ids = randint(0, model->config.vocab_size, {o.batch, o.seq});
    Tensor mask = ones({o.batch, o.seq}, TensorOptions(DType::Int64));
    NoGradGuard no_grad;
    const double t = median_seconds([&] { model->forward(ids, mask); }, o.steps, 1);
    std::printf("bench forward shape=%s batch=%lld seq=%lld step_s=%.4f tokens_per_s=%.0f\n", shape.c_str(),
                static_cast<long long>(o.batch), static_cast<long long>(o.seq), t,
                static_cast<double>(o.batch * o.seq) / t);
    if (o.profile || o.profile_shapes) {
      profiler::Profile prof;
      for (int i = 0; i < o.steps; ++i) {
        profiler::RecordScope step("step", profiler::Category::Step, i + 1);
        model->forward(ids, mask);
      }
      prof.stop();
      profiler::KeyAveragesOptions ko;
      ko.group_by_shapes = o.profile_shapes;
      std::printf("%s", prof.key_averages(ko, 25).c_str());
    }
  }
  return 0;
}

const BenchRegistrar reg("forward", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("forward", "BERT encoder forward pass on CPU (no grad)");
  auto o = std::make_shared<ForwardOptions>();
  cmd->add_option("--shape", o->shapes, "bert-tiny | bert-mini | bert-small | bert-base (repeatable)");
  cmd->add_option("--model", o->model, "a model directory (config.json, model.safetensors) instead of --shape");
  cmd->add_option("--batch", o->batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o->seq, "sequence length")->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o->steps, "timed steps (median)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_flag("--profile", o->profile, "then profile --steps more forwards and print the op table");
  cmd->add_flag("--profile-shapes", o->profile_shapes, "--profile, its rows grouped by input shapes");
  return [o] { return run_forward(*o); };
});

}  // namespace
}  // namespace kiln::tools
