// `kiln bench train`: one BERT masked-LM training step (forward, backward,
// AdamW) per preset shape, fed by the real DataLoader with 2 workers, to set
// beside ../shared/peer/bert_step_torch.py in the same run
// (bench/train_vs_torch.sh runs both).
//
// Prints per shape:
//   bench train shape=NAME batch=B seq=S step_s=SECONDS tokens_per_s=N
//   bench train-detail shape=NAME model_gflop=F gemm_peak_gflops=P mfu=U loader_wait=W
// step_s is the median over --steps steps after 2 warm-up steps.
// Model FLOPs per step (the count): 6 x non-embedding encoder
// parameters x tokens + attention 12 x layers x hidden x seq per token + the
// MLM head (transform + tied decoder, 6 x (H^2 + H V) per token) on the 15%
// masked tokens. MFU = model FLOP/s over the 1024^3 float32 GEMM rate
// measured in the same process just before the shape. loader_wait = time inside DataLoader::next()
// over the timed steps' wall time.
// --device cuda[:N]: model, batches (pinned, copied on a side stream) and
// optimizer state on the GPU, the GEMM peak measured there too; each timed
// call ends with cuda::synchronize() so the times cover the queued kernels.
// --amp bf16|fp16: the forward under autocast (fp16 with the grad scaler), as
// `kiln pretrain --amp`; the peak is then the 16-bit GEMM's.
// --profile [--profile-dir DIR]: the timed steps run under the profiler
// (Note [Profiler]); their Chrome trace and key_averages table are written to
// DIR/bench-train-SHAPE.json and .txt and the table's top rows printed.
// step_s then includes the profiler's overhead (docs/performance.md,
// "Profiler overhead", compares the two).
// --gradient-checkpointing: every encoder layer recomputes its activations in
// backward (Module::set_gradient_checkpointing, as `kiln pretrain
// --gradient-checkpointing`). Each shape also prints its memory over the
// timed steps (tools/bench.h StepMemory):
//   bench train-memory shape=NAME gradient_checkpointing=0|1 start_mib=.. peak_mib=.. step_peak_mib=.. saved_mib=.. peak_rss_mib=..
// --memory adds each phase's own peaks (forward, backward, optimizer; the
// allocator's and the resident set's), bench/memory_torch.py the same for
// transformers + PyTorch: `bench train-memory-phases ...`.
// --freeze PATTERN (nn::freeze) and --lora-r R [--lora-target ...]
// (nn::add_lora): a step of a partly frozen model (Note [Frozen parameters]).
#include <cstdio>
#include <optional>
#include <string>

#include "data/dataloader.h"
#include "data/device_staging.h"
#include "cuda/cuda.h"
#include "data/pretraining.h"
#include "kiln.h"
#include "nn/models/bert.h"
#include "optim/optim.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct TrainBenchOptions {
  std::vector<std::string> shapes{"bert-tiny", "bert-mini", "bert-small", "bert-base"};
  int64_t batch = 0;  // 0: the peer's batch for the shape (32, 32, 16, 8)
  int64_t seq = 128;
  int steps = 5;
  int workers = 2;
  std::string device = "cpu";
  std::string amp = "none";  // none | bf16 | fp16 (fp16 with dynamic loss scaling), as kiln pretrain --amp
  bool profile = false;
  std::string profile_dir = "kiln-profile";
  bool gradient_checkpointing = false;
  bool memory = false;                // per-phase peaks (StepMemory::enable_phases)
  std::vector<std::string> freeze;    // nn::freeze patterns (Note [Frozen parameters])
  int64_t lora_r = 0;                 // > 0: LoRA adapters on lora_target (Note [LoRA])
  std::vector<std::string> lora_target{"query", "value"};
};

int64_t default_batch(const std::string& shape) {
  if (shape == "bert-small") return 16;
  if (shape == "bert-base") return 8;
  return 32;
}

// Waits for the device's queued work (nothing to wait for on CPU).
void sync(Device device) {
  if (!device.is_cpu()) cuda::synchronize(device.index);
}

// GFLOP/s of a 1024^3 matmul of `dtype` on `device` (median of 10).
double gemm_peak_gflops(Device device, DType dtype) {
  Tensor a = randn({1024, 1024}).to(dtype).to(device), b = randn({1024, 1024}).to(dtype).to(device);
  const double t = median_seconds(
      [&] {
        matmul(a, b);
        sync(device);
      },
      10, 2);
  return 2.0 * 1024 * 1024 * 1024 / t / 1e9;
}

