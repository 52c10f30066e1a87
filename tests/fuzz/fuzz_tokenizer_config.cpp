// Fuzz target: a model directory's tokenizer_config.json, as read by
// train::model_lowercase and train::load_tokenizer (train/task_util.h; used by
// pretrain, finetune and evaluate --model DIR).
//
// Input: the file itself, written as DIR/tokenizer_config.json beside a fixed
// small vocab.txt.
//
// Properties: reading either succeeds or throws kiln::Error; --cased wins
// without reading the file; an accepted file is a JSON object whose
// do_lower_case, when present, is a boolean and is the answer (true when
// absent); load_tokenizer agrees with model_lowercase.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "scratch.h"
#include "train/task_util.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_tokenizer_config", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  const std::string_view text = kiln_fuzz::as_text(data, size);
  const std::string dir = scratch.fresh_dir();
  kiln_fuzz::write_file(dir + "/tokenizer_config.json", text);
  kiln_fuzz::write_file(dir + "/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nHello\nhello\n##s\n");

  require(!kiln::train::model_lowercase(dir, /*cased=*/true), "--cased wins");
  bool lowercase = false;
  try {
    lowercase = kiln::train::model_lowercase(dir, false);
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;  // rejected cleanly
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  require(j.is_object(), "an accepted file is a JSON object");
  const auto it = j.find("do_lower_case");
  require(it == j.end() ? lowercase : it->is_boolean() && it->get<bool>() == lowercase,
          "do_lower_case is the answer, true when absent");
  try {
    const kiln::data::BertTokenizer tok = kiln::train::load_tokenizer(dir, "", false);
    require(tok.lowercase() == lowercase, "load_tokenizer agrees with model_lowercase");
    require(tok.encode_ids("Hello")[0] == (lowercase ? 7 : 6), "the case setting is applied");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "load_tokenizer accepts what model_lowercase accepts");
  }
  return 0;
}
