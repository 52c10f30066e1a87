// post_processor_from_json (post_processors.h, Note [Post-processor JSON]):
// the "post_processor" object of tokenizer.json, read as HF's untagged
// PostProcessorWrapper.
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/post_processors.h"

namespace kiln::data::tok {
namespace {
constexpr auto kMaxId = static_cast<int64_t>(std::numeric_limits<int32_t>::max());
}  // namespace

// ---- JSON (Note [Post-processor JSON]) ---------------------------------------------------

namespace {

// serde's (String, u32): [token, id].
SpecialPair special_pair(const Json& j, std::string_view key, const std::string& where) {
  const std::string w = json_path(where, key);
  const Json& v = json_as_array(json_required(j, key, where), w);
  if (v.size() != 2) json_fail(w, "expected [token, id], got " + std::to_string(v.size()) +
                                      " elements");
  return {json_as_string(v[0], w + "[0]"),
          static_cast<int32_t>(json_as_int(v[1], w + "[1]", 0, kMaxId))};
}

// A field with a serde default: absent is nullptr, null is an error.
const Json* defaulted(const Json& j, std::string_view key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  if (it->is_null()) json_fail(json_path(where, key), "expected a value, got null");
  return &*it;
}

void require_type(const Json& j, const std::string& where, const char* want) {
  const Json* t = json_find(j, "type", where);
  if (!t || !t->is_string() || t->get<std::string>() != want)
    json_fail(where, std::string("expected \"type\": \"") + want + "\"");
}

std::unique_ptr<HfPostProcessor> post_processor(const Json& j, const std::string& where,
                                                size_t depth);

std::unique_ptr<HfPostProcessor> roberta(const Json& j, const std::string& where) {
  SpecialPair sep = special_pair(j, "sep", where);
  SpecialPair cls = special_pair(j, "cls", where);
  const bool trim = json_bool(j, "trim_offsets", where);
  const bool prefix = json_bool(j, "add_prefix_space", where);
  return std::make_unique<RobertaProcessing>(std::move(sep), std::move(cls), trim, prefix);
}

std::unique_ptr<HfPostProcessor> bert(const Json& j, const std::string& where) {
  SpecialPair sep = special_pair(j, "sep", where);
  SpecialPair cls = special_pair(j, "cls", where);
  return std::make_unique<BertProcessing>(std::move(sep), std::move(cls));
}

std::unique_ptr<HfPostProcessor> byte_level(const Json& j, const std::string& where) {
  require_type(j, where, "ByteLevel");
  const bool prefix = json_bool(j, "add_prefix_space", where);
  const bool trim = json_bool(j, "trim_offsets", where);
  if (const Json* v = defaulted(j, "use_regex", where))
    json_as_bool(*v, json_path(where, "use_regex"));  // read, unused by the processor
  return std::make_unique<ByteLevelProcessing>(trim, prefix);
}

int32_t type_id(const Json& obj, const std::string& where) {
  return static_cast<int32_t>(
      json_as_int(json_required(obj, "type_id", where), json_path(where, "type_id"), 0, kMaxId));
}

// serde's externally tagged Piece: {"Sequence": {id: "A"|"B", type_id}} or
// {"SpecialToken": {id, type_id}}.
TemplateProcessing::Piece piece(const Json& v, const std::string& where) {
  json_object(v, where);
  if (v.size() != 1)
    json_fail(where, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got an object "
                     "with " + std::to_string(v.size()) + " members");
  const std::string kind = v.begin().key();
  const std::string w = json_path(where, kind);
  const Json& body = json_object(v.begin().value(), w);
  TemplateProcessing::Piece p;
  if (kind == "Sequence") {
    const std::string id = json_string(body, "id", w);
    if (id != "A" && id != "B")
      json_fail(json_path(w, "id"), "unknown sequence \"" + id + "\" (expected A or B)");
    p.is_sequence = true;
    p.sequence = id == "A" ? 0 : 1;
  } else if (kind == "SpecialToken") {
    p.is_sequence = false;
    p.special = json_string(body, "id", w);
  } else {
    json_fail(where, "unknown template piece \"" + kind + "\" (expected Sequence or SpecialToken)");
  }
  p.type_id = type_id(body, w);
  return p;
}

std::vector<TemplateProcessing::Piece> template_pieces(const Json& j, std::string_view key,
                                                       const std::string& where) {
  const std::string w = json_path(where, key);
  const Json& arr = json_as_array(json_required(j, key, where), w);
  std::vector<TemplateProcessing::Piece> out;
  for (size_t i = 0; i < arr.size(); ++i)
    out.push_back(piece(arr[i], w + "[" + std::to_string(i) + "]"));
  return out;
}

std::unique_ptr<HfPostProcessor> template_processing(const Json& j, const std::string& where) {
  auto single = template_pieces(j, "single", where);
  auto pair = template_pieces(j, "pair", where);
  const std::string sw = json_path(where, "special_tokens");
  const Json& st = json_object(json_required(j, "special_tokens", where), sw);
  std::map<std::string, TemplateProcessing::Special> specials;
  for (auto it = st.begin(); it != st.end(); ++it) {
    const std::string w = json_path(sw, it.key());
    const Json& body = json_object(it.value(), w);
    json_string(body, "id", w);  // read, unused (the map's key names the token)
    TemplateProcessing::Special s;
    const std::string iw = json_path(w, "ids");
    const Json& ids = json_as_array(json_required(body, "ids", w), iw);
    for (size_t i = 0; i < ids.size(); ++i)
      s.ids.push_back(static_cast<int32_t>(
          json_as_int(ids[i], iw + "[" + std::to_string(i) + "]", 0, kMaxId)));
    const std::string tw = json_path(w, "tokens");
    const Json& toks = json_as_array(json_required(body, "tokens", w), tw);
    for (size_t i = 0; i < toks.size(); ++i)
      s.tokens.push_back(json_as_string(toks[i], tw + "[" + std::to_string(i) + "]"));
    if (s.ids.size() != s.tokens.size())
      json_fail(w, "has " + std::to_string(s.ids.size()) + " ids but " +
                       std::to_string(s.tokens.size()) + " tokens");
    specials.emplace(it.key(), std::move(s));
  }
  try {
    return std::make_unique<TemplateProcessing>(std::move(single), std::move(pair),
                                                std::move(specials));
  } catch (const kiln::Error& e) {
    json_fail(where, e.what());
  }
}

std::unique_ptr<HfPostProcessor> sequence(const Json& j, const std::string& where, size_t depth) {
  require_type(j, where, "Sequence");
  const std::string w = json_path(where, "processors");
  const Json& arr = json_as_array(json_required(j, "processors", where), w);
  std::vector<std::unique_ptr<HfPostProcessor>> steps;
  for (size_t i = 0; i < arr.size(); ++i)
    steps.push_back(post_processor(arr[i], w + "[" + std::to_string(i) + "]", depth + 1));
  return std::make_unique<SequenceProcessing>(std::move(steps));
}

std::unique_ptr<HfPostProcessor> post_processor(const Json& j, const std::string& where,
                                                size_t depth) {
  json_object(j, where);
  if (depth > kMaxPostProcessorDepth)
    json_fail(where, "post-processors nested more than " +
                         std::to_string(kMaxPostProcessorDepth) + " deep");
  std::string type;
  if (const Json* t = json_find(j, "type", where); t && t->is_string()) type = t->get<std::string>();
  // HF's untagged order; each kind's error is kept for the message.
  struct Kind {
    const char* name;
    std::unique_ptr<HfPostProcessor> (*read)(const Json&, const std::string&, size_t);
  };
  static const Kind kinds[] = {
      {"RobertaProcessing", [](const Json& x, const std::string& w, size_t) { return roberta(x, w); }},
      {"BertProcessing", [](const Json& x, const std::string& w, size_t) { return bert(x, w); }},
      {"ByteLevel", [](const Json& x, const std::string& w, size_t) { return byte_level(x, w); }},
      {"TemplateProcessing",
       [](const Json& x, const std::string& w, size_t) { return template_processing(x, w); }},
      {"Sequence", [](const Json& x, const std::string& w, size_t d) { return sequence(x, w, d); }},
  };
  std::string named_error;
  for (const Kind& k : kinds) {
    try {
      return k.read(j, where, depth);
    } catch (const kiln::Error& e) {
      if (type == k.name) named_error = e.what();
    }
  }
  if (!named_error.empty()) throw kiln::Error(named_error);
  if (type.empty()) json_fail(where, "missing field \"type\" (and no post-processor's fields)");
  json_fail(where, "unknown post-processor type \"" + type + "\"");
}

}  // namespace

std::unique_ptr<PostProcessor> post_processor_from_json(const Json& j, const std::string& where) {
  return post_processor(j, where, 0);
}

}  // namespace kiln::data::tok
