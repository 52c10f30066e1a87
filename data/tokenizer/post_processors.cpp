// HF tokenizers' post-processors (post_processors.h; Notes [Sequence ranges],
// [Processing flow], [Combination budget], [Offset trimming],
// [Single-sequence fast path] there); the JSON reader is post_processors_json.cpp.
#include "kiln/data/tokenizer/post_processors.h"

#include <algorithm>
#include <limits>
#include <iterator>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "kiln/data/tokenizer/decoders.h"
#include "kiln/data/tokenizer/pre_tokenizers.h"

namespace kiln::data::tok {

// ---- RangedEncoding ------------------------------------------------------------

void TokenBudget::charge(size_t tokens, size_t encodings) {
  used_ += tokens + encodings * kEncodingCost;
  KILN_CHECK(used_ <= kMaxProcessedTokens, "post-processor: combining the overflowing windows ",
             "builds more than ", kMaxProcessedTokens,
             " tokens (HF's merge of every window with every other; use fewer windows)");
}

namespace {

void check_shape(const Encoding& e) {
  const size_t n = e.ids.size();
  KILN_CHECK(e.type_ids.size() == n && e.tokens.size() == n && e.offsets.size() == n &&
                 e.special_tokens_mask.size() == n && e.attention_mask.size() == n &&
                 e.word_ids.size() == n,
             "post-processor: malformed Encoding (", n, " ids but ", e.type_ids.size(),
             " type ids, ", e.tokens.size(), " tokens, ", e.offsets.size(), " offsets, ",
             e.special_tokens_mask.size(), " special-token flags, ", e.attention_mask.size(),
             " attention flags, ", e.word_ids.size(), " word ids)");
}

// A deep copy, charged to the budget.
RangedEncoding copy_of(const RangedEncoding& x, TokenBudget& budget) {
  budget.charge(x.size());
  RangedEncoding c;
  c.enc = x.enc;
  c.ranges = x.ranges;
  c.overflowing.reserve(x.overflowing.size());
  for (const RangedEncoding& o : x.overflowing) c.overflowing.push_back(copy_of(o, budget));
  return c;
}

// What copy_of(x) charges, for a caller that moves x instead.
void charge_as_copy(const RangedEncoding& x, TokenBudget& budget) {
  budget.charge(x.size());
  for (const RangedEncoding& o : x.overflowing) charge_as_copy(o, budget);
}

void set_sequence_id(RangedEncoding& r, size_t id) { r.ranges[id] = {0, r.size()}; }

template <typename T>
void concat(std::vector<T>& out, const std::vector<T>& v) {
  out.insert(out.end(), v.begin(), v.end());
}

// Room for `n` tokens in every per-token vector (sequence_ids aside, which
// to_encoding sets).
void reserve_tokens(Encoding& e, size_t n) {
  e.ids.reserve(n);
  e.type_ids.reserve(n);
  e.tokens.reserve(n);
  e.offsets.reserve(n);
  e.special_tokens_mask.reserve(n);
  e.attention_mask.reserve(n);
  e.word_ids.reserve(n);
}

// self's tokens followed by other's, other's ranges shifted after self's
// (other's token strings moved when it is an rvalue); not the windows.
template <typename R>
void append_fields(RangedEncoding& self, R&& other) {
  const size_t shift = self.size();
  for (const auto& [id, span] : other.ranges)
    self.ranges[id] = {span.begin + shift, span.end + shift};
  Encoding& s = self.enc;
  const Encoding& o = other.enc;
  concat(s.ids, o.ids);
  concat(s.type_ids, o.type_ids);
  if constexpr (std::is_rvalue_reference_v<R&&>)
    s.tokens.insert(s.tokens.end(), std::make_move_iterator(other.enc.tokens.begin()),
                    std::make_move_iterator(other.enc.tokens.end()));
  else
    concat(s.tokens, o.tokens);
  concat(s.word_ids, o.word_ids);
  concat(s.offsets, o.offsets);
  concat(s.special_tokens_mask, o.special_tokens_mask);
  concat(s.attention_mask, o.attention_mask);
}

// `e` between optional `head` and optional `tail` special tokens (Bert's and
// Roberta's encodings): specials have no word, offsets (0, 0), mask 1; every
// attention flag becomes 1, and sequence `seq` covers e's tokens only.
// type ids: head_type, e's, tail_type; or all 0 when zero_types.
RangedEncoding surround(const Encoding& e, const SpecialPair* head, const SpecialPair* tail,
                        int32_t head_type, int32_t tail_type, bool zero_types, size_t seq,
                        TokenBudget& budget) {
  const size_t n = e.size();
  const size_t total = n + (head ? 1 : 0) + (tail ? 1 : 0);
  budget.charge(total);
  RangedEncoding r;
  Encoding& o = r.enc;
  reserve_tokens(o, total);
  auto special = [&](const SpecialPair& s, int32_t type) {
    o.ids.push_back(s.id);
    o.type_ids.push_back(zero_types ? 0 : type);
    o.tokens.push_back(s.token);
    o.offsets.push_back({0, 0});
    o.special_tokens_mask.push_back(1);
    o.word_ids.push_back(-1);
  };
  if (head) special(*head, head_type);
  concat(o.ids, e.ids);
  if (zero_types)
    o.type_ids.insert(o.type_ids.end(), n, 0);
  else
    concat(o.type_ids, e.type_ids);
  concat(o.tokens, e.tokens);
  concat(o.offsets, e.offsets);
  o.special_tokens_mask.insert(o.special_tokens_mask.end(), n, 0);
  concat(o.word_ids, e.word_ids);
  if (tail) special(*tail, tail_type);
  o.attention_mask.assign(total, 1);
  const size_t first = head ? 1 : 0;
  r.ranges[seq] = {first, first + n};
  return r;
}

// surround() for an encoding and each of its windows (their own windows are
// dropped, as HF's).
RangedEncoding surround_all(const RangedEncoding& e, const SpecialPair* head,
                            const SpecialPair* tail, int32_t head_type, int32_t tail_type,
                            bool zero_types, bool zero_window_types, size_t seq,
                            TokenBudget& budget) {
  RangedEncoding r = surround(e.enc, head, tail, head_type, tail_type, zero_types, seq, budget);
  for (const RangedEncoding& w : e.overflowing)
    r.overflowing.push_back(
        surround(w.enc, head, tail, head_type, tail_type, zero_window_types, seq, budget));
  return r;
}

void trim_all(std::vector<RangedEncoding>& encodings, bool add_prefix_space) {
  for (RangedEncoding& e : encodings) {
    trim_byte_level_offsets(e.enc, add_prefix_space);
    for (RangedEncoding& w : e.overflowing) trim_byte_level_offsets(w.enc, add_prefix_space);
  }
}

}  // namespace

void merge_ranged(RangedEncoding& self, const RangedEncoding& other, TokenBudget& budget) {
  std::vector<RangedEncoding> windows;
  for (const RangedEncoding& mine : self.overflowing) {
    RangedEncoding n = copy_of(mine, budget);
    merge_ranged(n, other, budget);
    windows.push_back(std::move(n));
    for (const RangedEncoding& theirs : other.overflowing) {
      RangedEncoding m = copy_of(mine, budget);
      merge_ranged(m, theirs, budget);
      windows.push_back(std::move(m));
    }
  }
  for (const RangedEncoding& theirs : other.overflowing) {
    RangedEncoding n = copy_of(self, budget);
    merge_ranged(n, theirs, budget);
    windows.push_back(std::move(n));
  }
  budget.charge(other.size(), 0);
  append_fields(self, other);
  self.overflowing = std::move(windows);
}

RangedEncoding to_ranged(Encoding e) {
  check_shape(e);
  RangedEncoding r;
  std::vector<Encoding> windows = std::move(e.overflowing);
  e.overflowing.clear();
  r.enc = std::move(e);
  r.overflowing.reserve(windows.size());
  for (Encoding& w : windows) r.overflowing.push_back(to_ranged(std::move(w)));
  return r;
}

Encoding to_encoding(RangedEncoding r) {
  Encoding e = std::move(r.enc);
  const size_t n = e.size();
  e.sequence_ids.assign(n, -1);
  const size_t count = r.ranges.empty() ? 1 : r.ranges.size();
  for (size_t k = 0; k < count; ++k) {
    const auto it = r.ranges.find(k);
    const Span span = it == r.ranges.end() ? Span{0, n} : it->second;
    for (size_t i = span.begin; i < std::min(span.end, n); ++i)
      e.sequence_ids[i] = static_cast<int32_t>(k);
  }
  e.overflowing.clear();
  e.overflowing.reserve(r.overflowing.size());
  for (RangedEncoding& w : r.overflowing) e.overflowing.push_back(to_encoding(std::move(w)));
  return e;
}

// ---- the processors -----------------------------------------------------------------

namespace {

// Note [Single-sequence fast path]: `layout` applied to `e` in place.
void apply_single(const SingleLayout& layout, Encoding& e, bool add_special_tokens) {
  if (layout.trim_offsets) trim_byte_level_offsets(e, layout.add_prefix_space);
  const size_t n = e.size();
  std::fill(e.type_ids.begin(), e.type_ids.end(), layout.sequence_type);
  if (layout.plain_masks && add_special_tokens) {
    std::fill(e.special_tokens_mask.begin(), e.special_tokens_mask.end(), 0);
    std::fill(e.attention_mask.begin(), e.attention_mask.end(), 1);
  }
  const size_t h = add_special_tokens ? layout.head_ids.size() : 0;
  const size_t t = add_special_tokens ? layout.tail_ids.size() : 0;
  if (h + t > 0) {
    reserve_tokens(e, n + h + t);
    auto wrap = [&](auto& v, const auto& head, const auto& tail) {
      v.insert(v.begin(), head.begin(), head.end());
      v.insert(v.end(), tail.begin(), tail.end());
    };
    auto wrap_value = [&](auto& v, auto value) {
      v.insert(v.begin(), h, value);
      v.insert(v.end(), t, value);
    };
    wrap(e.ids, layout.head_ids, layout.tail_ids);
    wrap(e.type_ids, layout.head_types, layout.tail_types);
    wrap(e.tokens, layout.head_tokens, layout.tail_tokens);
    wrap_value(e.offsets, Span{0, 0});
    wrap_value(e.special_tokens_mask, 1);
    wrap_value(e.attention_mask, 1);
    wrap_value(e.word_ids, -1);
  }
  e.sequence_ids.assign(n + h + t, -1);
  std::fill_n(e.sequence_ids.begin() + static_cast<std::ptrdiff_t>(h), n, 0);
}

// A layout with `head` before the sequence and `tail` after it, each type 0
// (Bert's and Roberta's single sequence).
SingleLayout wrap_layout(const SpecialPair& head, const SpecialPair& tail) {
  SingleLayout l;
  l.head_ids = {head.id};
  l.head_tokens = {head.token};
  l.head_types = {0};
  l.tail_ids = {tail.id};
  l.tail_tokens = {tail.token};
  l.tail_types = {0};
  l.plain_masks = true;
  return l;
}

}  // namespace

Encoding HfPostProcessor::process(Encoding a, std::optional<Encoding> b,
                                  bool add_special_tokens) const {
  if (layout_ && !b && a.overflowing.empty()) {
    check_shape(a);
    apply_single(*layout_, a, add_special_tokens);
    return a;
  }
  std::vector<RangedEncoding> encodings;
  encodings.push_back(to_ranged(std::move(a)));
  if (b) encodings.push_back(to_ranged(std::move(*b)));
  for (size_t i = 0; i < encodings.size(); ++i) {
    RangedEncoding& e = encodings[i];
    set_sequence_id(e, i);
    for (RangedEncoding& w : e.overflowing) set_sequence_id(w, i);
    std::fill(e.enc.type_ids.begin(), e.enc.type_ids.end(), static_cast<int32_t>(i));
  }
  TokenBudget budget;
  encodings = process_encodings(std::move(encodings), add_special_tokens, budget);
  RangedEncoding merged;
  // Without windows the merge is one concatenation: its size is known.
  size_t total = 0;
  bool windows = false;
  for (const RangedEncoding& e : encodings) {
    total += e.size();
    windows = windows || !e.overflowing.empty();
  }
  for (RangedEncoding& e : encodings) {
    if (!windows && merged.size() > 0 && merged.enc.tokens.capacity() < total)
      reserve_tokens(merged.enc, total);
    if (merged.size() == 0 && merged.ranges.empty() && merged.overflowing.empty() &&
        e.overflowing.empty()) {
      // merge_ranged into nothing, without windows, is `e` itself (but for
      // sequence_ids, which to_encoding sets from the ranges): moved.
      budget.charge(e.size(), 0);
      merged = std::move(e);
      continue;
    }
    if (merged.overflowing.empty() && e.overflowing.empty()) {
      // merge_ranged without windows on either side, moving e's strings.
      budget.charge(e.size(), 0);
      append_fields(merged, std::move(e));
      continue;
    }
    merge_ranged(merged, e, budget);
  }
  return to_encoding(std::move(merged));
}

Encoding default_post_process(Encoding a, std::optional<Encoding> b) {
  if (!b) return to_encoding(to_ranged(std::move(a)));
  RangedEncoding ra = to_ranged(std::move(a)), rb = to_ranged(std::move(*b));
  set_sequence_id(ra, 0);
  set_sequence_id(rb, 1);
  TokenBudget budget;
  RangedEncoding merged;
  merge_ranged(merged, ra, budget);
  merge_ranged(merged, rb, budget);
  return to_encoding(std::move(merged));
}

BertProcessing::BertProcessing(SpecialPair sep, SpecialPair cls)
    : sep_(std::move(sep)), cls_(std::move(cls)) {
  layout_ = wrap_layout(cls_, sep_);
}

RobertaProcessing::RobertaProcessing(SpecialPair sep, SpecialPair cls, bool trim_offsets,
                                     bool add_prefix_space)
    : sep_(std::move(sep)),
      cls_(std::move(cls)),
      trim_offsets_(trim_offsets),
      add_prefix_space_(add_prefix_space) {
  layout_ = wrap_layout(cls_, sep_);
  layout_->trim_offsets = trim_offsets_;
  layout_->add_prefix_space = add_prefix_space_;
}

ByteLevelProcessing::ByteLevelProcessing(bool trim_offsets, bool add_prefix_space)
    : trim_offsets_(trim_offsets), add_prefix_space_(add_prefix_space) {
  layout_.emplace();
  layout_->trim_offsets = trim_offsets_;
  layout_->add_prefix_space = add_prefix_space_;
}

std::vector<RangedEncoding> BertProcessing::process_encodings(std::vector<RangedEncoding> encodings,
                                                              bool add_special_tokens,
                                                              TokenBudget& budget) const {
  if (!add_special_tokens) return encodings;
  std::vector<RangedEncoding> out;
  out.reserve(encodings.size());
  for (size_t i = 0; i < encodings.size(); ++i) {
    if (i == 0)
      out.push_back(surround_all(encodings[i], &cls_, &sep_, 0, 0, false, false, 0, budget));
    else
      out.push_back(surround_all(encodings[i], nullptr, &sep_, 0, 1, false, false, 1, budget));
  }
  return out;
}

std::vector<RangedEncoding> RobertaProcessing::process_encodings(
    std::vector<RangedEncoding> encodings, bool add_special_tokens, TokenBudget& budget) const {
  if (trim_offsets_) trim_all(encodings, add_prefix_space_);
  // Every top-level type id is 0 (the windows keep theirs unless wrapped).
  for (RangedEncoding& e : encodings) std::fill(e.enc.type_ids.begin(), e.enc.type_ids.end(), 0);
  if (!add_special_tokens) return encodings;
  std::vector<RangedEncoding> out;
  out.reserve(encodings.size());
  for (size_t i = 0; i < encodings.size(); ++i) {
    if (i == 0)
      out.push_back(surround_all(encodings[i], &cls_, &sep_, 0, 0, true, true, 0, budget));
    else
      out.push_back(surround_all(encodings[i], &sep_, &sep_, 0, 0, true, true, 1, budget));
  }
  return out;
}

void trim_byte_level_offsets(Encoding& e, bool add_prefix_space) {
  auto is_space = [](char32_t c) { return c == U'\u0120' || is_rust_whitespace(c); };
  std::string fixed;
  for (size_t i = 0; i < e.size(); ++i) {
    std::string_view t = e.tokens[i];
    // Only a C++ caller can make a token of ill-formed UTF-8; it is read as
    // U+FFFD (not a space).
    if (!is_valid_utf8(t)) {
      fixed = to_valid_utf8(t);
      t = fixed;
    }
    size_t lead = 0, trail = 0, front = 0, back = t.size();
    while (front < back) {
      size_t next = front;
      if (!is_space(decode_utf8(t, next))) break;
      ++lead;
      front = next;
    }
    while (back > 0) {
      size_t start = back - 1;
      while (start > 0 && (static_cast<unsigned char>(t[start]) & 0xC0) == 0x80) --start;
      size_t k = start;
      if (!is_space(decode_utf8(t, k))) break;
      ++trail;
      back = start;
    }
    if (lead == 0 && trail == 0) continue;
    Span& o = e.offsets[i];
    if (lead > 0) {
      const bool is_first = i == 0 || o.begin == 0;
      if (is_first && add_prefix_space && lead == 1) lead = 0;
      o.begin = std::min(o.begin + lead, o.end);
    }
    if (trail > 0 && o.end >= trail) o.end = std::max(o.end - trail, o.begin);
  }
}

std::vector<RangedEncoding> ByteLevelProcessing::process_encodings(
    std::vector<RangedEncoding> encodings, bool, TokenBudget&) const {
  if (trim_offsets_) trim_all(encodings, add_prefix_space_);
  for (size_t i = 0; i < encodings.size(); ++i) set_sequence_id(encodings[i], i);
  return encodings;
}

TemplateProcessing::TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair,
                                       std::map<std::string, Special> specials)
    : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {
  for (const auto& [name, s] : specials_)
    KILN_CHECK(s.ids.size() == s.tokens.size(), "TemplateProcessing: special token \"", name,
               "\" has ", s.ids.size(), " ids but ", s.tokens.size(), " tokens");
  auto count = [&](const std::vector<Piece>& t, const char* which) {
    size_t n = 0;
    for (const Piece& p : t) {
      if (p.is_sequence) {
        KILN_CHECK(p.sequence == 0 || p.sequence == 1, "TemplateProcessing: bad sequence ",
                   p.sequence);
        continue;
      }
      const auto it = specials_.find(p.special);
      KILN_CHECK(it != specials_.end(), "TemplateProcessing: the ", which,
                 " template names the special token \"", p.special,
                 "\", which special_tokens does not define");
      n += it->second.ids.size();
    }
    return n;
  };
  added_single_ = count(single_, "single");
  added_pair_ = count(pair_, "pair");
  // Note [Single-sequence fast path]: $A exactly once and no $B.
  const auto uses = [&](int sequence) {
    return std::count_if(single_.begin(), single_.end(),
                         [&](const Piece& p) { return p.is_sequence && p.sequence == sequence; });
  };
  if (uses(0) == 1 && uses(1) == 0) {
    SingleLayout l;
    bool after = false;
    for (const Piece& p : single_) {
      if (p.is_sequence) {
        l.sequence_type = p.type_id;
        after = true;
        continue;
      }
      const Special& s = specials_.at(p.special);
      auto& ids = after ? l.tail_ids : l.head_ids;
      auto& tokens = after ? l.tail_tokens : l.head_tokens;
      auto& types = after ? l.tail_types : l.head_types;
      ids.insert(ids.end(), s.ids.begin(), s.ids.end());
      tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
      types.insert(types.end(), s.ids.size(), p.type_id);
    }
    layout_ = std::move(l);
  }
}

