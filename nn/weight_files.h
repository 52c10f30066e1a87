// Note [Sharded checkpoints]
// A model directory holds its weights as one model.safetensors, or as shards
// listed by model.safetensors.index.json (what transformers' save_pretrained
// writes past max_shard_size):
//   {"metadata": {"total_size": <bytes>}, "weight_map": {"<tensor>": "<shard file>", ...}}
// Reading: model.safetensors wins when both are there (as transformers). The
// index is bounded JSON (Note [Bounded JSON]); every shard name is a plain
// file name in the directory (no '/', not "." or ".."), so an index cannot
// reach outside it; each shard must exist and hold exactly the tensors the
// index maps to it, and no tensor may be in two shards. Anything else is a
// kiln::Error naming the index, the shard or the tensor.
// Writing: save_pretrained(..., max_shard_bytes) fills shards
// model-00001-of-0000N.safetensors in state_dict order, a new shard when the
// next tensor would pass the limit (a larger tensor gets a shard of its own).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightIndexFile = "model.safetensors.index.json";

// The weight_map of an index's text: tensor name -> shard file name (checked
// as above, except that the shards exist).
std::map<std::string, std::string> parse_weight_index(const std::string& text, const std::string& source);

// Whether `dir` holds weights kiln reads (model.safetensors or the index).
bool has_weight_files(const std::string& dir);

// The safetensors files of a model directory, checked against the index
// (paths, in shard order).
std::vector<std::string> weight_files(const std::string& dir);

// Every tensor of the directory's weights, copied into CPU tensors.
std::map<std::string, Tensor> load_weight_files(const std::string& dir);

// Writes `tensors` into `dir` as model.safetensors, or as shards and the
// index when max_shard_bytes > 0 and they are larger.
void save_weight_files(const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes = 0);

}  // namespace kiln::nn
