// Unigram model (unigram.h): the double-array trie, HF's encode_optimized
// Viterbi pass and its tokenize, and the tokenizer.json reader.
#include "kiln/data/tokenizer/unigram.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace kiln::data::tok {
namespace {

// Note [Double array build]: keys are sorted, so the keys below a trie node
// are a contiguous range and its children's labels come out in increasing
// order. Nodes are placed depth first from an explicit stack (a hostile
// vocabulary may hold one very long piece). A node's children need a base
// b with every b + label free; free units form a doubly linked list in
// index order, searched from its head. After kMaxTries candidate bases the
// node's children go past the end of the array instead, which bounds the
// build at O(units * kMaxTries) whatever the keys (the array grows by at
// most 256 units each time).
constexpr int kMaxTries = 64;

class FreeList {
 public:
  // Grows the free list to cover [0, size).
  void extend_to(int64_t size) {
    KILN_CHECK(size < std::numeric_limits<int32_t>::max(),
               "Unigram: the vocabulary's trie is too large (over 2^31 units)");
    if (size <= size_) return;
    next_.resize(size, -1);
    prev_.resize(size, -1);
    for (int64_t i = size_; i < size; ++i) {
      prev_[i] = static_cast<int32_t>(tail_);
      if (tail_ >= 0)
        next_[tail_] = static_cast<int32_t>(i);
      else
        head_ = i;
      tail_ = i;
    }
    size_ = size;
  }
  void take(int64_t i) {
    const int32_t p = prev_[i], n = next_[i];
    if (p >= 0) next_[p] = n; else head_ = n;
    if (n >= 0) prev_[n] = p; else tail_ = p;
    prev_[i] = next_[i] = -1;
  }
  int64_t head() const { return head_; }
  int64_t next(int64_t i) const { return next_[i]; }

 private:
  std::vector<int32_t> next_, prev_;
  int64_t head_ = -1, tail_ = -1;
  int64_t size_ = 0;
};

// Bytes of the code point starting with `lead` (1 for a stray continuation
// byte, which valid UTF-8 never starts with).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

const std::array<std::string, 256>& byte_pieces() {
  static const std::array<std::string, 256> pieces = [] {
    std::array<std::string, 256> a;
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      a[b] = buf;
    }
    return a;
  }();
  return pieces;
}

// One lattice position: the best path ending here (HF's BestPathNode).
struct BestNode {
  double score;
  int32_t start;  // -1: no path ends here yet
  int32_t id;
};
struct PathSegment {
  int32_t start, end, id;
};
// Reused by every call on a thread (Model::tokenize is const and shared).
struct Scratch {
  std::vector<BestNode> best;
  std::vector<PathSegment> path;
};
constexpr size_t kKeepScratch = size_t{1} << 20;  // entries kept after a long input

}  // namespace

void DoubleArrayTrie::build(std::vector<std::pair<std::string_view, int32_t>> keys) {
  std::sort(keys.begin(), keys.end());
  for (size_t i = 1; i < keys.size(); ++i)
    KILN_CHECK(keys[i].first != keys[i - 1].first, "DoubleArrayTrie: duplicate key");
  units_.assign(1, Unit{0, -2, kNone});
  FreeList free_list;
  free_list.extend_to(1);
  free_list.take(0);
  auto grow = [&](int64_t size) {
    if (size <= static_cast<int64_t>(units_.size())) return;
    free_list.extend_to(size);
    units_.resize(static_cast<size_t>(size));
  };
  grow(256);

  struct Work {
    int32_t unit;
    uint32_t lo, hi, depth;
  };
  KILN_CHECK(keys.size() < std::numeric_limits<uint32_t>::max(), "DoubleArrayTrie: too many keys");
  std::vector<Work> stack;
  if (!keys.empty()) stack.push_back({kRoot, 0, static_cast<uint32_t>(keys.size()), 0});
  std::vector<unsigned char> labels;
  std::vector<uint32_t> starts;  // range start of each label's keys
  int64_t max_base = 0;
  while (!stack.empty()) {
    Work w = stack.back();
    stack.pop_back();
    if (keys[w.lo].first.size() == w.depth) {  // the sorted range's shortest key ends here
      units_[w.unit].value = keys[w.lo].second;
      ++w.lo;
    }
    if (w.lo == w.hi) continue;
    labels.clear();
    starts.clear();
    for (uint32_t i = w.lo; i < w.hi; ++i) {
      const auto c = static_cast<unsigned char>(keys[i].first[w.depth]);
      if (labels.empty() || labels.back() != c) {
        labels.push_back(c);
        starts.push_back(i);
      }
    }
    // Find a base whose child slots are all free (Note [Double array build]).
    int64_t base = -1;
    int tries = 0;
    for (int64_t p = free_list.head(); p >= 0 && tries < kMaxTries; p = free_list.next(p)) {
      const int64_t b = p - labels[0];
      if (b < 0) continue;
      ++tries;
      grow(b + 256);
      bool ok = true;
      for (size_t k = 1; k < labels.size() && ok; ++k) ok = units_[b + labels[k]].check == -1;
      if (ok) {
        base = b;
        break;
      }
    }
    if (base < 0) {
      base = static_cast<int64_t>(units_.size());
      grow(base + 256);
    }
    max_base = std::max(max_base, base);
    units_[w.unit].base = static_cast<int32_t>(base);
    for (size_t k = 0; k < labels.size(); ++k) {
      const int64_t t = base + labels[k];
      free_list.take(t);
      units_[t].check = w.unit;
    }
    for (size_t k = labels.size(); k-- > 0;) {
      const uint32_t hi = k + 1 < labels.size() ? starts[k + 1] : w.hi;
      stack.push_back({static_cast<int32_t>(base + labels[k]), starts[k], hi, w.depth + 1});
    }
  }
  grow(max_base + 256);  // Note [Double array]: base + 255 stays inside
  units_.shrink_to_fit();
}

