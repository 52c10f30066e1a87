// SentencePiece .model -> tokenizer.json (sentencepiece_model.h): the
// protobuf reader and transformers' converters.
#include "kiln/data/tokenizer/sentencepiece_model.h"

#include <google/protobuf/stubs/strutil.h>  // Base64Escape (Debian 12's protobuf 3.21)
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "core/file_util.h"
#include "data/tokenizer/sentencepiece_model.pb.h"
#include "kiln/data/tokenizer/unigram.h"

namespace kiln::data::tok {
namespace {

const char* const kMetaspace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

std::string checked_text(const std::string& s, const std::string& what, const std::string& field) {
  KILN_CHECK(is_valid_utf8(s), what, ": ", field, " is not valid UTF-8");
  return s;
}

// ---- tokenizer.json pieces, as tokenizers 0.23 serializes them ------------

using Vocab = std::vector<std::pair<std::string, double>>;

Json metaspace(const char* type) {
  return {{"type", type}, {"replacement", kMetaspace}, {"prepend_scheme", "always"}, {"split", true}};
}

Json replace_regex(const char* regex, const char* content) {
  return {{"type", "Replace"}, {"pattern", {{"Regex", regex}}}, {"content", content}};
}
Json replace_string(const char* pattern, const char* content) {
  return {{"type", "Replace"}, {"pattern", {{"String", pattern}}}, {"content", content}};
}

// One item of a TemplateProcessing template: a special token, or the
// sequence "A" / "B".
struct TemplateItem {
  bool sequence;
  std::string id;
  int type_id;
};
Json template_items(const std::vector<TemplateItem>& items) {
  Json out = Json::array();
  for (const TemplateItem& t : items)
    out.push_back({{t.sequence ? "Sequence" : "SpecialToken", {{"id", t.id}, {"type_id", t.type_id}}}});
  return out;
}
Json template_processing(const std::vector<TemplateItem>& single,
                         const std::vector<TemplateItem>& pair,
                         const std::vector<std::pair<std::string, int64_t>>& special_tokens) {
  Json specials = Json::object();
  for (const auto& [token, id] : special_tokens)
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  return {{"type", "TemplateProcessing"},
          {"single", template_items(single)},
          {"pair", template_items(pair)},
          {"special_tokens", specials}};
}

// What a converter decides; turned into JSON by assemble().
struct Conversion {
  Vocab vocab;
  int64_t unk_id = 0;
  bool byte_fallback = false;
  bool merges_by_score = false;  // BPE: SentencePieceExtractor.extract(vocab_scores)
  Json normalizer, pre_tokenizer, post_processor, decoder;
  struct Added {
    std::string content;
    bool lstrip = false;
    bool normalized = false;
  };
  std::vector<Added> added;  // special added tokens, in the order they are added
};

// SpmConverter.normalizer.
Json spm_normalizer(const SentencePieceModel& m) {
  Json list = Json::array();
  if (!m.precompiled_charsmap.empty()) {
    std::string b64;
    google::protobuf::Base64Escape(google::protobuf::StringPiece(m.precompiled_charsmap), &b64);
    list.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", b64}});
  }
  list.push_back(replace_regex(" {2,}", " "));
  return {{"type", "Sequence"}, {"normalizers", list}};
}

Vocab proto_vocab(const SentencePieceModel& m, size_t from) {
  Vocab v;
  for (size_t i = from; i < m.pieces.size(); ++i)
    v.emplace_back(m.pieces[i].piece, static_cast<double>(m.pieces[i].score));
  return v;
}

Conversion spm_converter(const SentencePieceModel& m) {
  Conversion c;
  c.vocab = proto_vocab(m, 0);
  c.unk_id = m.unk_id;
  c.normalizer = spm_normalizer(m);
  c.pre_tokenizer = metaspace("Metaspace");
  c.decoder = metaspace("Metaspace");
  return c;
}

Conversion xlm_roberta_converter(const SentencePieceModel& m) {
  Conversion c = spm_converter(m);
  c.vocab = {{"<s>", 0.0}, {"<pad>", 0.0}, {"</s>", 0.0}, {"<unk>", 0.0}};
  for (auto& p : proto_vocab(m, 3)) c.vocab.push_back(std::move(p));
  c.vocab.emplace_back("<mask>", 0.0);
  c.unk_id = 3;
  // XLMRobertaTokenizer's fairseq ids: <s> 0, </s> 2, whatever the pieces.
  c.post_processor = template_processing(
      {{false, "<s>", 0}, {true, "A", 0}, {false, "</s>", 0}},
      {{false, "<s>", 0}, {true, "A", 0}, {false, "</s>", 0}, {false, "</s>", 0}, {true, "B", 0},
       {false, "</s>", 0}},
      {{"<s>", 0}, {"</s>", 2}});
  // XLMRobertaTokenizerFast's special tokens; its <mask> is
  // AddedToken(lstrip=True), normalized by default.
  c.added = {{"<s>"}, {"</s>"}, {"<unk>"}, {"<pad>"}, {"<mask>", true, true}};
  return c;
}

Conversion llama_converter(const SentencePieceModel& m) {
  Conversion c;
  c.vocab = {{"<unk>", 0.0}, {"<s>", 0.0}, {"</s>", 0.0}};
  for (auto& p : proto_vocab(m, 3)) c.vocab.push_back(std::move(p));
  c.unk_id = 0;
  c.byte_fallback = true;
  c.merges_by_score = true;
  c.normalizer = {{"type", "Sequence"},
                  {"normalizers",
                   {{{"type", "Prepend"}, {"prepend", kMetaspace}}, replace_string(" ", kMetaspace)}}};
  c.pre_tokenizer = nullptr;
  c.decoder = {{"type", "Sequence"},
               {"decoders",
                {replace_string(kMetaspace, " "),
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}},
                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  // LlamaTokenizerFast.update_post_processor with add_bos_token (its
  // default) set and add_eos_token unset; the id is filled in by assemble().
  c.post_processor = template_processing({{false, "<s>", 0}, {true, "A", 0}},
                                         {{false, "<s>", 0}, {true, "A", 0}, {false, "<s>", 1},
                                          {true, "B", 1}},
                                         {{"<s>", -1}});
  c.added = {{"<unk>"}, {"<s>"}, {"</s>"}};
  return c;
}

// transformers' SentencePieceExtractor.extract: merges rebuilt from the
// vocabulary. Every split of a piece (at a code point) into two pieces of
// the model is a merge, ordered within a piece by the two halves' ids;
// then all are stably sorted by the merged piece's score (highest first),
// or, without scores, by its id. `vocab` maps the model's pieces to their
// last id; entries are the distinct pieces in first-seen order with their
// last score.
std::vector<std::pair<std::string, std::string>> extract_merges(
    const SentencePieceModel& m, const Vocab* vocab_scores) {
  std::vector<std::pair<std::string_view, int32_t>> keys;
  std::unordered_map<std::string_view, int32_t> last_id;
  for (size_t i = 0; i < m.pieces.size(); ++i) last_id[m.pieces[i].piece] = static_cast<int32_t>(i);
  keys.assign(last_id.begin(), last_id.end());
  DoubleArrayTrie vocab;
  vocab.build(std::move(keys));

  struct Entry {
    std::string_view piece;
    double score;
  };
  std::vector<Entry> entries;
  std::unordered_map<std::string_view, size_t> position;
  auto add = [&](std::string_view piece, double score) {
    auto [it, fresh] = position.emplace(piece, entries.size());
    if (fresh)
      entries.push_back({piece, score});
    else
      entries[it->second].score = score;
  };
  if (vocab_scores) {
    for (const auto& [piece, score] : *vocab_scores) add(piece, score);
  } else {
    for (const auto& p : m.pieces) add(p.piece, static_cast<double>(last_id[p.piece]));
  }

  struct Merge {
    std::string_view left, right;
    double score;
  };
  std::vector<Merge> merges;
  struct Split {
    int32_t left_id, right_id;
    size_t at;
  };
  std::vector<Split> local;
  for (const Entry& e : entries) {
    local.clear();
    int32_t unit = DoubleArrayTrie::kRoot;
    for (size_t i = 0; i + 1 < e.piece.size(); ++i) {
      unit = vocab.step(unit, static_cast<unsigned char>(e.piece[i]));
      if (unit < 0) break;
      const int32_t left = vocab.value(unit);
      if (left < 0) continue;
      const int32_t right = vocab.find(e.piece.substr(i + 1));
      if (right >= 0) local.push_back({left, right, i + 1});
    }
    std::sort(local.begin(), local.end(), [](const Split& a, const Split& b) {
      return a.left_id != b.left_id ? a.left_id < b.left_id : a.right_id < b.right_id;
    });
    for (const Split& s : local)
      merges.push_back({e.piece.substr(0, s.at), e.piece.substr(s.at), e.score});
  }
  const bool highest_first = vocab_scores != nullptr;
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) {
    return highest_first ? a.score > b.score : a.score < b.score;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Merge& mg : merges) out.emplace_back(mg.left, mg.right);
  return out;
}

Json assemble(const SentencePieceModel& m, Conversion c, const std::string& what) {
  for (size_t i = 0; i < c.vocab.size(); ++i)
    KILN_CHECK(std::isfinite(c.vocab[i].second), what, ": piece ", i, " (\"", c.vocab[i].first,
               "\") has a non-finite score");
  // The model's token_to_id: a piece's last id.
  std::unordered_map<std::string, int64_t> ids;
  for (size_t i = 0; i < c.vocab.size(); ++i) ids[c.vocab[i].first] = static_cast<int64_t>(i);

  Json model;
  if (m.model_type == SentencePieceModel::ModelType::kUnigram) {
    KILN_CHECK(c.unk_id >= 0 && static_cast<size_t>(c.unk_id) < c.vocab.size(), what, ": unk_id ",
               c.unk_id, " is outside the vocabulary of ", c.vocab.size(), " pieces");
    Json vocab = Json::array();
    for (const auto& [piece, score] : c.vocab) vocab.push_back(Json::array({piece, score}));
    model = {{"type", "Unigram"},
             {"unk_id", c.unk_id},
             {"vocab", std::move(vocab)},
             {"byte_fallback", c.byte_fallback}};
  } else if (m.model_type == SentencePieceModel::ModelType::kBpe) {
    Json vocab = Json::object();
    for (const auto& [piece, id] : ids) vocab[piece] = id;
    Json merges = Json::array();
    for (auto& [l, r] : extract_merges(m, c.merges_by_score ? &c.vocab : nullptr))
      merges.push_back(Json::array({std::move(l), std::move(r)}));
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", m.unk_piece},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},
             {"byte_fallback", c.byte_fallback},
             {"ignore_merges", false},
             {"vocab", std::move(vocab)},
             {"merges", std::move(merges)}};
  } else {
    fail(what, ": trained as model type ", static_cast<int>(m.model_type),
         " (WORD or CHAR); transformers converts only UNIGRAM (1) and BPE (2) models");
  }

