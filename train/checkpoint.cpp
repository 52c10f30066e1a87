#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/file_util.h"
#include "core/json_util.h"
#include "core/profiler.h"
#include "data/integrity.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kManifestFormat = "kiln-checkpoint-manifest";
constexpr const char* kAsideSuffix = ".aside";

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) fail(p.string(), ": cannot open for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(p.string(), ": fsync failed");
}

void write_text(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(), text);
}

// The one place checkpoint JSON is read (trainer_state.json, manifest.json):
// an object, or kiln::Error naming the file.
nlohmann::json read_json_object(const fs::path& path) {
  KILN_CHECK(fs::exists(path), path.string(), ": file not found");
  // Bounded (Note [Bounded JSON], core/json_util.h): regular file, 16 MiB, depth 64.
  nlohmann::json j = read_json_file(path.string(), path.string());
  KILN_CHECK(j.is_object(), path.string(), ": not a JSON object");
  return j;
}

std::optional<int64_t> parse_step(const std::string& digits) {
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

std::optional<int64_t> step_of(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  return parse_step(name.substr(std::string(kPrefix).size()));
}

// ".checkpoint-STEP.aside" -> STEP
std::optional<int64_t> aside_step_of(const std::string& name) {
  const std::string head = std::string(".") + kPrefix, tail = kAsideSuffix;
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  return parse_step(name.substr(head.size(), name.size() - head.size() - tail.size()));
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name[0] != '.' && fs::path(name).filename() == name;
}

// Writes manifest.json listing every other file of `dir` (Note [Checkpoint manifest]).
void write_manifest(const fs::path& dir, int64_t step) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kManifest) continue;
    const data::FileDigest d = data::file_digest(e.path().string());
    files[name] = {{"bytes", d.bytes}, {"crc32c", data::crc32c_hex(d.crc32c)}};
  }
  const nlohmann::json manifest = {{"format", kManifestFormat}, {"version", 1}, {"step", step}, {"files", files}};
  write_text(dir / kManifest, manifest.dump(2) + "\n");
}

// Everything of checkpoint `step` into `dir` (a fresh temporary directory), fsynced.
void write_checkpoint_files(const fs::path& dir, int64_t step, const CheckpointData& data) {
  data.config.to_json_file((dir / "config.json").string());
  nn::save_safetensors((dir / "model.safetensors").string(), data.model);
  nn::NamedTensors opt(data.optimizer.begin(), data.optimizer.end());
  nn::save_safetensors((dir / "optimizer.safetensors").string(), opt, {{"format", "kiln"}});
  write_text(dir / "trainer_state.json", data.trainer_state.dump(2) + "\n");
  for (const auto& [name, text] : data.extra_files) {
    KILN_CHECK(is_plain_file_name(name) && name != kManifest, "save_checkpoint: extra file name '", name,
               "' is not a plain file name");
    write_text(dir / name, text);
  }
  for (const auto& [name, path] : data.moved_files) {
    KILN_CHECK(is_plain_file_name(name) && name != kManifest && !fs::exists(dir / name),
               "save_checkpoint: moved file name '", name, "' is not a plain, new file name");
    std::error_code ec;
    fs::rename(path, dir / name, ec);
    KILN_CHECK(!ec, "save_checkpoint: cannot move ", path, " into the checkpoint: ", ec.message());
  }
  write_manifest(dir, step);
  for (const auto& e : fs::directory_iterator(dir)) fsync_path(e.path(), false);
  fsync_path(dir, true);
}

}  // namespace

void crash_point_for_tests(const char* point) {
  const char* want = std::getenv("KILN_TEST_CRASH_AT");
  if (want && std::strcmp(want, point) == 0) ::kill(::getpid(), SIGKILL);
}

