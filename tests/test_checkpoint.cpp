// Atomic training checkpoints (train/checkpoint.h): round trip, ordering and
// pruning, SIGKILL during a save (at random moments, and at each point of
// re-saving a step) never leaves the step without a loadable checkpoint
// (Note [Atomic checkpoints]), and the manifest names damaged files (Note
// [Checkpoint manifest]).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(KILN_BINARY_DIR) + "/checkpoint_test_" + name;
  fs::remove_all(d);
  return d;
}

train::CheckpointData make_data(int64_t step, int64_t elements, double value) {
  train::CheckpointData d;
  d.config = BertConfig::preset("bert-tiny");
  d.model = {{"a.weight", full({elements}, value)}, {"b.bias", full({3}, -1.0 * step)}};
  d.optimizer = {{"state.a.weight.exp_avg", full({elements}, 0.5 * step)}, {"step", scalar_tensor(step, DType::Int64)}};
  d.trainer_state = {{"step", step}, {"epoch", 1}, {"loader", {{"batches", 7}}}};
  d.extra_files = {{"vocab.txt", "[PAD]\n[UNK]\n"}};
  return d;
}

train::CheckpointData make_data(int64_t step, int64_t elements) {
  return make_data(step, elements, static_cast<double>(step));
}

// Flips one byte of a file at `offset` (from the end when negative).
void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset, offset < 0 ? std::ios::end : std::ios::beg);
  const auto at = f.tellg();
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(at);
  f.write(&c, 1);
}

