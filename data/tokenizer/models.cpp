// model_from_json (pipeline.h): the tokenizer.json "model" object to its
// Model, by "type" (HF's ModelWrapper). Without a "type" (files older than
// the tag), HF tries each model in turn, BPE, WordPiece, WordLevel, Unigram,
// and takes the first that deserializes (WordPiece before WordLevel, whose
// fields are a subset); so does this, and names every reason when none does.
#include <string>

#include "core/error.h"
#include "kiln/data/tokenizer/bpe.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/unigram.h"
#include "kiln/data/tokenizer/wordlevel.h"
#include "kiln/data/tokenizer/wordpiece_model.h"

namespace kiln::data::tok {

std::unique_ptr<Model> model_from_json(const Json& j, const std::string& where) {
  using Factory = std::unique_ptr<Model> (*)(const Json&, const std::string&);
  struct Kind {
    const char* name;
    Factory make;
  };
  static const Kind kinds[] = {{"BPE", bpe_from_json},
                               {"WordPiece", wordpiece_model_from_json},
                               {"WordLevel", wordlevel_from_json},
                               {"Unigram", unigram_from_json}};
  json_object(j, where);
  if (const auto t = j.find("type"); t != j.end()) {  // a null "type" is an error too (HF)
    const std::string type = json_as_string(*t, json_path(where, "type"));
    for (const Kind& k : kinds)
      if (type == k.name) return k.make(j, where);
    json_fail(json_path(where, "type"), "unknown model type \"" + type +
                                            "\" (expected BPE, WordPiece, WordLevel or Unigram)");
  }
  std::string reasons;
  for (const Kind& k : kinds) {
    try {
      return k.make(j, where);
    } catch (const Error& e) {
      reasons += std::string(reasons.empty() ? "" : "; ") + "not " + k.name + " (" + e.what() + ")";
    }
  }
  json_fail(where, "no \"type\", and the object is no model: " + reasons);
}

}  // namespace kiln::data::tok
