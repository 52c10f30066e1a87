// LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
// Models") as Hugging Face PEFT makes, trains, saves and merges them, in
// PEFT's file format both ways.
//
//   nn::LoraConfig c;  c.r = 8;  c.lora_alpha = 16;  c.target_modules = {"query", "value"};
//   c.task_type = "SEQ_CLS";                      // the head (classifier) trains and is saved too
//   nn::add_lora(*model, c);                       // everything else frozen
//   ... train ...
//   nn::save_adapter(*model, c, "sst2-lora");      // adapter_config.json + adapter_model.safetensors
//   nn::load_adapter(*other_base, "sst2-lora");    // a PEFT adapter as well
//   nn::merge_and_unload(*model);                  // a plain model with W + scale B A
//
// Note [LoRA]
// An adapted layer y = x W^T + b (W (out, in)) computes
//   y + scale * dropout(x) A^T B^T,   A (r, in), B (out, r),
// as PEFT's lora.Linear.forward: the term is two skinny GEMMs beside the
// layer's own, never the merged (out, in) matrix. scale = lora_alpha / r, or
// lora_alpha / sqrt(r) with use_rslora (rsLoRA). A is initialised as
// torch.nn.Linear's weight (kaiming_uniform, a = sqrt(5): U(-1/sqrt(in),
// 1/sqrt(in))), B to zero, so a new adapter changes nothing until trained
// (init_lora_weights "gaussian": A ~ N(0, 1/r); false: B keeps Linear's
// initialisation too). A and B are submodules "lora_A" and "lora_B" of the
// adapted layer, so their names ("...query.lora_A.weight") are PEFT's saved
// names without its "base_model.model." prefix; the dropout is the layer's
// "lora_dropout" submodule (no parameters), which model.train()/eval()
// switch. GPT-2's Conv1D stores W as (in, out) (PEFT's fan_in_fan_out); its
// A and B have the same shapes and merging adds the transposed product.
//
// Which layers: target_modules as PEFT matches them against each module's
// full name: a name list matches a module whose name is a listed name or
// ends in "." + one ("query" matches "bert.encoder.layer.3.attention.self.
// query"); the string form (target_regex here) must match the whole name
// (re.fullmatch); "all-linear" takes every Linear and Conv1D but the output
// layer (PEFT 0.8+). A name that selects nothing, or selects a layer that is
// not a Linear or Conv1D, is an error naming it. add_lora freezes every other
// parameter (requires_grad false: no gradient computed, no optimizer state;
// Note [Frozen parameters], nn/freeze.h), except: bias "all" keeps every
// bias trainable, "lora_only" the adapted layers' biases; modules_to_save
// (plus "classifier" and "score" for task_type SEQ_CLS and TOKEN_CLS, as
// PEFT's PeftModelForSequenceClassification adds them) stay trainable whole.
// A module to save matches when its full name ends with the listed string
// (PEFT's endswith, so "classifier" also takes DistilBERT's "pre_classifier").
//
// merge: W += scale B A (for Conv1D W += (scale B A)^T), keeping W's value
// from before, so unmerge restores it bit for bit; merged output equals the
// adapted output to rounding. merge_and_unload merges and drops the adapters:
// the plain model PEFT's merge_and_unload gives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/nn/layers.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// PEFT's LoraConfig: the fields of adapter_config.json kiln reads and writes.
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  std::vector<std::string> target_modules;  // names, or {"all-linear"} (Note [LoRA])
  std::optional<std::string> target_regex;  // PEFT's string form of target_modules: re.fullmatch on full names
  std::string bias = "none";                // none | all | lora_only
  std::vector<std::string> modules_to_save;
  bool use_rslora = false;
  std::string init_lora_weights = "true";  // true | false | gaussian
  std::string task_type;                   // SEQ_CLS, TOKEN_CLS, CAUSAL_LM, FEATURE_EXTRACTION, ... or ""
  std::string base_model_name_or_path;
  bool fan_in_fan_out = false;  // written as PEFT does for a model of Conv1D layers (GPT-2); kiln reads each layer's own layout

  double scaling() const;
  // modules_to_save and the task's heads PEFT adds (SEQ_CLS, TOKEN_CLS: classifier, score).
  std::vector<std::string> saved_modules() const;
  // kiln::Error naming the field and `source` for r <= 0, alpha <= 0, a
  // dropout outside [0, 1), an unknown bias or init, no target modules.
  void validate(const std::string& source = "LoraConfig") const;
  nlohmann::json to_json() const;  // adapter_config.json as PEFT writes it ("peft_type": "LORA")
  // Refuses other PEFT methods (IA3, prefix tuning, ...: peft_type), and LoRA
  // options kiln does not implement (use_dora, rank_pattern, alpha_pattern,
  // layers_to_transform, layer_replication, init methods beyond true / false /
  // gaussian), each one error naming the field.
  static LoraConfig from_json(const nlohmann::json& j, const std::string& source);
  static LoraConfig from_file(const std::string& path);
};

