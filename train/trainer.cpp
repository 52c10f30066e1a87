// The training loop (train/trainer.h): optimizer, schedule, accumulation,
// clipping, logging, evaluation and data parallel; resume and saves are in
// train/trainer_checkpoints.cpp. One train() call is a TrainingRun
// (train/training_run.h), in phases: set-up (agreed step counts, optimizer), resume or
// a fresh start, then steps (micro-batches, optimizer step, logging,
// evaluation and saves, the stop check of Note [Preemption]; each a "step"
// span of the profiler, which records the --profile-steps window) and the end
// (final evaluation, checkpoint and model).
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/file_util.h"
#include "core/memory_summary.h"
#include "core/profiler.h"
#include "core/random.h"
#include "dist/ddp.h"
#include "nn/freeze.h"
#include "nn/hf_checkpoint.h"
#include "nn/lora.h"
#include "nn/safetensors.h"
#include "ops/autocast.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/metric_log.h"
#include "train/preemption.h"
#include "train/progress.h"
#include "train/task_util.h"
#include "train/training_run.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

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

std::vector<Tensor> trainable_parameters_of(const nn::Module& model) {
  std::vector<Tensor> out;
  for (auto& [name, p] : nn::trainable_parameters(model)) out.push_back(p);
  return out;
}

// PEFT's task_type for a task's kind (its PeftModelFor* class).
std::string peft_task_type(const std::string& kind) {
  if (kind == "classification" || kind == "regression" || kind == "multi-label-classification") return "SEQ_CLS";
  if (kind == "token-classification") return "TOKEN_CLS";
  if (kind == "causal-lm") return "CAUSAL_LM";
  return "";
}

// --lora-* as a LoraConfig (Note [LoRA], nn/lora.h).
nn::LoraConfig lora_config_of(const TrainingArguments& a, const std::string& kind) {
  nn::LoraConfig c;
  c.r = a.lora_r;
  c.lora_alpha = a.lora_alpha;
  c.lora_dropout = a.lora_dropout;
  c.target_modules = a.lora_target;
  if (!a.lora_target_regex.empty()) c.target_regex = a.lora_target_regex;
  c.modules_to_save = a.lora_modules_to_save;
  c.bias = a.lora_bias;
  c.use_rslora = a.lora_rslora;
  c.task_type = peft_task_type(kind);
  if (!a.model.empty()) c.base_model_name_or_path = fs::absolute(a.model).lexically_normal().string();
  c.validate("--lora-*");
  return c;
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(), text);
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

}  // namespace

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

