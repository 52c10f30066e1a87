#include "nn/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/file_util.h"
#include "nn/model_family.h"
#include "nn/safetensors.h"
#include "nn/weight_files.h"

namespace kiln::nn {
namespace fs = std::filesystem;

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  KILN_CHECK(fs::exists(path), path, ": file not found");
  SafeTensorsFile f = SafeTensorsFile::open(path);
  std::map<std::string, Tensor> out;
  for (const SafeTensorInfo& info : f.tensors()) {
    const DType dt = f.kiln_dtype(info);
    Tensor t = empty(info.shape, TensorOptions(dt));
    const auto bytes = f.data(info);
    if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
    out.emplace(info.name, t);
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  std::vector<SafeTensorEntry> entries;
  for (const auto& [name, t] : tensors) {
    Tensor c = contiguous(to_device(t.detach(), kCPU));
    keep.push_back(c);
    entries.push_back({name, safetensors_dtype(c.dtype()), c.sizes(), c.raw_data(),
                       static_cast<size_t>(c.numel()) * c.element_size()});
  }
  write_safetensors(path, entries, metadata);
}

namespace {

std::string legacy_rename(std::string k) {
  auto ends = [&](const std::string& s) { return k.size() >= s.size() && k.compare(k.size() - s.size(), s.size(), s) == 0; };
  if (ends(".gamma")) k = k.substr(0, k.size() - 6) + ".weight";
  else if (ends(".beta")) k = k.substr(0, k.size() - 5) + ".bias";
  return k;
}

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// A file tensor's name as the base model's (legacy names renamed, no "bert." prefix).
std::string base_name(const std::string& raw, const WeightNames& names) {
  std::string k = legacy_rename(raw);
  return starts(k, names.base_prefix) ? k.substr(names.base_prefix.size()) : k;
}

// The shape a config implies for a tensor (by base_name), or nullopt when it
// does not fix it (a classifier head, a layer past the config's layer count,
// a tensor kiln does not know).
std::optional<Shape> config_shape(const TensorShapes& shapes, const std::string& name) {
  for (const auto* list : {&shapes.required, &shapes.optional})
    for (const auto& [n, shape] : *list)
      if (name == n) return shape;
  const std::string& prefix = shapes.layer_prefix;
  if (prefix.empty() || !starts(name, prefix)) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  const std::string index = name.substr(prefix.size(), dot == std::string::npos ? dot : dot - prefix.size());
  if (dot == std::string::npos || index.empty() || index.size() > 10 || (index.size() > 1 && index[0] == '0') ||
      !std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return std::nullopt;
  if (std::stoll(index) >= shapes.num_layers) return std::nullopt;  // ignored by the loader
  const std::string rest = name.substr(dot + 1);
  for (const auto& [n, shape] : shapes.layer)
    if (rest == n) return shape;
  return std::nullopt;
}

}  // namespace

void check_checkpoint_matches_config(const std::string& safetensors_path, const ModelConfig& config,
                                     const std::string& config_source) {
  check_checkpoint_matches_config(std::vector<std::string>{safetensors_path}, config, config_source);
}

void check_checkpoint_matches_config(const std::vector<std::string>& files, const ModelConfig& config,
                                     const std::string& config_source) {
  KILN_CHECK(!files.empty(), config_source, ": no weight files to check");
  const WeightNames& names = weight_names_for(config.model_type());
  const TensorShapes shapes = names.shapes(config);
  std::set<std::string> present;
  const std::string safetensors_path = files.size() == 1 ? files[0] : "the checkpoint's shards";
  for (const std::string& path : files) {
    KILN_CHECK(fs::exists(path), path, ": file not found");
    const SafeTensorsFile f = SafeTensorsFile::open(path);
    for (const SafeTensorInfo& info : f.tensors()) {
      const std::string name = base_name(info.name, names);
      present.insert(name);
      // A name the family itself knows (DistilBERT's "transformer.layer.N." under
      // GPT-2's "transformer." prefix) is not another family's.
      const bool own = config_shape(shapes, name) || (!shapes.layer_prefix.empty() && starts(name, shapes.layer_prefix));
      for (const std::string& other : supported_model_types()) {
        const std::string& prefix = weight_names_for(other).base_prefix;
        KILN_CHECK(own || prefix == names.base_prefix || !starts(info.name, prefix), path, ": tensor '",
                   info.name, "' is named as a ", other, " model's, but ", config_source, " has model_type '",
                   config.model_type(), "' (config.json of one family with another's weights?)");
      }
      const std::optional<Shape> want = config_shape(shapes, name);
      KILN_CHECK(!want || *want == info.shape, path, ": tensor '", info.name, "' has shape ",
                 shape_str(info.shape), " but ", config_source, " implies ", shape_str(want ? *want : Shape{}),
                 " (does config.json match the weights?)");
    }
  }
  for (const auto& [name, shape] : shapes.required)
    KILN_CHECK(present.count(name), safetensors_path, ": checkpoint lacks '", name, "', which every ",
               config.model_type(), " model has (config: ", config_source, ")");
  // Stops at the first missing tensor: a huge layer count costs no more than the file's tensor count.
  for (int64_t i = 0; i < shapes.num_layers; ++i)
    for (const auto& [rest, shape] : shapes.layer) {
      const std::string name = shapes.layer_prefix + std::to_string(i) + "." + rest;
      KILN_CHECK(present.count(name), safetensors_path, ": checkpoint lacks '", name, "', which ", config_source,
                 "'s ", shapes.layers_field, " = ", shapes.num_layers, " implies");
    }
}

LoadReport load_hf_state(Module& model, std::map<std::string, Tensor> state, const std::string& source,
                         const WeightNames& names) {
  std::set<std::string> model_keys;
  for (auto& [n, t] : model.state_dict()) model_keys.insert(n);
  const std::string& prefix = names.base_prefix;
  const bool model_prefixed =
      std::any_of(model_keys.begin(), model_keys.end(), [&](auto& k) { return starts(k, prefix); });
  LoadReport report;
  std::map<std::string, Tensor> mapped;
  for (auto& [raw, t] : state) {
    std::string k = legacy_rename(raw);
    // the word embeddings, unless the model has its own (GPT-2 with tie_word_embeddings false)
    if (std::find(names.tied.begin(), names.tied.end(), k) != names.tied.end() && !model_keys.count(k) &&
        !model_keys.count(prefix + k))
      continue;
    bool skip = false;
    for (const auto& [from, to] : names.aliases)
      if (k == from) {
        skip = state.count(to) > 0;  // the file has the model's own name too
        k = to;
      }
    if (skip) continue;
    if (model_prefixed && !starts(k, prefix) && model_keys.count(prefix + k)) k = prefix + k;
    if (!model_prefixed && starts(k, prefix)) k = k.substr(prefix.size());
    if (!model_keys.count(k)) {
      report.ignored.push_back(raw);
      continue;
    }
    KILN_CHECK(!mapped.count(k), source, ": tensors '", raw, "' and another both map to '", k, "'");
    mapped.emplace(k, t);
  }
  // Buffers transformers may or may not save (position_ids) are not required.
  std::vector<std::string> missing_base;
  for (const std::string& k : model_keys) {
    if (mapped.count(k)) continue;
    const std::string base = model_prefixed && starts(k, prefix) ? k.substr(prefix.size()) : k;
    const bool head = std::any_of(names.head_prefixes.begin(), names.head_prefixes.end(),
                                  [&](const std::string& p) { return starts(base, p); });
    const bool optional_buffer = k.find("position_ids") != std::string::npos;
    if (head) report.new_heads.push_back(k);
    else if (!optional_buffer) missing_base.push_back(k);
  }
  if (!missing_base.empty()) {
    std::string list;
    for (size_t i = 0; i < missing_base.size() && i < 10; ++i) list += (i ? ", " : "") + missing_base[i];
    fail(source, ": checkpoint lacks ", missing_base.size(), " model tensors: ", list,
         missing_base.size() > 10 ? ", ..." : "");
  }
  try {
    model.load_state_dict(mapped, false);
  } catch (const Error& e) {
    fail(source, ": ", e.what(), " (does config.json match the weights?)");
  }
  return report;
}

void check_model_dir(const std::string& dir, bool weights, const std::string& label) {
  const std::string where = label.empty() ? dir : label + " " + dir;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  KILN_CHECK(fs::exists(st), where, ": no such directory");
  KILN_CHECK(fs::is_directory(st), where, ": not a directory (a model directory holds config.json and "
             "model.safetensors)");
  KILN_CHECK(::access(dir.c_str(), R_OK | X_OK) == 0, where, ": cannot read the directory (",
             std::strerror(errno), ")");
  const fs::path d(dir);
  const auto check_file = [&](const char* name, const char* missing) {
    const fs::file_status f = fs::status(d / name, ec);
    KILN_CHECK(fs::exists(f), where, ": no ", name, " in it (", missing, ")");
    check_regular_file((d / name).string(), where + ": its " + name);  // "is not a regular file (a FIFO)"
    KILN_CHECK(::access((d / name).c_str(), R_OK) == 0, where, ": cannot read its ", name, " (",
               std::strerror(errno), ")");
  };
  check_file("config.json", "a Hugging Face model directory holds config.json and model.safetensors");
  if (!weights) return;
  KILN_CHECK(fs::exists(d / kWeightsFile, ec) || fs::exists(d / kWeightIndexFile, ec) ||
                 !fs::exists(d / "adapter_config.json", ec),
             where, ": it holds a LoRA adapter (adapter_config.json), not a whole model: pass the base model as --model "
             "and this directory as --adapter (or write a merged model with kiln merge-adapter)");
  KILN_CHECK(has_weight_files(dir) || !fs::exists(d / "pytorch_model.bin", ec), where,
             ": no model.safetensors in it, only pytorch_model.bin, which kiln does not read; convert it with "
             "tools/convert_pytorch_to_safetensors.py ", dir);
  if (!fs::exists(d / kWeightsFile, ec) && fs::exists(d / kWeightIndexFile, ec)) {
    check_file(kWeightIndexFile, "the index of the model's weight shards");  // Note [Sharded checkpoints]
    return;
  }
  check_file("model.safetensors", "the model's weights");
}

BertConfig load_config(const std::string& dir) {
  check_model_dir(dir, false);
  return BertConfig::from_json_file(dir + "/config.json");
}

ModelConfig load_model_config(const std::string& dir) {
  check_model_dir(dir, false);
  return ModelConfig::from_json_file(dir + "/config.json");
}

ModelConfig pretrained_config(const std::string& dir) {
  check_model_dir(dir, true);  // what load_config checks, and the weights
  const ModelConfig config = ModelConfig::from_json_file(dir + "/config.json");
  check_checkpoint_matches_config(weight_files(dir), config, dir + "/config.json");
  return config;
}

LoadReport load_pretrained_weights(Module& model, const std::string& dir, const ModelConfig& config) {
  const std::vector<std::string> files = weight_files(dir);  // Note [Sharded checkpoints]
  const std::string source = files.size() == 1 ? files[0] : dir + "/" + kWeightIndexFile;
  return load_hf_state(model, load_weight_files(dir), source, weight_names_for(config.model_type()));
}

void save_pretrained(const Module& model, const ModelConfig& config, const std::string& dir,
                     const std::string& vocab_file, uint64_t max_shard_bytes) {
  const fs::path target = fs::absolute(dir);
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  const fs::path tmp = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  KILN_CHECK(fs::create_directory(tmp, ec), tmp.string(), ": cannot create directory: ", ec.message());
  try {
    config.to_json_file((tmp / "config.json").string());
    save_weight_files(tmp.string(), model.state_dict(), max_shard_bytes);  // Note [Sharded checkpoints]
    if (!vocab_file.empty()) check_regular_file(vocab_file, vocab_file);  // Note [Bounded input]
    if (!vocab_file.empty()) fs::copy_file(vocab_file, tmp / "vocab.txt", fs::copy_options::overwrite_existing);
    // replace: move the old directory aside, rename the new one in, drop the old
    const fs::path old = parent / (target.filename().string() + ".old-" + std::to_string(::getpid()));
    const bool had_old = fs::exists(target);
    if (had_old) fs::rename(target, old);
    fs::rename(tmp, target);
    if (had_old) fs::remove_all(old, ec);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    fail(dir, ": could not save model: ", e.what());
  }
}

}  // namespace kiln::nn
