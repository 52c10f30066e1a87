// Fuzz target: BertConfig::from_json_string on arbitrary text.
//
// Properties: parsing either succeeds or throws kiln::Error; an accepted config
// is valid, names a known activation, and to_json_string() -> from_json_string()
// gives back an equal config whose JSON text is the same again (a fixed point).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "nn/models/bert_config.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_bert_config: property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::BertConfig config;
  try {
    config = kiln::BertConfig::from_json_string(text, "fuzz.json");
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  try {
    config.validate();
    (void)config.activation();
    require(config.hidden_size % config.num_attention_heads == 0, "heads divide hidden_size");
    const std::string json = config.to_json_string();
    const kiln::BertConfig back = kiln::BertConfig::from_json_string(json, "roundtrip.json");
    require(back == config, "config round-trips through JSON");
    require(back.to_json_string() == json, "JSON text is a fixed point");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "an accepted config validates, serializes and parses again");
  }
  return 0;
}
