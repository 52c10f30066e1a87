// Note [Preemption] (train/preemption.h) in-process: SIGTERM or SIGINT
// during a step lets the step finish, writes a checkpoint of it and returns
// with stop_signal set; --resume then ends bitwise where a straight run does.
// (tests/train_cli.sh sends real signals to `kiln pretrain`, a second signal
// included; tests/train_dist.sh and tests/dist/test_ddp.cpp stop ranks.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln.h"
#include "test_util.h"
#include "train/metric_log.h"
#include "train/mlm_task.h"
#include "train/preemption.h"
#include "train/trainer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using train::TrainingArguments;

using testing::read_bytes;
fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("preempt", name); }

TrainingArguments small_run(const fs::path& out) {
  TrainingArguments a;
  a.output_dir = out.string();
  a.synthetic_documents = 200;
  a.max_seq_length = 32;
  a.batch_size = 8;
  a.grad_accum = 2;
  a.lr = 1e-3;
  a.max_steps = 6;
  a.logging_steps = 1;
  a.save_steps = 0;
  a.eval_steps = 3;
  a.workers = 1;
  a.seed = 11;
  return a;
}

// An MlmTask that raises `sig` in its own process during its n-th forward.
class SignallingTask final : public train::TrainTask {
 public:
  SignallingTask(const TrainingArguments& a, std::ostream& out, int sig, int64_t at_forward)
      : inner_(a, out), sig_(sig), at_(at_forward) {}
  nn::Module& model() override { return inner_.model(); }
  ModelConfig model_config() const override { return inner_.model_config(); }
  std::string kind() const override { return inner_.kind(); }
  size_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  data::LoaderState loader_state() const override { return inner_.loader_state(); }
  void load_loader_state(const data::LoaderState& s) override { inner_.load_loader_state(s); }
  void start_epoch(int64_t epoch) override { inner_.start_epoch(epoch); }
  std::optional<train::MicroBatch> forward_next() override {
    if (++forwards_ == at_) ::raise(sig_);
    return inner_.forward_next();
  }
  std::map<std::string, double> evaluate() override { return inner_.evaluate(); }
  double loader_wait_seconds() const override { return inner_.loader_wait_seconds(); }
  std::map<std::string, std::string> extra_files() const override { return inner_.extra_files(); }

 private:
  train::MlmTask inner_;
  int sig_;
  int64_t at_, forwards_ = 0;
};

// The handler of `sig` now (to check that train() put the previous one back).
void (*handler_of(int sig))(int) {
  struct sigaction sa {};
  ::sigaction(sig, nullptr, &sa);
  return sa.sa_handler;
}

// The signal arrives during step 3's second micro-batch (forward 6 of 2 per
// step): step 3 completes, its evaluation is logged, checkpoint-3 is written.
void check_stop_and_exact_resume(int sig) {
  const fs::path straight = fresh_dir("straight"), stopped = fresh_dir("stopped");
  std::ostringstream log;
  train::MlmTask plain(small_run(straight), log);
  const train::TrainResult full = train::train(small_run(straight), plain, log);
  ASSERT_TRUE(full.finished);

  const auto before = handler_of(sig);
  TrainingArguments b = small_run(stopped);
  std::ostringstream log1;
  SignallingTask task(b, log1, sig, 6);
  const train::TrainResult first = train::train(b, task, log1);
  EXPECT_EQ(handler_of(sig), before);
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.stop_signal, sig);
  EXPECT_EQ(first.step, 3);
  EXPECT_EQ(first.last_checkpoint, (stopped / "checkpoint-3").string());
  EXPECT_NE(log1.str().find("stopped by " + train::signal_name(sig) + " after step 3/6: saved " +
                            (stopped / "checkpoint-3").string() + "; continue with --resume"),
            std::string::npos)
      << log1.str();
  EXPECT_FALSE(fs::exists(stopped / "model.safetensors"));

  b.resume = true;
  std::ostringstream log2;
  train::MlmTask again(b, log2);
  const train::TrainResult second = train::train(b, again, log2);
  EXPECT_TRUE(second.finished) << log2.str();
  EXPECT_EQ(second.stop_signal, 0);
  EXPECT_EQ(read_bytes(straight / "model.safetensors"), read_bytes(stopped / "model.safetensors"));
  const auto s = train::read_metrics_jsonl(straight / "metrics.jsonl");
  const auto r = train::read_metrics_jsonl(stopped / "metrics.jsonl");
  EXPECT_EQ(s.at("loss").values, r.at("loss").values);
  EXPECT_EQ(s.at("eval_loss").values, r.at("eval_loss").values);
  EXPECT_EQ(full.eval, second.eval);
  fs::remove_all(straight);
  fs::remove_all(stopped);
}

TEST(Preemption, SigtermStopsAfterTheStepWithACheckpointAndResumesExactly) { check_stop_and_exact_resume(SIGTERM); }

TEST(Preemption, SigintToo) {
  // A test runner started in the background may hand SIGINT down ignored,
  // which train() respects; this test wants it delivered.
  struct sigaction dfl {}, saved {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &dfl, &saved);
  check_stop_and_exact_resume(SIGINT);
  ::sigaction(SIGINT, &saved, nullptr);
}

// A signal during the last step changes nothing: the run is complete.
TEST(Preemption, ASignalDuringTheLastStepFinishesTheRun) {
  const fs::path dir = fresh_dir("last");
  TrainingArguments a = small_run(dir);
  std::ostringstream log;
  SignallingTask task(a, log, SIGTERM, 12);
  const train::TrainResult r = train::train(a, task, log);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.stop_signal, 0);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
