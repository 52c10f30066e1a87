#include "nn/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "nn/safetensors.h"

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

}  // namespace

LoadReport load_hf_state(Module& model, std::map<std::string, Tensor> state, const std::string& source) {
  std::set<std::string> model_keys;
  for (auto& [n, t] : model.state_dict()) model_keys.insert(n);
  const bool model_prefixed = std::any_of(model_keys.begin(), model_keys.end(), [](auto& k) { return starts(k, "bert."); });
  LoadReport report;
  std::map<std::string, Tensor> mapped;
  for (auto& [raw, t] : state) {
    std::string k = legacy_rename(raw);
    if (k == "cls.predictions.decoder.weight") continue;  // tied to the word embeddings
    if (k == "cls.predictions.decoder.bias") {
      if (!state.count("cls.predictions.bias")) k = "cls.predictions.bias";
      else continue;
    }
    if (model_prefixed && !starts(k, "bert.") && model_keys.count("bert." + k)) k = "bert." + k;
    if (!model_prefixed && starts(k, "bert.")) k = k.substr(5);
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
    const bool head = starts(k, "cls.") || starts(k, "classifier.") ||
                      (model_prefixed && starts(k, "bert.pooler.")) || starts(k, "pooler.");
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

BertConfig load_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  KILN_CHECK(fs::is_directory(dir), dir, ": model directory not found");
  KILN_CHECK(fs::exists(path), path, ": file not found");
  return BertConfig::from_json_file(path);
}

void save_pretrained(const Module& model, const BertConfig& config, const std::string& dir,
                     const std::string& vocab_file) {
  const fs::path target = fs::absolute(dir);
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  const fs::path tmp = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  KILN_CHECK(fs::create_directory(tmp, ec), tmp.string(), ": cannot create directory: ", ec.message());
  try {
    config.to_json_file((tmp / "config.json").string());
    save_safetensors((tmp / "model.safetensors").string(), model.state_dict());
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
