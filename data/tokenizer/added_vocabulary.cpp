// AddedVocabulary (added_vocabulary.h), HF's tokenizer/added_vocabulary.rs.
#include "kiln/data/tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/error.h"

namespace kiln::data::tok {
namespace {

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_space_char(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// The code point ending just before byte `end` of valid UTF-8 `s` (end > 0).
char32_t last_char_before(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return decode_utf8(s, b);
}

}  // namespace

void AddedVocabulary::Matcher::build(const std::vector<std::pair<std::string, int32_t>>& patterns) {
  by_first_byte.assign(256, {});
  empty = patterns.empty();
  for (const auto& p : patterns) by_first_byte[static_cast<unsigned char>(p.first[0])].push_back(p);
  for (auto& list : by_first_byte)
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void AddedVocabulary::add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                                 const Normalizer* normalizer) {
  const auto vocab = static_cast<int64_t>(model.vocab_size());
  int64_t next_id = vocab;
  if (!by_id_.empty()) {
    const int64_t max = by_id_.rbegin()->first;
    next_id = (max >= vocab || vocab == 0) ? max + 1 : vocab;
  }
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    auto known = by_content_.find(t.content);
    if (known != by_content_.end()) {
      const AddedToken& old = by_id_.at(known->second);
      if (old.content == t.content && old.single_word == t.single_word && old.lstrip == t.lstrip &&
          old.rstrip == t.rstrip && old.normalized == t.normalized && old.special == t.special)
        continue;
    }
    int64_t id = token_to_id(t.content);
    if (id < 0) id = model.token_to_id(t.content);
    if (id < 0) {
      KILN_CHECK(next_id <= INT32_MAX, "added tokens: id ", next_id, " out of range");
      id = next_id++;
    }
    const auto id32 = static_cast<int32_t>(id);
    if (t.normalized && normalizer) {
      NormalizedString s(t.content);
      normalizer->normalize(s);
      if (s.get() != t.content) normalized_cache_[id32] = s.get();
    }
    by_content_[t.content] = id32;
    if (t.special) special_.insert(t.content);
    by_id_[id32] = t;
  }
  refresh(normalizer);
}

void AddedVocabulary::refresh(const Normalizer*) {
  std::vector<std::pair<std::string, int32_t>> norm, raw;
  for (const auto& [id, t] : by_id_) {
    if (t.normalized) {
      auto it = normalized_cache_.find(id);
      const std::string& p = it != normalized_cache_.end() ? it->second : t.content;
      if (!p.empty()) norm.emplace_back(p, id);
    } else {
      raw.emplace_back(t.content, id);
    }
  }
  raw_.build(raw);
  normalized_.build(norm);
}

int32_t AddedVocabulary::token_to_id(std::string_view token) const {
  auto it = by_content_.find(std::string(token));
  return it == by_content_.end() ? -1 : it->second;
}

const std::string* AddedVocabulary::id_to_token(int32_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  auto n = normalized_cache_.find(id);
  return n != normalized_cache_.end() ? &n->second : &it->second.content;
}

std::vector<std::pair<int32_t, Span>> AddedVocabulary::find_matches(std::string_view s,
                                                                    const Matcher& m) const {
  if (s.empty()) return {{-1, {0, 0}}};
  if (m.empty) return {{-1, {0, s.size()}}};
  std::vector<std::pair<int32_t, Span>> out;
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const auto& list = m.by_first_byte[static_cast<unsigned char>(s[pos])];
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& p : list)
      if (s.compare(pos, p.first.size(), p.first) == 0) {
        hit = &p;
        break;
      }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->first.size();
    pos = stop;  // the automaton scans on after the match, used or not
    const AddedToken& t = by_id_.at(hit->second);
    if (t.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char_before(s, start));
      size_t k = stop;
      const bool stop_space = stop == s.size() || !is_word_char(decode_utf8(s, k));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t c = b - 1;
        while (c > 0 && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) --c;
        size_t k = c;
        if (!is_space_char(decode_utf8(s, k))) break;
        b = c;
      }
      start = std::max(b, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t k = stop;
        if (!is_space_char(decode_utf8(s, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) out.push_back({-1, {start_offset, start}});
    out.push_back({hit->second, {start, stop}});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back({-1, {start_offset, s.size()}});
  return out;
}

void AddedVocabulary::cut(NormalizedString&& n, const Matcher& m, std::vector<Split>& out) const {
  if (n.empty()) return;  // (PreTokenizedString drops empty splits)
  const auto matches = find_matches(n.get(), m);
  // No added token, and n's alignments span all of its original: the one
  // slice would be n itself, so n is kept as it is (no copy).
  if (matches.size() == 1 && matches[0].first < 0 && matches[0].second == Span{0, n.size()} &&
      n.alignments().front().begin == 0 && n.alignments().back().end == n.original().size()) {
    out.push_back({std::move(n), std::nullopt});
    return;
  }
  for (const auto& [id, span] : matches) {
    std::optional<NormalizedString> slice = n.slice_normalized(span);
    KILN_CHECK(slice.has_value(), "added tokens: bad split [", span.begin, ", ", span.end, ")");
    if (slice->empty()) continue;
    if (id >= 0) {
      std::string value = slice->get();
      const size_t len = value.size();
      out.push_back({std::move(*slice), std::vector<Token>{{id, std::move(value), {0, len}}}});
    } else {
      out.push_back({std::move(*slice), std::nullopt});
    }
  }
}

void AddedVocabulary::split_with(PreTokenizedString& p, const Matcher& m) const {
  p.split([&](size_t, NormalizedString&& n) {
    std::vector<Split> out;
    cut(std::move(n), m, out);
    return out;
  });
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer,
                                                          std::string_view sequence) const {
  // HF's steps, split_with(raw_) on the whole text, then each piece without
  // a token normalized and split_with(normalized_), without their lists: a
  // piece of the raw text is made from its bytes (the slice of the whole
  // text's NormalizedString, whose alignments are the identity, would equal it).
  std::vector<Split> splits;
  for (const auto& [id, span] : find_matches(sequence, raw_)) {
    if (span.begin == span.end) continue;
    KILN_CHECK(is_boundary(sequence, span.begin) && is_boundary(sequence, span.end),
               "added tokens: bad split [", span.begin, ", ", span.end, ")");
    NormalizedString n(sequence.substr(span.begin, span.end - span.begin), span.begin);
    if (id >= 0) {
      std::string value = n.get();
      const size_t len = value.size();
      splits.push_back({std::move(n), std::vector<Token>{{id, std::move(value), {0, len}}}});
      continue;
    }
    if (normalizer) normalizer->normalize(n);
    cut(std::move(n), normalized_, splits);
  }
  return PreTokenizedString(std::move(splits));
}

}  // namespace kiln::data::tok
