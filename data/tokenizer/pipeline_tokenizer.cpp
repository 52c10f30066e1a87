#include "kiln/data/tokenizer/pipeline_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/parallel.h"
#include "kiln/data/tokenizer/bert_tokenizer.h"
#include "kiln/data/tokenizer/tokenizer_config.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using tok::Json;

constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 24;
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;

// dir/name parsed, or null when the directory has no such file.
Json optional_json(const std::string& dir, const char* name) {
  if (dir.empty()) return nullptr;
  const fs::path p = fs::path(dir) / name;
  if (!fs::exists(p)) return nullptr;
  JsonLimits limits;
  limits.max_bytes = kMaxConfigBytes;
  Json j = read_json_file(p.string(), p.string(), limits);
  KILN_CHECK(j.is_object(), p.string(), ": expected a JSON object");
  return j;
}

// ---- Note [Choosing a tokenizer]: BERT's WordPiece pipeline ----------------

const char* const kBertSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

bool is(const Json& j, const char* key, const Json& value) { return j.contains(key) && j[key] == value; }

// The tokens of a WordPiece vocab whose ids are dense in [0, n), or nullopt.
std::optional<std::vector<std::string>> dense_tokens(const Json& vocab) {
  if (!vocab.is_object() || vocab.empty()) return std::nullopt;
  std::vector<std::string> tokens(vocab.size());
  std::vector<uint8_t> seen(vocab.size(), 0);
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) return std::nullopt;
    const int64_t i = id.get<int64_t>();
    if (i < 0 || static_cast<size_t>(i) >= tokens.size() || seen[static_cast<size_t>(i)]) return std::nullopt;
    seen[static_cast<size_t>(i)] = 1;
    tokens[static_cast<size_t>(i)] = token;
  }
  return tokens;
}

bool bert_post_processor(const Json& p, const Json& vocab) {
  if (!p.is_object() || !vocab.contains("[CLS]") || !vocab.contains("[SEP]")) return false;
  const Json cls = vocab["[CLS]"], sep = vocab["[SEP]"];
  if (is(p, "type", "BertProcessing"))
    return is(p, "cls", Json::array({"[CLS]", cls})) && is(p, "sep", Json::array({"[SEP]", sep}));
  auto special = [](const char* s, int type) { return Json{{"SpecialToken", {{"id", s}, {"type_id", type}}}}; };
  auto seq = [](const char* s, int type) { return Json{{"Sequence", {{"id", s}, {"type_id", type}}}}; };
  const Json specials = {{"[CLS]", {{"id", "[CLS]"}, {"ids", {cls}}, {"tokens", {"[CLS]"}}}},
                         {"[SEP]", {{"id", "[SEP]"}, {"ids", {sep}}, {"tokens", {"[SEP]"}}}}};
  return is(p, "type", "TemplateProcessing") &&
         is(p, "single", Json::array({special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)})) &&
         is(p, "pair",
            Json::array({special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)})) &&
         is(p, "special_tokens", specials);
}

// The BertTokenizer equal to tokenizer.json `j`, or nullopt when `j` is not
// BERT's WordPiece pipeline (Note [Choosing a tokenizer]).
std::optional<BertTokenizer> as_bert_tokenizer(const Json& j, bool cased) {
  if (!j.is_object() || !j.contains("model") || !j.contains("normalizer")) return std::nullopt;
  const Json& m = j["model"];
  const Json& n = j["normalizer"];
  if (!m.is_object() || !is(m, "type", "WordPiece") || !is(m, "unk_token", "[UNK]") ||
      !is(m, "continuing_subword_prefix", "##") || !is(m, "max_input_chars_per_word", 100) ||
      !m.contains("vocab"))
    return std::nullopt;
  if (!n.is_object() || !is(n, "type", "BertNormalizer") || !is(n, "clean_text", true) ||
      !is(n, "handle_chinese_chars", true) || !n.contains("lowercase") || !n["lowercase"].is_boolean())
    return std::nullopt;
  const bool lowercase = n["lowercase"].get<bool>();
  if (!n.contains("strip_accents") || !(n["strip_accents"].is_null() || n["strip_accents"] == Json(lowercase)))
    return std::nullopt;
  if (!is(j, "pre_tokenizer", Json{{"type", "BertPreTokenizer"}}) ||
      !is(j, "decoder", Json{{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}))
    return std::nullopt;
  const Json& vocab = m["vocab"];
  std::optional<std::vector<std::string>> tokens = dense_tokens(vocab);
  if (!tokens || !vocab.contains("[UNK]") || !j.contains("post_processor") ||
      !bert_post_processor(j["post_processor"], vocab))
    return std::nullopt;
  // The added tokens: exactly the BERT specials the vocab has, as BertConverter adds them.
  if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) return std::nullopt;
  size_t expected = 0;
  for (const char* s : kBertSpecials) expected += vocab.contains(s) ? 1 : 0;
  if (j["added_tokens"].size() != expected) return std::nullopt;
  for (const Json& a : j["added_tokens"]) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string()) return std::nullopt;
    const std::string content = a["content"].get<std::string>();
    if (std::find(std::begin(kBertSpecials), std::end(kBertSpecials), content) == std::end(kBertSpecials) ||
        !is(a, "id", vocab[content]) || !is(a, "special", true) || !is(a, "normalized", false) ||
        !is(a, "lstrip", false) || !is(a, "rstrip", false) || !is(a, "single_word", false))
      return std::nullopt;
  }
  return BertTokenizer(Vocab::from_tokens(std::move(*tokens)), lowercase && !cased);
}

