// LoRA adapters in PEFT's files: adapter_config.json + adapter_model.safetensors
// (Note [LoRA], nn/lora.h).
//
// Note [PEFT adapter names]: PEFT saves an adapted layer's matrices as
// "base_model.model.<layer>.lora_A.weight" (its in-memory name holds the
// adapter's name, ".lora_A.default.weight", which save_pretrained drops); a
// bias of an adapted layer as "<layer>.base_layer.bias" (the layer moved to
// .base_layer when PEFT wrapped it); a module to save by its plain name
// ("base_model.model.classifier.weight"; in memory
// "classifier.modules_to_save.default.weight"). kiln's module names are
// transformers' (the families' weight maps keep them), so each file name is
// "base_model.model." + kiln's name, with "lora_A.default." read as
// "lora_A." and ".base_layer.bias" as ".bias". PEFT's bias="all" also saves
// the biases of its wrapper around a module to save,
// "<module>.modules_to_save.bias" (the trained copy, read as "<module>.bias",
// which PEFT saves too: the two must agree) and
// "<module>.original_module.bias" (the untrained original, not read).
#include <filesystem>
#include <set>

#include "core/file_util.h"
#include "nn/hf_checkpoint.h"
#include "nn/lora.h"
#include "nn/model_family.h"

namespace kiln::nn {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  if (const size_t at = s.find(from); at != std::string::npos) s.replace(at, from.size(), to);
}

// A file name as kiln's parameter name (Note [PEFT adapter names]).
std::string kiln_name(std::string name) {
  if (name.rfind(kPrefix, 0) == 0) name = name.substr(std::string(kPrefix).size());
  replace_once(name, ".lora_A.default.", ".lora_A.");
  replace_once(name, ".lora_B.default.", ".lora_B.");
  replace_once(name, ".modules_to_save.default.", ".");
  replace_once(name, ".modules_to_save.", ".");
  if (ends_with(name, ".base_layer.bias")) name = name.substr(0, name.size() - 16) + ".bias";
  if (ends_with(name, ".base_layer.weight")) name = name.substr(0, name.size() - 18) + ".weight";
  return name;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  return a.numel() ? amax(abs(sub(a.to(DType::Float64), b.to(DType::Float64)))).item<double>() : 0.0;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 10; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 10) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

}  // namespace

NamedTensors adapter_state_dict(const Module& model, const LoraConfig& config) {
  NamedTensors out;
  std::set<std::string> taken;
  auto put = [&](const std::string& name, const Tensor& t) {
    if (taken.insert(name).second) out.emplace_back(kPrefix + name, t);
  };
  std::set<std::string> adapted;
  for (auto& [name, l] : adapted_layers(model)) {
    KILN_CHECK(!l->adapter->merged, "save_adapter: the adapter of ", name, " is merged into its weight (unmerge first)");
    put(name + ".lora_A.weight", l->adapter->A->weight);
    put(name + ".lora_B.weight", l->adapter->B->weight);
    adapted.insert(name);
  }
  KILN_CHECK(!adapted.empty(), "save_adapter: the model has no LoRA adapter");
  if (config.bias != "none")
    for (auto& [name, p] : model.named_parameters()) {
      if (!ends_with(name, ".bias")) continue;
      const std::string layer = name.substr(0, name.size() - 5);
      if (adapted.count(layer)) put(layer + ".base_layer.bias", p);
      else if (config.bias == "all") put(name, p);
    }
  const std::vector<std::string> saved = config.saved_modules();
  for (const auto& entry : model.named_modules()) {
    const std::string& mname = entry.first;  // (clang 14 captures no structured binding)
    if (std::any_of(saved.begin(), saved.end(), [&](const std::string& t) { return ends_with(mname, t); }))
      for (auto& [n, p] : entry.second->named_parameters()) put(mname + "." + n, p);
  }
  return out;
}

void save_adapter(const Module& model, const LoraConfig& config, const std::string& dir) {
  const NamedTensors tensors = adapter_state_dict(model, config);
  LoraConfig written = config;  // PEFT's fan_in_fan_out: the adapted layers store (in, out) weights (GPT-2's Conv1D)
  for (auto& [name, l] : adapted_layers(model)) written.fan_in_fan_out = written.fan_in_fan_out || l->weight_is_in_out();
  fs::create_directories(dir);
  write_file_atomic((fs::path(dir) / "adapter_config.json").string(), written.to_json().dump(2) + "\n");
  save_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors);
}

bool is_adapter_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "adapter_config.json", ec);
}

