// Tokenizer (tokenizer.h): HF tokenizers' TokenizerImpl encode/decode flow
// (tokenizer/mod.rs, pre_tokenizer.rs into_encoding, utils/truncation.rs,
// utils/padding.rs). Loading is in tokenizer_json.cpp and tokenizer_files.cpp.
#include "kiln/data/tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel.h"
#include "kiln/data/tokenizer/post_processors.h"

namespace kiln::data {
namespace {

using tok::Encoding;
using tok::PreTokenizedString;
using tok::Span;
using tok::Split;
using tok::Token;

// HF's BytesToCharOffsetConverter: byte offsets of `text` to code-point
// offsets; an end at the very end maps past the last code point; offsets it
// cannot map stay as they are.
class CharOffsets {
 public:
  explicit CharOffsets(std::string_view text) : size_(text.size()) {
    ascii_ = std::all_of(text.begin(), text.end(),
                         [](char c) { return (static_cast<unsigned char>(c) & 0x80) == 0; });
    if (ascii_) return;
    char_of_byte_.resize(text.size());
    uint32_t c = 0;
    for (size_t i = 0; i < text.size();) {
      const size_t b = i;
      tok::decode_utf8(text, i);
      for (size_t k = b; k < i && k < text.size(); ++k) char_of_byte_[k] = c;
      ++c;
    }
  }
  Span convert(Span o) const {
    if (ascii_) return o;
    if (o.begin < size_ && o.end < size_) return {char_of_byte_[o.begin], char_of_byte_[o.end]};
    if (o.begin < size_) {
      const size_t last = o.end >= 1 && o.end - 1 < size_ ? char_of_byte_[o.end - 1] : o.begin;
      return {char_of_byte_[o.begin], last + 1};
    }
    return o;
  }

