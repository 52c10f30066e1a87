// Training checkpoints: one directory per save, written atomically.
//
//   OUTPUT/checkpoint-STEP/
//     config.json            the model config (Hugging Face layout)
//     model.safetensors      weights, Hugging Face names (transformers loads it)
//     optimizer.safetensors  optimizer and scheduler state tensors
//     trainer_state.json     step, epoch, data-loader position, RNG state,
//                            scheduler/scaler scalars, metrics, command-line config
//     vocab.txt, ...         CheckpointData::extra_files
//
// Note [Atomic checkpoints]: a save writes everything into a sibling
// temporary directory (".checkpoint-STEP.tmp-PID"), fsyncs every file and the
// directory, then renames it to checkpoint-STEP and fsyncs the parent. A
// process killed at any moment leaves either the complete new checkpoint or
// none (plus a temporary directory that the next save or resume removes), so
// the previous checkpoint always stays loadable.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/bert_config.h"
#include "nn/module.h"

namespace kiln::train {

struct CheckpointData {
  nn::NamedTensors model;                       // state_dict() of the model
  std::map<std::string, Tensor> optimizer;      // optimizer + scheduler tensors
  nlohmann::json trainer_state;                 // must hold "step"
  BertConfig config;
  // Further files by name (e.g. "vocab.txt", "tokenizer_config.json"), so a
  // checkpoint is a complete Hugging Face model directory. Plain names only.
  std::map<std::string, std::string> extra_files;
};

// Writes OUTPUT/checkpoint-STEP atomically; returns its path. Removes stale
// temporary directories first. With keep_last > 0, deletes older complete
// checkpoints beyond the newest keep_last.
std::string save_checkpoint(const std::string& output_dir, int64_t step, const CheckpointData& data,
                            int keep_last = 0);

// Complete checkpoints under output_dir, oldest first (by step).
std::vector<std::string> list_checkpoints(const std::string& output_dir);
// The newest complete checkpoint, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& output_dir);

struct LoadedCheckpoint {
  std::map<std::string, Tensor> model;
  std::map<std::string, Tensor> optimizer;
  nlohmann::json trainer_state;
  BertConfig config;
};
// Reads a checkpoint directory; kiln::Error naming the file for anything
// missing or malformed.
LoadedCheckpoint load_checkpoint(const std::string& dir);

}  // namespace kiln::train