namespace detail {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<double> all_reduced(const dist::ProcessGroupPtr& group, std::vector<double> v, dist::ReduceOp op) {
  Tensor t = tensor(std::move(v)).to(group->device());
  group->all_reduce(t, op);
  return t.to_vector<double>();
}

TrainingRun::TrainingRun(const TrainingArguments& args, TrainTask& task, std::ostream& user_out,
                         dist::ProcessGroupPtr group)
    : args_(args),
      task_(task),
      group_(std::move(group)),
      distributed_(group_ && group_->size() > 1),
      main_(!group_ || group_->rank() == 0),
      out_(main_ ? user_out : discard_),
      out_dir_(args.output_dir),
      model_(task.model()),
      autocast_(args.amp != "none"),
      low_(args.amp == "fp16" ? DType::Float16 : DType::BFloat16),
      scaler_(optim::GradScalerOptions{.enabled = args.amp == "fp16"}) {
  args.validate();
  KILN_CHECK(!distributed_ || (args.world_size == group_->size() && args.rank == group_->rank()),
             "train: TrainingArguments rank/world_size (", args.rank, "/", args.world_size,
             ") differ from the process group's (", group_ ? group_->rank() : 0, "/", group_ ? group_->size() : 1,
             ")");
  KILN_CHECK(!args.output_dir.empty(), "--output-dir is required");
  check_output_dir_apart_from_model(args);
  per_epoch_ = agreed_batches_per_epoch();
  KILN_CHECK(per_epoch_ > 0, "the training data gives no batch", distributed_ ? " on some rank" : "");
  result_.total_steps = total_ = total_training_steps(args, per_epoch_);
  warmup_ = args.warmup_steps > 0 ? args.warmup_steps : static_cast<int64_t>(std::ceil(args.warmup_ratio * total_));
  KILN_CHECK(warmup_ <= total_, "--warmup-steps (", warmup_, ") exceeds the run's ", total_, " steps");
  // The tasks build their model on args.device already; this covers any other
  // TrainTask (a no-op when the model is there). The optimizer holds the
  // parameter tensors, so it comes after the move.
  move_model_to_device(model_, args.device);
  choose_trainable_parameters();
  model_.set_gradient_checkpointing(args.gradient_checkpointing);  // every task's model, in one place
  optimizer_ = make_optimizer(args, model_);
  scheduler_ = std::make_unique<optim::Scheduler>(*optimizer_, make_schedule(args, warmup_, total_));
  params_ = trainable_parameters_of(model_);
  if (!args.profile_steps.empty()) profile_steps_ = parse_profile_steps(args.profile_steps);
}

// --freeze and --lora-r (Notes [Frozen parameters], [LoRA]): before the
// optimizer, which then holds only what trains.
void TrainingRun::choose_trainable_parameters() {
  if (!args_.freeze.empty()) {
    const std::vector<std::string> frozen = nn::freeze(model_, args_.freeze, "--freeze");
    out_ << "--freeze: " << frozen.size() << " parameter tensors frozen\n";
  }
  if (args_.lora_r > 0) {
    lora_ = lora_config_of(args_, task_.kind());
    const std::vector<std::string> layers = nn::add_lora(model_, *lora_);
    out_ << "LoRA: rank " << lora_->r << " adapters on " << layers.size() << " layers (" << layers.front()
         << (layers.size() > 1 ? ", ..." : "") << ")\n";
  }
  if (args_.freeze.empty() && !lora_) return;
  int64_t trainable = 0, all = 0;
  for (auto& [n, p] : model_.named_parameters()) {
    all += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  out_ << "trainable parameters: " << trainable << " of " << all << " ("
       << (all ? 100.0 * static_cast<double>(trainable) / static_cast<double>(all) : 0.0) << "%)\n";
}

// Note [Agreed step counts].
size_t TrainingRun::agreed_batches_per_epoch() {
  const size_t local = task_.batches_per_epoch();
  if (!distributed_) return local;
  const std::vector<double> v =
      all_reduced(group_, {-static_cast<double>(local), static_cast<double>(local)}, dist::ReduceOp::Max);
  const auto fewest = static_cast<size_t>(-v[0]), most = static_cast<size_t>(v[1]);
  if (fewest != most)
    out_ << "note: the ranks' training shards give " << fewest << " to " << most
         << " batches per epoch; every rank runs " << fewest << " per epoch\n";
  return fewest;
}

// The gradient norm, clipped to --max-grad-norm when set. With stage-2
// sharding each rank holds only its own gradients: the squares are added
// over the ranks (rounding differs from the unsharded norm).
double TrainingRun::clip_gradients() {
  if (!ddp_ || ddp_->shard_stage() < 2 || group_->size() == 1)
    return args_.max_grad_norm > 0 ? optim::clip_grad_norm(params_, args_.max_grad_norm) : optim::grad_norm(params_);
  const double local = optim::grad_norm(params_);
  const double total = std::sqrt(all_reduced(group_, {local * local}, dist::ReduceOp::Sum)[0]);
  if (args_.max_grad_norm > 0) optim::clip_grads_to_norm(params_, args_.max_grad_norm, total);
  return total;
}

// DDP, and with --shard-optimizer the optimizer's share of the parameters
// (Note [Sharded optimizer state] in dist/ddp.h).
void TrainingRun::start_data_parallel() {
  dist::DDPOptions options;
  options.shard_stage = static_cast<int>(args_.shard_optimizer);
  ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, group_, options);
  if (args_.shard_optimizer == 0) return;
  std::vector<Tensor> flat;
  for (const optim::ParamGroup& g : optimizer_->param_groups()) flat.insert(flat.end(), g.params.begin(), g.params.end());
  optimizer_->set_owned(ddp_->owned_mask(flat));
  int64_t all = 0;
  for (const Tensor& t : flat) all += t.numel();
  out_ << "sharded optimizer (ZeRO stage " << args_.shard_optimizer << "): rank 0 keeps the state of "
       << ddp_->owned_numel() << " of " << all << " parameters\n";
}

// One line per rank on rank 0 (a collective): the optimizer state this rank
// holds (about 1/world of it with --shard-optimizer) and its peak RSS.
void TrainingRun::report_memory_per_rank() {
  const Tensor mine = tensor(std::vector<double>{static_cast<double>(optimizer_->state_bytes()),
                                                 static_cast<double>(resident_peak_bytes())})
                          .to(group_->device());
  const std::vector<double> all = group_->all_gather(mine).to(kCPU).to_vector<double>();
  for (int r = 0; r < group_->size(); ++r) {
    char line[160];
    std::snprintf(line, sizeof(line), "rank %d: optimizer state %.1f MiB, peak RSS %.1f MiB\n", r,
                  all[2 * static_cast<size_t>(r)] / 1048576.0, all[2 * static_cast<size_t>(r) + 1] / 1048576.0);
    out_ << line;
  }
}

void TrainingRun::evaluate(int64_t s) {
  std::map<std::string, double> m;
  {
    AutocastGuard guard(low_, autocast_);
    m = task_.evaluate();
  }
  model_.train();
  if (m.empty()) return;
  result_.eval = m;
  std::map<std::string, double> logged;
  for (auto& [k, v] : m) logged["eval_" + k] = v;
  if (log_) log_->log(s, logged);
  out_ << "eval step " << s << ":" << format_metrics(m) << "\n";
}

// The next micro-batch of the stream (Note [Training step accounting]); an
// epoch ends after per_epoch_ batches (Note [Agreed step counts]).
MicroBatch TrainingRun::next_micro_batch() {
  AutocastGuard guard(low_, autocast_);
  std::optional<MicroBatch> mb;
  if (task_.loader_state().batches_consumed < static_cast<int64_t>(per_epoch_)) mb = task_.forward_next();
  if (!mb) {
    task_.start_epoch(task_.loader_state().epoch + 1);
    mb = task_.forward_next();
    KILN_CHECK(mb.has_value(), "the training data gives no batch in epoch ", task_.loader_state().epoch);
  }
  return std::move(*mb);
}

void TrainingRun::train_step() {
  optimizer_->zero_grad();
  for (int64_t k = 0; k < args_.grad_accum; ++k) {
    MicroBatch mb = next_micro_batch();
    const double loss = mb.loss.item<double>();
    KILN_CHECK(std::isfinite(loss), "training diverged: the loss is ", loss, " at step ", step_ + 1,
               " (try a lower --lr or --max-grad-norm)");
    {
      // no all-reduce on accumulation micro-steps; the last one syncs
      dist::DistributedDataParallel::NoSync no_sync =
          ddp_ && k + 1 < args_.grad_accum ? ddp_->no_sync() : dist::DistributedDataParallel::NoSync();
      scaler_.scale(args_.grad_accum > 1 ? mb.loss * (1.0 / static_cast<double>(args_.grad_accum)) : mb.loss)
          .backward();
    }
    window_.loss_sum += loss;
    window_.micro_batches += 1;
    window_.tokens += mb.tokens;
    window_.correct += mb.correct;
    window_.predicted += mb.predicted;
  }
  if (ddp_) ddp_->finish_gradient_sync();
  scaler_.unscale_(*optimizer_);
  window_.grad_norm_sum += clip_gradients();
  const double lr = optimizer_->lr(0);
  // A step skipped for non-finite fp16 gradients leaves the schedule where it is (as HF's Trainer).
  if (scaler_.step(*optimizer_)) scheduler_->step();
  if (ddp_) ddp_->gather_parameters();  // sharded: each owner's updated parameters to every rank
  scaler_.update();
  ++step_;
  ++steps_here_;
  ++window_.steps;
  if (step_ % args_.logging_steps == 0 || step_ == total_) log_step(lr);
}

void TrainingRun::log_step(double lr) {
  const double elapsed = std::max(seconds_now() - window_.start_time, 1e-9);
  if (distributed_) {  // sums over all ranks (a collective: every rank logs at the same steps)
    const std::vector<double> v = all_reduced(
        group_,
        {window_.loss_sum, static_cast<double>(window_.micro_batches), static_cast<double>(window_.tokens),
         static_cast<double>(window_.correct), static_cast<double>(window_.predicted)},
        dist::ReduceOp::Sum);
    window_.loss_sum = v[0];
    window_.micro_batches = static_cast<int64_t>(v[1]);
    window_.tokens = static_cast<int64_t>(v[2]);
    window_.correct = static_cast<int64_t>(v[3]);
    window_.predicted = static_cast<int64_t>(v[4]);
  }
  std::map<std::string, double> m{{"loss", window_.loss_sum / static_cast<double>(window_.micro_batches)},
                                  {"lr", lr},
                                  {"grad_norm", window_.grad_norm_sum / static_cast<double>(window_.steps)},
                                  {"tokens_per_s", static_cast<double>(window_.tokens) / elapsed}};
  if (scaler_.is_enabled()) m["loss_scale"] = scaler_.get_scale();
  if (window_.predicted > 0)
    m["accuracy"] = static_cast<double>(window_.correct) / static_cast<double>(window_.predicted);
  const data::LoaderState ls = task_.loader_state();
  m["epoch"] = static_cast<double>(ls.epoch) + static_cast<double>(ls.batches_consumed) / per_epoch_;
  result_.last_loss = m["loss"];
  if (log_) log_->log(step_, m);
  progress_->update(step_, m);
  window_ = LogWindow{};
}

void TrainingRun::after_step() {
  if (args_.eval_steps > 0 && step_ % args_.eval_steps == 0) {
    evaluate(step_);
    last_eval_ = step_;
  }
  if (args_.save_steps > 0 && step_ % args_.save_steps == 0) {
    save(step_);
    last_saved_ = step_;
  }
}

// Note [Preemption]: the signal seen on any rank (max over ranks; 0: none).
int TrainingRun::agreed_stop_signal(const StopSignals& signals) {
  const int local = signals.received();
  if (!distributed_) return local;
  return static_cast<int>(all_reduced(group_, {static_cast<double>(local)}, dist::ReduceOp::Max)[0]);
}

// --profile-steps A:B: recording starts before step A (or the first step of
// a resumed run inside the window) and ends after step B or with the run.
void TrainingRun::profile_before_step() {
  if (!profile_steps_ || profile_) return;
  const int64_t next = step_ + 1;
  if (next >= profile_steps_->first && next <= profile_steps_->second)
    profile_ = std::make_unique<profiler::Profile>();
}

void TrainingRun::profile_after_step() {
  if (profile_ && step_ >= profile_steps_->second) write_profile();
}

void TrainingRun::write_profile() {
  profile_->stop();
  const auto [first, last] = *profile_steps_;
  const std::string dir = args_.profile_dir.empty() ? (out_dir_ / "profile").string() : args_.profile_dir;
  const std::string stem = "trace-steps" + std::to_string(first) + "-" + std::to_string(last) + "-rank" +
                           std::to_string(args_.rank);
  const std::string path = profiler::save_profile(*profile_, dir, stem);
  out_ << "profile of steps " << first << ".." << std::min(last, step_) << " written to " << path
       << " (open it in https://ui.perfetto.dev or chrome://tracing; the whole table beside it, .txt):\n"
       << profile_->key_averages({}, 20);
  profile_.reset();
  profile_steps_.reset();  // one window per run
}

void TrainingRun::finish(int stop_signal) {
  if (profile_) write_profile();  // the run ended inside the window
  progress_->finish();
  result_.step = step_;
  result_.finished = step_ >= total_;
  result_.stop_signal = result_.finished ? 0 : stop_signal;
  if (result_.finished && last_eval_ != step_) evaluate(step_);
  if (last_saved_ != step_) save(step_);
  if (distributed_ && group_->size() > 1) report_memory_per_rank();
  if (result_.finished && main_) {
    save_final_model();
    const fs::path plot = log_->write_plot();
    out_ << "saved the " << (lora_ ? "adapter" : "model") << " to " << out_dir_.string() << " and the plot to "
         << plot.string() << "\n";
  } else if (result_.stop_signal != 0) {
    out_ << "stopped by " << signal_name(result_.stop_signal) << " after step " << step_ << "/" << total_
         << ": saved " << result_.last_checkpoint << "; continue with --resume" << std::endl;
    if (distributed_) group_->barrier();  // the checkpoint is complete before any rank exits
  } else if (!result_.finished) {
    out_ << "stopped after " << steps_here_ << " steps at step " << step_ << "/" << total_
         << "; continue with --resume\n";
  }
}

// The model, or with --lora-r only its adapter in PEFT's format (plus the
// task's config.json, which names the head's labels, and the tokenizer files).
void TrainingRun::save_final_model() {
  task_.model_config().to_json_file((out_dir_ / "config.json").string());
  if (lora_) nn::save_adapter(model_, *lora_, out_dir_.string());
  else nn::save_safetensors((out_dir_ / "model.safetensors").string(), model_.state_dict());
  for (auto& [name, text] : task_.extra_files()) write_text_atomic(out_dir_ / name, text);
}

TrainResult TrainingRun::run() {
  StopSignals signals;  // a signal from here on stops the run after its next step
  resume_or_start();
  if (distributed_) group_->barrier();  // every rank has checked the output directory before rank 0 writes to it
  if (main_) log_.emplace(out_dir_);
  if (distributed_) start_data_parallel();
  model_.train();
  progress_.emplace(total_, out_, &out_ == &std::cout && stdout_is_terminal(), step_);
  int stop_signal = 0;
  while (step_ < total_ && !(args_.stop_after_steps > 0 && steps_here_ >= args_.stop_after_steps)) {
    profile_before_step();
    {
      profiler::RecordScope span("step", profiler::Category::Step, step_ + 1);
      train_step();
      signals.test_hook(step_, distributed_ ? group_->rank() : 0);
      after_step();
    }
    profile_after_step();
    if (step_ < total_ && (stop_signal = agreed_stop_signal(signals)) != 0) break;
  }
  finish(stop_signal);
  return result_;
}

}  // namespace detail

TrainResult train(const TrainingArguments& args, TrainTask& task, std::ostream& out, dist::ProcessGroupPtr group) {
  return detail::TrainingRun(args, task, out, std::move(group)).run();
}

}  // namespace kiln::train
