// tok::Encoding's operations (pipeline.h): HF's tokenizer/encoding.rs.
#include <algorithm>

#include "core/error.h"
#include "kiln/data/tokenizer/pipeline.h"

namespace kiln::data::tok {

void Encoding::append(const Encoding& o) {
  ids.insert(ids.end(), o.ids.begin(), o.ids.end());
  type_ids.insert(type_ids.end(), o.type_ids.begin(), o.type_ids.end());
  tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
  offsets.insert(offsets.end(), o.offsets.begin(), o.offsets.end());
  special_tokens_mask.insert(special_tokens_mask.end(), o.special_tokens_mask.begin(),
                             o.special_tokens_mask.end());
  attention_mask.insert(attention_mask.end(), o.attention_mask.begin(), o.attention_mask.end());
  word_ids.insert(word_ids.end(), o.word_ids.begin(), o.word_ids.end());
  sequence_ids.insert(sequence_ids.end(), o.sequence_ids.begin(), o.sequence_ids.end());
}

void set_sequence_id(Encoding& e, int32_t id) {
  std::fill(e.sequence_ids.begin(), e.sequence_ids.end(), id);
  for (Encoding& o : e.overflowing) set_sequence_id(o, id);
}

namespace {
Encoding window(const Encoding& e, size_t b, size_t n) {
  Encoding w;
  auto take = [&](const auto& v, auto& out) {
    out.assign(v.begin() + static_cast<std::ptrdiff_t>(b),
               v.begin() + static_cast<std::ptrdiff_t>(b + n));
  };
  take(e.ids, w.ids);
  take(e.type_ids, w.type_ids);
  take(e.tokens, w.tokens);
  take(e.offsets, w.offsets);
  take(e.special_tokens_mask, w.special_tokens_mask);
  take(e.attention_mask, w.attention_mask);
  take(e.word_ids, w.word_ids);
  // HF clears the sequence ranges of a truncated encoding.
  w.sequence_ids.assign(n, -1);
  return w;
}
}  // namespace

void truncate_encoding(Encoding& e, size_t max_len, size_t stride, TruncateSide side) {
  const size_t len = e.size();
  if (max_len >= len) return;
  if (max_len == 0) {
    Encoding all = std::move(e);
    e = Encoding{};
    e.overflowing.push_back(std::move(all));
    return;
  }
  KILN_CHECK(stride < max_len, "truncation: stride ", stride, " must be less than max_length ",
             max_len, " (max_length here excludes the special tokens)");
  const size_t step = max_len - stride;
  std::vector<Span> parts;
  if (side == TruncateSide::kRight) {
    for (size_t start = 0; start < len; start += step) {
      const size_t stop = std::min(start + max_len, len);
      parts.push_back({start, stop});
      if (stop == len) break;
    }
  } else {
    for (size_t k = 0; k < len; k += step) {
      const size_t stop = len - k;  // (len - 1 - k) + 1
      const size_t start = stop > max_len ? stop - max_len : 0;
      parts.push_back({start, stop});
      if (start == 0) break;
    }
  }
  Encoding out = window(e, parts[0].begin, parts[0].end - parts[0].begin);
  for (size_t i = 1; i < parts.size(); ++i)
    out.overflowing.push_back(window(e, parts[i].begin, parts[i].end - parts[i].begin));
  e = std::move(out);
}

void pad_encoding(Encoding& e, size_t length, int32_t pad_id, int32_t pad_type_id,
                  const std::string& pad_token, bool left) {
  for (Encoding& o : e.overflowing) pad_encoding(o, length, pad_id, pad_type_id, pad_token, left);
  if (e.size() >= length) return;
  const size_t n = length - e.size();
  auto grow = [&](auto& v, const auto& value) {
    if (left)
      v.insert(v.begin(), n, value);
    else
      v.insert(v.end(), n, value);
  };
  grow(e.ids, pad_id);
  grow(e.type_ids, pad_type_id);
  grow(e.tokens, pad_token);
  grow(e.offsets, Span{0, 0});
  grow(e.special_tokens_mask, 1);
  grow(e.attention_mask, 0);
  grow(e.word_ids, -1);
  grow(e.sequence_ids, -1);
}

}  // namespace kiln::data::tok
