// Internal: what the families with BERT's config schema and encoder layout
// (BERT, RoBERTa, XLM-R: nn/bert_config.h) share in their family entries.
#pragma once

#include <string>

#include "nn/models/bert_config.h"
#include "nn/hf_checkpoint.h"
#include "nn/model_config.h"

namespace kiln::nn {

// ModelFamily::read_config for a BERT-schema config.json.
ConfigFacts read_bert_schema_config(const std::string& text, const std::string& source, std::string& normalized);
// The encoder's tensors (embeddings.*, encoder.layer.N.*, pooler.*) a config
// implies; the family adds its heads' shapes to `optional`.
TensorShapes bert_encoder_shapes(const BertConfig& c);

}  // namespace kiln::nn
