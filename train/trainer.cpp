// The training loop (train/trainer.h): optimizer, schedule, accumulation,
// clipping, logging, evaluation, checkpoints and resume. One train() call is
// a TrainingRun, in phases: set-up (agreed step counts, optimizer), resume or
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
#include "core/profiler.h"
#include "core/random.h"
#include "data/integrity.h"
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

// The fields that fix the model's shapes; a checkpoint must agree on all.
void check_same_architecture(const ModelConfig& saved, const ModelConfig& now, const std::string& where) {
  const char* fix = " (resume with the flags of the run that wrote it, or choose another --output-dir)";
  KILN_CHECK(saved.model_type() == now.model_type(), where, " was written for another model config: model_type is ",
             saved.model_type(), " there and ", now.model_type(), " here", fix);
  const auto& a = saved.facts().shape_fields;
  const auto& b = now.facts().shape_fields;
  KILN_CHECK(a.size() == b.size(), where, ": the shape fields of its config differ from this model's", fix);
  for (size_t i = 0; i < a.size(); ++i)
    KILN_CHECK(a[i] == b[i], where, " was written for another model config: ", a[i].first, " is ", a[i].second,
               " there and ", b[i].second, " here", fix);
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

// Sums over the micro-batches since the last log line.
struct LogWindow {
  double loss_sum = 0;
  int64_t micro_batches = 0, tokens = 0, correct = 0, predicted = 0, steps = 0;
  double grad_norm_sum = 0;
  double start_time = seconds_now();
};

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


namespace {

// The CRC-32C of the task's vocab.txt, else of its tokenizer.json ("" when
// it writes neither): the run's vocabulary fingerprint, kept in every
// checkpoint.
std::string vocab_fingerprint(const TrainTask& task) {
  const std::map<std::string, std::string> files = task.extra_files();
  auto it = files.find("vocab.txt");
  if (it == files.end()) it = files.find("tokenizer.json");
  if (it == files.end()) return "";
  return data::crc32c_hex(
      data::crc32c({reinterpret_cast<const uint8_t*>(it->second.data()), it->second.size()}));
}

// Doubles reduced over the group (NCCL groups reduce GPU tensors only).
std::vector<double> all_reduced(const dist::ProcessGroupPtr& group, std::vector<double> v, dist::ReduceOp op) {
  Tensor t = tensor(std::move(v)).to(group->device());
  group->all_reduce(t, op);
  return t.to_vector<double>();
}

// One call of train(): its phases as member functions (set-up, resume, steps,
// logging, stopping, the end).
class TrainingRun {
 public:
  TrainingRun(const TrainingArguments& args, TrainTask& task, std::ostream& user_out, dist::ProcessGroupPtr group);
  TrainResult run();

 private:
  size_t agreed_batches_per_epoch();
  void resume_or_start();
  std::optional<FoundCheckpoint> choose_checkpoint();
  void check_resumable(const std::string& path, const LoadedCheckpoint& ck);
  void train_step();
  MicroBatch next_micro_batch();
  void log_step(double lr);
  void after_step();
  int agreed_stop_signal(const StopSignals& signals);
  void save(int64_t s);
  void evaluate(int64_t s);
  void finish(int stop_signal);
  void choose_trainable_parameters();
  void save_final_model();
  void profile_before_step();
  void profile_after_step();
  void write_profile();

  const TrainingArguments& args_;
  TrainTask& task_;
  dist::ProcessGroupPtr group_;
  const bool distributed_, main_;
  std::ostringstream discard_;
  std::ostream& out_;  // user_out on rank 0, discard_ elsewhere (Note [Data-parallel training])
  const fs::path out_dir_;
  size_t per_epoch_ = 0;
  int64_t total_ = 0, warmup_ = 0;
  nn::Module& model_;
  std::optional<nn::LoraConfig> lora_;  // --lora-r: the adapters trained and saved
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Scheduler> scheduler_;
  std::vector<Tensor> params_;
  // Mixed precision (ops/autocast.h, optim/grad_scaler.h): autocast around
  // every forward; loss scaling only for float16.
  const bool autocast_;
  const DType low_;
  optim::GradScaler scaler_;
  std::string vocab_fingerprint_;  // of the run's start (Note [Exact resume])
  std::optional<MetricLog> log_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::optional<Progress> progress_;
  LogWindow window_;
  TrainResult result_;
  int64_t step_ = 0, steps_here_ = 0, last_saved_ = -1, last_eval_ = -1;
  std::optional<std::pair<int64_t, int64_t>> profile_steps_;  // --profile-steps
  std::unique_ptr<profiler::Profile> profile_;                 // recording the window now
};

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

// rank 0 picks the newest checkpoint that verifies; the others load the same step.
std::optional<FoundCheckpoint> TrainingRun::choose_checkpoint() {
  std::optional<FoundCheckpoint> found;
  double step = -1;
  if (main_) {
    std::vector<std::string> skipped;
    found = load_newest_valid_checkpoint(out_dir_.string(), &skipped);
    for (const std::string& why : skipped) out_ << "--resume: skipping " << why << "\n";
    if (found) {
      step = static_cast<double>(found->checkpoint.resume.step);
      KILN_CHECK(fs::path(found->path).filename() == "checkpoint-" + std::to_string(static_cast<int64_t>(step)),
                 found->path, "/trainer_state.json holds step ", static_cast<int64_t>(step),
                 ", which is not the directory's");
    }
  }
  if (distributed_) step = all_reduced(group_, {main_ ? step : -1.0}, dist::ReduceOp::Max)[0];
  KILN_CHECK(step >= 0, "--resume: no checkpoint in ", out_dir_.string(),
             " verifies (", distributed_ ? "rank 0 says why" : "see the lines above", ")");
  if (!main_) {
    const std::string path = (out_dir_ / ("checkpoint-" + std::to_string(static_cast<int64_t>(step)))).string();
    found = FoundCheckpoint{path, load_checkpoint(path)};
  }
  return found;
}

void TrainingRun::check_resumable(const std::string& path, const LoadedCheckpoint& ck) {
  const ResumeState& st = ck.resume;
  check_same_architecture(ck.config, task_.model_config(), path);
  KILN_CHECK(st.amp == args_.amp, path, " was written with --amp ", st.amp, "; resume it with the same --amp (not ",
             args_.amp, ")");
  KILN_CHECK(st.kind == task_.kind(), path, " is a '", st.kind.empty() ? "?" : st.kind,
             "' checkpoint; this command trains '", task_.kind(), "'");
  KILN_CHECK(st.total_steps == total_ && st.batches_per_epoch == static_cast<int64_t>(per_epoch_), path,
             ": its run spans ", st.total_steps, " steps of ", st.batches_per_epoch,
             " batches per epoch; these flags give ", total_, " steps of ", per_epoch_,
             " (resume with the same data, batch size and step flags)");
  KILN_CHECK(st.has_rng && st.loader, path, "/trainer_state.json lacks the ", st.has_rng ? "\"loader\"" : "\"rng\"",
             " state a resume needs");
  const std::string& started_with = st.vocab_crc32c;
  KILN_CHECK(started_with.empty() || started_with == vocab_fingerprint_, path,
             ": the run started with another vocabulary (vocab.txt CRC-32C, else tokenizer.json's: ", started_with, "; this command's is ",
             vocab_fingerprint_.empty() ? "none" : vocab_fingerprint_,
             "): resume with the --model / --vocab of the run that wrote it");
  if (!started_with.empty()) vocab_fingerprint_ = started_with;
}

// Resume (rank 0 first repairs an interrupted save), or refuse to mix a new
// run into an old one's files.
void TrainingRun::resume_or_start() {
  vocab_fingerprint_ = vocab_fingerprint(task_);
  if (main_)
    for (const std::string& line : recover_checkpoints(out_dir_.string())) out_ << line << "\n";
  if (distributed_) group_->barrier();
  if (!args_.resume) {
    KILN_CHECK(list_checkpoints(out_dir_.string()).empty() && !fs::exists(out_dir_ / "metrics.jsonl"),
               out_dir_.string(),
               " already holds a training run; pass --resume to continue it or choose another --output-dir");
    return;
  }
  KILN_CHECK(!list_checkpoints(out_dir_.string()).empty(), "--resume: no checkpoint-* directory in ",
             out_dir_.string());
  const std::optional<FoundCheckpoint> found = choose_checkpoint();
  const LoadedCheckpoint& ck = found->checkpoint;
  const ResumeState& st = ck.resume;
  check_resumable(found->path, ck);
  model_.load_state_dict(ck.model);
  optimizer_->load_state_dict(with_prefix("optimizer.", ck.optimizer));
  scheduler_->load_state_dict(with_prefix("scheduler.", ck.optimizer));
  if (scaler_.is_enabled()) scaler_.load_state_dict(with_prefix("scaler.", ck.optimizer));
  default_generator().set_state({st.rng_seed, st.rng_offset});
  task_.load_loader_state(data::LoaderState::from_map(*st.loader));
  step_ = st.step;
  out_ << "resuming from " << found->path << " at step " << step_ << "/" << total_ << "\n";
}

void TrainingRun::save(int64_t s) {
  if (!main_) return;
  CheckpointData data;
  data.model = model_.state_dict();
  data.optimizer = prefixed("optimizer.", optimizer_->state_dict());
  for (auto& [k, v] : prefixed("scheduler.", scheduler_->state_dict())) data.optimizer[k] = v;
  for (auto& [k, v] : prefixed("scaler.", scaler_.state_dict())) data.optimizer[k] = v;
  const data::LoaderState ls = task_.loader_state();
  const PhiloxState rng = default_generator().state();
  data.trainer_state = {{"step", s},
                        {"total_steps", total_},
                        {"batches_per_epoch", per_epoch_},
                        {"kind", task_.kind()},
                        {"amp", args_.amp},
                        {"epoch", static_cast<double>(ls.epoch) + static_cast<double>(ls.batches_consumed) / per_epoch_},
                        {"loader", ls.to_map()},
                        {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                        {"vocab_crc32c", vocab_fingerprint_},
                        {"eval", result_.eval},
                        {"args", args_.to_json()}};
  data.config = task_.model_config();
  data.extra_files = task_.extra_files();
  result_.last_checkpoint = save_checkpoint(out_dir_.string(), s, data, static_cast<int>(args_.save_total_limit));
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
  window_.grad_norm_sum +=
      args_.max_grad_norm > 0 ? optim::clip_grad_norm(params_, args_.max_grad_norm) : optim::grad_norm(params_);
  const double lr = optimizer_->lr(0);
  // A step skipped for non-finite fp16 gradients leaves the schedule where it is (as HF's Trainer).
  if (scaler_.step(*optimizer_)) scheduler_->step();
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
  if (distributed_) ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, group_);
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

}  // namespace

TrainResult train(const TrainingArguments& args, TrainTask& task, std::ostream& out, dist::ProcessGroupPtr group) {
  return TrainingRun(args, task, out, std::move(group)).run();
}

}  // namespace kiln::train
