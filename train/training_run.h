// Internal to train/ (not installed): one call of train() as a TrainingRun,
// whose phases are split over train/trainer.cpp (set-up, steps, logging,
// data parallel, the end) and train/trainer_checkpoints.cpp (resume, elastic
// resume, saves).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/profiler.h"
#include "dist/ddp.h"
#include "nn/lora.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/metric_log.h"
#include "train/preemption.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace kiln::train::detail {
namespace fs = std::filesystem;

double seconds_now();
// Doubles reduced over the group (NCCL groups reduce GPU tensors only).
std::vector<double> all_reduced(const dist::ProcessGroupPtr& group, std::vector<double> v, dist::ReduceOp op);

// Sums over the micro-batches since the last log line.
struct LogWindow {
  double loss_sum = 0;
  int64_t micro_batches = 0, tokens = 0, correct = 0, predicted = 0, steps = 0;
  double grad_norm_sum = 0;
  double start_time = seconds_now();
};

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
  bool is_elastic(const ResumeState& st) const;
  void train_step();
  MicroBatch next_micro_batch();
  void log_step(double lr);
  void after_step();
  int agreed_stop_signal(const StopSignals& signals);
  void save(int64_t s);
  void evaluate(int64_t s);
  void finish(int stop_signal);
  void choose_trainable_parameters();
  void start_data_parallel();
  void report_memory_per_rank();
  double clip_gradients();
  std::map<std::string, Tensor> optimizer_entries_to_save(int64_t s, std::map<std::string, std::string>& moved);
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

}  // namespace kiln::train::detail
