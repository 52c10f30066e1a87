// Tokenizer::from_pretrained: a model directory's tokenizer, whatever files
// it holds. A tokenizer.json is loaded as is; the older formats are first
// turned into the tokenizer.json that transformers' converters
// (convert_slow_tokenizer.py) build from them, so every format runs the
// same pipeline code:
//   vocab.json + merges.txt   GPT2Converter (RobertaConverter when
//                             config.json's model_type is roberta)
//   *.model (SentencePiece)   sentencepiece_model.h
//   vocab.txt                 BertConverter (do_lower_case from
//                             tokenizer_config.json, default true)
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "kiln/data/tokenizer/sentencepiece_model.h"
#include "kiln/data/tokenizer/tokenizer.h"
#include "kiln/data/tokenizer/tokenizer_config.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using tok::Json;

constexpr uint64_t kMaxVocabBytes = uint64_t{1} << 30;

Json read_json(const std::string& path) {
  JsonLimits limits;
  limits.max_bytes = kMaxVocabBytes;
  return read_json_file(path, path, limits);
}

// config.json's model_type, or "" (no file, or no such field).
std::string model_type(const fs::path& dir) {
  const fs::path config = dir / "config.json";
  if (!fs::exists(config)) return "";
  const Json j = read_json(config.string());
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return "";
  return j["model_type"].get<std::string>();
}

// tokenizer_config.json's add_prefix_space (GPT-2 default false).
bool add_prefix_space(const fs::path& dir) {
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config)) return false;
  const Json j = read_json(config.string());
  return j.is_object() && j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() &&
         j["add_prefix_space"].get<bool>();
}

Json added(int id, const std::string& content, bool special) {
  return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", !special}, {"special", special}};
}

// GPT-2's merges.txt: an optional "#version" first line, then "a b" per line.
Json read_merges(const std::string& path) {
  const std::string text = read_file_bounded(path, "merges.txt", kMaxVocabBytes);
  Json merges = Json::array();
  size_t line_no = 0, begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    KILN_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                   line.find(' ', space + 1) == std::string::npos,
               path, ":", line_no, ": a merge is two tokens separated by one space, got \"", line,
               "\"");
    merges.push_back(line);
  }
  return merges;
}

Json gpt2_json(const fs::path& dir) {
  const std::string vocab_path = (dir / "vocab.json").string();
  Json vocab = read_json(vocab_path);
  KILN_CHECK(vocab.is_object(), vocab_path, ": expected an object of token -> id");
  const bool roberta = model_type(dir) == "roberta";
  const bool prefix = add_prefix_space(dir);
  Json j;
  j["version"] = "1.0";
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", read_merges((dir / "merges.txt").string())}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", prefix},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  Json added_tokens = Json::array();
  if (roberta) {
    j["post_processor"] = {{"type", "RobertaProcessing"},
                           {"sep", {"</s>", vocab.value("</s>", 2)}},
                           {"cls", {"<s>", vocab.value("<s>", 0)}},
                           {"trim_offsets", true},
                           {"add_prefix_space", prefix}};
    for (const char* s : {"<s>", "<pad>", "</s>", "<unk>", "<mask>"})
      if (vocab.contains(s)) added_tokens.push_back(added(vocab[s].get<int>(), s, true));
  } else {
    j["post_processor"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", false},
                           {"use_regex", true}};
    if (vocab.contains("<|endoftext|>"))
      added_tokens.push_back(added(vocab["<|endoftext|>"].get<int>(), "<|endoftext|>", true));
  }
  j["added_tokens"] = added_tokens;
  return j;
}