std::vector<RangedEncoding> TemplateProcessing::process_encodings(
    std::vector<RangedEncoding> encodings, bool add_special_tokens, TokenBudget& budget) const {
  KILN_CHECK(encodings.size() == 1 || encodings.size() == 2,
             "TemplateProcessing: got ", encodings.size(),
             " encodings to process (a single sequence or a pair; HF panics)");
  const std::vector<Piece>& pieces = encodings.size() == 2 ? pair_ : single_;
  std::vector<RangedEncoding> out;
  for (const Piece& p : pieces) {
    if (p.is_sequence) {
      const auto i = static_cast<size_t>(p.sequence);
      KILN_CHECK(i < encodings.size(), "TemplateProcessing: the single-sequence template uses $B",
                 " (HF panics)");
      RangedEncoding& e = encodings[i];
      std::fill(e.enc.type_ids.begin(), e.enc.type_ids.end(), p.type_id);
      set_sequence_id(e, i);
      // A sequence the template names once is moved (charged as the copy).
      const auto uses = std::count_if(pieces.begin(), pieces.end(), [&](const Piece& q) {
        return q.is_sequence && q.sequence == p.sequence;
      });
      if (uses == 1) {
        charge_as_copy(e, budget);
        out.push_back(std::move(e));
      } else {
        out.push_back(copy_of(e, budget));
      }
    } else if (add_special_tokens) {
      const Special& s = specials_.at(p.special);
      const size_t n = s.ids.size();
      budget.charge(n);
      RangedEncoding r;
      r.enc.ids = s.ids;
      r.enc.type_ids.assign(n, p.type_id);
      r.enc.tokens = s.tokens;
      r.enc.word_ids.assign(n, -1);
      r.enc.offsets.assign(n, Span{0, 0});
      r.enc.special_tokens_mask.assign(n, 1);
      r.enc.attention_mask.assign(n, 1);
      out.push_back(std::move(r));
    }
  }
  return out;
}

size_t SequenceProcessing::added_tokens(bool is_pair) const {
  size_t n = 0;
  for (const auto& s : steps_) n += s->added_tokens(is_pair);
  return n;
}

std::vector<RangedEncoding> SequenceProcessing::process_encodings(
    std::vector<RangedEncoding> encodings, bool add_special_tokens, TokenBudget& budget) const {
  for (const auto& s : steps_)
    encodings = s->process_encodings(std::move(encodings), add_special_tokens, budget);
  return encodings;
}

}  // namespace kiln::data::tok
