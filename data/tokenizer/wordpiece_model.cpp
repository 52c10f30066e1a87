#include "kiln/data/tokenizer/wordpiece_model.h"

#include <utf8proc.h>

#include "core/error.h"
#include "core/file_util.h"

namespace kiln::data::tok {

WordPieceModel::WordPieceModel(TokenVocab vocab, std::string unk_token,
                               std::string continuing_subword_prefix,
                               size_t max_input_chars_per_word)
    : vocab_(std::move(vocab)),
      unk_(std::move(unk_token)),
      prefix_(std::move(continuing_subword_prefix)),
      max_chars_(max_input_chars_per_word) {
  unk_id_ = vocab_.find(unk_);
  if (prefix_.empty()) return;  // later pieces are looked up like the first
  const auto& strings = vocab_.strings();
  const auto& ids = vocab_.ids();
  for (size_t k = 0; k < strings.size(); ++k) {
    const std::string_view t = strings[k];
    if (t.size() > prefix_.size() && t.substr(0, prefix_.size()) == prefix_)
      continuation_.insert(t.substr(prefix_.size()), ids[k]);
  }
}

template <typename Lookup>
size_t WordPieceModel::longest_match(const Lookup& lookup, size_t max_len, std::string_view w,
                                     size_t start, int32_t& id) {
  auto is_continuation = [&](size_t i) {
    return (static_cast<unsigned char>(w[i]) & 0xC0) == 0x80;
  };
  size_t end = w.size();
  if (end - start > max_len) {
    // Nothing longer than the longest key can match; back up to a code
    // point boundary (w[start] starts one, so this stops at start at worst).
    end = start + max_len;
    while (end > start && is_continuation(end)) --end;
  }
  while (end > start) {
    id = lookup(w.substr(start, end - start));
    if (id >= 0) return end;
    --end;
    while (end > start && is_continuation(end)) --end;
  }
  return start;
}

void WordPieceModel::push_unk(std::string_view sequence, std::vector<Token>& out) const {
  if (unk_id_ < 0) fail("WordPiece: unk token \"", unk_, "\" is not in the vocabulary");
  out.push_back(Token{unk_id_, unk_, Span{0, sequence.size()}});
}

void WordPieceModel::tokenize(std::string_view sequence, std::vector<Token>& out) const {
  size_t chars = 0;
  for (char c : sequence) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (chars > max_chars_) return push_unk(sequence, out);
  const size_t mark = out.size();
  auto first = [this](std::string_view s) { return vocab_.find(s); };
  auto later = [this](std::string_view s) { return continuation_.find(s); };
  const bool plain = prefix_.empty();
  size_t start = 0;
  while (start < sequence.size()) {
    int32_t id = -1;
    const size_t end =
        start == 0 || plain
            ? longest_match(first, vocab_.max_token_length(), sequence, start, id)
            : longest_match(later, continuation_.max_key_length(), sequence, start, id);
    if (end == start) {
      out.resize(mark);
      return push_unk(sequence, out);
    }
    out.push_back(Token{id, *vocab_.token(id), Span{start, end}});
    start = end;
  }
}

std::unique_ptr<Model> wordpiece_model_from_json(const Json& j, const std::string& where) {
  json_object(j, where);
  if (const Json* t = json_find(j, "type", where)) {
    const std::string type = json_as_string(*t, json_path(where, "type"));
    if (type != "WordPiece")
      json_fail(json_path(where, "type"), "expected \"WordPiece\", got \"" + type + "\"");
  }
  // HF's visitor: each field required, and null is not a value of any of them.
  auto field = [&](const char* key) -> const Json& {
    const auto it = j.find(key);
    if (it == j.end()) json_fail(where, std::string("missing field \"") + key + "\"");
    return *it;
  };
  std::string unk = json_as_string(field("unk_token"), json_path(where, "unk_token"));
  std::string prefix = json_as_string(field("continuing_subword_prefix"),
                                      json_path(where, "continuing_subword_prefix"));
  const int64_t max_chars = json_as_int(field("max_input_chars_per_word"),
                                        json_path(where, "max_input_chars_per_word"), 0);
  TokenVocab vocab = TokenVocab::from_json(field("vocab"), json_path(where, "vocab"));
  return std::make_unique<WordPieceModel>(std::move(vocab), std::move(unk), std::move(prefix),
                                          static_cast<size_t>(max_chars));
}

namespace {

constexpr uint64_t kMaxVocabTxtBytes = uint64_t{64} << 20;  // 64 MiB

// Rust's char::is_whitespace (the White_Space property): \t..\r, U+0085 and
// the general categories Zs, Zl, Zp.
bool is_white_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// Rust's str::trim_end: `s` without its trailing White_Space (valid UTF-8).
std::string_view trim_end(std::string_view s) {
  while (!s.empty()) {
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t k = i;
    if (!is_white_space(decode_utf8(s, k))) break;
    s.remove_suffix(s.size() - i);
  }
  return s;
}

}  // namespace

std::unique_ptr<WordPieceModel> wordpiece_model_from_vocab_file(const std::string& vocab_txt_path,
                                                                std::string unk_token,
                                                                std::string prefix,
                                                                size_t max_input_chars_per_word) {
  const std::string what = "vocab.txt '" + vocab_txt_path + "'";
  const std::string text = read_file_bounded(vocab_txt_path, what, kMaxVocabTxtBytes);
  std::vector<std::pair<std::string, int32_t>> entries;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    KILN_CHECK(entries.size() < static_cast<size_t>(kMaxTokenId), what, ": too many lines");
    KILN_CHECK(is_valid_utf8(line), what, " line ", entries.size() + 1, ": not valid UTF-8");
    // (Rust's lines() drops "\r\n"'s '\r', which trim_end would drop anyway.)
    entries.emplace_back(std::string(trim_end(line)), static_cast<int32_t>(entries.size()));
  }
  return std::make_unique<WordPieceModel>(TokenVocab::from_entries(std::move(entries), what),
                                          std::move(unk_token), std::move(prefix),
                                          max_input_chars_per_word);
}

}  // namespace kiln::data::tok