std::vector<std::string> recover_checkpoints(const std::string& output_dir) {
  std::vector<std::string> restored;
  std::error_code ec;
  const fs::path root = output_dir;
  if (!fs::is_directory(root, ec)) return restored;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(root, ec)) entries.push_back(e.path());
  bool renamed = false;
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (name.rfind(".checkpoint-", 0) == 0 && name.find(".tmp-") != std::string::npos) {
      fs::remove_all(p, ec);  // a save that never got renamed in
    } else if (const auto step = aside_step_of(name)) {
      const fs::path final_dir = root / (kPrefix + std::to_string(*step));
      if (fs::is_directory(final_dir, ec)) {
        fs::remove_all(p, ec);  // the swap completed; the old copy is no longer needed
      } else {
        fs::rename(p, final_dir, ec);
        KILN_CHECK(!ec, p.string(), ": cannot rename back to ", final_dir.string(), ": ", ec.message());
        restored.push_back("recovered " + final_dir.string() + " from an interrupted save of the same step");
        renamed = true;
      }
    }
  }
  if (renamed) fsync_path(root, true);
  return restored;
}

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
  profiler::RecordScope span("save_checkpoint", profiler::Category::Checkpoint);
  KILN_CHECK(step >= 0, "save_checkpoint: negative step ", step);
  KILN_CHECK(data.trainer_state.is_object() && data.trainer_state.contains("step"),
             "save_checkpoint: trainer_state must be an object holding \"step\"");
  const fs::path root = fs::absolute(output_dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  KILN_CHECK(fs::is_directory(root), output_dir, ": cannot create output directory: ", ec.message());
  recover_checkpoints(root.string());
  const std::string name = kPrefix + std::to_string(step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  const fs::path aside = root / ("." + name + kAsideSuffix);
  fs::remove_all(tmp, ec);
  KILN_CHECK(fs::create_directory(tmp, ec), tmp.string(), ": cannot create: ", ec.message());
  bool moved_aside = false;
  try {
    write_checkpoint_files(tmp, step, data);
    crash_point_for_tests("checkpoint-before-rename");
    // Note [Atomic checkpoints]: the old copy of this step goes aside, never away, until the new one is in.
    if (fs::exists(final_dir)) {
      fs::rename(final_dir, aside);
      moved_aside = true;
      fsync_path(root, true);
      crash_point_for_tests("checkpoint-after-aside");
    }
    fs::rename(tmp, final_dir);
    fsync_path(root, true);
    crash_point_for_tests("checkpoint-after-swap");
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    if (moved_aside && !fs::exists(final_dir)) fs::rename(aside, final_dir, ec);
    fail(output_dir, ": could not save checkpoint ", step, ": ", e.what());
  }
  if (moved_aside) fs::remove_all(aside, ec);
  if (keep_last > 0) {
    auto all = list_checkpoints(root.string());
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) fs::remove_all(all[i], ec);
  }
  return final_dir.string();
}

void verify_checkpoint(const std::string& dir) {
  const fs::path root = dir;
  KILN_CHECK(fs::is_directory(root), dir, ": checkpoint directory not found");
  const fs::path manifest_path = root / kManifest;
  KILN_CHECK(fs::exists(manifest_path), manifest_path.string(),
             " is missing: not a complete kiln checkpoint (or one written before checkpoints had manifests)");
  const nlohmann::json m = read_json_object(manifest_path);
  KILN_CHECK(m.value("format", "") == kManifestFormat && m.contains("files") && m["files"].is_object(),
             manifest_path.string(), ": not a kiln checkpoint manifest");
  for (const auto& [name, entry] : m["files"].items()) {
    KILN_CHECK(is_plain_file_name(name), manifest_path.string(), ": lists '", name, "', not a plain file name");
    const fs::path file = root / name;
    KILN_CHECK(entry.is_object() && entry.contains("bytes") && entry["bytes"].is_number_unsigned() &&
                   entry.contains("crc32c") && entry["crc32c"].is_string() &&
                   data::parse_crc32c_hex(entry["crc32c"].get<std::string>()).has_value(),
               manifest_path.string(), ": the entry of '", name, "' is malformed");
    KILN_CHECK(fs::exists(file), file.string(), " is missing (", kManifest, " lists it)");
    const data::FileDigest d = data::file_digest(file.string());
    const uint64_t bytes = entry["bytes"].get<uint64_t>();
    const std::string want = entry["crc32c"].get<std::string>();
    KILN_CHECK(d.bytes == bytes, file.string(), " is damaged: ", d.bytes, " bytes, ", kManifest, " says ", bytes,
               " (truncated or overwritten)");
    KILN_CHECK(data::crc32c_hex(d.crc32c) == want, file.string(), " is damaged: its CRC-32C is ",
               data::crc32c_hex(d.crc32c), ", ", kManifest, " says ", want);
  }
}

