// Fuzz target: a model directory's tokenizer_config.json, as read by
// train::model_lowercase and train::load_tokenizer (train/task_util.h; used by
// pretrain, finetune and evaluate --model DIR).
//
// Input: the file itself, written as DIR/tokenizer_config.json beside a fixed
// small vocab.txt, and as DIR2/tokenizer_config.json beside a small WordLevel
// tokenizer.json (whose special-token roles it names, Note [Choosing a
// tokenizer] in data/tokenizer/pipeline_tokenizer.h).
//
// Properties: reading either succeeds or throws kiln::Error; --cased wins
// without reading the file; an accepted file is a JSON object whose
// do_lower_case, when present, is a boolean and is the answer (true when
// absent); load_tokenizer agrees with model_lowercase. Beside the
// tokenizer.json: opening succeeds or throws kiln::Error, every role is -1 or
// an id of the vocabulary, and a pad_token string the vocabulary has is the
// pad id.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
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
    const auto tok = kiln::train::load_tokenizer(dir, "", "", false);
    require(tok->lowercase() == lowercase, "load_tokenizer agrees with model_lowercase");
    require(tok->encode_ids("Hello")[0] == (lowercase ? 7 : 6), "the case setting is applied");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "load_tokenizer accepts what model_lowercase accepts");
  }

  const std::string dir2 = scratch.fresh_dir();
  kiln_fuzz::write_file(dir2 + "/tokenizer_config.json", text);
  kiln_fuzz::write_file(dir2 + "/tokenizer.json", R"({"version": "1.0", "added_tokens": [],
    "pre_tokenizer": {"type": "Whitespace"},
    "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "<pad>": 1, "a": 2, "<s>": 3}, "unk_token": "<unk>"}})");
  std::unique_ptr<kiln::data::TextTokenizer> tok;
  try {
    tok = kiln::train::load_tokenizer(dir2, "", "", false);
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;
  }
  for (int32_t id : {tok->unk_id(), tok->cls_id(), tok->sep_id(), tok->pad_id(), tok->mask_id()})
    require(id == -1 || (id >= 0 && static_cast<size_t>(id) < tok->vocab_size()), "a role is -1 or a vocab id");
  const auto pad = j.find("pad_token");
  if (pad != j.end() && pad->is_string() && tok->token_to_id(pad->get<std::string>()) >= 0)
    require(tok->pad_id() == tok->token_to_id(pad->get<std::string>()), "a configured pad_token is the pad id");
  return 0;
}