  // Added tokens: the model's id, or a new one past the vocabulary (HF's
  // AddedVocabulary); written sorted by id.
  std::vector<std::pair<int64_t, Json>> added;
  int64_t next_id = static_cast<int64_t>(c.vocab.size());
  for (const Conversion::Added& a : c.added) {
    auto it = ids.find(a.content);
    const int64_t id = it != ids.end() ? it->second : next_id++;
    if (it == ids.end()) ids.emplace(a.content, id);
    added.emplace_back(id, Json{{"id", id},
                                {"content", a.content},
                                {"single_word", false},
                                {"lstrip", a.lstrip},
                                {"rstrip", false},
                                {"normalized", a.normalized},
                                {"special", true}});
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Json added_tokens = Json::array();
  for (auto& [id, t] : added) added_tokens.push_back(std::move(t));
  // Template ids left as -1 are the fast tokenizer's token_to_id.
  if (c.post_processor.is_object())
    for (auto& [token, spec] : c.post_processor["special_tokens"].items())
      if (spec["ids"][0].get<int64_t>() < 0) spec["ids"][0] = ids.count(token) ? ids[token] : 0;

  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added_tokens)},
          {"normalizer", std::move(c.normalizer)},
          {"pre_tokenizer", std::move(c.pre_tokenizer)},
          {"post_processor", std::move(c.post_processor)},
          {"decoder", std::move(c.decoder)},
          {"model", std::move(model)}};
}

}  // namespace

SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& what) {
  KILN_CHECK(bytes.size() <= kMaxSentencePieceModelBytes, what, ": ", bytes.size(),
             " bytes, over the limit of ", kMaxSentencePieceModelBytes, " bytes");
  spm::ModelProto proto;
  KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), what,
             ": not a SentencePiece model (protobuf could not parse the ModelProto)");
  SentencePieceModel m;
  m.pieces.reserve(static_cast<size_t>(proto.pieces_size()));
  for (int i = 0; i < proto.pieces_size(); ++i) {
    const auto& p = proto.pieces(i);
    SentencePieceModel::Piece piece;
    piece.piece = checked_text(p.piece(), what, "piece " + std::to_string(i));
    piece.score = p.score();
    KILN_CHECK(std::isfinite(piece.score), what, ": piece ", i, " (\"", piece.piece,
               "\") has a non-finite score");
    piece.type = static_cast<int32_t>(p.type());
    m.pieces.push_back(std::move(piece));
  }
  const auto& t = proto.trainer_spec();
  m.model_type = static_cast<SentencePieceModel::ModelType>(t.model_type());
  m.byte_fallback = t.byte_fallback();
  m.unk_id = t.unk_id();
  m.bos_id = t.bos_id();
  m.eos_id = t.eos_id();
  m.pad_id = t.pad_id();
  m.unk_piece = checked_text(t.unk_piece(), what, "trainer_spec.unk_piece");
  m.bos_piece = checked_text(t.bos_piece(), what, "trainer_spec.bos_piece");
  m.eos_piece = checked_text(t.eos_piece(), what, "trainer_spec.eos_piece");
  m.pad_piece = checked_text(t.pad_piece(), what, "trainer_spec.pad_piece");
  const auto& n = proto.normalizer_spec();
  m.normalizer_name = checked_text(n.name(), what, "normalizer_spec.name");
  m.precompiled_charsmap = n.precompiled_charsmap();
  m.add_dummy_prefix = n.add_dummy_prefix();
  m.remove_extra_whitespaces = n.remove_extra_whitespaces();
  m.escape_whitespaces = n.escape_whitespaces();
  return m;
}

SentencePieceModel read_sentencepiece_model(const std::string& path) {
  return parse_sentencepiece_model(read_file_bounded(path, path, kMaxSentencePieceModelBytes),
                                   path);
}

Json sentencepiece_to_tokenizer_json(const SentencePieceModel& m, const std::string& model_type,
                                     const std::string& what) {
  Conversion c;
  if (model_type.empty())
    c = spm_converter(m);
  else if (model_type == "xlm-roberta")
    c = xlm_roberta_converter(m);
  else if (model_type == "llama")
    c = llama_converter(m);
  else
    fail(what, ": no SentencePiece converter for model_type \"", model_type,
         "\" (supported: xlm-roberta, llama, or none for transformers' plain SpmConverter)");
  return assemble(m, std::move(c), what);
}

Json sentencepiece_to_tokenizer_json(const std::string& model_path, const std::string& model_type) {
  return sentencepiece_to_tokenizer_json(read_sentencepiece_model(model_path), model_type,
                                         model_path);
}

}  // namespace kiln::data::tok
