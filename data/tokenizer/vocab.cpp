#include "data/tokenizer/vocab.h"

#include "core/error.h"
#include "core/file_util.h"

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
  // Note [Bounded input]: a regular file (not a FIFO, not a directory) of bounded size.
  const std::string text = read_file_bounded(path, "Vocab: vocab file '" + path + "'", kMaxVocabFileBytes);
  // Lines as std::getline splits them: a final line without '\n' counts, a final '\n' adds none.
  std::vector<std::string> tokens;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    if (end == std::string::npos) end = text.size();
    while (end > begin && is_trailing_space(text[end - 1])) --end;
    tokens.emplace_back(text, begin, end - begin);
    begin = next;
  }
  KILN_CHECK(!tokens.empty(), "Vocab: vocab file '", path, "' is empty");
  return from_tokens(std::move(tokens));
}

const std::string& Vocab::token(int32_t id) const {
  KILN_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size(), "Vocab: token id ", id,
             " out of range [0, ", tokens_.size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

}  // namespace kiln::data