Json bert_json(const fs::path& vocab_txt, bool lowercase) {
  const std::string text = read_file_bounded(vocab_txt.string(), "vocab.txt", kMaxVocabBytes);
  Json vocab = Json::object();
  size_t begin = 0;
  int id = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string token = text.substr(begin, end - begin);
    if (!token.empty() && token.back() == '\r') token.pop_back();
    // transformers' load_vocab: a repeated token keeps its last id.
    vocab[token] = id++;
    begin = end + 1;
  }
  KILN_CHECK(vocab.contains("[UNK]"), vocab_txt.string(), ": no [UNK] token");
  Json j;
  j["version"] = "1.0";
  j["normalizer"] = {{"type", "BertNormalizer"},
                     {"clean_text", true},
                     {"handle_chinese_chars", true},
                     {"strip_accents", nullptr},
                     {"lowercase", lowercase}};
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  j["model"] = {{"type", "WordPiece"},
                {"unk_token", "[UNK]"},
                {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100},
                {"vocab", vocab}};
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  Json added_tokens = Json::array();
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (vocab.contains(s)) added_tokens.push_back(added(vocab[s].get<int>(), s, true));
  j["added_tokens"] = added_tokens;
  if (vocab.contains("[CLS]") && vocab.contains("[SEP]")) {
    const int cls = vocab["[CLS]"].get<int>(), sep = vocab["[SEP]"].get<int>();
    auto special = [](const char* s) { return Json{{"SpecialToken", {{"id", s}, {"type_id", 0}}}}; };
    auto seq = [](const char* s, int type) { return Json{{"Sequence", {{"id", s}, {"type_id", type}}}}; };
    Json sep1 = {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 1}}}};
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {special("[CLS]"), seq("A", 0), special("[SEP]")}},
        {"pair", {special("[CLS]"), seq("A", 0), special("[SEP]"), seq("B", 1), sep1}},
        {"special_tokens",
         {{"[CLS]", {{"id", "[CLS]"}, {"ids", {cls}}, {"tokens", {"[CLS]"}}}},
          {"[SEP]", {{"id", "[SEP]"}, {"ids", {sep}}, {"tokens", {"[SEP]"}}}}}}};
  }
  return j;
}

// The SentencePiece model of a directory, under the names transformers uses.
std::optional<fs::path> sentencepiece_file(const fs::path& dir) {
  for (const char* name : {"sentencepiece.bpe.model", "spiece.model", "tokenizer.model",
                           "sentencepiece.model"})
    if (fs::exists(dir / name)) return dir / name;
  return std::nullopt;
}

}  // namespace

tok::Json Tokenizer::pretrained_json(const std::string& path, std::string* source) {
  const fs::path p(path);
  KILN_CHECK(fs::exists(p), path, ": no such file or directory");
  std::string named = path;
  Json j;
  if (!fs::is_directory(p)) {
    const std::string name = p.filename().string();
    if (p.extension() == ".json" && name != "vocab.json") {
      j = read_tokenizer_json(path);
    } else if (p.extension() == ".model") {
      j = tok::sentencepiece_to_tokenizer_json(path, "");
    } else if (p.extension() == ".txt") {
      j = bert_json(p, true);
    } else {
      fail(path, ": not a tokenizer file (expected tokenizer.json, a SentencePiece .model or a "
                 "vocab.txt), nor a model directory");
    }
  } else if (fs::exists(p / "tokenizer.json")) {
    named = (p / "tokenizer.json").string();
    j = read_tokenizer_json(named);
  } else if (fs::exists(p / "vocab.json") && fs::exists(p / "merges.txt")) {
    named = (p / "vocab.json").string();
    j = gpt2_json(p);
  } else if (const std::optional<fs::path> model = sentencepiece_file(p)) {
    named = model->string();
    j = tok::sentencepiece_to_tokenizer_json(named, model_type(p));
  } else if (fs::exists(p / "vocab.txt")) {
    named = (p / "vocab.txt").string();
    j = bert_json(p / "vocab.txt", model_dir_lowercase(path));
  } else {
    fail(path, ": no tokenizer in this directory (looked for tokenizer.json, vocab.json + "
               "merges.txt, a SentencePiece .model, vocab.txt)");
  }
  if (source) *source = named;
  return j;
}

Tokenizer Tokenizer::from_pretrained(const std::string& path) {
  std::string source;
  const Json j = pretrained_json(path, &source);
  return from_json(j, source);
}

}  // namespace kiln::data