ModelConfig adapter_task_config(const ModelConfig& base, const std::string& dir) {
  const fs::path own = fs::path(dir) / "config.json";
  std::error_code ec;
  if (fs::is_regular_file(own, ec)) return ModelConfig::from_json_file(own.string());
  const LoraConfig c = LoraConfig::from_file((fs::path(dir) / "adapter_config.json").string());
  const bool seq = c.task_type == "SEQ_CLS", tok = c.task_type == "TOKEN_CLS";
  const fs::path weights = fs::path(dir) / "adapter_model.safetensors";
  if ((!seq && !tok) || !fs::is_regular_file(weights, ec)) return base;
  int64_t labels = 0;
  for (auto& [name, t] : load_safetensors(weights.string())) {
    const std::string k = kiln_name(name);
    if ((k.rfind("classifier.", 0) == 0 || k.rfind("score.", 0) == 0) && ends_with(k, ".weight") && t.dim() == 2)
      labels = labels == 0 ? t.size(0) : std::min(labels, t.size(0));
  }
  KILN_CHECK(labels > 0, dir, ": a ", c.task_type, " adapter without config.json and without its head's weights "
             "(modules_to_save classifier): the number of labels is unknown");
  const ModelTask task = seq ? ModelTask::SequenceClassification : ModelTask::TokenClassification;
  const std::string arch = model_family(base.model_type()).architecture(task);
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (int64_t i = 0; i < labels; ++i) {
    std::string n = "LABEL_";
    n += std::to_string(i);
    id2label[std::to_string(i)] = n;
    label2id[n] = i;
  }
  return base.with_field("architectures", nlohmann::json::array({arch}).dump())
      .with_field("id2label", id2label.dump())
      .with_field("label2id", label2id.dump());
}

LoraConfig load_adapter(Module& model, const std::string& dir, const std::string& base_prefix) {
  KILN_CHECK(fs::is_directory(dir), "--adapter ", dir, ": no such directory");
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  const fs::path weights = fs::path(dir) / "adapter_model.safetensors";
  KILN_CHECK(fs::is_regular_file(config_path), "--adapter ", dir, ": no adapter_config.json (not a PEFT adapter directory)");
  KILN_CHECK(fs::is_regular_file(weights), "--adapter ", dir, ": no adapter_model.safetensors",
             fs::exists(fs::path(dir) / "adapter_model.bin")
                 ? " (only adapter_model.bin: save the adapter with safe_serialization, or convert it)"
                 : "");
  const LoraConfig config = LoraConfig::from_file(config_path.string());
  std::map<std::string, Tensor> file;
  for (auto& [name, t] : load_safetensors(weights.string())) {
    if (name.find(".original_module.") != std::string::npos) continue;  // Note [PEFT adapter names]
    std::string k = kiln_name(name);
    if (!base_prefix.empty()) {
      if (k.rfind(base_prefix, 0) != 0) continue;  // the head's
      k = k.substr(base_prefix.size());
    }
    const auto [it, fresh] = file.emplace(k, t);
    KILN_CHECK(fresh || (it->second.sizes() == t.sizes() && it->second.dtype() == t.dtype() &&
                         max_abs_difference(it->second, t) == 0.0), weights.string(),
               ": tensors '", name, "' and another both name ", k, " with different values");
  }
  // Check everything before the model changes: the layers it adapts, the shapes of A and B, the rest.
  const std::vector<std::string> targets = lora_targets(model, config);
  std::map<std::string, Shape> expected;
  std::map<std::string, std::shared_ptr<Module>> modules;
  for (auto& [n, m] : model.named_modules()) modules[n] = m;
  for (const std::string& layer : targets) {
    auto* l = dynamic_cast<Adaptable*>(modules.at(layer).get());
    const Tensor& w = l->base_weight();
    const int64_t in = w.size(l->weight_is_in_out() ? 0 : 1), out = w.size(l->weight_is_in_out() ? 1 : 0);
    expected[layer + ".lora_A.weight"] = {config.r, in};
    expected[layer + ".lora_B.weight"] = {out, config.r};
  }
  std::map<std::string, Shape> params;
  for (auto& [n, p] : model.state_dict()) params[n] = p.sizes();
  std::vector<std::string> unknown, mismatched, absent;
  for (auto& [name, t] : file) {
    auto it = expected.find(name);
    const Shape* want = it != expected.end() ? &it->second : params.count(name) ? &params.at(name) : nullptr;
    if (!want) unknown.push_back(name);
    else if (t.sizes() != *want)
      mismatched.push_back(name + " (adapter " + shape_str(t.sizes()) + ", model " + shape_str(*want) + ")");
  }
  for (auto& [name, shape] : expected)
    if (!file.count(name)) absent.push_back(name);
  std::string msg;
  if (!mismatched.empty()) msg += " shapes differ: " + join(mismatched) + ";";
  if (!unknown.empty()) msg += " tensors for no layer of this model: " + join(unknown) + ";";
  if (!absent.empty()) msg += " adapted layers without their matrices: " + join(absent) + ";";
  KILN_CHECK(msg.empty(), "--adapter ", dir, " does not fit this model (an adapter of another base model or rank?):",
             msg);
  add_lora(model, config);
  model.load_state_dict(file, /*strict=*/false);
  return config;
}

}  // namespace kiln::nn
