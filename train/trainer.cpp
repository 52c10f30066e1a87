// The training loop (train/trainer.h): optimizer, schedule, accumulation,
// clipping, logging, evaluation, checkpoints and resume.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/random.h"
#include "dist/ddp.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"
#include "ops/autocast.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/metric_log.h"
#include "train/progress.h"
#include "train/task_util.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainingArguments& a, nn::Module& model) {
  auto groups = optim::param_groups_no_decay(model, a.weight_decay);
  std::erase_if(groups, [](const optim::ParamGroup& g) { return g.params.empty(); });
  if (a.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{.lr = a.lr,
                                                                                .beta1 = a.adam_beta1,
                                                                                .beta2 = a.adam_beta2,
                                                                                .eps = a.adam_epsilon,
                                                                                .weight_decay = a.weight_decay});
  if (a.optimizer == "lamb")
    return std::make_unique<optim::LAMB>(std::move(groups), optim::LAMBOptions{.lr = a.lr,
                                                                              .beta1 = a.adam_beta1,
                                                                              .beta2 = a.adam_beta2,
                                                                              .eps = a.adam_epsilon,
                                                                              .weight_decay = a.weight_decay});
  return std::make_unique<optim::SGD>(std::move(groups),
                                      optim::SGDOptions{.lr = a.lr, .momentum = a.momentum, .weight_decay = a.weight_decay});
}

optim::LrMultiplier make_schedule(const TrainingArguments& a, int64_t warmup, int64_t total) {
  if (a.lr_scheduler == "linear") return optim::linear_schedule_with_warmup(warmup, total);
  if (a.lr_scheduler == "cosine") return optim::cosine_schedule_with_warmup(warmup, total);
  if (a.lr_scheduler == "constant") return optim::constant_schedule();
  if (a.lr_scheduler == "constant_with_warmup") return optim::constant_schedule_with_warmup(warmup);
  return optim::polynomial_decay_schedule_with_warmup(warmup, total, a.lr);
}

std::vector<Tensor> parameters_of(const nn::Module& model) {
  std::vector<Tensor> out;
  for (auto& [name, p] : model.named_parameters()) out.push_back(p);
  return out;
}

// The fields that fix the model's shapes; a checkpoint must agree on all.
void check_same_architecture(const BertConfig& saved, const BertConfig& now, const std::string& where) {
  auto field = [&](const char* name, int64_t a, int64_t b) {
    KILN_CHECK(a == b, where, " was written for another model config: ", name, " is ", a, " there and ", b,
               " here (resume with the flags of the run that wrote it, or choose another --output-dir)");
  };
  field("vocab_size", saved.vocab_size, now.vocab_size);
  field("hidden_size", saved.hidden_size, now.hidden_size);
  field("num_hidden_layers", saved.num_hidden_layers, now.num_hidden_layers);
  field("num_attention_heads", saved.num_attention_heads, now.num_attention_heads);
  field("intermediate_size", saved.intermediate_size, now.intermediate_size);
  field("max_position_embeddings", saved.max_position_embeddings, now.max_position_embeddings);
  field("type_vocab_size", saved.type_vocab_size, now.type_vocab_size);
}

std::map<std::string, Tensor> prefixed(const std::string& prefix, const std::map<std::string, Tensor>& m) {
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : m) out[prefix + k] = v;
  return out;
}

std::map<std::string, Tensor> with_prefix(const std::string& prefix, const std::map<std::string, Tensor>& m) {
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(),
                    {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())});
}

std::string format_metrics(const std::map<std::string, double>& m) {
  std::string s;
  char buf[64];
  for (auto& [k, v] : m) {
    std::snprintf(buf, sizeof buf, " %s %.4f", k.c_str(), v);
    s += buf;
  }
  return s;
}

// Sums over the micro-batches since the last log line.
struct LogWindow {
  double loss_sum = 0;
  int64_t micro_batches = 0, tokens = 0, correct = 0, predicted = 0, steps = 0;
  double grad_norm_sum = 0;
  double start_time = seconds_now();
};

}  // namespace

