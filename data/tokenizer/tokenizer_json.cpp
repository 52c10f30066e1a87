// Tokenizer::from_file / from_json: tokenizer.json as HF tokenizers writes it
// (tokenizer/serialization.rs): version "1.0", truncation, padding,
// added_tokens, normalizer, pre_tokenizer, model, post_processor, decoder.
// Unknown top-level keys are ignored, as HF does.
#include <memory>

#include "core/error.h"
#include "core/json_util.h"
#include "kiln/data/tokenizer/tokenizer.h"
#include "kiln/data/tokenizer/unigram.h"

namespace kiln::data {
namespace {

using tok::Json;

// A tokenizer.json holds the whole vocabulary (XLM-R's is 17 MB, large
// multilingual ones ~30 MB); 1 GiB bounds a hostile file's memory.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;

TruncationParams read_truncation(const Json& j, const std::string& where) {
  TruncationParams t;
  t.max_length = static_cast<size_t>(
      tok::json_as_int(tok::json_required(j, "max_length", where), where + ".max_length", 0));
  t.stride = static_cast<size_t>(
      tok::json_as_int(tok::json_required(j, "stride", where), where + ".stride", 0));
  const std::string strategy = tok::json_string(j, "strategy", where);
  if (strategy == "LongestFirst")
    t.strategy = TruncationParams::Strategy::kLongestFirst;
  else if (strategy == "OnlyFirst")
    t.strategy = TruncationParams::Strategy::kOnlyFirst;
  else if (strategy == "OnlySecond")
    t.strategy = TruncationParams::Strategy::kOnlySecond;
  else
    tok::json_fail(where + ".strategy", "unknown strategy \"" + strategy + "\"");
  const std::string direction = tok::json_string_or(j, "direction", where, "Right");
  if (direction == "Left")
    t.direction = TruncationParams::Direction::kLeft;
  else if (direction != "Right")
    tok::json_fail(where + ".direction", "unknown direction \"" + direction + "\"");
  return t;
}

PaddingParams read_padding(const Json& j, const std::string& where) {
  PaddingParams p;
  const Json& strategy = tok::json_required(j, "strategy", where);
  if (strategy.is_string() && strategy.get<std::string>() == "BatchLongest") {
    p.fixed_length.reset();
  } else if (strategy.is_object() && strategy.size() == 1 && strategy.contains("Fixed")) {
    p.fixed_length = static_cast<size_t>(
        tok::json_as_int(strategy["Fixed"], where + ".strategy.Fixed", 0, int64_t{1} << 32));
  } else {
    tok::json_fail(where + ".strategy", "expected \"BatchLongest\" or {\"Fixed\": n}");
  }
  const std::string direction = tok::json_string(j, "direction", where);
  if (direction == "Left")
    p.direction = PaddingParams::Direction::kLeft;
  else if (direction != "Right")
    tok::json_fail(where + ".direction", "unknown direction \"" + direction + "\"");
  if (const Json* m = tok::json_find(j, "pad_to_multiple_of", where))
    p.pad_to_multiple_of = static_cast<size_t>(
        tok::json_as_int(*m, where + ".pad_to_multiple_of", 0, int64_t{1} << 32));
  p.pad_id = static_cast<int32_t>(
      tok::json_as_int(tok::json_required(j, "pad_id", where), where + ".pad_id", 0, INT32_MAX));
  p.pad_type_id = static_cast<int32_t>(tok::json_as_int(tok::json_required(j, "pad_type_id", where),
                                                        where + ".pad_type_id", 0, INT32_MAX));
  p.pad_token = tok::json_string(j, "pad_token", where);
  return p;
}

std::vector<AddedToken> read_added_tokens(const Json& j, const std::string& where) {
  std::vector<AddedToken> out;
  tok::json_as_array(j, where);
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& e = j[i];
    tok::json_object(e, w);
    tok::json_as_int(tok::json_required(e, "id", w), w + ".id", 0, INT32_MAX);
    AddedToken t;
    t.content = tok::json_string(e, "content", w);
    t.single_word = tok::json_bool(e, "single_word", w);
    t.lstrip = tok::json_bool(e, "lstrip", w);
    t.rstrip = tok::json_bool(e, "rstrip", w);
    t.normalized = tok::json_bool(e, "normalized", w);
    t.special = tok::json_bool(e, "special", w);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_json(const Json& j, const std::string& source) {
  try {
    tok::json_object(j, "(top level)");
    if (const Json* v = tok::json_find(j, "version", "(top level)")) {
      const std::string version = tok::json_as_string(*v, "version");
      KILN_CHECK(version == "1.0", "tokenizer.json: unknown tokenizer version '", version, "'");
    }
    Tokenizer t;
    t.model_ = tok::model_from_json(tok::json_required(j, "model", "(top level)"), "model");
    if (const Json* n = tok::json_find(j, "normalizer", "(top level)"))
      t.normalizer_ = tok::normalizer_from_json(*n, "normalizer");
    if (const Json* p = tok::json_find(j, "pre_tokenizer", "(top level)"))
      t.pre_tokenizer_ = tok::pre_tokenizer_from_json(*p, "pre_tokenizer");
    if (const Json* p = tok::json_find(j, "post_processor", "(top level)"))
      t.post_processor_ = tok::post_processor_from_json(*p, "post_processor");
    if (const Json* d = tok::json_find(j, "decoder", "(top level)"))
      t.decoder_ = tok::decoder_from_json(*d, "decoder");
    if (const Json* tr = tok::json_find(j, "truncation", "(top level)"))
      t.truncation_ = read_truncation(*tr, "truncation");
    if (const Json* pa = tok::json_find(j, "padding", "(top level)"))
      t.padding_ = read_padding(*pa, "padding");
    auto added = std::make_shared<tok::AddedVocabulary>();
    if (const Json* a = tok::json_find(j, "added_tokens", "(top level)"))
      added->add_tokens(read_added_tokens(*a, "added_tokens"), *t.model_, t.normalizer_.get());
    t.added_ = std::move(added);
    return t;
  } catch (const Error& e) {
    if (source == "tokenizer.json") throw;
    throw Error(source + ": " + e.what());
  }
}

Json Tokenizer::read_tokenizer_json(const std::string& path) {
  JsonLimits limits;
  limits.max_bytes = kMaxTokenizerJsonBytes;
  Json j = read_json_file(path, path, limits);
  tok::apply_serde_json_floats(j);  // Note [HF float parsing] in unigram.h
  return j;
}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_tokenizer_json(path), path); }

}  // namespace kiln::data
