#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "checkpoint-";

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) fail(p.string(), ": cannot open for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(p.string(), ": fsync failed");
}

std::optional<int64_t> step_of(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(std::string(kPrefix).size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

void remove_stale_temporaries(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".checkpoint-", 0) == 0 && name.find(".tmp-") != std::string::npos) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    if (!e.is_directory()) continue;
    if (auto s = step_of(e.path())) found.emplace_back(*s, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [s, p] : found) out.push_back(p);
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& output_dir) {
  auto all = list_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string save_checkpoint(const std::string& output_dir, int64_t step, const CheckpointData& data, int keep_last) {
  KILN_CHECK(step >= 0, "save_checkpoint: negative step ", step);
  KILN_CHECK(data.trainer_state.is_object() && data.trainer_state.contains("step"),
             "save_checkpoint: trainer_state must be an object holding \"step\"");
  const fs::path root = fs::absolute(output_dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  KILN_CHECK(fs::is_directory(root), output_dir, ": cannot create output directory: ", ec.message());
  remove_stale_temporaries(root);
  const fs::path final_dir = root / (kPrefix + std::to_string(step));
  const fs::path tmp = root / (".checkpoint-" + std::to_string(step) + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  KILN_CHECK(fs::create_directory(tmp, ec), tmp.string(), ": cannot create: ", ec.message());
  try {
    data.config.to_json_file((tmp / "config.json").string());
    nn::save_safetensors((tmp / "model.safetensors").string(), data.model);
    nn::NamedTensors opt(data.optimizer.begin(), data.optimizer.end());
    nn::save_safetensors((tmp / "optimizer.safetensors").string(), opt, {{"format", "kiln"}});
    const std::string state = data.trainer_state.dump(2) + "\n";
    write_file_atomic((tmp / "trainer_state.json").string(),
                      {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(state.data()), state.size())});
    for (const auto& [name, text] : data.extra_files) {
      KILN_CHECK(!name.empty() && name.find('/') == std::string::npos && name[0] != '.' &&
                     fs::path(name).filename() == name,
                 "save_checkpoint: extra file name '", name, "' is not a plain file name");
      write_file_atomic((tmp / name).string(),
                        {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())});
      fsync_path(tmp / name, false);
    }
    for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"})
      fsync_path(tmp / f, false);
    fsync_path(tmp, true);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // re-saving the same step replaces it
    fs::rename(tmp, final_dir);
    fsync_path(root, true);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    fail(output_dir, ": could not save checkpoint ", step, ": ", e.what());
  }
  if (keep_last > 0) {
    auto all = list_checkpoints(root.string());
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) fs::remove_all(all[i], ec);
  }
  return final_dir.string();
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  KILN_CHECK(fs::is_directory(dir), dir, ": checkpoint directory not found");
  LoadedCheckpoint c;
  c.config = BertConfig::from_json_file(dir + "/config.json");
  c.model = nn::load_safetensors(dir + "/model.safetensors");
  c.optimizer = nn::load_safetensors(dir + "/optimizer.safetensors");
  const std::string path = dir + "/trainer_state.json";
  std::ifstream f(path);
  KILN_CHECK(f.good(), path, ": file not found");
  std::stringstream ss;
  ss << f.rdbuf();
  c.trainer_state = nlohmann::json::parse(ss.str(), nullptr, false);
  KILN_CHECK(!c.trainer_state.is_discarded() && c.trainer_state.is_object() && c.trainer_state.contains("step") &&
                 c.trainer_state["step"].is_number_integer(),
             path, ": not a valid trainer state (expected a JSON object with an integer \"step\")");
  return c;
}

}  // namespace kiln::train