void TrainingArguments::validate() const {
  auto positive = [](const char* flag, int64_t v) { KILN_CHECK(v >= 1, flag, " must be >= 1, got ", v); };
  positive("--batch-size", batch_size);
  positive("--grad-accum", grad_accum);
  positive("--max-seq-length", max_seq_length);
  positive("--logging-steps", logging_steps);
  KILN_CHECK(eval_batch_size >= 0, "--eval-batch-size must be >= 0, got ", eval_batch_size);
  KILN_CHECK(workers >= 0, "--workers must be >= 0, got ", workers);
  KILN_CHECK(std::isfinite(lr) && lr >= 0, "--lr must be a finite number >= 0, got ", lr);
  KILN_CHECK(warmup_ratio >= 0 && warmup_ratio <= 1, "--warmup-ratio must be in [0, 1], got ", warmup_ratio);
  KILN_CHECK(warmup_steps >= 0, "--warmup-steps must be >= 0, got ", warmup_steps);
  KILN_CHECK(max_steps > 0 || (std::isfinite(epochs) && epochs > 0),
             "--epochs must be > 0 (or give --max-steps), got ", epochs);
  KILN_CHECK(weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  KILN_CHECK(optimizer == "adamw" || optimizer == "lamb" || optimizer == "sgd",
             "--optimizer must be adamw, lamb or sgd, got '", optimizer, "'");
  KILN_CHECK(lr_scheduler == "linear" || lr_scheduler == "cosine" || lr_scheduler == "constant" ||
                 lr_scheduler == "constant_with_warmup" || lr_scheduler == "polynomial",
             "--lr-scheduler must be linear, cosine, constant, constant_with_warmup or polynomial, got '",
             lr_scheduler, "'");
  KILN_CHECK(mlm_probability > 0 && mlm_probability <= 1, "--mlm-probability must be in (0, 1], got ",
             mlm_probability);
  KILN_CHECK(validation_split_percentage >= 0 && validation_split_percentage < 100,
             "--validation-split-percentage must be in [0, 100), got ", validation_split_percentage);
  KILN_CHECK(synthetic_documents >= 10, "--synthetic-documents must be >= 10, got ", synthetic_documents);
  KILN_CHECK(stop_after_steps >= 0, "--stop-after-steps must be >= 0, got ", stop_after_steps);
  KILN_CHECK(std::isfinite(max_grad_norm), "--max-grad-norm must be finite");
  KILN_CHECK(amp == "none" || amp == "bf16" || amp == "fp16", "--amp must be none, bf16 or fp16, got '", amp, "'");
}

nlohmann::json TrainingArguments::to_json() const {
  return {{"model", model},
          {"config", config},
          {"vocab", vocab},
          {"cased", cased},
          {"train_file", train_file},
          {"validation_file", validation_file},
          {"validation_split_percentage", validation_split_percentage},
          {"synthetic_documents", synthetic_documents},
          {"max_seq_length", max_seq_length},
          {"text_column", text_column},
          {"pair_column", pair_column},
          {"label_column", label_column},
          {"mlm_probability", mlm_probability},
          {"whole_word_mask", whole_word_mask},
          {"workers", workers},
          {"batch_size", batch_size},
          {"eval_batch_size", eval_batch_size},
          {"grad_accum", grad_accum},
          {"lr", lr},
          {"warmup_ratio", warmup_ratio},
          {"warmup_steps", warmup_steps},
          {"epochs", epochs},
          {"max_steps", max_steps},
          {"weight_decay", weight_decay},
          {"optimizer", optimizer},
          {"lr_scheduler", lr_scheduler},
          {"adam_beta1", adam_beta1},
          {"adam_beta2", adam_beta2},
          {"adam_epsilon", adam_epsilon},
          {"momentum", momentum},
          {"max_grad_norm", max_grad_norm},
          {"seed", seed},
          {"output_dir", output_dir},
          {"save_steps", save_steps},
          {"save_total_limit", save_total_limit},
          {"eval_steps", eval_steps},
          {"logging_steps", logging_steps},
          {"device", device},
          {"world_size", world_size},
          {"amp", amp}};
}

std::shared_ptr<const data::Sampler> training_sampler(const TrainingArguments& a, size_t dataset_size) {
  if (a.world_size > 1)
    return std::make_shared<data::DistributedSampler>(dataset_size, a.rank, a.world_size, /*shuffle=*/true, a.seed);
  return std::make_shared<data::RandomSampler>(dataset_size, a.seed);
}

int64_t total_training_steps(const TrainingArguments& a, size_t batches_per_epoch) {
  if (a.max_steps > 0) return a.max_steps;
  const double micro = a.epochs * static_cast<double>(batches_per_epoch);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(micro / static_cast<double>(a.grad_accum))));
}