// ---- special-token roles ---------------------------------------------------

// The token a tokenizer_config.json / special_tokens_map.json names for
// `key`, or "" (absent or null).
std::string configured_token(const Json& config, const char* key, const std::string& file) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return "";
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  KILN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), file, ": ", key,
             " must be a string or an object with a string \"content\"");
  return v["content"].get<std::string>();
}

// Whether pretrained_json read `source` as a tokenizer.json (not converted).
bool is_tokenizer_json(const std::string& source) {
  const fs::path p(source);
  return p.extension() == ".json" && p.filename() != "vocab.json";
}

}  // namespace

PipelineTokenizer PipelineTokenizer::from_pretrained(const std::string& path) {
  std::string source;
  const Json j = Tokenizer::pretrained_json(path, &source);
  return from_pretrained_json(j, source, path);
}

PipelineTokenizer PipelineTokenizer::from_pretrained_json(const Json& j, const std::string& source,
                                                          const std::string& path) {
  PipelineTokenizer p(Tokenizer::from_json(j, source), j, fs::is_directory(path) ? path : "");
  // A tokenizer.json is saved as its own bytes; a converted one as JSON.
  if (is_tokenizer_json(source))
    p.files_["tokenizer.json"] = read_file_bounded(source, source, kMaxTokenizerJsonBytes);
  else
    p.files_["tokenizer.json"] = j.dump(2) + "\n";
  return p;
}

PipelineTokenizer::PipelineTokenizer(Tokenizer tokenizer, const Json& json, const std::string& source_dir)
    : tokenizer_(std::move(tokenizer)) {
  tokenizer_.set_truncation(std::nullopt);
  tokenizer_.set_padding(std::nullopt);
  special_.assign(tokenizer_.vocab_size(true), 0);
  for (const auto& [id, token] : tokenizer_.added_tokens())
    if (token.special && id >= 0 && static_cast<size_t>(id) < special_.size()) special_[static_cast<size_t>(id)] = 1;
  const auto [before, after] = tokenizer_.special_tokens_around();
  around_ = {before, after};
  const Json& model = json["model"];
  if (model.is_object() && is(model, "type", "WordPiece") && model.contains("continuing_subword_prefix") &&
      model["continuing_subword_prefix"].is_string())
    continuation_prefix_ = model["continuing_subword_prefix"].get<std::string>();

  const Json config = optional_json(source_dir, "tokenizer_config.json");
  const Json map = optional_json(source_dir, "special_tokens_map.json");
  const std::string config_file = (fs::path(source_dir) / "tokenizer_config.json").string();
  const std::string map_file = (fs::path(source_dir) / "special_tokens_map.json").string();
  Json roles = Json::object();
  auto role = [&](const char* key, std::initializer_list<const char*> defaults) {
    std::string token = configured_token(config, key, config_file);
    std::string file = config_file;
    if (token.empty()) {
      token = configured_token(map, key, map_file);
      file = map_file;
    }
    if (!token.empty()) {
      const int32_t id = tokenizer_.token_to_id(token);
      KILN_CHECK(id >= 0, file, ": ", key, " \"", token, "\" is not a token of the tokenizer");
      roles[key] = token;
      return id;
    }
    for (const char* name : defaults) {
      const int32_t id = tokenizer_.token_to_id(name);
      if (id >= 0) {
        roles[key] = name;
        return id;
      }
    }
    return int32_t{-1};
  };
  unk_ = role("unk_token", {"[UNK]", "<unk>", "<|endoftext|>"});
  cls_ = role("cls_token", {"[CLS]", "<s>"});
  sep_ = role("sep_token", {"[SEP]", "</s>"});
  pad_ = role("pad_token", {"[PAD]", "<pad>"});
  mask_ = role("mask_token", {"[MASK]", "<mask>"});

  if (config.is_object()) {
    files_["tokenizer_config.json"] = config.dump(2) + "\n";
  } else {
    roles["tokenizer_class"] = "PreTrainedTokenizerFast";
    files_["tokenizer_config.json"] = roles.dump(2) + "\n";
  }
  if (map.is_object()) files_["special_tokens_map.json"] = map.dump(2) + "\n";
}

