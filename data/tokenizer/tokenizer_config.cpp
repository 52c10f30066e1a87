#include "data/tokenizer/tokenizer_config.h"

#include <sys/stat.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"

namespace kiln::data {

TokenizerConfig read_tokenizer_config(const std::string& path) {
  const nlohmann::json j = read_json_file(path, path);
  KILN_CHECK(j.is_object(), path, ": tokenizer config must be a JSON object, got ", j.type_name());
  TokenizerConfig c;
  if (const auto it = j.find("do_lower_case"); it != j.end()) {
    KILN_CHECK(it->is_boolean(), path, ": do_lower_case must be true or false, got ", it->type_name());
    c.do_lower_case = it->get<bool>();
  }
  return c;
}

bool model_dir_lowercase(const std::string& model_dir) {
  if (model_dir.empty()) return true;
  const std::string path = model_dir + "/tokenizer_config.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) return true;
  return read_tokenizer_config(path).do_lower_case.value_or(true);
}

}  // namespace kiln::data