int32_t DoubleArrayTrie::find(std::string_view key) const {
  int32_t unit = kRoot;
  for (char c : key) {
    unit = step(unit, static_cast<unsigned char>(c));
    if (unit < 0) return kNone;
  }
  return value(unit);
}

namespace {
// Words per cache generation (HF's Unigram cache holds 10,000).
constexpr size_t kUnigramCacheCapacity = 16384;
}  // namespace

Unigram::Unigram(std::vector<Piece> vocab, std::optional<int32_t> unk_id, bool byte_fallback)
    : byte_fallback_(byte_fallback),
      cache_(std::make_shared<WordCache<CachedToken>>(kUnigramCacheCapacity)) {
  KILN_CHECK(vocab.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             "Unigram: ", vocab.size(), " pieces, over the limit of 2^31 - 1");
  if (unk_id) {
    KILN_CHECK(!vocab.empty(), "Unigram: the vocabulary is empty but unk_id is set");
    KILN_CHECK(*unk_id >= 0 && static_cast<size_t>(*unk_id) < vocab.size(), "Unigram: unk_id ",
               *unk_id, " is not in the vocabulary of ", vocab.size(), " pieces");
    unk_id_ = *unk_id;
  }
  min_score_ = std::numeric_limits<double>::infinity();
  pieces_.reserve(vocab.size());
  scores_.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    KILN_CHECK(is_valid_utf8(vocab[i].piece), "Unigram: piece ", i, " is not valid UTF-8");
    KILN_CHECK(std::isfinite(vocab[i].score), "Unigram: piece ", i, " has a non-finite score ",
               vocab[i].score);
    min_score_ = std::min(min_score_, vocab[i].score);
    pieces_.push_back(std::move(vocab[i].piece));
    scores_.push_back(vocab[i].score);
  }
  // Each distinct piece maps to its last id (HF's token_to_ids insert order).
  std::vector<int32_t> order(pieces_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
  std::vector<std::pair<std::string_view, int32_t>> keys;
  keys.reserve(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + 1 < order.size() && pieces_[order[k + 1]] == pieces_[order[k]]) continue;
    keys.emplace_back(pieces_[order[k]], order[k]);
  }
  trie_.build(std::move(keys));
  for (int b = 0; b < 256; ++b) byte_ids_[b] = trie_.find(byte_pieces()[b]);
}

void Unigram::emit_unknown(std::string_view sequence, size_t begin, size_t end,
                           std::vector<Token>& out) const {
  const std::string_view text = sequence.substr(begin, end - begin);
  const Span span{begin, end};
  if (const int32_t id = trie_.find(text); id >= 0) {
    out.push_back(Token{id, std::string(text), span});
    return;
  }
  if (byte_fallback_) {
    bool all = true;
    for (char c : text) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all) {
      for (char c : text) {
        const auto b = static_cast<unsigned char>(c);
        out.push_back(Token{byte_ids_[b], byte_pieces()[b], span});
      }
      return;
    }
  }
  out.push_back(Token{unk_id_, std::string(text), span});
}

