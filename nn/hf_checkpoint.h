// Hugging Face model directories: config.json + model.safetensors (+ vocab.txt).
//
// Loading maps a transformers checkpoint onto kiln's module tree: legacy
// LayerNorm.gamma/beta become weight/bias; a BertModel file ("embeddings.*")
// loads into a task model ("bert.embeddings.*") and the reverse; the tied
// decoder weight is absent from (or dropped from) the file and stays tied.
// Missing base-model weights and any shape mismatch are errors; missing task
// heads are reported (they keep their fresh initialisation, as transformers).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/bert.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Tensors of a safetensors file, copied into CPU tensors.
std::map<std::string, Tensor> load_safetensors(const std::string& path);
// Writes tensors (any device; copied to CPU) atomically.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

struct LoadReport {
  std::vector<std::string> new_heads;  // model tensors the file did not have (task heads)
  std::vector<std::string> ignored;    // file tensors the model has no place for
};

// Loads weights from a state (file names) into `model`, mapping names as above.
LoadReport load_hf_state(Module& model, std::map<std::string, Tensor> state, const std::string& source);

// That `dir` is a model directory kiln can read: an existing, readable
// directory holding config.json and, when `weights`, model.safetensors. Else
// kiln::Error "<label> <dir>: <what is wrong or missing>" (no such directory;
// a file, not a directory; unreadable; no config.json; only a
// pytorch_model.bin, with the command that converts it). load_config and
// from_pretrained check this first; the kiln tool passes label "--model".
void check_model_dir(const std::string& dir, bool weights = true, const std::string& label = "model directory");

// Reads config.json from a model directory (check_model_dir(dir, false) first).
BertConfig load_config(const std::string& dir);

// Checks a checkpoint's header against a config before any model is built
// (reading the header only): every base-model tensor the config implies
// (embeddings.*, encoder.layer.0 to num_hidden_layers - 1) must be in the
// file, and every file tensor whose shape the config fixes must have that
// shape. Names are mapped as load_hf_state maps them ("bert." prefix,
// gamma/beta). kiln::Error naming the tensor and both shapes, or the missing
// tensor and the config field that implies it.
void check_checkpoint_matches_config(const std::string& safetensors_path, const BertConfig& config,
                                     const std::string& config_source);

// Builds M(config, args...) from dir/config.json and loads dir/model.safetensors,
// after check_checkpoint_matches_config (so a mismatch is found before building).
template <typename M, typename... Args>
std::shared_ptr<M> from_pretrained(const std::string& dir, LoadReport* report = nullptr, Args&&... args) {
  check_model_dir(dir, true);  // what load_config checks, and the weights
  const BertConfig config = BertConfig::from_json_file(dir + "/config.json");
  check_checkpoint_matches_config(dir + "/model.safetensors", config, dir + "/config.json");
  auto model = std::make_shared<M>(config, std::forward<Args>(args)...);
  LoadReport r = load_hf_state(*model, load_safetensors(dir + "/model.safetensors"), dir + "/model.safetensors");
  if (report) *report = r;
  return model;
}

// Writes dir/config.json and dir/model.safetensors (and copies vocab_file to
// dir/vocab.txt when given) into a temporary sibling directory, then renames it
// over `dir`, so a reader never sees a half-written directory.
void save_pretrained(const Module& model, const BertConfig& config, const std::string& dir,
                     const std::string& vocab_file = "");

}  // namespace kiln::nn