// Random token sequences of length `seq`, masked as in pretraining.
class RandomTokens final : public data::Dataset<data::PretrainingExample> {
 public:
  RandomTokens(int64_t vocab, int64_t seq) : seq_(seq) {
    std::vector<std::string> tokens{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < vocab; ++i) tokens.push_back("t" + std::to_string(i));
    vocab_ = data::MaskingVocab::from_tokens(tokens, {0, 1, 2, 3, 4}, 4);
  }
  size_t size() const override { return 1u << 20; }
  data::PretrainingExample get(size_t, Generator& rng) const override {
    PhiloxState st = rng.next();
    std::vector<int32_t> ids(static_cast<size_t>(seq_));
    const auto n = static_cast<uint32_t>(vocab_.vocab_size - 5);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = 5 + static_cast<int32_t>(philox_words(st, i)[0] % n);
    ids.front() = 2;
    ids.back() = 3;
    data::MaskedExample m = data::mask_tokens(ids, vocab_, {}, rng);
    return {std::move(m.input_ids), std::vector<int32_t>(ids.size(), 0), std::move(m.labels), -1};
  }

 private:
  int64_t seq_;
  data::MaskingVocab vocab_;
};

int run_train_bench(const TrainBenchOptions& o) {
  const Device device = Device::parse(o.device);
  if (!device.is_cpu()) {
    KILN_CHECK(cuda_built(), "--device ", o.device, ": ", cuda_unavailable_reason());
    KILN_CHECK(device.index < cuda::device_count(), "--device ", o.device, ": no such CUDA device (",
               cuda::device_count(), " visible)");
  }
  const bool amp = o.amp != "none";
  const DType amp_dtype = o.amp == "fp16" ? DType::Float16 : DType::BFloat16;
  for (const std::string& shape : o.shapes) {
    // Beside each shape (the machine's speed drifts), in the GEMMs' dtype.
    const double peak = gemm_peak_gflops(device, amp ? amp_dtype : DType::Float32);
    const BertConfig c = BertConfig::preset(shape);
    const int64_t batch = o.batch > 0 ? o.batch : default_batch(shape);
    manual_seed(0);
    nn::BertForMaskedLM model(c);
    if (!device.is_cpu()) model.to(device);  // before the optimizer, which holds the parameter tensors
    model.train();
    model.set_gradient_checkpointing(o.gradient_checkpointing);
    if (!o.freeze.empty()) nn::freeze(model, o.freeze, "--freeze");
    if (o.lora_r > 0) {
      nn::LoraConfig lc;
      lc.r = o.lora_r;
      lc.lora_alpha = 2.0 * static_cast<double>(o.lora_r);
      lc.target_modules = o.lora_target;
      nn::add_lora(model, lc);
    }
    optim::AdamW opt(optim::param_groups_no_decay(model, 0.01), optim::AdamWOptions{.lr = 1e-4});
    auto dataset = std::make_shared<RandomTokens>(c.vocab_size, o.seq);
    data::DataLoader<data::PretrainingExample, data::PretrainingBatch> loader(
        dataset,
        std::make_shared<data::BatchSampler>(std::make_shared<data::SequentialSampler>(dataset->size()), batch),
        data::pinned_collate<data::PretrainingExample, data::PretrainingBatch>(
            [](std::vector<data::PretrainingExample>&& ex) { return data::collate_pretraining(ex, 0); }, device),
        data::DataLoaderOptions{.num_workers = o.workers, .seed = 0},
        data::device_transfer<data::PretrainingBatch>(device));  // Note [Batch staging]
    optim::GradScalerOptions so;
    so.enabled = o.amp == "fp16";
    optim::GradScaler scaler(so);
    int64_t masked = 0;
    StepMemory memory(device);
    if (o.memory) memory.enable_phases();
    auto step = [&] {
      profiler::RecordScope span("step", profiler::Category::Step);
      data::PretrainingBatch b = *loader.next();
      opt.zero_grad();
      nn::MaskedLMOutput out;
      memory.phase_begin(StepMemory::Forward);
      memory.forward_begin();
      {
        AutocastGuard autocast(amp_dtype, amp);
        out = model.forward(b.input_ids, b.attention_mask, b.token_type_ids, b.labels);
      }
      memory.forward_end();
      memory.phase_begin(StepMemory::Backward);
      scaler.scale(out.loss).backward();
      memory.phase_begin(StepMemory::Optimizer);
      scaler.step(opt);
      scaler.update();
      memory.phase_end();
      masked += out.logits.size(0);
      sync(device);
    };
    step();
    step();
    const double wait0 = loader.wait_seconds();
    masked = 0;
    memory.start();
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<profiler::Profile> profile;
    if (o.profile) profile.emplace();
    const double t = median_seconds(step, o.steps, 0);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (profile) {
      profile->stop();
      const std::string path = profiler::save_profile(*profile, o.profile_dir, "bench-train-" + shape);
      std::printf("bench train profile shape=%s trace=%s\n%s", shape.c_str(), path.c_str(),
                  profile->key_averages({}, 15).c_str());
    }
    const double wait = (loader.wait_seconds() - wait0) / wall;

    double encoder_params = 0;
    for (auto& [name, p] : model.named_parameters())
      if (name.rfind("bert.encoder.", 0) == 0) encoder_params += static_cast<double>(p.numel());
    const double tokens = static_cast<double>(batch * o.seq);
    const double masked_per_step = static_cast<double>(masked) / o.steps;
    const double h = static_cast<double>(c.hidden_size), v = static_cast<double>(c.vocab_size);
    const double flop = 6.0 * encoder_params * tokens +
                        12.0 * c.num_hidden_layers * h * static_cast<double>(o.seq) * tokens +
                        6.0 * (h * h + h * v) * masked_per_step;
    std::printf("bench train shape=%s batch=%lld seq=%lld step_s=%.4f tokens_per_s=%.0f\n", shape.c_str(),
                static_cast<long long>(batch), static_cast<long long>(o.seq), t, tokens / t);
    std::printf("bench train-detail shape=%s model_gflop=%.2f gemm_peak_gflops=%.1f mfu=%.3f loader_wait=%.4f\n",
                shape.c_str(), flop / 1e9, peak, flop / t / 1e9 / peak, wait);
    std::string keys = "shape=";
    keys += shape;
    keys += o.gradient_checkpointing ? " gradient_checkpointing=1" : " gradient_checkpointing=0";
    if (!o.freeze.empty()) keys += " frozen=1";
    if (o.lora_r > 0) {
      keys += " lora_r=";
      keys += std::to_string(o.lora_r);
    }
    memory.print("train", keys);
  }
  return 0;
}