void Unigram::tokenize(std::string_view sequence, std::vector<Token>& out) const {
  struct PerThread {
    std::vector<CachedToken> cached;
    WordCache<CachedToken>::Local cache_local;
  };
  thread_local PerThread me;
  std::vector<CachedToken>& cached = me.cached;
  const bool cacheable = cache_ && WordCache<CachedToken>::cacheable(sequence);
  if (cacheable && cache_->find(me.cache_local, sequence, cached)) {
    for (const CachedToken& t : cached)
      out.push_back(Token{t.id,
                          t.vocab_value ? pieces_[static_cast<size_t>(t.id)]
                                        : std::string(sequence.substr(t.begin, t.end - t.begin)),
                          Span{t.begin, t.end}});
    return;
  }
  const size_t first = out.size();
  tokenize_uncached(sequence, out);
  if (!cacheable) return;
  // Cached only when every value is the span's text or its id's piece.
  cached.clear();
  for (size_t k = first; k < out.size(); ++k) {
    const Token& t = out[k];
    const std::string_view text = sequence.substr(t.offsets.begin, t.offsets.end - t.offsets.begin);
    const bool vocab_value = t.value != text;
    if (vocab_value && t.value != pieces_[static_cast<size_t>(t.id)]) return;
    cached.push_back({t.id, static_cast<uint8_t>(t.offsets.begin),
                      static_cast<uint8_t>(t.offsets.end), vocab_value});
  }
  cache_->insert(me.cache_local, sequence, cached.data(), cached.size());
}

void Unigram::tokenize_uncached(std::string_view sequence, std::vector<Token>& out) const {
  const size_t n = sequence.size();
  if (n == 0) return;
  KILN_CHECK(n < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             "Unigram: a pre-token of ", n, " bytes, over the limit of 2^31 - 1");
  thread_local Scratch scratch;
  std::vector<BestNode>& best = scratch.best;
  std::vector<PathSegment>& path = scratch.path;
  best.assign(n + 1, BestNode{0.0, -1, 0});
  const double unk_score = min_score_ - 10.0;

  // Forward pass: best[e] is the best path over sequence[0, e).
  for (size_t s = 0; s < n;) {
    const size_t mblen = std::min(utf8_len(static_cast<unsigned char>(sequence[s])), n - s);
    const double here = best[s].score;
    bool has_single = false;
    int32_t unit = DoubleArrayTrie::kRoot;
    for (size_t i = s; i < n; ++i) {
      unit = trie_.step(unit, static_cast<unsigned char>(sequence[i]));
      if (unit < 0) break;
      const int32_t id = trie_.value(unit);
      if (id < 0) continue;
      const double candidate = scores_[id] + here;
      BestNode& target = best[i + 1];
      if (target.start < 0 || candidate > target.score)
        target = BestNode{candidate, static_cast<int32_t>(s), id};
      if (i + 1 - s == mblen) has_single = true;
    }
    if (!has_single) {
      BestNode& target = best[s + mblen];
      const double candidate = unk_score + here;
      if (target.start < 0 || candidate > target.score) {
        if (unk_id_ < 0) {
          size_t shown = std::min<size_t>(n, 64);  // a code-point boundary
          while (shown < n && (static_cast<unsigned char>(sequence[shown]) & 0xC0) == 0x80) ++shown;
          fail("Unigram: encountered an unknown token but unk_id is missing (in \"",
               sequence.substr(0, shown), shown < n ? "...\")" : "\")");
        }
        target = BestNode{candidate, static_cast<int32_t>(s), unk_id_};
      }
    }
    s += mblen;
  }

  // Backtrack, then emit front to back, fusing runs of unknown nodes.
  path.clear();
  for (size_t e = n; e > 0;) {
    const BestNode& node = best[e];
    KILN_CHECK(node.start >= 0 && static_cast<size_t>(node.start) < e,
               "Unigram: internal error: no path to byte ", e);
    path.push_back(PathSegment{node.start, static_cast<int32_t>(e), node.id});
    e = static_cast<size_t>(node.start);
  }
  for (size_t k = path.size(); k-- > 0;) {
    const PathSegment seg = path[k];
    if (seg.id == unk_id_) {
      size_t end = static_cast<size_t>(seg.end);
      while (k > 0 && path[k - 1].id == unk_id_) end = static_cast<size_t>(path[--k].end);
      emit_unknown(sequence, static_cast<size_t>(seg.start), end, out);
    } else {
      const size_t b = static_cast<size_t>(seg.start), e = static_cast<size_t>(seg.end);
      out.push_back(Token{seg.id, std::string(sequence.substr(b, e - b)), Span{b, e}});
    }
  }
  if (best.capacity() > kKeepScratch) {
    best = {};
    path = {};
  }
}

