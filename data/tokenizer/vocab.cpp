#include "data/tokenizer/vocab.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace kiln::data {
namespace {

bool is_trailing_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

}  // namespace

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  KILN_CHECK(tokens.size() < static_cast<size_t>(INT32_MAX), "Vocab: too many tokens (",
             tokens.size(), ")");
  Vocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i)
    v.ids_.insert(v.tokens_[i], static_cast<int32_t>(i));
  return v;
}

Vocab Vocab::from_file(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(path, ec), "Vocab: vocab file '", path,
             "' is a directory");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "Vocab: cannot open vocab file '", path, "'");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    size_t end = line.size();
    while (end > 0 && is_trailing_space(line[end - 1])) --end;
    line.resize(end);
    tokens.push_back(line);
  }
  KILN_CHECK(!in.bad(), "Vocab: error reading vocab file '", path, "'");
  KILN_CHECK(!tokens.empty(), "Vocab: vocab file '", path, "' is empty");
  return from_tokens(std::move(tokens));
}

const std::string& Vocab::token(int32_t id) const {
  KILN_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size(), "Vocab: token id ", id,
             " out of range [0, ", tokens_.size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

}  // namespace kiln::data
