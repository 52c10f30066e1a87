// The BPE model (bpe.h): construction from a vocabulary and merges, the
// per-word merge loop, the word cache and the tokenizer.json / vocab.json +
// merges.txt loaders.
#include "kiln/data/tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"

namespace kiln::data::tok {

// ---- FlatU64Map -------------------------------------------------------------

void FlatU64Map::rehash(size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = mix(s.key) & mask_;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void FlatU64Map::reserve(size_t n) {
  size_t capacity = 16;
  while (capacity < 2 * n) capacity *= 2;
  if (capacity > slots_.size()) rehash(capacity);
}

void FlatU64Map::put(uint64_t key, uint32_t value) {
  if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
  size_t i = mix(key) & mask_;
  for (; slots_[i].key != kEmpty; i = (i + 1) & mask_) {
    if (slots_[i].key == key) {
      slots_[i].value = value;
      return;
    }
  }
  slots_[i] = Slot{key, value};
  ++size_;
}

// ---- scratch and cache --------------------------------------------------------

// Per-thread buffers reused across calls, so tokenize allocates nothing once
// they have grown to the longest word seen (they are released after a word
// of more than kKeepSymbols code points).
struct Bpe::Scratch {
  static constexpr size_t kKeepSymbols = size_t{1} << 16;
  std::vector<Symbol> symbols;
  std::vector<uint64_t> heap;    // rank << 32 | position, a min-heap
  std::vector<uint64_t> packed;  // a cached word (Note [BPE cache])
  WordCache<uint64_t>::Local cache_local;
  void release_if_large() {
    if (symbols.capacity() > kKeepSymbols) {
      symbols = {};
      heap = {};
    }
  }
};

// Note [BPE cache]: merged words are kept in a WordCache (Note [Word cache]),
// as id << 32 | kValueIsText | byte length per symbol; kValueIsText marks a
// token whose string is the word's bytes it covers (no prefix, suffix or
// byte fallback), which a hit then copies from the word itself.
constexpr uint64_t kValueIsText = uint64_t{1} << 31;
constexpr uint64_t kLengthMask = kValueIsText - 1;

// ---- construction -------------------------------------------------------------

namespace {

// The code point of `s` when it is exactly one (valid) code point.
std::optional<char32_t> single_code_point(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const auto b0 = static_cast<unsigned char>(s[0]);
  const size_t len = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (len == 0 || len != s.size() || !is_valid_utf8(s)) return std::nullopt;
  size_t i = 0;
  return decode_utf8(s, i);
}

std::string byte_token(unsigned b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

}  // namespace

Bpe::Bpe(TokenVocab vocab, const Merges& merges, BpeOptions options,
         const std::function<std::string(size_t)>& describe_merge)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  const std::string& prefix = options_.continuing_subword_prefix;
  const std::string& suffix = options_.end_of_word_suffix;
  if (options_.unk_token) unk_id_ = vocab_.find(*options_.unk_token);
  kind_mask_ = (prefix.empty() ? 0u : 1u) | (suffix.empty() ? 0u : 2u);

  // Single code points, per kind of position (bpe.h, step 1).
  for (unsigned kind = 0; kind < 4; ++kind)
    if ((kind & ~kind_mask_) == 0) dense_chars_[kind].assign(kDenseChars, -1);
  const auto& strings = vocab_.strings();
  const auto& ids = vocab_.ids();
  for (size_t k = 0; k < strings.size(); ++k) {
    const std::string_view t = strings[k];
    for (unsigned kind = 0; kind < 4; ++kind) {
      if ((kind & ~kind_mask_) != 0) continue;
      const std::string_view pre = (kind & 1) ? std::string_view(prefix) : std::string_view();
      const std::string_view suf = (kind & 2) ? std::string_view(suffix) : std::string_view();
      if (t.size() <= pre.size() + suf.size() || t.substr(0, pre.size()) != pre ||
          t.substr(t.size() - suf.size()) != suf)
        continue;
      const auto cp = single_code_point(t.substr(pre.size(), t.size() - pre.size() - suf.size()));
      if (!cp) continue;
      if (*cp < kDenseChars)
        dense_chars_[kind][*cp] = ids[k];
      else
        sparse_chars_.put(static_cast<uint64_t>(kind) << 21 | *cp, static_cast<uint32_t>(ids[k]));
    }
  }
  for (unsigned b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(byte_token(b));

  // Merges: rank i, a repeated pair keeps its last rank and merged id (HF
  // collects them into a hash map in order).
  KILN_CHECK(merges.size() < static_cast<size_t>(INT32_MAX), describe_merge(merges.size()),
             ": too many merges");
  pairs_.reserve(merges.size());
  merged_id_.resize(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const int32_t a_id = vocab_.find(a);
    if (a_id < 0) fail(describe_merge(i), ": token \"", a, "\" is not in the vocabulary");
    const int32_t b_id = vocab_.find(b);
    if (b_id < 0) fail(describe_merge(i), ": token \"", b, "\" is not in the vocabulary");
    // HF cuts the prefix's length off b whether or not b starts with it
    // (and panics when b is shorter).
    if (b.size() < prefix.size())
      fail(describe_merge(i), ": token \"", b, "\" is shorter than continuing_subword_prefix \"",
           prefix, "\"");
    joined.assign(a).append(b, prefix.size(), std::string::npos);
    const int32_t new_id = vocab_.find(joined);
    if (new_id < 0)
      fail(describe_merge(i), ": merged token \"", joined, "\" is not in the vocabulary");
    pairs_.put(pair_key(a_id, b_id), static_cast<uint32_t>(i));
    merged_id_[i] = new_id;
  }
  if (options_.cache_capacity > 0) cache_ = std::make_unique<WordCache<uint64_t>>(options_.cache_capacity);
}

Bpe::~Bpe() = default;

// ---- tokenization -------------------------------------------------------------

int32_t Bpe::char_id(char32_t cp, unsigned kind) const {
  kind &= kind_mask_;
  if (cp < kDenseChars) return dense_chars_[kind][cp];
  const uint32_t v = sparse_chars_.get(static_cast<uint64_t>(kind) << 21 | cp);
  return v == FlatU64Map::kNone ? -1 : static_cast<int32_t>(v);
}

void Bpe::merge_word(std::string_view w, Scratch& scratch) const {
  std::vector<Symbol>& sym = scratch.symbols;
  sym.clear();
  auto add = [&sym](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back(Symbol{id, n - 1, -1, len});
  };
  const std::string& prefix = options_.continuing_subword_prefix;
  const std::string& suffix = options_.end_of_word_suffix;
  bool has_unk = false;  // a pending unk symbol (HF's `unk`)
  uint32_t unk_len = 0;
  size_t i = 0;
  while (i < w.size()) {
    const size_t start = i;
    const auto b0 = static_cast<unsigned char>(w[i]);
    char32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      ++i;
    } else {
      cp = decode_utf8(w, i);
    }
    const auto byte_len = static_cast<uint32_t>(i - start);
    const unsigned kind = (start != 0 ? 1u : 0u) | (i == w.size() ? 2u : 0u);
    const int32_t id = char_id(cp, kind);
    if (id >= 0) {
      if (has_unk) {
        add(unk_id_, unk_len);
        has_unk = false;
      }
      add(id, byte_len);
      continue;
    }
    if (options_.byte_fallback) {
      // Every byte of prefix + code point + suffix must have its token.
      const std::string_view pre = (kind & 1) ? std::string_view(prefix) : std::string_view();
      const std::string_view suf = (kind & 2) ? std::string_view(suffix) : std::string_view();
      const std::string_view parts[3] = {pre, w.substr(start, byte_len), suf};
      bool all = true;
      for (const auto& part : parts)
        for (char c : part) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const auto& part : parts)
          for (char c : part) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (options_.unk_token) {
      if (unk_id_ < 0)
        fail("BPE: unk token \"", *options_.unk_token, "\" is not in the vocabulary");
      if (has_unk && options_.fuse_unk) {
        unk_len += byte_len;
      } else {
        if (has_unk) add(unk_id_, unk_len);
        has_unk = true;
        unk_len = byte_len;
      }
    }
  }
  if (has_unk) add(unk_id_, unk_len);
  merge_all(scratch);
}

// Note [BPE merge order]: HF's Word::merge_all, step for step. A min-heap
// holds (rank, position) for every adjacent pair that has a merge; the
// lowest rank pops first, ties going to the leftmost position. An entry is
// stale, and skipped, when its left symbol has been merged into its own left
// neighbour (len 0), has no right neighbour any more, or the pair now there
// merges into a different token than the entry's rank does. HF compares only
// the merged id, not the rank, so a different pair that merges into the same
// token passes the check and merges at the stale rank; kept as is, though it
// takes a prefix cut off a right token that does not start with it (the left
// symbol only changes by merging, which consumes the entry). A merge gives
// the left symbol the merged id and the right one's bytes, removes the right
// one, and pushes the new pairs with its left and right neighbours.
void Bpe::merge_all(Scratch& scratch) const {
  std::vector<Symbol>& sym = scratch.symbols;
  std::vector<uint64_t>& heap = scratch.heap;
  heap.clear();
  const size_t n = sym.size();
  if (n < 2) return;
  for (size_t p = 0; p + 1 < n; ++p) {
    const uint32_t r = rank_of(sym[p].id, sym[p + 1].id);
    if (r != FlatU64Map::kNone) heap.push_back(static_cast<uint64_t>(r) << 32 | p);
  }
  const auto later = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto pos = static_cast<size_t>(top & 0xFFFFFFFFu);
    Symbol& left = sym[pos];
    if (left.len == 0 || left.next < 0) continue;
    const auto next_pos = static_cast<size_t>(left.next);
    const Symbol right = sym[next_pos];
    const int32_t new_id = merged_id_[rank];
    const uint32_t current = rank_of(left.id, right.id);
    if (current == FlatU64Map::kNone || merged_id_[current] != new_id) continue;
    left.id = new_id;
    left.len += right.len;
    left.next = right.next;
    sym[next_pos].len = 0;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(pos);
    if (left.prev >= 0) {
      const uint32_t r = rank_of(sym[static_cast<size_t>(left.prev)].id, left.id);
      if (r != FlatU64Map::kNone) {
        heap.push_back(static_cast<uint64_t>(r) << 32 | static_cast<uint32_t>(left.prev));
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      const uint32_t r = rank_of(left.id, sym[static_cast<size_t>(left.next)].id);
      if (r != FlatU64Map::kNone) {
        heap.push_back(static_cast<uint64_t>(r) << 32 | pos);
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
}

void Bpe::emit(const Symbol* symbols, size_t n, std::vector<Token>& out) const {
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    const Symbol& s = symbols[i];
    if (s.len == 0) continue;
    const std::string* value = vocab_.token(s.id);  // every symbol id is a vocabulary id
    out.push_back(Token{s.id, *value, Span{pos, pos + s.len}});
    pos += s.len;
  }
}

void Bpe::tokenize(std::string_view sequence, std::vector<Token>& out) const {
  if (sequence.empty()) return;
  KILN_CHECK(sequence.size() < static_cast<size_t>(INT32_MAX), "BPE: a pre-token of ",
             sequence.size(), " bytes is over the limit of ", INT32_MAX - 1);
  if (options_.ignore_merges) {
    const int32_t id = vocab_.find(sequence);
    if (id >= 0) {
      out.push_back(Token{id, std::string(sequence), Span{0, sequence.size()}});
      return;
    }
  }
  thread_local Scratch scratch;
  const bool cacheable = cache_ && WordCache<uint64_t>::cacheable(sequence);
  if (cacheable && cache_->find(scratch.cache_local, sequence, scratch.packed)) {
    size_t pos = 0;
    for (const uint64_t p : scratch.packed) {
      const auto id = static_cast<int32_t>(p >> 32);
      const auto len = static_cast<uint32_t>(p & kLengthMask);
      // (The word's own bytes when they spell the token: no vocabulary read.)
      out.push_back(Token{id,
                          (p & kValueIsText) ? std::string(sequence.substr(pos, len))
                                             : *vocab_.token(id),
                          Span{pos, pos + len}});
      pos += len;
    }
    return;
  }
  merge_word(sequence, scratch);
  emit(scratch.symbols.data(), scratch.symbols.size(), out);
  if (cacheable) {
    scratch.packed.clear();
    size_t pos = 0;
    for (const Symbol& sym : scratch.symbols) {
      if (sym.len == 0) continue;
      // (byte fallback with a prefix or suffix spells more bytes than the word has)
      const bool text = pos + sym.len <= sequence.size() &&
                        *vocab_.token(sym.id) == sequence.substr(pos, sym.len);
      scratch.packed.push_back(static_cast<uint64_t>(static_cast<uint32_t>(sym.id)) << 32 |
                               (text ? kValueIsText : 0) | sym.len);
      pos += sym.len;
    }
    cache_->insert(scratch.cache_local, sequence, scratch.packed.data(), scratch.packed.size());
  }
  scratch.release_if_large();
}

// ---- loaders ------------------------------------------------------------------

namespace {

// HF's merge line format: exactly one ' ' (either side may be empty).
std::optional<std::pair<std::string, std::string>> split_merge(std::string_view line) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
    return std::nullopt;
  return std::make_pair(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
}

bool is_version_line(std::string_view line) { return line.substr(0, 8) == "#version"; }

std::optional<std::string> optional_string(const Json& j, const char* key,
                                           const std::string& where) {
  const Json* v = json_find(j, key, where);
  if (!v) return std::nullopt;
  return json_as_string(*v, json_path(where, key));
}

}  // namespace

Bpe::Merges parse_merges_txt(std::string_view text, const std::string& what,
                             std::vector<size_t>* line_numbers) {
  Bpe::Merges merges;
  size_t begin = 0, line_no = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const bool newline = end != std::string_view::npos;
    if (!newline) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    // Rust's lines(): "\n" or "\r\n" ends a line; a lone final "\r" stays.
    if (newline && !line.empty() && line.back() == '\r') line.remove_suffix(1);
    KILN_CHECK(is_valid_utf8(line), what, " line ", line_no, ": not valid UTF-8");
    if (is_version_line(line)) continue;
    auto merge = split_merge(line);
    KILN_CHECK(merge.has_value(), what, " line ", line_no,
               ": a merge is two tokens separated by one space, got \"", line, "\"");
    merges.push_back(std::move(*merge));
    if (line_numbers) line_numbers->push_back(line_no);
  }
  return merges;
}

std::unique_ptr<Model> bpe_from_json(const Json& j, const std::string& where) {
  json_object(j, where);
  if (const Json* t = json_find(j, "type", where)) {
    const std::string type = json_as_string(*t, json_path(where, "type"));
    if (type != "BPE")
      json_fail(json_path(where, "type"), "expected \"BPE\", got \"" + type + "\"");
  }
  BpeOptions o;
  if (const Json* d = json_find(j, "dropout", where)) {
    const std::string w = json_path(where, "dropout");
    // HF reads an f32 and accepts [0, 1].
    const auto p = static_cast<float>(json_as_double(*d, w));
    if (!(p >= 0.0f && p <= 1.0f))
      json_fail(w, "dropout should be between 0 and 1, got " + d->dump());
    if (p > 0.0f)
      json_fail(w, "BPE dropout " + d->dump() +
                       " is not supported: kiln tokenizes deterministically (use null or 0)");
  }
  o.unk_token = optional_string(j, "unk_token", where);
  o.continuing_subword_prefix = optional_string(j, "continuing_subword_prefix", where).value_or("");
  o.end_of_word_suffix = optional_string(j, "end_of_word_suffix", where).value_or("");
  o.fuse_unk = json_bool_or(j, "fuse_unk", where, false);
  o.byte_fallback = json_bool_or(j, "byte_fallback", where, false);
  o.ignore_merges = json_bool_or(j, "ignore_merges", where, false);

  // vocab and merges are required and may not be null (HF: "Missing vocab/merges").
  const auto vocab_it = j.find("vocab");
  if (vocab_it == j.end()) json_fail(where, "missing field \"vocab\"");
  const auto merges_it = j.find("merges");
  if (merges_it == j.end()) json_fail(where, "missing field \"merges\"");
  TokenVocab vocab = TokenVocab::from_json(*vocab_it, json_path(where, "vocab"));

  const std::string mw = json_path(where, "merges");
  const Json& mj = json_as_array(*merges_it, mw);
  // Either every entry is a "a b" string (the legacy form) or every entry is
  // a pair ["a", "b"].
  bool strings = true, pairs = true;
  for (const Json& e : mj) {
    strings = strings && e.is_string();
    pairs = pairs && e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string();
  }
  if (!strings && !pairs) {
    size_t k = 0;
    while (k < mj.size() && (mj[0].is_string() ? mj[k].is_string()
                                               : mj[k].is_array() && mj[k].size() == 2 &&
                                                     mj[k][0].is_string() && mj[k][1].is_string()))
      ++k;
    json_fail(
        mw + "[" + std::to_string(k) + "]",
        "expected every merge to be a string \"a b\" or every merge a pair [\"a\", \"b\"], got " +
            mj[k].dump().substr(0, 80));
  }
  Bpe::Merges merges;
  std::vector<size_t> source;  // merges[i] is mj[source[i]]
  merges.reserve(mj.size());
  source.reserve(mj.size());
  for (size_t k = 0; k < mj.size(); ++k) {
    if (pairs) {
      merges.emplace_back(mj[k][0].get<std::string>(), mj[k][1].get<std::string>());
    } else {
      const std::string& line = mj[k].get_ref<const std::string&>();
      if (is_version_line(line)) continue;  // HF skips these anywhere
      auto merge = split_merge(line);
      if (!merge)
        json_fail(mw + "[" + std::to_string(k) + "]",
                  "a merge is two tokens separated by one space, got \"" + line + "\"");
      merges.push_back(std::move(*merge));
    }
    source.push_back(k);
  }
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(o), [&](size_t i) {
    // (Appended piece by piece: GCC 12 warns, falsely, on `"..." + std::string&&` here.)
    std::string where = "tokenizer.json: " + mw;
    if (i < source.size()) where += "[" + std::to_string(source[i]) + "]";
    return where;
  });
}

namespace {
constexpr uint64_t kMaxBpeFileBytes = uint64_t{64} << 20;  // 64 MiB each
}  // namespace

std::unique_ptr<Bpe> bpe_from_vocab_merges(const std::string& vocab_json_path,
                                           const std::string& merges_txt_path, BpeOptions options) {
  const std::string vocab_what = "vocab.json '" + vocab_json_path + "'";
  JsonLimits limits;
  limits.max_bytes = kMaxBpeFileBytes;
  const Json vj = read_json_file(vocab_json_path, vocab_what, limits);
  KILN_CHECK(vj.is_object(), vocab_what, ": expected an object of token -> id, got ",
             vj.type_name());
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(vj.size());
  for (auto it = vj.begin(); it != vj.end(); ++it) {
    const Json& v = it.value();
    KILN_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId),
               vocab_what, ": token \"", it.key(), "\": expected an id in [0, ", kMaxTokenId,
               "], got ", v.dump());
    entries.emplace_back(it.key(), static_cast<int32_t>(v.get<uint64_t>()));
  }
  TokenVocab vocab = TokenVocab::from_entries(std::move(entries), vocab_what);

  const std::string merges_what = "merges.txt '" + merges_txt_path + "'";
  const std::string text = read_file_bounded(merges_txt_path, merges_what, kMaxBpeFileBytes);
  std::vector<size_t> lines;
  const Bpe::Merges merges = parse_merges_txt(text, merges_what, &lines);
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(options), [&](size_t i) {
    return merges_what + (i < lines.size() ? " line " + std::to_string(lines[i]) : "");
  });
}

}  // namespace kiln::data::tok