 private:
  size_t size_;
  bool ascii_ = true;
  std::vector<uint32_t> char_of_byte_;
};

// Every split the added-tokens layer did not tokenize goes through the model.
// (HF's later tokenize_with_limit, which stops early under truncation, is
// not in the tokenizers release kiln matches, 0.23.3: there every split is
// tokenized and truncation cuts afterwards, keeping all overflowing windows.)
void tokenize_splits(PreTokenizedString& p, const tok::Model& model) {
  for (Split& s : p.splits()) {
    if (s.tokens) continue;
    std::vector<Token> tokens;
    model.tokenize(s.normalized.get(), tokens);
    s.tokens = std::move(tokens);
  }
}

// Appends one token to the encoding being built (type ids and masks come last).
void push_token(Encoding& e, Token& t, Span offsets, int32_t word) {
  e.ids.push_back(t.id);
  e.tokens.push_back(std::move(t.value));
  e.offsets.push_back(offsets);
  e.word_ids.push_back(word);
}

// The tokens of one tokenized split (HF's into_encoding, per split).
void push_split(Encoding& e, Split& s, int32_t word, const CharOffsets* chars) {
  const size_t shift = s.normalized.original_shift();
  for (Token& t : *s.tokens) {
    Span o = t.offsets;
    if (auto r = s.normalized.normalized_to_original(t.offsets)) o = {shift + r->begin, shift + r->end};
    if (chars) o = chars->convert(o);
    push_token(e, t, o, word);
  }
}

// `room`: tokens the post-processor will add (Note [Single-sequence fast path]).
void finish_encoding(Encoding& e, int32_t type_id, size_t room) {
  const size_t n = e.ids.size();
  for (auto* v : {&e.ids, &e.type_ids, &e.special_tokens_mask, &e.attention_mask, &e.word_ids,
                  &e.sequence_ids})
    v->reserve(n + room);
  e.tokens.reserve(n + room);
  e.offsets.reserve(n + room);
  e.type_ids.assign(n, type_id);
  e.special_tokens_mask.assign(n, 0);
  e.attention_mask.assign(n, 1);
  e.sequence_ids.assign(n, -1);
}

// The tokens of the pieces of a plain split (Note [Fast pre-tokenization]),
// each piece one word; `word` is advanced past them.
void push_pieces(Encoding& e, const tok::NormalizedString& split, const tok::Pieces& pieces,
                 const tok::Model& model, int32_t& word, const CharOffsets* chars) {
  thread_local std::vector<Token> tokens;
  for (size_t k = 0; k < pieces.spans.size(); ++k) {
    const Span& p = pieces.spans[k];
    tokens.clear();
    model.tokenize(pieces.view(p), tokens);
    for (Token& t : tokens) {
      // normalized_to_original on the piece: an empty range is kept as is
      // (plus the piece's shift); one out of bounds keeps the model's offsets.
      Span o = t.offsets;
      if (t.offsets.begin == t.offsets.end)
        o = {pieces.shifts[k] + t.offsets.begin, pieces.shifts[k] + t.offsets.end};
      else if (t.offsets.begin < t.offsets.end && t.offsets.end <= p.end - p.begin)
        o = {tok::input_begin(split, pieces, p.begin + t.offsets.begin),
             tok::input_end(split, pieces, p.begin + t.offsets.end - 1)};
      if (chars) o = chars->convert(o);
      push_token(e, t, o, word);
    }
    ++word;
  }
}

tok::TruncateSide side(TruncationParams::Direction d) {
  return d == TruncationParams::Direction::kLeft ? tok::TruncateSide::kLeft
                                                 : tok::TruncateSide::kRight;
}

// HF's truncate_encodings.
void truncate_pair(Encoding& a, std::optional<Encoding>& b, const TruncationParams& t,
                   size_t max_length) {
  if (max_length == 0) {
    tok::truncate_encoding(a, 0, t.stride, side(t.direction));
    if (b) tok::truncate_encoding(*b, 0, t.stride, side(t.direction));
    return;
  }
  const size_t total = a.size() + (b ? b->size() : 0);
  if (total <= max_length) return;
  const size_t to_remove = total - max_length;
  using S = TruncationParams::Strategy;
  if (t.strategy == S::kLongestFirst) {
    if (!b) {
      tok::truncate_encoding(a, total - to_remove, t.stride, side(t.direction));
      return;
    }
    size_t n1 = a.size(), n2 = b->size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
    if (n1 + n2 > max_length) {
      n1 = max_length / 2;
      n2 = n1 + max_length % 2;
    }
    if (swap) std::swap(n1, n2);
    tok::truncate_encoding(a, n1, t.stride, side(t.direction));
    tok::truncate_encoding(*b, n2, t.stride, side(t.direction));
    return;
  }
  Encoding* target = &a;
  if (t.strategy == S::kOnlySecond) {
    KILN_CHECK(b.has_value(), "Truncation error: Second sequence not provided");
    target = &*b;
  }
  KILN_CHECK(target->size() > to_remove,
             "Truncation error: Sequence to truncate too short to respect the provided max_length");
  tok::truncate_encoding(*target, target->size() - to_remove, t.stride, side(t.direction));
}

void pad_all(std::vector<Encoding>& encodings, const PaddingParams& p) {
  if (encodings.empty()) return;
  size_t length = 0;
  if (p.fixed_length) {
    length = *p.fixed_length;
  } else {
    for (const Encoding& e : encodings) length = std::max(length, e.size());
  }
  if (p.pad_to_multiple_of > 0 && length % p.pad_to_multiple_of != 0)
    length += p.pad_to_multiple_of - length % p.pad_to_multiple_of;
  for (Encoding& e : encodings)
    tok::pad_encoding(e, length, p.pad_id, p.pad_type_id, p.pad_token,
                      p.direction == PaddingParams::Direction::kLeft);
}

}  // namespace

Encoding Tokenizer::encode_sequence(std::string_view raw, int32_t type_id, OffsetUnit unit,
                                    size_t room) const {
  std::string valid;
  std::string_view text = raw;
  if (!std::all_of(raw.begin(), raw.end(),
                   [](char c) { return (static_cast<unsigned char>(c) & 0x80) == 0; })) {
    valid = tok::to_valid_utf8(raw);
    text = valid;
  }
  PreTokenizedString p = added_->extract_and_normalize(normalizer_.get(), text);
  std::optional<CharOffsets> char_offsets;
  if (unit == OffsetUnit::kChar) char_offsets.emplace(text);
  const CharOffsets* chars = char_offsets ? &*char_offsets : nullptr;
  Encoding e;
  if (!pre_tokenizer_ || !fast_pre_tokenization_ || !pre_tokenizer_->has_pieces()) {
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(p);
    tokenize_splits(p, *model_);
    int32_t word = 0;
    for (Split& s : p.splits()) push_split(e, s, word++, chars);
    finish_encoding(e, type_id, room);
    return e;
  }
  // Note [Fast pre-tokenization]: each plain split as Pieces, any other one
  // through the general path alone (pre-tokenizers cut splits independently).
  thread_local tok::Pieces in, out;
  int32_t word = 0;
  for (Split& s : p.splits()) {
    if (s.tokens) {
      push_split(e, s, word++, chars);
    } else if (tok::plain_alignments(s.normalized)) {
      in.reset(s.normalized);
      pre_tokenizer_->pre_tokenize_pieces(s.normalized, in, out);
      // At least a token a piece (most pieces are one token).
      const size_t expect = e.ids.size() + out.spans.size() + out.spans.size() / 4;
      e.ids.reserve(expect);
      e.tokens.reserve(expect);
      e.offsets.reserve(expect);
      e.word_ids.reserve(expect);
      push_pieces(e, s.normalized, out, *model_, word, chars);
    } else {
      PreTokenizedString one(std::move(s.normalized));
      pre_tokenizer_->pre_tokenize(one);
      tokenize_splits(one, *model_);
      for (Split& piece : one.splits()) push_split(e, piece, word++, chars);
    }
  }
  finish_encoding(e, type_id, room);
  return e;
}

size_t Tokenizer::num_special_tokens_to_add(bool is_pair) const {
  return post_processor_ ? post_processor_->added_tokens(is_pair) : 0;
}

Encoding Tokenizer::post_process(Encoding a, std::optional<Encoding> b, bool add_special_tokens) const {
  if (truncation_) {
    const size_t added = num_special_tokens_to_add(b.has_value());
    size_t max_length = truncation_->max_length;
    if (add_special_tokens && added > 0) {
      KILN_CHECK(max_length >= added, "truncation: max_length ", max_length,
                 " leaves no room for the ", added, " special tokens");
      max_length -= added;
    }
    truncate_pair(a, b, *truncation_, max_length);
  }
  Encoding out;
  bool sequence_zero = false;
  if (post_processor_) {
    out = post_processor_->process(std::move(a), std::move(b), add_special_tokens);
  } else {
    // HF's default_process (post_processors.h); an encoding without sequence
    // ranges reports every token, padding included, as sequence 0.
    sequence_zero = !b.has_value();
    out = tok::default_post_process(std::move(a), std::move(b));
  }
  if (padding_) {
    std::vector<Encoding> one;
    one.push_back(std::move(out));
    pad_all(one, *padding_);
    out = std::move(one[0]);
  }
  if (sequence_zero) tok::set_sequence_id(out, 0);
  return out;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> Tokenizer::special_tokens_around() const {
  if (!post_processor_) return {};
  // A one-token sequence (id -1, no real token); what the post-processor adds lies around it.
  Encoding one;
  one.ids = {-1};
  one.type_ids = {0};
  one.tokens = {""};
  one.offsets = {tok::Span{}};
  one.special_tokens_mask = {0};
  one.attention_mask = {1};
  one.word_ids = {0};
  one.sequence_ids = {0};
  const Encoding out = post_processor_->process(std::move(one), std::nullopt, true);
  std::pair<std::vector<int32_t>, std::vector<int32_t>> around;
  bool seen = false;
  for (size_t i = 0; i < out.ids.size(); ++i) {
    if (!out.special_tokens_mask[i]) {
      seen = true;
      continue;
    }
    (seen ? around.second : around.first).push_back(out.ids[i]);
  }
  return around;
}

Encoding Tokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                           bool add_special_tokens, OffsetUnit unit) const {
  Encoding ea = encode_sequence(a, 0, unit, b ? 0 : num_special_tokens_to_add(false));
  std::optional<Encoding> eb;
  if (b) eb = encode_sequence(*b, 1, unit);
  return post_process(std::move(ea), std::move(eb), add_special_tokens);
}

namespace {
template <typename F>
std::vector<Encoding> batch(size_t n, const std::optional<PaddingParams>& padding, F encode_one) {
  std::vector<Encoding> out(n);
  parallel_for(static_cast<int64_t>(n), 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = encode_one(static_cast<size_t>(i));
  });
  // Each encoding was padded alone (post_process); BatchLongest pads again
  // to the batch's longest, as HF's encode_batch does.
  if (padding && !padding->fixed_length) pad_all(out, *padding);
  return out;
}
}  // namespace

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                              bool add_special_tokens, OffsetUnit unit) const {
  return batch(texts.size(), padding_,
               [&](size_t i) { return encode(texts[i], std::nullopt, add_special_tokens, unit); });
}

