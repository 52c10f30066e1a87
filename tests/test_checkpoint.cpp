// Atomic training checkpoints (train/checkpoint.h): round trip, ordering and
// pruning, and SIGKILL during a save never leaves the previous checkpoint
// unloadable (Note [Atomic checkpoints]).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "kiln.h"
#include "train/checkpoint.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(KILN_BINARY_DIR) + "/checkpoint_test_" + name;
  fs::remove_all(d);
  return d;
}

train::CheckpointData make_data(int64_t step, int64_t elements) {
  train::CheckpointData d;
  d.config = BertConfig::preset("bert-tiny");
  d.model = {{"a.weight", full({elements}, static_cast<double>(step))}, {"b.bias", full({3}, -1.0 * step)}};
  d.optimizer = {{"state.a.weight.exp_avg", full({elements}, 0.5 * step)}, {"step", scalar_tensor(step, DType::Int64)}};
  d.trainer_state = {{"step", step}, {"epoch", 1}, {"loader", {{"batches", 7}}}};
  return d;
}

TEST(Checkpoint, RoundTripIsExact) {
  const std::string dir = fresh_dir("roundtrip");
  train::CheckpointData d = make_data(5, 100);
  d.model.push_back({"c", randn({4, 5})});
  const std::string path = train::save_checkpoint(dir, 5, d);
  EXPECT_EQ(fs::path(path).filename(), "checkpoint-5");
  train::LoadedCheckpoint c = train::load_checkpoint(path);
  EXPECT_EQ(c.trainer_state["step"], 5);
  EXPECT_EQ(c.trainer_state["loader"]["batches"], 7);
  EXPECT_EQ(c.config, d.config);
  for (auto& [name, t] : d.model) {
    ASSERT_TRUE(c.model.count(name)) << name;
    EXPECT_EQ(std::memcmp(c.model[name].raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * 4), 0) << name;
  }
  EXPECT_EQ(c.optimizer.at("step").item<int64_t>(), 5);
}

TEST(Checkpoint, LatestIsTheHighestStepAndPruningKeepsTheNewest) {
  const std::string dir = fresh_dir("latest");
  for (int64_t s : {9, 10, 2}) train::save_checkpoint(dir, s, make_data(s, 4));
  EXPECT_EQ(fs::path(*train::latest_checkpoint(dir)).filename(), "checkpoint-10");
  train::save_checkpoint(dir, 11, make_data(11, 4), 2);
  auto all = train::list_checkpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all[0]).filename(), "checkpoint-10");
  EXPECT_EQ(fs::path(all[1]).filename(), "checkpoint-11");
  EXPECT_FALSE(train::latest_checkpoint(fresh_dir("empty")).has_value());
}

TEST(Checkpoint, BadCheckpointsAreClearErrors) {
  const std::string dir = fresh_dir("bad");
  const std::string path = train::save_checkpoint(dir, 1, make_data(1, 4));
  fs::remove(path + "/optimizer.safetensors");
  try {
    train::load_checkpoint(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::load_checkpoint(dir + "/checkpoint-404"), Error);
}

// A child process saves checkpoints in a loop; the parent kills it with
// SIGKILL at random moments. After every kill the newest complete
// checkpoint must load and be internally consistent.
TEST(Checkpoint, SigkillDuringSaveKeepsThePreviousCheckpoint) {
  const std::string dir = fresh_dir("sigkill");
  fs::create_directories(dir);
  // 32768 elements: one chunk, so filling them never wakes the thread pool,
  // which does not exist in a forked child.
  constexpr int64_t kElements = 1 << 15;
  std::mt19937 rng(1234);
  int kills_mid_save = 0;
  for (int trial = 0; trial < 12; ++trial) {
    int64_t start = 1;
    if (auto latest = train::latest_checkpoint(dir)) start = train::load_checkpoint(*latest).trainer_state["step"].get<int64_t>() + 1;
    ASSERT_LT(start + 30, 400) << "test ran too many steps";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // child: save as fast as possible, touching no thread pool
      for (int64_t s = start; s < 400; ++s) train::save_checkpoint(dir, s, make_data(s, kElements), 3);
      _exit(0);
    }
    usleep(static_cast<useconds_t>(std::uniform_int_distribution<int>(2000, 25000)(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind(".checkpoint-", 0) == 0) ++kills_mid_save;
    auto latest = train::latest_checkpoint(dir);
    if (!latest) continue;
    train::LoadedCheckpoint c = train::load_checkpoint(*latest);
    const int64_t step = c.trainer_state["step"];
    EXPECT_EQ(c.model.at("a.weight").to_vector<float>()[kElements - 1], static_cast<float>(step)) << *latest;
    EXPECT_EQ(c.optimizer.at("step").item<int64_t>(), step) << *latest;
  }
  // the harness must really have interrupted saves for the test to mean anything
  EXPECT_GT(kills_mid_save, 0);
  // and the next save cleans the leftovers
  train::save_checkpoint(dir, 399, make_data(399, kElements));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().filename().string().rfind(".checkpoint-", 0), 0u) << e.path();
}

}  // namespace
}  // namespace kiln
