// Fuzz target: parse_weight_index (model.safetensors.index.json, Note
// [Sharded checkpoints] in nn/weight_files.h) on arbitrary text.
//
// Properties: parsing either succeeds or throws kiln::Error; an accepted index
// maps at least one tensor, and every shard it names is a plain file name
// (not empty, not "." or "..", no '/' or NUL), so no index reaches outside
// its model directory.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "nn/weight_files.h"
#include "scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> map;
  try {
    map = kiln::nn::parse_weight_index(text, "fuzz.index.json");
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  kiln_fuzz::require(!map.empty(), "fuzz_weight_index", "an accepted index maps a tensor");
  for (const auto& [tensor, shard] : map)
    kiln_fuzz::require(!shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                           shard.find('\0') == std::string::npos,
                       "fuzz_weight_index", "every shard is a file name inside the model directory");
  return 0;
}
