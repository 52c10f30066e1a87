// Hugging Face model directories: config.json + model.safetensors (+ vocab.txt).
//
// Loading maps a transformers checkpoint onto kiln's module tree by the
// family's WeightNames (its model_type's, nn/model_family.h): legacy
// LayerNorm.gamma/beta become weight/bias; a base-model file ("embeddings.*")
// loads into a task model ("bert.embeddings.*", "roberta.embeddings.*") and
// the reverse; the tied decoder weight is absent from (or dropped from) the
// file and stays tied.
// Missing base-model weights and any shape mismatch are errors; missing task
// heads are reported (they keep their fresh initialisation, as transformers).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/nn/models/bert.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"
#include "kiln/nn/weight_files.h"

namespace kiln::nn {

// Tensors of a safetensors file, copied into CPU tensors.
std::map<std::string, Tensor> load_safetensors(const std::string& path);
// Writes tensors (any device; copied to CPU) atomically.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// The tensors a config implies, by base-model names (no "bert." prefix):
// check_checkpoint_matches_config checks a file's header against them.
struct TensorShapes {
  std::vector<std::pair<std::string, Shape>> required;  // every model of the family has these (embeddings)
  std::vector<std::pair<std::string, Shape>> optional;  // shape fixed when present (heads, pooler, buffers)
  std::string layer_prefix;                             // "encoder.layer."
  std::vector<std::pair<std::string, Shape>> layer;     // each layer's, named after "<layer_prefix>N."
  int64_t num_layers = 0;
  std::string layers_field;                             // the config field that sets it: "num_hidden_layers"
};

// How one family's checkpoint names map onto its modules (Note [Task model
// interfaces]: a family's weight-name map, nn/models/*_family.cpp).
struct WeightNames {
  std::string base_prefix;                 // the base model's prefix in task models: "bert."
  std::vector<std::string> tied;           // file tensors that are the tied decoder (skipped)
  // {file name, model name}: the file's tensor loads as the model's when the
  // file lacks the model's own name (an older decoder.bias for the head's bias)
  std::vector<std::pair<std::string, std::string>> aliases;
  std::vector<std::string> head_prefixes;  // model tensors that may start fresh (task heads, the pooler)
  // The shapes a config fixes (the family's).
  TensorShapes (*shapes)(const ModelConfig&) = nullptr;
};

// The WeightNames of a config's model_type (BERT's for "bert").
const WeightNames& weight_names_for(const std::string& model_type);

struct LoadReport {
  std::vector<std::string> new_heads;  // model tensors the file did not have (task heads)
  std::vector<std::string> ignored;    // file tensors the model has no place for
};

// Loads weights from a state (file names) into `model`, mapping names as
// above (BERT's names unless `names` says otherwise).
LoadReport load_hf_state(Module& model, std::map<std::string, Tensor> state, const std::string& source,
                         const WeightNames& names = weight_names_for("bert"));

// That `dir` is a model directory kiln can read: an existing, readable
// directory holding config.json and, when `weights`, model.safetensors (or
// model.safetensors.index.json, Note [Sharded checkpoints]). Else
// kiln::Error "<label> <dir>: <what is wrong or missing>" (no such directory;
// a file, not a directory; unreadable; no config.json; only a
// pytorch_model.bin, with the command that converts it). load_config and
// from_pretrained check this first; the kiln tool passes label "--model".
void check_model_dir(const std::string& dir, bool weights = true, const std::string& label = "model directory");

// Reads config.json from a model directory (check_model_dir(dir, false) first):
// load_config as a BERT-schema config, load_model_config as any family's.
BertConfig load_config(const std::string& dir);
ModelConfig load_model_config(const std::string& dir);

// Checks a checkpoint's header against a config before any model is built
// (reading the header only): every base-model tensor the config implies
// (the family's WeightNames::shapes: its embeddings, and each layer's tensors
// up to the layer count, e.g. encoder.layer.0 to num_hidden_layers - 1) must
// be in the file, and every file tensor whose shape the config fixes must
// have that shape. Names are mapped as load_hf_state maps them (the family's prefix,
// gamma/beta). A file whose tensors carry another family's prefix ("bert."
// under a roberta config) is refused as that family's checkpoint. kiln::Error
// naming the tensor and both shapes, or the missing tensor and the config
// field that implies it.
void check_checkpoint_matches_config(const std::string& safetensors_path, const ModelConfig& config,
                                     const std::string& config_source);
// The same over a sharded checkpoint's files (nn/weight_files.h).
void check_checkpoint_matches_config(const std::vector<std::string>& files, const ModelConfig& config,
                                     const std::string& config_source);

// The config a model for `dir` is built from: check_model_dir(dir), then
// dir/config.json read and checked against dir/model.safetensors'
// header (check_checkpoint_matches_config), before anything is built.
ModelConfig pretrained_config(const std::string& dir);
// Loads dir/model.safetensors into `model`, built from pretrained_config(dir),
// with the config's family's weight names.
LoadReport load_pretrained_weights(Module& model, const std::string& dir, const ModelConfig& config);

// The config struct a model class is built from: M::config_type when it
// names one, else BertConfig.
template <typename M, typename = void>
struct model_config_type {
  using type = BertConfig;
};
template <typename M>
struct model_config_type<M, std::void_t<typename M::config_type>> {
  using type = typename M::config_type;
};

// Builds M(config, args...) from dir/config.json and loads dir/model.safetensors,
// after check_checkpoint_matches_config (so a mismatch is found before
// building). The Auto layer (nn/auto.h) picks M from the config instead.
template <typename M, typename... Args>
std::shared_ptr<M> from_pretrained(const std::string& dir, LoadReport* report = nullptr, Args&&... args) {
  const ModelConfig config = pretrained_config(dir);
  using C = typename model_config_type<M>::type;
  auto model = std::make_shared<M>(config.template as<C>(dir + "/config.json"), std::forward<Args>(args)...);
  LoadReport r = load_pretrained_weights(*model, dir, config);
  if (report) *report = r;
  return model;
}

// Writes dir/config.json and dir/model.safetensors (and copies vocab_file to
// dir/vocab.txt when given) into a temporary sibling directory, then renames it
// over `dir`, so a reader never sees a half-written directory. With
// max_shard_bytes > 0 weights larger than that are written as shards and
// model.safetensors.index.json instead (Note [Sharded checkpoints]).
void save_pretrained(const Module& model, const ModelConfig& config, const std::string& dir,
                     const std::string& vocab_file = "", uint64_t max_shard_bytes = 0);

}  // namespace kiln::nn