double serde_json_f64(double d) {
  if (!std::isfinite(d) || d == 0.0) return d;
  // 10^0 .. 10^308, each correctly rounded (as Rust's float literals).
  static const std::array<double, 309> pow10 = [] {
    std::array<double, 309> p{};
    for (int i = 0; i < 309; ++i) p[i] = std::strtod(("1e" + std::to_string(i)).c_str(), nullptr);
    return p;
  }();
  // Shortest round-trip digits "d.ddde±x": value = digits * 10^exp10.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  const std::string_view text(buf, static_cast<size_t>(r.ptr - buf));
  const size_t e = text.find('e');
  uint64_t digits = 0;
  int num_digits = 0;
  for (char c : text.substr(0, e))
    if (c != '.') {
      digits = digits * 10 + static_cast<uint64_t>(c - '0');
      ++num_digits;
    }
  int exp10 = std::atoi(std::string(text.substr(e + 1)).c_str()) - (num_digits - 1);
  while (digits % 10 == 0) {
    digits /= 10;
    --num_digits;
    ++exp10;
  }
  // How serde_json / Python lay the digits out, and serde_json's reading:
  // an integral value up to 16 digits is written "N.0" (significand N0,
  // exponent -1); anything else keeps (digits, exp10).
  uint64_t significand = digits;
  int exponent = exp10;
  if (exp10 >= 0 && num_digits + exp10 <= 16) {
    for (int i = 0; i <= exp10; ++i) significand *= 10;
    exponent = -1;
  }
  double f = static_cast<double>(significand);
  for (;;) {
    const int a = exponent < 0 ? -exponent : exponent;
    if (a <= 308) {
      f = exponent >= 0 ? f * pow10[a] : f / pow10[a];
      break;
    }
    if (f == 0.0 || exponent >= 0) {
      if (exponent >= 0) f = std::numeric_limits<double>::infinity();  // serde: out of range
      break;
    }
    f /= 1e308;
    exponent += 308;
  }
  return d < 0 ? -f : f;
}

void apply_serde_json_floats(Json& j) {
  if (j.is_number_float()) {
    j = serde_json_f64(j.get<double>());
  } else if (j.is_structured()) {
    for (Json& v : j) apply_serde_json_floats(v);
  }
}

std::unique_ptr<Model> unigram_from_json(const Json& j, const std::string& where) {
  json_object(j, where);
  if (const Json* t = json_find(j, "type", where)) {
    const std::string type = json_as_string(*t, json_path(where, "type"));
    if (type != "Unigram")
      json_fail(json_path(where, "type"), "expected \"Unigram\", got \"" + type + "\"");
  }
  const std::string vw = json_path(where, "vocab");
  const Json& vocab_json = json_as_array(json_required(j, "vocab", where), vw);
  std::vector<Unigram::Piece> vocab;
  vocab.reserve(vocab_json.size());
  for (size_t i = 0; i < vocab_json.size(); ++i) {
    const std::string w = vw + "[" + std::to_string(i) + "]";
    const Json& e = vocab_json[i];
    if (!e.is_array() || e.size() != 2)
      json_fail(w, "expected a [piece, score] pair, got " +
                       (e.is_array() ? "an array of " + std::to_string(e.size()) : json_type(e)));
    Unigram::Piece p;
    p.piece = json_as_string(e[0], w + "[0]");
    p.score = json_as_double(e[1], w + "[1]");
    if (!std::isfinite(p.score)) json_fail(w + "[1]", "score is not finite");
    if (!is_valid_utf8(p.piece)) json_fail(w + "[0]", "piece is not valid UTF-8");
    vocab.push_back(std::move(p));
  }
  std::optional<int32_t> unk_id;
  if (const Json* u = json_find(j, "unk_id", where)) {
    const int64_t id = json_as_int(*u, json_path(where, "unk_id"), 0);
    if (vocab.empty())
      json_fail(json_path(where, "unk_id"), "the vocabulary is empty but unk_id is set");
    if (static_cast<uint64_t>(id) >= vocab.size())
      json_fail(json_path(where, "unk_id"), "unk_id " + std::to_string(id) +
                                                " is not in the vocabulary of " +
                                                std::to_string(vocab.size()) + " pieces");
    unk_id = static_cast<int32_t>(id);
  }
  const bool byte_fallback = json_bool_or(j, "byte_fallback", where, false);
  try {
    return std::make_unique<Unigram>(std::move(vocab), unk_id, byte_fallback);
  } catch (const Error& e) {
    json_fail(where, e.what());
  }
}

}  // namespace kiln::data::tok