const BenchRegistrar reg("train", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("train", "One BERT masked-LM training step (forward, backward, AdamW)");
  auto o = std::make_shared<TrainBenchOptions>();
  cmd->add_option("--shape", o->shapes, "bert-tiny | bert-mini | bert-small | bert-base (repeatable; default all)");
  cmd->add_option("--batch", o->batch, "batch size (default: 32, 32, 16, 8 by shape, as the PyTorch peer)");
  cmd->add_option("--seq", o->seq, "sequence length")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps (median)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--workers", o->workers, "data-loader workers")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--amp", o->amp, "mixed precision: none, bf16 or fp16 (fp16 with loss scaling)")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_flag("--profile", o->profile, "profile the timed steps: Chrome trace and key_averages table");
  cmd->add_option("--profile-dir", o->profile_dir, "where --profile writes (created; no file is replaced)")
      ->capture_default_str();
  cmd->add_flag("--memory", o->memory,
                "peak allocator and resident bytes of each phase (forward, backward, optimizer) on their own");
  cmd->add_option("--freeze", o->freeze, "freeze the parameters a regular expression finds (e.g. '^bert\\.': all but "
                                         "the MLM head); repeatable");
  cmd->add_option("--lora-r", o->lora_r, "LoRA adapters of this rank on --lora-target, the rest frozen");
  cmd->add_option("--lora-target", o->lora_target, "layers LoRA adapts")->delimiter(',')->capture_default_str();
  cmd->add_flag("--gradient-checkpointing", o->gradient_checkpointing,
                "recompute each encoder layer's activations in backward (less memory, more time)");
  return [o] { return run_train_bench(*o); };
});

}  // namespace
}  // namespace kiln::tools
