// Fuzz target: ModelConfig::from_json_string on arbitrary text (every
// family's config reader, by model_type: bert, roberta, xlm-roberta,
// distilbert, an unknown one).
//
// Properties: parsing either succeeds or throws kiln::Error; an accepted
// config's facts are sane (sizes positive, heads dividing the hidden size,
// the padding id inside the vocabulary); its text read again gives an equal
// config with the same facts (a fixed point); with_field of a label map keeps
// it readable.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "nn/model_config.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_model_config: property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::ModelConfig config;
  try {
    config = kiln::ModelConfig::from_json_string(text, "fuzz.json");
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  try {
    const kiln::ConfigFacts& f = config.facts();
    require(f.vocab_size >= 1 && f.hidden_size >= 1 && f.num_layers >= 1 && f.num_heads >= 1, "sizes positive");
    require(f.hidden_size % f.num_heads == 0, "heads divide the hidden size");
    require(f.max_sequence_length >= 0 && f.max_sequence_length <= f.max_position_embeddings, "sequence length");
    require(!f.pad_token_id || (*f.pad_token_id >= 0 && *f.pad_token_id < f.vocab_size), "padding id in vocab");
    require(!f.shape_fields.empty(), "shape fields");
    const kiln::ModelConfig back = kiln::ModelConfig::from_json_string(config.to_json_string(), "roundtrip.json");
    require(back == config, "config text is a fixed point");
    require(back.facts() == f, "facts round-trip");
    require(back.model_type() == config.model_type(), "model_type round-trips");
    (void)config.architectures();
    (void)config.id2label();
    const kiln::ModelConfig labelled = config.with_field("id2label", "{\"0\": \"a\", \"1\": \"b\"}");
    require(labelled.id2label().size() == 2, "with_field sets id2label");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "an accepted config reads back and takes a label map");
  }
  return 0;
}
