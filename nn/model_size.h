// How much memory a BertConfig's model needs, checked before anything is built.
//
// Note [Model size limit]: BertConfig::validate() caps each size alone, so a
// config.json with num_hidden_layers = 2147483647, or vocab_size and
// hidden_size both near 2^31, is valid field by field and yet describes a
// model no machine holds; building it runs until the OOM killer comes. So
// every config read from JSON (BertConfig::from_json_string / _file) is
// refused with a kiln::Error when estimate_model_size(config).bytes exceeds
// max_model_bytes(), which is, in order of precedence:
//   1. the value given to set_max_model_bytes() (the API setting);
//   2. the environment variable KILN_MAX_MODEL_BYTES (a positive decimal
//      byte count; anything else is a kiln::Error);
//   3. the machine's physical memory (sysconf), no limit when unknown.
// The estimate is BertForPreTraining's (the largest kiln model of a config:
// embeddings, encoder, pooler, MLM and NSP heads) parameters in float32 plus
// kTensorOverheadBytes per tensor, so that millions of tiny layers count too.
// All arithmetic saturates at UINT64_MAX instead of overflowing.
// A config built in code (a preset, fields set by hand) is checked only when
// passed to check_model_size().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/model_config.h"

namespace kiln {

inline constexpr uint64_t kTensorOverheadBytes = 1024;  // impl, storage, module bookkeeping

struct ModelSizeEstimate {
  uint64_t parameters = 0;  // elements of every parameter and buffer
  uint64_t tensors = 0;     // how many parameters and buffers
  uint64_t bytes = 0;       // 4 * parameters + kTensorOverheadBytes * tensors
};

ModelSizeEstimate estimate_model_size(const BertConfig& config);

// The limit of Note [Model size limit], and where it comes from ("KILN_MAX_MODEL_BYTES", ...).
uint64_t max_model_bytes(std::string* origin = nullptr);
// nullopt: back to the environment variable or the physical memory.
void set_max_model_bytes(std::optional<uint64_t> bytes);

// kiln::Error "<source>: the model this config describes needs about N bytes
// ..., over the limit of M bytes (...)" when the estimate exceeds the limit.
void check_model_size(const BertConfig& config, const std::string& source);

// A tokenizer whose vocabulary is larger than config.vocab_size yields ids
// past the word-embedding matrix: kiln::Error naming both sizes. A smaller
// one is fine (models often pad vocab_size to a round number).
void check_vocab_matches(const BertConfig& config, size_t tokenizer_vocab_size,
                         const std::string& source);
void check_vocab_matches(const ModelConfig& config, size_t tokenizer_vocab_size, const std::string& source);

}  // namespace kiln
