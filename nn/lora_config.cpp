// LoraConfig: PEFT's adapter_config.json (peft.LoraConfig) read and written.
#include <cmath>

#include "core/json_util.h"
#include "nn/config_fields.h"
#include "nn/lora.h"

namespace kiln::nn {

using nlohmann::json;
using config_fields::brief;

double LoraConfig::scaling() const {
  const double rank = static_cast<double>(r);
  return use_rslora ? lora_alpha / std::sqrt(rank) : lora_alpha / rank;
}

std::vector<std::string> LoraConfig::saved_modules() const {
  std::vector<std::string> out = modules_to_save;
  if (task_type == "SEQ_CLS" || task_type == "TOKEN_CLS")  // PeftModelFor{Sequence,Token}Classification
    for (const char* head : {"classifier", "score"})
      if (std::find(out.begin(), out.end(), head) == out.end()) out.push_back(head);
  return out;
}

void LoraConfig::validate(const std::string& source) const {
  KILN_CHECK(r > 0 && r <= config_fields::kMaxSize, source, ": r = ", r, " must be a positive integer (the adapter's rank)");
  KILN_CHECK(std::isfinite(lora_alpha) && lora_alpha > 0, source, ": lora_alpha = ", lora_alpha, " must be positive");
  KILN_CHECK(lora_dropout >= 0 && lora_dropout < 1, source, ": lora_dropout = ", lora_dropout, " must be in [0, 1)");
  KILN_CHECK(bias == "none" || bias == "all" || bias == "lora_only", source, ": bias '", bias,
             "' must be none, all or lora_only");
  KILN_CHECK(init_lora_weights == "true" || init_lora_weights == "false" || init_lora_weights == "gaussian", source,
             ": init_lora_weights '", init_lora_weights, "' is not supported (true, false or gaussian)");
  KILN_CHECK(target_regex || !target_modules.empty(), source,
             ": no target_modules (name the layers to adapt, e.g. query,value or q_proj,v_proj, or all-linear)");
  for (const std::string& t : target_modules)
    KILN_CHECK(!t.empty(), source, ": target_modules holds an empty name");
}

json LoraConfig::to_json() const {
  validate();
  json j;  // the fields of peft.LoraConfig (0.10), so PEFT's from_pretrained takes every key
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["bias"] = bias;
  j["fan_in_fan_out"] = fan_in_fan_out;
  j["inference_mode"] = true;
  j["init_lora_weights"] = init_lora_weights == "gaussian" ? json("gaussian") : json(init_lora_weights == "true");
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  j["lora_alpha"] = lora_alpha;
  j["lora_dropout"] = lora_dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = modules_to_save.empty() ? json(nullptr) : json(modules_to_save);
  j["peft_type"] = "LORA";
  j["r"] = r;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  j["target_modules"] = target_regex ? json(*target_regex)
                        : target_modules == std::vector<std::string>{"all-linear"} ? json("all-linear")
                                                                                   : json(target_modules);
  j["task_type"] = task_type.empty() ? json(nullptr) : json(task_type);
  j["use_dora"] = false;
  j["use_rslora"] = use_rslora;
  return j;
}

namespace {

// A value that asks for nothing: null, false, "", {} or [] (PEFT's defaults
// for the options kiln does not implement).
bool is_default(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_object() || v.is_array()) && v.empty());
}

}  // namespace

LoraConfig LoraConfig::from_json(const json& j, const std::string& source) {
  KILN_CHECK(j.is_object(), source, ": an adapter config must be a JSON object, got ", j.type_name());
  config_fields::FieldReader rd(j, source);
  LoraConfig c;
  std::string peft_type;
  rd.optional("peft_type", peft_type);
  KILN_CHECK(peft_type == "LORA", source, ": peft_type '", peft_type,
             "' is not supported: kiln reads LoRA adapters (peft_type LORA), not ",
             peft_type.empty() ? std::string("a config without peft_type") : peft_type);
  if (const json* v = rd.get("r")) {
    KILN_CHECK(v->is_number_integer(), source, ": field 'r' must be an integer, got ", brief(*v));
    KILN_CHECK(v->get<int64_t>() > 0 && v->get<int64_t>() <= config_fields::kMaxSize, source, ": r = ", brief(*v),
               " must be a positive integer (the adapter's rank)");
    c.r = v->get<int64_t>();
  }
  rd.optional("lora_alpha", c.lora_alpha);
  rd.optional("lora_dropout", c.lora_dropout);
  if (const json* v = rd.get("target_modules")) {
    if (v->is_string()) {
      if (v->get<std::string>() == "all-linear") c.target_modules = {"all-linear"};
      else c.target_regex = v->get<std::string>();
    } else if (!v->is_null()) {
      rd.optional("target_modules", c.target_modules);
    }
  }
  std::optional<std::string> bias;
  rd.optional("bias", bias);
  if (bias) c.bias = *bias;
  if (const json* v = rd.get("modules_to_save"); v && !v->is_null()) rd.optional("modules_to_save", c.modules_to_save);
  rd.optional("use_rslora", c.use_rslora);
  if (const json* v = rd.get("init_lora_weights")) {
    KILN_CHECK(v->is_boolean() || v->is_string(), source, ": field 'init_lora_weights' must be true, false or a "
               "method name, got ", brief(*v));
    c.init_lora_weights = v->is_boolean() ? (v->get<bool>() ? "true" : "false") : v->get<std::string>();
  }
  std::optional<std::string> task, base;
  rd.optional("task_type", task);
  rd.optional("base_model_name_or_path", base);
  c.task_type = task.value_or("");
  c.base_model_name_or_path = base.value_or("");
  rd.optional("fan_in_fan_out", c.fan_in_fan_out);
  // Bookkeeping PEFT writes that asks nothing of the model.
  for (const char* key : {"auto_mapping", "revision", "inference_mode", "megatron_core", "peft_version"})
    (void)rd.get(key);
  // Everything else is an option kiln does not implement: fine at its default, else refused by name.
  for (const auto& [key, text] : rd.unused()) {
    const json v = json::parse(text);
    KILN_CHECK(is_default(v), source, ": '", key, "' = ", brief(v),
               " is not supported by kiln's LoRA (only its default: kiln would compute another adapter than PEFT)");
  }
  c.validate(source);
  return c;
}

LoraConfig LoraConfig::from_file(const std::string& path) {
  return from_json(read_json_file(path, path), path);
}

}  // namespace kiln::nn