Tokenizer PipelineTokenizer::configured(const EncodeOptions& options) const {
  Tokenizer t = tokenizer_;
  if (options.max_length > 0) {
    TruncationParams p;
    p.max_length = options.max_length;
    t.set_truncation(p);
  }
  return t;
}

void PipelineTokenizer::pad(Encoding& e, size_t length) const {
  if (e.ids.size() >= length) return;
  KILN_CHECK(pad_ >= 0, "padding needs a pad token, and the tokenizer has none (set pad_token in "
                        "tokenizer_config.json)");
  e.ids.resize(length, pad_);
  e.type_ids.resize(length, 0);
  e.attention_mask.resize(length, 0);
}

namespace {
Encoding plain(tok::Encoding&& e) {
  Encoding out;
  out.ids = std::move(e.ids);
  out.type_ids = std::move(e.type_ids);
  out.attention_mask = std::move(e.attention_mask);
  return out;
}
}  // namespace

template <typename F>
std::vector<Encoding> PipelineTokenizer::encode_all(size_t n, const EncodeOptions& options, F encode_one) const {
  const Tokenizer t = configured(options);
  std::vector<tok::Encoding> encoded = encode_one(t);
  KILN_CHECK(encoded.size() == n, "PipelineTokenizer: internal error: ", encoded.size(), " encodings for ", n,
             " inputs");
  std::vector<Encoding> out(n);
  size_t longest = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = plain(std::move(encoded[i]));
    pad(out[i], options.pad_to);
    longest = std::max(longest, out[i].size());
  }
  if (options.pad_to_longest)
    for (Encoding& e : out) pad(e, longest);
  return out;
}

void PipelineTokenizer::encode_ids(std::string_view text, std::vector<int32_t>& ids) const {
  const tok::Encoding e = tokenizer_.encode(text, std::nullopt, false, OffsetUnit::kByte);
  ids.insert(ids.end(), e.ids.begin(), e.ids.end());
}

std::vector<std::vector<int32_t>> PipelineTokenizer::encode_ids_batch(const std::vector<std::string>& texts) const {
  std::vector<tok::Encoding> encoded = tokenizer_.encode_batch(texts, false, OffsetUnit::kByte);
  std::vector<std::vector<int32_t>> out(encoded.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::move(encoded[i].ids);
  return out;
}

Encoding PipelineTokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                                   const EncodeOptions& options) const {
  Encoding e = plain(configured(options).encode(a, b, options.add_special_tokens, OffsetUnit::kByte));
  pad(e, options.pad_to);
  return e;
}

std::vector<Encoding> PipelineTokenizer::encode_batch(const std::vector<std::string>& texts,
                                                      const EncodeOptions& options) const {
  return encode_all(texts.size(), options, [&](const Tokenizer& t) {
    return t.encode_batch(texts, options.add_special_tokens, OffsetUnit::kByte);
  });
}

std::vector<Encoding> PipelineTokenizer::encode_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                      const EncodeOptions& options) const {
  return encode_all(pairs.size(), options, [&](const Tokenizer& t) {
    return t.encode_batch(pairs, options.add_special_tokens, OffsetUnit::kByte);
  });
}

std::string PipelineTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return tokenizer_.decode(ids, skip_special_tokens);
}

std::vector<std::string> PipelineTokenizer::tokens() const {
  std::vector<std::string> out(vocab_size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = tokenizer_.id_to_token(static_cast<int32_t>(i)).value_or("");
  return out;
}

bool PipelineTokenizer::is_special_id(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[static_cast<size_t>(id)] != 0;
}

std::map<std::string, std::string> PipelineTokenizer::files() const { return files_; }

std::unique_ptr<TextTokenizer> open_text_tokenizer(const std::string& path, bool cased) {
  KILN_CHECK(!path.empty(), "no tokenizer: give a model directory or a tokenizer file");
  std::string source;
  const Json j = Tokenizer::pretrained_json(path, &source);
  if (fs::path(source).extension() == ".txt") {  // BERT's vocab.txt, read as BertTokenizer always has
    const bool lowercase = !cased && (!fs::is_directory(path) || model_dir_lowercase(path));
    return std::make_unique<BertTokenizer>(BertTokenizer::from_vocab_file(source, lowercase));
  }
  if (std::optional<BertTokenizer> bert = as_bert_tokenizer(j, cased))
    return std::make_unique<BertTokenizer>(std::move(*bert));
  KILN_CHECK(!cased, "--cased is for BERT's WordPiece; ", source, " is another tokenizer, which says its own case");
  return std::make_unique<PipelineTokenizer>(PipelineTokenizer::from_pretrained_json(j, source, path));
}

}  // namespace kiln::data
