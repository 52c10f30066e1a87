// Optimizer shards of a checkpoint (Note [Optimizer shards] in
// train/checkpoint.h): their names, the merge at load and `kiln checkpoint
// consolidate`.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"
#include "train/checkpoint.h"

namespace kiln::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kShardPrefix = "optimizer-shard-";
constexpr const char* kShardSuffix = ".safetensors";
constexpr const char* kStatePrefix = "optimizer.state.";

struct ShardName {
  int rank = 0, world = 0;
};

// "optimizer-shard-R-of-N.safetensors" -> {R, N}; nullopt for any other name.
std::optional<ShardName> parse_shard_name(const std::string& name) {
  const std::string prefix = kShardPrefix, suffix = kShardSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t of = middle.find("-of-");
  if (of == std::string::npos) return std::nullopt;
  ShardName s;
  const char* b = middle.data();
  const auto r = std::from_chars(b, b + of, s.rank);
  const auto w = std::from_chars(b + of + 4, b + middle.size(), s.world);
  if (r.ec != std::errc() || r.ptr != b + of || w.ec != std::errc() || w.ptr != b + middle.size()) return std::nullopt;
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) return std::nullopt;
  return s;
}

std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (parse_shard_name(e.path().filename().string())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string optimizer_shard_name(int rank, int world) {
  return kShardPrefix + std::to_string(rank) + "-of-" + std::to_string(world) + kShardSuffix;
}

std::string optimizer_shard_staging_dir(const std::string& output_dir, int64_t step) {
  return (fs::path(output_dir) / (".optimizer-shards-" + std::to_string(step))).string();
}

void merge_optimizer_shards(const std::string& dir, std::map<std::string, Tensor>& optimizer) {
  const std::vector<std::string> names = shard_files(dir);
  if (names.empty()) return;
  const int world = parse_shard_name(names.front())->world;
  std::set<int> ranks;
  for (const std::string& n : names) {
    const ShardName s = *parse_shard_name(n);
    KILN_CHECK(s.world == world, dir, ": optimizer shards of ", world, " and of ", s.world,
               " ranks side by side (", names.front(), ", ", n, ")");
    ranks.insert(s.rank);
  }
  for (int r = 0; r < world; ++r)
    KILN_CHECK(ranks.count(r), dir, ": ", optimizer_shard_name(r, world), " is missing (", names.size(), " of ", world,
               " optimizer shards present)");
  for (const std::string& n : names) {
    for (auto& [key, t] : nn::load_safetensors(dir + "/" + n)) {
      KILN_CHECK(key.rfind(kStatePrefix, 0) == 0, dir, "/", n, ": '", key, "' is not optimizer state");
      KILN_CHECK(optimizer.emplace(key, t).second, dir, "/", n, ": '", key,
                 "' is also in another file of the checkpoint");
    }
  }
}

int consolidate_checkpoint(const std::string& dir) {
  const fs::path path = fs::path(dir).lexically_normal();
  const LoadedCheckpoint ck = load_checkpoint(path.string());  // verified, shards merged
  const std::vector<std::string> shards = shard_files(path.string());
  if (shards.empty()) return 0;
  KILN_CHECK(path.filename() == "checkpoint-" + std::to_string(ck.resume.step), path.string(),
             ": a checkpoint directory is named checkpoint-STEP after its step (", ck.resume.step, ")");
  CheckpointData data;
  data.model = nn::NamedTensors(ck.model.begin(), ck.model.end());
  data.optimizer = ck.optimizer;
  data.trainer_state = ck.trainer_state;
  data.trainer_state["optimizer_shards"] = 0;
  data.config = ck.config;
  const std::set<std::string> rewritten = {"config.json", "model.safetensors", "optimizer.safetensors",
                                           "trainer_state.json", "manifest.json"};
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (rewritten.count(name) || parse_shard_name(name) || !e.is_regular_file()) continue;
    data.extra_files[name] = read_file_bounded(e.path().string(), "checkpoint file", uint64_t{1} << 34);
  }
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  save_checkpoint(parent.string(), ck.resume.step, data);
  return static_cast<int>(shards.size());
}

}  // namespace kiln::train
