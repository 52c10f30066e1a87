// Note [Elastic resume] (train/trainer.cpp) end to end through train(): the
// two ranks of a data-parallel run (each simulated on its own: TrainingArguments
// rank / world_size without a process group take the rank's shard) stop after
// 2 of the epoch's 6 steps; one process with twice the batch resumes rank 0's
// checkpoint. Together they train on every example of the epoch exactly once,
// which is the set an uninterrupted run sees.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "data/dataloader.h"
#include "kiln.h"
#include "test_util.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

constexpr size_t kExamples = 36;

// Regression on the example index through the trainer's own sampler
// (training_sampler: the rank's DistributedSampler shard, or the whole
// shuffled order), recording every example it trains on.
class RecordingTask final : public train::TrainTask {
 public:
  using Loader = data::DataLoader<size_t, std::vector<size_t>>;
  explicit RecordingTask(const train::TrainingArguments& a) {
    manual_seed(3);
    model_ = std::make_shared<nn::Linear>(1, 1);
    auto set = std::make_shared<data::FunctionDataset<size_t>>(kExamples, [](size_t i, Generator&) { return i; });
    loader_ = std::make_unique<Loader>(
        set, std::make_shared<data::BatchSampler>(train::training_sampler(a, kExamples), a.batch_size),
        [](std::vector<size_t>&& xs) { return std::move(xs); }, data::DataLoaderOptions{.num_workers = 0, .seed = a.seed});
  }
  nn::Module& model() override { return *model_; }
  const BertConfig& config() const override { return config_; }
  std::string kind() const override { return "recording"; }
  size_t batches_per_epoch() const override { return loader_->num_batches(); }
  data::LoaderState loader_state() const override { return loader_->state(); }
  void load_loader_state(const data::LoaderState& s) override { loader_->load_state(s); }
  void start_epoch(int64_t epoch) override { loader_->set_epoch(epoch); }
  std::optional<train::MicroBatch> forward_next() override {
    std::optional<std::vector<size_t>> ids = loader_->next();
    if (!ids) return std::nullopt;
    std::vector<double> x;
    for (size_t i : *ids) {
      seen.push_back(i);
      x.push_back(static_cast<double>(i) / kExamples);
    }
    const Tensor in = tensor(x, {static_cast<int64_t>(x.size()), 1});
    train::MicroBatch mb;
    mb.loss = mean(mul(model_->forward(in), model_->forward(in)));
    mb.tokens = static_cast<int64_t>(x.size());
    return mb;
  }
  std::map<std::string, double> evaluate() override { return {}; }
  double loader_wait_seconds() const override { return 0; }

  std::vector<size_t> seen;

 private:
  BertConfig config_;
  std::shared_ptr<nn::Linear> model_;
  std::unique_ptr<Loader> loader_;
};

train::TrainingArguments run_args(const fs::path& dir, int64_t rank, int64_t world, int64_t batch) {
  train::TrainingArguments a;
  a.output_dir = dir.string();
  a.optimizer = "sgd";
  a.lr = 0.01;
  a.max_steps = 6;  // one epoch: 36 examples, 2 x 3 or 1 x 6 per step
  a.save_steps = 0;
  a.logging_steps = 1;
  a.workers = 0;
  a.seed = 17;
  a.rank = rank;
  a.world_size = world;
  a.batch_size = batch;
  return a;
}

TEST(ElasticResume, TwoRanksStoppedThenOneProcessSeeEveryExampleOnce) {
  const fs::path root = fs::path(KILN_BINARY_DIR) / "elastic_resume_test";
  fs::remove_all(root);
  std::multiset<size_t> all;
  for (int64_t r = 0; r < 2; ++r) {
    train::TrainingArguments a = run_args(root / ("rank" + std::to_string(r)), r, 2, 3);
    a.stop_after_steps = 2;
    RecordingTask task(a);
    std::ostringstream log;
    const train::TrainResult res = train::train(a, task, log);
    EXPECT_EQ(res.step, 2) << log.str();
    EXPECT_EQ(task.seen.size(), 6u);
    all.insert(task.seen.begin(), task.seen.end());
  }
  train::TrainingArguments b = run_args(root / "rank0", 0, 1, 6);
  b.resume = true;
  RecordingTask task(b);
  std::ostringstream log;
  const train::TrainResult res = train::train(b, task, log);
  EXPECT_TRUE(res.finished) << log.str();
  EXPECT_NE(log.str().find("written by 2 ranks of --batch-size 3; 1 ranks of 6 continue epoch 0 after its first 12 "
                           "examples"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(task.seen.size(), 24u);
  all.insert(task.seen.begin(), task.seen.end());
  std::set<size_t> distinct(all.begin(), all.end());
  EXPECT_EQ(all.size(), kExamples) << "an example trained on twice";
  EXPECT_EQ(distinct.size(), kExamples) << "an example skipped";

  // The uninterrupted one-process run of the same epoch: the same set.
  RecordingTask straight(run_args(root / "straight", 0, 1, 6));
  std::ostringstream log2;
  train::train(run_args(root / "straight", 0, 1, 6), straight, log2);
  EXPECT_EQ(std::set<size_t>(straight.seen.begin(), straight.seen.end()), distinct);

  // Another number of examples per step is refused, naming the product.
  train::TrainingArguments c = run_args(root / "rank1", 0, 1, 4);
  c.resume = true;
  RecordingTask other(c);
  std::ostringstream log3;
  EXPECT_KILN_ERROR(train::train(c, other, log3), "batch size x ranks x accumulation is 6");
}

}  // namespace
}  // namespace kiln
