// Note [Sharded checkpoints] (nn/weight_files.h).
#include "nn/weight_files.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_util.h"
#include "core/json_util.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"

namespace kiln::nn {
namespace fs = std::filesystem;

std::map<std::string, std::string> parse_weight_index(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json_bounded(text, source);  // Note [Bounded JSON]
  KILN_CHECK(j.is_object(), source, ": must be a JSON object, got ", j.type_name());
  KILN_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), source,
             ": needs \"weight_map\", an object of tensor name -> shard file");
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    KILN_CHECK(file.is_string(), source, ": the shard of tensor '", tensor, "' must be a file name, got ",
               file.type_name());
    const std::string name = file.get<std::string>();
    KILN_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                   name.find('\0') == std::string::npos,
               source, ": the shard of tensor '", tensor, "' is '", name,
               "', not a file name in the model directory");
    map.emplace(tensor, name);
  }
  KILN_CHECK(!map.empty(), source, ": weight_map is empty");
  return map;
}

bool has_weight_files(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / kWeightsFile, ec) || fs::exists(fs::path(dir) / kWeightIndexFile, ec);
}

namespace {

struct Index {
  std::vector<std::string> shards;             // in first-use order
  std::map<std::string, std::string> weights;  // tensor -> shard
};

Index read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / kWeightIndexFile).string();
  Index ix;
  ix.weights = parse_weight_index(read_file_bounded(path, path, kMaxJsonBytes), path);
  std::set<std::string> seen;
  for (const auto& [tensor, shard] : ix.weights)
    if (seen.insert(shard).second) ix.shards.push_back(shard);
  std::sort(ix.shards.begin(), ix.shards.end());
  return ix;
}

}  // namespace

std::vector<std::string> weight_files(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d / kWeightsFile, ec)) return {(d / kWeightsFile).string()};
  const std::string index_path = (d / kWeightIndexFile).string();
  KILN_CHECK(fs::exists(index_path, ec), dir, ": no ", kWeightsFile, " or ", kWeightIndexFile, " in it");
  const Index ix = read_index(dir);
  std::vector<std::string> paths;
  std::map<std::string, std::string> found;  // tensor -> shard holding it
  for (const std::string& shard : ix.shards) {
    const std::string path = (d / shard).string();
    KILN_CHECK(fs::exists(path, ec), index_path, ": shard '", shard, "' is not in ", dir);
    const SafeTensorsFile f = SafeTensorsFile::open(path);
    for (const SafeTensorInfo& info : f.tensors()) {
      const auto it = ix.weights.find(info.name);
      KILN_CHECK(it != ix.weights.end(), path, ": tensor '", info.name, "' is not in ", index_path);
      KILN_CHECK(it->second == shard, path, ": tensor '", info.name, "' is mapped to shard '", it->second, "' by ",
                 index_path);
      KILN_CHECK(found.emplace(info.name, shard).second, path, ": tensor '", info.name, "' is in two shards");
    }
    paths.push_back(path);
  }
  for (const auto& [tensor, shard] : ix.weights)
    KILN_CHECK(found.count(tensor), index_path, ": tensor '", tensor, "' is not in its shard '", shard, "'");
  return paths;
}

std::map<std::string, Tensor> load_weight_files(const std::string& dir) {
  std::map<std::string, Tensor> all;
  for (const std::string& path : weight_files(dir))  // checked: no tensor in two shards
    all.merge(load_safetensors(path));
  return all;
}

void save_weight_files(const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes) {
  const auto bytes = [](const Tensor& t) { return static_cast<uint64_t>(t.numel()) * t.element_size(); };
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += bytes(t);
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    save_safetensors((fs::path(dir) / kWeightsFile).string(), tensors);
    return;
  }
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0;
  for (const auto& [name, t] : tensors) {
    if (!shards.back().empty() && in_shard + bytes(t) > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, t);
    in_shard += bytes(t);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors((fs::path(dir) / file).string(), shards[i]);
    for (const auto& [name, t] : shards[i]) index["weight_map"][name] = file;
  }
  write_file_atomic((fs::path(dir) / kWeightIndexFile).string(), index.dump(2) + "\n");
}

}  // namespace kiln::nn