TrainResult train(const TrainingArguments& args, TrainTask& task, std::ostream& user_out,
                  dist::ProcessGroupPtr group) {
  args.validate();
  const bool distributed = group && group->size() > 1;
  const bool main_process = !group || group->rank() == 0;
  KILN_CHECK(!distributed || (args.world_size == group->size() && args.rank == group->rank()),
             "train: TrainingArguments rank/world_size (", args.rank, "/", args.world_size,
             ") differ from the process group's (", group ? group->rank() : 0, "/", group ? group->size() : 1, ")");
  std::ostringstream discard;
  std::ostream& out = main_process ? user_out : discard;  // Note [Data-parallel training]
  KILN_CHECK(!args.output_dir.empty(), "--output-dir is required");
  const size_t per_epoch = task.batches_per_epoch();
  KILN_CHECK(per_epoch > 0, "the training data gives no batch");
  const fs::path out_dir = args.output_dir;

  TrainResult result;
  result.total_steps = total_training_steps(args, per_epoch);
  const int64_t total = result.total_steps;
  const int64_t warmup =
      args.warmup_steps > 0 ? args.warmup_steps : static_cast<int64_t>(std::ceil(args.warmup_ratio * total));
  KILN_CHECK(warmup <= total, "--warmup-steps (", warmup, ") exceeds the run's ", total, " steps");

  nn::Module& model = task.model();
  // The tasks build their model on args.device already; this covers any other
  // TrainTask (a no-op when the model is there). The optimizer holds the
  // parameter tensors, so it comes after the move.
  move_model_to_device(model, args.device);
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(args, model);
  optim::Scheduler scheduler(*optimizer, make_schedule(args, warmup, total));
  const std::vector<Tensor> params = parameters_of(model);
  // Mixed precision (ops/autocast.h, optim/grad_scaler.h): autocast around
  // every forward; loss scaling only for float16.
  const bool autocast = args.amp != "none";
  const DType low = args.amp == "fp16" ? DType::Float16 : DType::BFloat16;
  optim::GradScaler scaler(optim::GradScalerOptions{.enabled = args.amp == "fp16"});

  // Resume, or refuse to mix a new run into an old one's files.
  int64_t step = 0;
  std::optional<std::string> latest = latest_checkpoint(out_dir.string());
  if (args.resume) {
    KILN_CHECK(latest.has_value(), "--resume: no checkpoint-* directory in ", out_dir.string());
    LoadedCheckpoint ck = load_checkpoint(*latest);
    const nlohmann::json& st = ck.trainer_state;
    check_same_architecture(ck.config, task.config(), *latest);
    KILN_CHECK(st.value("amp", std::string("none")) == args.amp, *latest, " was written with --amp ",
               st.value("amp", std::string("none")), "; resume it with the same --amp (not ", args.amp, ")");
    KILN_CHECK(st.value("kind", "") == task.kind(), *latest, " is a '", st.value("kind", "?"),
               "' checkpoint; this command trains '", task.kind(), "'");
    KILN_CHECK(st.value("total_steps", int64_t{-1}) == total && st.value("batches_per_epoch", int64_t{-1}) ==
                                                                     static_cast<int64_t>(per_epoch),
               *latest, ": its run spans ", st.value("total_steps", int64_t{-1}), " steps of ",
               st.value("batches_per_epoch", int64_t{-1}), " batches per epoch; these flags give ", total,
               " steps of ", per_epoch, " (resume with the same data, batch size and step flags)");
    model.load_state_dict(ck.model);
    optimizer->load_state_dict(with_prefix("optimizer.", ck.optimizer));
    scheduler.load_state_dict(with_prefix("scheduler.", ck.optimizer));
    if (scaler.is_enabled()) scaler.load_state_dict(with_prefix("scaler.", ck.optimizer));
    default_generator().set_state({st.at("rng").at("seed").get<uint64_t>(), st.at("rng").at("offset").get<uint64_t>()});
    task.load_loader_state(data::LoaderState::from_map(st.at("loader").get<std::map<std::string, int64_t>>()));
    step = st.at("step").get<int64_t>();
    out << "resuming from " << *latest << " at step " << step << "/" << total << "\n";
  } else {
    KILN_CHECK(!latest.has_value() && !fs::exists(out_dir / "metrics.jsonl"), out_dir.string(),
               " already holds a training run; pass --resume to continue it or choose another --output-dir");
  }

  if (distributed) group->barrier();  // every rank has checked the output directory before rank 0 writes to it
  std::optional<MetricLog> log;
  if (main_process) log.emplace(out_dir);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (distributed) ddp = std::make_unique<dist::DistributedDataParallel>(model, group);
  auto save = [&](int64_t s) {
    if (!main_process) return;
    CheckpointData data;
    data.model = model.state_dict();
    data.optimizer = prefixed("optimizer.", optimizer->state_dict());
    for (auto& [k, v] : prefixed("scheduler.", scheduler.state_dict())) data.optimizer[k] = v;
    for (auto& [k, v] : prefixed("scaler.", scaler.state_dict())) data.optimizer[k] = v;
    const data::LoaderState ls = task.loader_state();
    const PhiloxState rng = default_generator().state();
    data.trainer_state = {{"step", s},
                          {"total_steps", total},
                          {"batches_per_epoch", per_epoch},
                          {"kind", task.kind()},
                          {"amp", args.amp},
                          {"epoch", static_cast<double>(ls.epoch) + static_cast<double>(ls.batches_consumed) / per_epoch},
                          {"loader", ls.to_map()},
                          {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                          {"eval", result.eval},
                          {"args", args.to_json()}};
    data.config = task.config();
    data.extra_files = task.extra_files();
    result.last_checkpoint = save_checkpoint(out_dir.string(), s, data, static_cast<int>(args.save_total_limit));
  };
  auto evaluate = [&](int64_t s) {
    std::map<std::string, double> m;
    {
      AutocastGuard guard(low, autocast);
      m = task.evaluate();
    }
    model.train();
    if (m.empty()) return;
    result.eval = m;
    std::map<std::string, double> logged;
    for (auto& [k, v] : m) logged["eval_" + k] = v;
    if (log) log->log(s, logged);
    out << "eval step " << s << ":" << format_metrics(m) << "\n";
  };

  model.train();
  const bool terminal = &out == &std::cout && stdout_is_terminal();
  Progress progress(total, out, terminal, step);
  LogWindow window;
  int64_t steps_here = 0, last_saved = -1, last_eval = -1;
  while (step < total && !(args.stop_after_steps > 0 && steps_here >= args.stop_after_steps)) {
    optimizer->zero_grad();
    for (int64_t k = 0; k < args.grad_accum; ++k) {
      std::optional<MicroBatch> mb;
      {
        AutocastGuard guard(low, autocast);
        mb = task.forward_next();
        if (!mb) {
          task.start_epoch(task.loader_state().epoch + 1);
          mb = task.forward_next();
          KILN_CHECK(mb.has_value(), "the training data gives no batch in epoch ", task.loader_state().epoch);
        }
      }
      const double loss = mb->loss.item<double>();
      KILN_CHECK(std::isfinite(loss), "training diverged: the loss is ", loss, " at step ", step + 1,
                 " (try a lower --lr or --max-grad-norm)");
      {
        // no all-reduce on accumulation micro-steps; the last one syncs
        dist::DistributedDataParallel::NoSync no_sync =
            ddp && k + 1 < args.grad_accum ? ddp->no_sync() : dist::DistributedDataParallel::NoSync();
        scaler.scale(args.grad_accum > 1 ? mb->loss * (1.0 / static_cast<double>(args.grad_accum)) : mb->loss)
            .backward();
      }
      window.loss_sum += loss;
      window.micro_batches += 1;
      window.tokens += mb->tokens;
      window.correct += mb->correct;
      window.predicted += mb->predicted;
    }
    if (ddp) ddp->finish_gradient_sync();
    scaler.unscale_(*optimizer);
    window.grad_norm_sum +=
        args.max_grad_norm > 0 ? optim::clip_grad_norm(params, args.max_grad_norm) : optim::grad_norm(params);
    const double lr = optimizer->lr(0);
    // A step skipped for non-finite fp16 gradients leaves the schedule where it is (as HF's Trainer).
    if (scaler.step(*optimizer)) scheduler.step();
    scaler.update();
    ++step;
    ++steps_here;
    ++window.steps;

    if (step % args.logging_steps == 0 || step == total) {
      const double elapsed = std::max(seconds_now() - window.start_time, 1e-9);
      if (distributed) {  // sums over all ranks (a collective: every rank logs at the same steps)
        Tensor sums = tensor(std::vector<double>{window.loss_sum, static_cast<double>(window.micro_batches),
                                                 static_cast<double>(window.tokens),
                                                 static_cast<double>(window.correct),
                                                 static_cast<double>(window.predicted)})
                           .to(group->device());  // NCCL groups reduce GPU tensors only
        group->all_reduce(sums);
        const std::vector<double> v = sums.to_vector<double>();
        window.loss_sum = v[0];
        window.micro_batches = static_cast<int64_t>(v[1]);
        window.tokens = static_cast<int64_t>(v[2]);
        window.correct = static_cast<int64_t>(v[3]);
        window.predicted = static_cast<int64_t>(v[4]);
      }
      std::map<std::string, double> m{{"loss", window.loss_sum / static_cast<double>(window.micro_batches)},
                                      {"lr", lr},
                                      {"grad_norm", window.grad_norm_sum / static_cast<double>(window.steps)},
                                      {"tokens_per_s", static_cast<double>(window.tokens) / elapsed}};
      if (scaler.is_enabled()) m["loss_scale"] = scaler.get_scale();
      if (window.predicted > 0)
        m["accuracy"] = static_cast<double>(window.correct) / static_cast<double>(window.predicted);
      const data::LoaderState ls = task.loader_state();
      m["epoch"] = static_cast<double>(ls.epoch) + static_cast<double>(ls.batches_consumed) / per_epoch;
      result.last_loss = m["loss"];
      if (log) log->log(step, m);
      progress.update(step, m);
      window = LogWindow{};
    }
    if (args.eval_steps > 0 && step % args.eval_steps == 0) {
      evaluate(step);
      last_eval = step;
    }
    if (args.save_steps > 0 && step % args.save_steps == 0) {
      save(step);
      last_saved = step;
    }
  }
  progress.finish();
  result.step = step;
  result.finished = step >= total;
  if (result.finished && last_eval != step) evaluate(step);
  if (last_saved != step) save(step);
  if (result.finished && main_process) {
    task.config().to_json_file((out_dir / "config.json").string());
    nn::save_safetensors((out_dir / "model.safetensors").string(), model.state_dict());
    for (auto& [name, text] : task.extra_files()) write_text_atomic(out_dir / name, text);
    const fs::path plot = log->write_plot();
    out << "saved the model to " << out_dir.string() << " and the plot to " << plot.string() << "\n";
  } else if (!result.finished) {
    out << "stopped after " << steps_here << " steps at step " << step << "/" << total << "; continue with --resume\n";
  }
  return result;
}

}  // namespace kiln::train