// The adapter a layer carries (Adaptable::adapter).
struct LoraAdapter {
  std::shared_ptr<Linear> A, B;      // lora_A (r, in), lora_B (out, r): submodules of the layer
  std::shared_ptr<Dropout> dropout;  // lora_dropout
  double scale = 1.0;
  bool merged = false;
  Tensor weight_before_merge;  // what unmerge() restores
};

// Whether the layer's output needs its adapter's term (one attached, not merged).
bool adapter_term_needed(const Adaptable& layer);

// The full names of the layers `config` selects (Note [LoRA]), or the
// kiln::Error add_lora would give.
std::vector<std::string> lora_targets(const Module& model, const LoraConfig& config);

// Attaches an adapter to every layer `config` selects and freezes the rest
// (Note [LoRA]). Returns the adapted layers' full names, in module order.
std::vector<std::string> add_lora(Module& model, const LoraConfig& config);

// Every adapted layer of the model by full name.
std::vector<std::pair<std::string, Adaptable*>> adapted_layers(const Module& model);

void merge_adapters(Module& model);
void unmerge_adapters(Module& model);
void merge_and_unload(Module& model);

// The tensors of adapter_model.safetensors, by PEFT's names
// ("base_model.model.<layer>.lora_A.weight"; the biases bias says, an adapted
// layer's as "<layer>.base_layer.bias"; every tensor of the modules to save).
NamedTensors adapter_state_dict(const Module& model, const LoraConfig& config);
// Writes dir/adapter_config.json and dir/adapter_model.safetensors
// (atomically; dir is created).
void save_adapter(const Module& model, const LoraConfig& config, const std::string& dir);
// Reads a PEFT (or kiln) adapter directory, attaches its adapters to `model`
// (add_lora) and loads its tensors: a tensor for no place in the model, a
// shape that differs (an adapter of another base or rank) or an adapted
// layer left without its A or B is one kiln::Error naming them; nothing of
// the model changes then. PEFT's names with or without the adapter name
// ("lora_A.default.weight") are read. With base_prefix (the family's
// WeightNames::base_prefix, "bert."), `model` is the family's base model (no
// head): the adapter's names lose that prefix, and its head's tensors (the
// modules to save outside the base model) are left out.
LoraConfig load_adapter(Module& model, const std::string& dir, const std::string& base_prefix = "");
// Whether dir holds an adapter (adapter_config.json).
bool is_adapter_dir(const std::string& dir);

// The config of the task model an adapter directory was trained on: its own
// config.json when it has one (kiln finetune --lora-r writes the head's
// labels there); else, for a PEFT adapter of task_type SEQ_CLS or TOKEN_CLS,
// `base` with the family's head class in architectures and as many labels as
// the saved head has rows (the smallest head weight saved under "classifier"
// or "score": RoBERTa's out_proj, not its dense), named LABEL_0, LABEL_1, ...
// as transformers names them; else `base`.
ModelConfig adapter_task_config(const ModelConfig& base, const std::string& adapter_dir);

}  // namespace kiln::nn