// Every resume field of trainer_state.json is type-checked when the checkpoint
// loads: a wrong type is a kiln::Error naming the file (it used to escape from
// the trainer as a JSON library exception).
TEST(Checkpoint, ResumeStateFieldsAreTypeChecked) {
  const nlohmann::json good = {{"step", 3},          {"amp", "fp16"}, {"kind", "mlm"},
                               {"total_steps", 10},  {"batches_per_epoch", 4},
                               {"vocab_crc32c", "0a1b2c3d"},
                               {"rng", {{"seed", 42}, {"offset", 12}}},
                               {"loader", {{"epoch", 0}, {"batches_consumed", 3}}},
                               {"world_size", 2},    {"batch_size", 4}, {"grad_accum", 1},
                               {"max_tokens_per_batch", 512}};
  const train::ResumeState r = train::parse_resume_state(good, "x/trainer_state.json");
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.amp, "fp16");
  EXPECT_EQ(r.kind, "mlm");
  EXPECT_EQ(r.total_steps, 10);
  EXPECT_EQ(r.batches_per_epoch, 4);
  EXPECT_EQ(r.vocab_crc32c, "0a1b2c3d");
  EXPECT_TRUE(r.has_rng);
  EXPECT_EQ(r.rng_seed, 42u);
  EXPECT_EQ(r.rng_offset, 12u);
  ASSERT_TRUE(r.loader.has_value());
  EXPECT_EQ(r.loader->at("batches_consumed"), 3);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.batch_size, 4);
  EXPECT_EQ(r.grad_accum, 1);
  EXPECT_EQ(r.max_tokens_per_batch, 512);

  const train::ResumeState minimal = train::parse_resume_state({{"step", 0}}, "x/trainer_state.json");
  EXPECT_EQ(minimal.amp, "none");
  EXPECT_FALSE(minimal.has_rng);
  EXPECT_FALSE(minimal.loader.has_value());
  EXPECT_EQ(minimal.world_size, -1);  // an older checkpoint: taken as this run's
  EXPECT_EQ(minimal.max_tokens_per_batch, -1);  // not recorded: no budget

  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"step", -1}}, "\"step\" must be >= 0"},
      {{{"step", 18446744073709551615ull}}, "at most 2^63 - 1"},
      {{{"step", 1}, {"amp", 5}}, "\"amp\" must be a string, got number"},
      {{{"step", 1}, {"kind", nullptr}}, "\"kind\" must be a string, got null"},
      {{{"step", 1}, {"total_steps", 2.5}}, "\"total_steps\" must be an integer"},
      {{{"step", 1}, {"rng", {{"seed", "42"}, {"offset", 1}}}}, "\"seed\" must be an unsigned integer, got string"},
      {{{"step", 1}, {"rng", {{"seed", 42}}}}, "\"rng\" must hold \"seed\" and \"offset\""},
      {{{"step", 1}, {"rng", {{"seed", -4}, {"offset", 1}}}}, "\"seed\" must be an unsigned integer"},
      {{{"step", 1}, {"loader", {{"epoch", "0"}}}}, "\"loader\".\"epoch\" must be an integer, got string"},
      {{{"step", 1}, {"loader", {1, 2}}}, "\"loader\" must be an object, got array"},
      {{{"step", 1}, {"world_size", 0}}, "\"world_size\" must be >= 1, got 0"},
      {{{"step", 1}, {"batch_size", "4"}}, "\"batch_size\" must be an integer, got string"},
      {{{"step", 1}, {"max_tokens_per_batch", -3}}, "\"max_tokens_per_batch\" must be >= 0, got -3"},
      {{{"step", 1}, {"max_tokens_per_batch", "64"}}, "\"max_tokens_per_batch\" must be an integer, got string"},
  };
  for (const auto& [state, message] : bad) {
    try {
      (void)train::parse_resume_state(state, "x/trainer_state.json");
      ADD_FAILURE() << "accepted " << state.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x/trainer_state.json: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
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

// Note [Optimizer shards]: two ranks' shards moved into a checkpoint are in
// its manifest, load merged, and consolidate rewrites them into one file; a
// missing, foreign or overlapping shard is an error naming it.
TEST(Checkpoint, OptimizerShardsMergeAtLoadAndConsolidate) {
  const std::string dir = fresh_dir("shards");
  fs::create_directories(dir + "/staging");
  auto write_shard = [&](int rank, const std::vector<std::pair<std::string, Tensor>>& entries) {
    const std::string name = train::optimizer_shard_name(rank, 2);
    nn::save_safetensors(dir + "/staging/" + name, entries);
    return std::pair{name, dir + "/staging/" + name};
  };
  train::CheckpointData d = make_data(4, 10);
  d.optimizer = {{"optimizer.param_groups.0.lr", scalar_tensor(0.1, DType::Float64)}};
  const Tensor s0 = randn({3}), s1 = randn({5});
  d.moved_files.insert(write_shard(0, {{"optimizer.state.0.exp_avg", s0}}));
  d.moved_files.insert(write_shard(1, {{"optimizer.state.1.exp_avg", s1}}));
  const std::string path = train::save_checkpoint(dir, 4, d);
  EXPECT_TRUE(fs::exists(path + "/optimizer-shard-1-of-2.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/staging/optimizer-shard-0-of-2.safetensors")) << "moved, not copied";
  train::LoadedCheckpoint c = train::load_checkpoint(path);
  ASSERT_EQ(c.optimizer.size(), 3u);
  EXPECT_TRUE(testing::bitwise_equal(c.optimizer.at("optimizer.state.1.exp_avg"), s1));

  EXPECT_EQ(train::consolidate_checkpoint(path), 2);
  EXPECT_FALSE(fs::exists(path + "/optimizer-shard-0-of-2.safetensors"));
  EXPECT_TRUE(fs::exists(path + "/vocab.txt")) << "the other files are kept";
  train::verify_checkpoint(path);
  c = train::load_checkpoint(path);
  ASSERT_EQ(c.optimizer.size(), 3u);
  EXPECT_TRUE(testing::bitwise_equal(c.optimizer.at("optimizer.state.0.exp_avg"), s0));
  EXPECT_EQ(train::consolidate_checkpoint(path), 0) << "nothing left to merge";

  std::map<std::string, Tensor> opt;
  fs::copy_file(dir + "/checkpoint-4/model.safetensors", dir + "/optimizer-shard-0-of-3.safetensors");
  EXPECT_KILN_ERROR(train::merge_optimizer_shards(dir, opt), "optimizer-shard-1-of-3.safetensors is missing");
  nn::save_safetensors(dir + "/optimizer-shard-1-of-2.safetensors", {{"optimizer.state.9.exp_avg", s0}});
  EXPECT_KILN_ERROR(train::merge_optimizer_shards(dir, opt), "of 3 and of 2 ranks");
  fs::remove(dir + "/optimizer-shard-0-of-3.safetensors");
  nn::save_safetensors(dir + "/optimizer-shard-0-of-2.safetensors", {{"a.weight", s0}});
  EXPECT_KILN_ERROR(train::merge_optimizer_shards(dir, opt), "'a.weight' is not optimizer state");
  nn::save_safetensors(dir + "/optimizer-shard-0-of-2.safetensors", {{"optimizer.state.9.exp_avg", s0}});
  EXPECT_KILN_ERROR(train::merge_optimizer_shards(dir, opt), "also in another file");
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

// Re-saving a step (a run resumed from an earlier checkpoint saves it again):
// SIGKILL at each point of the swap leaves checkpoint-5 loadable, the old copy
// up to the second rename and the new one after it; recover_checkpoints()
// puts an aside copy back and clears what the interrupted save left.
TEST(Checkpoint, ResavingAStepSurvivesSigkillAtEveryPoint) {
  struct Case {
    const char* point;
    double want;  // a.weight of the checkpoint-5 that loads afterwards
    bool restored;
  };
  for (const Case& c : {Case{"checkpoint-before-rename", 5.0, false}, Case{"checkpoint-after-aside", 5.0, true},
                        Case{"checkpoint-after-swap", 50.0, false}}) {
    SCOPED_TRACE(c.point);
    const std::string dir = fresh_dir(std::string("resave_") + c.point);
    train::save_checkpoint(dir, 5, make_data(5, 16));
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // child: save step 5 again, with other weights, and die at the point
      ::setenv("KILN_TEST_CRASH_AT", c.point, 1);
      train::save_checkpoint(dir, 5, make_data(5, 16, 50.0));
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the save did not reach " << c.point;
    const std::vector<std::string> restored = train::recover_checkpoints(dir);
    EXPECT_EQ(restored.size(), c.restored ? 1u : 0u);
    ASSERT_TRUE(train::latest_checkpoint(dir).has_value());
    const train::LoadedCheckpoint ck = train::load_checkpoint(*train::latest_checkpoint(dir));
    EXPECT_EQ(ck.model.at("a.weight").to_vector<float>()[0], static_cast<float>(c.want));
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string(), "checkpoint-5") << "left behind: " << e.path();
  }
}

TEST(Checkpoint, ManifestNamesTheDamagedFile) {
  const std::string dir = fresh_dir("manifest");
  const std::string path = train::save_checkpoint(dir, 1, make_data(1, 64));
  ASSERT_TRUE(fs::exists(path + "/manifest.json"));
  EXPECT_NO_THROW(train::verify_checkpoint(path));
  flip_byte(path + "/model.safetensors", -3);  // a weight's byte: the safetensors file still parses
  EXPECT_KILN_ERROR(train::load_checkpoint(path), "model.safetensors", "damaged", "CRC-32C");
  flip_byte(path + "/model.safetensors", -3);
  EXPECT_NO_THROW(train::load_checkpoint(path));
  fs::resize_file(path + "/vocab.txt", 3);
  EXPECT_KILN_ERROR(train::verify_checkpoint(path), "vocab.txt", "damaged", "3 bytes");
  fs::remove(path + "/vocab.txt");
  EXPECT_KILN_ERROR(train::verify_checkpoint(path), "vocab.txt", "missing");
  fs::remove(path + "/manifest.json");
  EXPECT_KILN_ERROR(train::load_checkpoint(path), "manifest.json", "missing");
}

// --resume's choice: the newest checkpoint that verifies, and why the newer ones did not.
TEST(Checkpoint, NewestValidCheckpointSkipsDamagedOnes) {
  const std::string dir = fresh_dir("newest_valid");
  for (int64_t s : {1, 2, 3}) train::save_checkpoint(dir, s, make_data(s, 64));
  flip_byte(dir + "/checkpoint-3/optimizer.safetensors", -2);
  fs::resize_file(dir + "/checkpoint-2/trainer_state.json", 10);
  std::vector<std::string> skipped;
  const auto found = train::load_newest_valid_checkpoint(dir, &skipped);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(fs::path(found->path).filename(), "checkpoint-1");
  EXPECT_EQ(found->checkpoint.trainer_state["step"], 1);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].rfind("checkpoint-3: ", 0), 0u) << skipped[0];
  EXPECT_NE(skipped[0].find("optimizer.safetensors is damaged"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("trainer_state.json is damaged"), std::string::npos) << skipped[1];
  fs::remove(dir + "/checkpoint-1/config.json");
  EXPECT_FALSE(train::load_newest_valid_checkpoint(dir).has_value());
}

}  // namespace
}  // namespace kiln
