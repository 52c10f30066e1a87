// Note [Model-agnostic config]
// What train/, tools/, export/ and checkpoints know of a model's config,
// whatever its family: the config.json object as the family wrote it (its own
// fields, with the family's defaults filled in and unknown keys kept
// verbatim), its model_type, and the few facts every layer above nn/ asks
// about (ConfigFacts). The family's config reader (ModelFamily::read_config,
// nn/model_family.h) validates the text and computes the facts, so a
// ModelConfig is always a config its family accepts. A family's own struct
// (BertConfig, DistilBertConfig, ...) is one as<C>() away; a BertConfig
// converts implicitly, so BERT-schema code reads as it did.
//
//   ModelConfig c = ModelConfig::from_json_file("model/config.json");
//   c.facts().vocab_size;                       // any family
//   DistilBertConfig d = c.as<DistilBertConfig>();  // one family's fields
//   c = c.with_field("problem_type", "\"regression\"");  // revalidated copy
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/models/bert_config.h"

namespace kiln {

// What a config implies, in family-neutral terms.
struct ConfigFacts {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t max_position_embeddings = 0;
  int64_t max_sequence_length = 0;  // the most tokens a sequence may have
  int64_t type_vocab_size = 0;      // 0: the family has no token types
  std::optional<int64_t> pad_token_id;
  // The fields that fix the weights' shapes, by the family's names, in its
  // order: a checkpoint resumes only into a config that agrees on all.
  std::vector<std::pair<std::string, int64_t>> shape_fields;
  bool operator==(const ConfigFacts&) const = default;
};

class ModelConfig {
 public:
  ModelConfig();                     // BertConfig's defaults (bert-base)
  ModelConfig(const BertConfig& c);  // NOLINT: implicit, as BERT-schema code passes BertConfig

  // By config.json's "model_type" ("bert" when absent, as kiln always read
  // it); an unknown one is the Auto layer's error naming the supported ones.
  // Bounded as Note [Bounded JSON]; from_json_file reads a regular file only.
  static ModelConfig from_json_string(const std::string& text, const std::string& source = "config.json");
  static ModelConfig from_json_file(const std::string& path);

  const std::string& model_type() const { return model_type_; }
  const ConfigFacts& facts() const { return facts_; }
  // "architectures" (empty when absent).
  std::vector<std::string> architectures() const;
  // "id2label" in id order (empty when absent); BertConfig::id2label's rules.
  std::vector<std::string> id2label(const std::string& source = "config.json") const;
  // "problem_type" when a string.
  std::optional<std::string> problem_type() const;

  // A copy with one top-level key set to a JSON value (given as its text),
  // read again by the family: an invalid result is the family's kiln::Error.
  ModelConfig with_field(const std::string& key, const std::string& json_text) const;

  // The family's own struct: C::from_json_string(to_json_string(), source).
  template <typename C>
  C as(const std::string& source = "config.json") const {
    return C::from_json_string(text_, source);
  }

  // The config.json text as the family writes it (ends in a newline).
  const std::string& to_json_string() const { return text_; }
  void to_json_file(const std::string& path) const;  // atomic (temp file + rename)

  bool operator==(const ModelConfig& o) const { return text_ == o.text_; }

 private:
  struct Empty {};
  explicit ModelConfig(Empty) {}
  std::string model_type_;
  std::string text_;
  ConfigFacts facts_;
};

}  // namespace kiln