std::vector<Encoding> Tokenizer::encode_batch(
    const std::vector<std::pair<std::string, std::string>>& pairs, bool add_special_tokens,
    OffsetUnit unit) const {
  return batch(pairs.size(), padding_, [&](size_t i) {
    return encode(pairs[i].first, pairs[i].second, add_special_tokens, unit);
  });
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = added_->id_to_token(id);
    if (!t) t = model_->id_to_token(id);
    if (!t) continue;
    if (skip_special_tokens && added_->is_special(*t)) continue;
    tokens.push_back(*t);
  }
  if (decoder_) return decoder_->decode(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::vector<std::string> Tokenizer::decode_batch(const std::vector<std::vector<int32_t>>& ids,
                                                 bool skip_special_tokens) const {
  std::vector<std::string> out(ids.size());
  parallel_for(static_cast<int64_t>(ids.size()), 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[static_cast<size_t>(i)] = decode(ids[static_cast<size_t>(i)], skip_special_tokens);
  });
  return out;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const int32_t id = added_->token_to_id(token);
  return id >= 0 ? id : model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const std::string* t = added_->id_to_token(id)) return *t;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

size_t Tokenizer::vocab_size(bool with_added_tokens) const {
  size_t n = model_->vocab_size();
  if (!with_added_tokens) return n;
  // HF: the model's size plus the added tokens it does not hold.
  for (const auto& [id, t] : added_->by_id())
    if (model_->token_to_id(t.content) < 0) ++n;
  return n;
}

bool Tokenizer::is_special_token(std::string_view token) const { return added_->is_special(token); }

std::vector<std::pair<int32_t, AddedToken>> Tokenizer::added_tokens() const {
  return {added_->by_id().begin(), added_->by_id().end()};
}

}  // namespace kiln::data
