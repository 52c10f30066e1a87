// tokenizer_config.json of a Hugging Face model directory: the fields kiln's
// BertTokenizer uses.
//
// The file is read with the bounds of Note [Bounded input] (core/file_util.h:
// a regular file only, at most kMaxJsonBytes) and Note [Bounded JSON]
// (core/json_util.h). It must be a JSON object; do_lower_case, when present,
// must be true or false. Other keys are ignored. Errors are kiln::Error
// naming the file.
#pragma once

#include <optional>
#include <string>

namespace kiln::data {

struct TokenizerConfig {
  std::optional<bool> do_lower_case;  // unset when the file does not say
};

// Reads a tokenizer_config.json.
TokenizerConfig read_tokenizer_config(const std::string& path);

// do_lower_case from model_dir/tokenizer_config.json; true when model_dir is
// "" or holds no such file (an entry that is not a regular file, e.g. a FIFO,
// is an error, not "no file").
bool model_dir_lowercase(const std::string& model_dir);

}  // namespace kiln::data