ResumeState parse_resume_state(const nlohmann::json& st, const std::string& path) {
  KILN_CHECK(st.is_object() && st.contains("step") && st["step"].is_number_integer(), path,
             ": not a valid trainer state (expected a JSON object with an integer \"step\")");
  auto field = [&](const nlohmann::json& obj, const char* key, const char* type, auto is_type) -> const nlohmann::json* {
    const auto it = obj.find(key);
    if (it == obj.end()) return nullptr;
    KILN_CHECK(is_type(*it), path, ": \"", key, "\" must be ", type, ", got ", it->type_name());
    return &*it;
  };
  const auto is_string = [](const nlohmann::json& j) { return j.is_string(); };
  const auto is_int = [](const nlohmann::json& j) { return j.is_number_integer(); };
  const auto is_uint = [](const nlohmann::json& j) {
    return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
  };
  const auto is_object = [](const nlohmann::json& j) { return j.is_object(); };
  // An int64 (nlohmann keeps integers past INT64_MAX as unsigned).
  const auto int64_of = [&](const nlohmann::json& j, const char* key) {
    KILN_CHECK(j.is_number_integer() && (!j.is_number_unsigned() || j.get<uint64_t>() <= INT64_MAX), path, ": \"",
               key, "\" must be an integer of at most 2^63 - 1");
    return j.get<int64_t>();
  };
  ResumeState r;
  r.step = int64_of(st["step"], "step");
  KILN_CHECK(r.step >= 0, path, ": \"step\" must be >= 0, got ", r.step);
  if (const auto* j = field(st, "amp", "a string", is_string)) r.amp = j->get<std::string>();
  if (const auto* j = field(st, "kind", "a string", is_string)) r.kind = j->get<std::string>();
  if (const auto* j = field(st, "total_steps", "an integer", is_int)) r.total_steps = int64_of(*j, "total_steps");
  if (const auto* j = field(st, "batches_per_epoch", "an integer", is_int))
    r.batches_per_epoch = int64_of(*j, "batches_per_epoch");
  if (const auto* j = field(st, "vocab_crc32c", "a string", is_string)) r.vocab_crc32c = j->get<std::string>();
  for (auto [key, out] : {std::pair{"world_size", &r.world_size}, std::pair{"batch_size", &r.batch_size},
                          std::pair{"grad_accum", &r.grad_accum}})
    if (const auto* j = field(st, key, "an integer", is_int)) {
      *out = int64_of(*j, key);
      KILN_CHECK(*out >= 1, path, ": \"", key, "\" must be >= 1, got ", *out);
    }
  if (const auto* j = field(st, "max_tokens_per_batch", "an integer", is_int)) {
    r.max_tokens_per_batch = int64_of(*j, "max_tokens_per_batch");
    KILN_CHECK(r.max_tokens_per_batch >= 0, path, ": \"max_tokens_per_batch\" must be >= 0, got ",
               r.max_tokens_per_batch);
  }
  if (const auto* rng = field(st, "rng", "an object", is_object)) {
    const auto* seed = field(*rng, "seed", "an unsigned integer", is_uint);
    const auto* offset = field(*rng, "offset", "an unsigned integer", is_uint);
    KILN_CHECK(seed && offset, path, ": \"rng\" must hold \"seed\" and \"offset\"");
    r.has_rng = true;
    r.rng_seed = seed->get<uint64_t>();
    r.rng_offset = offset->get<uint64_t>();
  }
  if (const auto* loader = field(st, "loader", "an object", is_object)) {
    std::map<std::string, int64_t> m;
    for (const auto& [key, value] : loader->items()) {
      KILN_CHECK(value.is_number_integer(), path, ": \"loader\".\"", key, "\" must be an integer, got ",
                 value.type_name());
      m[key] = int64_of(value, "loader");
    }
    r.loader = std::move(m);
  }
  return r;
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  verify_checkpoint(dir);
  LoadedCheckpoint c;
  c.config = ModelConfig::from_json_file(dir + "/config.json");
  c.model = nn::load_safetensors(dir + "/model.safetensors");
  c.optimizer = nn::load_safetensors(dir + "/optimizer.safetensors");
  merge_optimizer_shards(dir, c.optimizer);
  const std::string path = dir + "/trainer_state.json";
  c.trainer_state = read_json_object(path);
  c.resume = parse_resume_state(c.trainer_state, path);
  return c;
}

std::optional<FoundCheckpoint> load_newest_valid_checkpoint(const std::string& output_dir,
                                                            std::vector<std::string>* skipped) {
  const std::vector<std::string> all = list_checkpoints(output_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return FoundCheckpoint{*it, load_checkpoint(*it)};
    } catch (const std::exception& e) {
      if (skipped) skipped->push_back(fs::path(*it).filename().string() + ": " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace kiln::train
