// Fuzz target: the tokenizer.json loader (Tokenizer::from_json, the stages'
// *_from_json) on hostile files: wrong types, huge or negative numbers,
// merges naming unknown tokens, absurd charsmaps, unknown stage types, deep
// nesting.
//
// Input: the file's text, parsed with the bounds of Note [Bounded JSON].
//
// Properties: loading either succeeds or throws kiln::Error (never a crash,
// a hang or unbounded memory); an accepted tokenizer encodes and decodes
// fixed texts, single and paired, every id it gives decodes, and every
// offset lies inside its text.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json_util.h"
#include "data/tokenizer/tokenizer.h"
#include "scratch.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_tokenizer_json", what); }

void check(const kiln::data::Tokenizer& tok, std::string_view text) {
  const kiln::data::tok::Encoding e = tok.encode(text, std::string_view("b, c"));
  require(e.ids.size() == e.offsets.size() && e.ids.size() == e.tokens.size() &&
              e.ids.size() == e.type_ids.size() && e.ids.size() == e.word_ids.size(),
          "per-token vectors have one entry per id");
  for (const auto& o : e.offsets) require(o.begin <= o.end && o.end <= text.size() + 4, "offsets inside the text");
  (void)tok.decode(e.ids, true);
  (void)tok.decode(e.ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = kiln_fuzz::as_text(data, size);
  kiln::JsonLimits limits;
  limits.max_bytes = 1 << 20;
  try {
    const kiln::data::Tokenizer tok =
        kiln::data::Tokenizer::from_json(kiln::parse_json_bounded(text, "fuzz", limits));
    try {
      check(tok, "Hello, world! héllo 日本 ▁x");
      check(tok, "");
    } catch (const kiln::Error& e) {
      // Truncation settings may be unsatisfiable for a text (HF errors too).
      kiln_fuzz::rejected(e);
    }
  } catch (const kiln::Error& e) {
    return kiln_fuzz::rejected(e);
  }
  return 0;
}
