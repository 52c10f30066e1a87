#include "data/tokenizer/bert_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel.h"

namespace kiln::data {
namespace {

// Per-thread scratch for the words of one segment; reused across calls so the
// hot path does not allocate once warmed up.
WordList& scratch_words() {
  thread_local WordList words;
  return words;
}

// HF's WordPiece decoder clean-up, applied to each (space-prefixed) piece.
void cleanup_piece(std::string& s) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  if (s.find(' ') == std::string::npos) return;
  for (const auto& [from, to] : kRules) {
    size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
      s.replace(pos, from.size(), to);
      pos += to.size();
    }
  }
}

// HF's truncate_encodings with TruncationStrategy::LongestFirst: the shorter
// sequence keeps its length if the longer one can absorb the cut, else both
// get half of `limit` (the longer one the odd id).
void truncate_longest_first(std::vector<int32_t>& a, std::vector<int32_t>* b, size_t limit) {
  if (b == nullptr) {
    if (a.size() > limit) a.resize(limit);
    return;
  }
  if (a.size() + b->size() <= limit) return;
  size_t n1 = a.size(), n2 = b->size();
  const bool swapped = n1 > n2;
  if (swapped) std::swap(n1, n2);
  n2 = n1 > limit ? n1 : std::max(n1, limit - n1);
  if (n1 + n2 > limit) {
    n1 = limit / 2;
    n2 = n1 + limit % 2;
  }
  if (swapped) std::swap(n1, n2);
  if (a.size() > n1) a.resize(n1);
  if (b->size() > n2) b->resize(n2);
}

int64_t batch_grain(size_t n) {
  const auto per_thread = static_cast<int64_t>(n) / (4 * static_cast<int64_t>(get_num_threads()));
  return std::clamp<int64_t>(per_thread, 1, 256);
}

}  // namespace

BertTokenizer BertTokenizer::from_vocab_file(const std::string& path, bool lowercase) {
  Vocab vocab = Vocab::from_file(path);
  KILN_CHECK(vocab.contains("[UNK]"), "BertTokenizer: vocab file '", path, "' has no [UNK] token (",
             vocab.size(), " tokens read)");
  return BertTokenizer(std::move(vocab), lowercase);
}

BertTokenizer::BertTokenizer(Vocab vocab, bool lowercase)
    : vocab_(std::move(vocab)), basic_(lowercase) {
  unk_id_ = vocab_.find("[UNK]");
  KILN_CHECK(unk_id_ >= 0, "BertTokenizer: vocab has no [UNK] token (", vocab_.size(), " tokens)");
  wordpiece_ = WordPiece(vocab_, unk_id_);
  cls_id_ = vocab_.find("[CLS]");
  sep_id_ = vocab_.find("[SEP]");
  pad_id_ = vocab_.find("[PAD]");
  mask_id_ = vocab_.find("[MASK]");
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    const int32_t id = vocab_.find(name);
    if (id >= 0) specials_.emplace_back(name, id);
  }
}

void BertTokenizer::encode_ids(std::string_view text, std::vector<int32_t>& ids) const {
  WordList& words = scratch_words();
  auto encode_segment = [&](std::string_view segment) {
    if (segment.empty()) return;
    words.clear();
    basic_.split(segment, words);
    for (const WordList::Word& w : words.words)
      wordpiece_.encode_word(std::string_view(words.bytes.data() + w.begin, w.size), w.num_chars,
                             ids);
  };
  // Every special token starts with '['; cut the text at each leftmost-longest match.
  size_t segment_begin = 0;
  size_t pos = specials_.empty() ? std::string_view::npos : text.find('[');
  while (pos != std::string_view::npos) {
    size_t best_len = 0;
    int32_t best_id = -1;
    for (const auto& [name, id] : specials_) {
      if (name.size() > best_len && text.substr(pos, name.size()) == name) {
        best_len = name.size();
        best_id = id;
      }
    }
    if (best_len > 0) {
      encode_segment(text.substr(segment_begin, pos - segment_begin));
      ids.push_back(best_id);
      segment_begin = pos + best_len;
      pos = text.find('[', segment_begin);
    } else {
      pos = text.find('[', pos + 1);
    }
  }
  encode_segment(text.substr(segment_begin));
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> tokens;
  for (int32_t id : encode_ids(text)) tokens.push_back(vocab_.token(id));
  return tokens;
}

Encoding BertTokenizer::assemble(std::vector<int32_t> a, std::optional<std::vector<int32_t>> b,
                                 const EncodeOptions& options) const {
  const bool specials = options.add_special_tokens;
  if (specials) {
    KILN_CHECK(cls_id_ >= 0 && sep_id_ >= 0,
               "BertTokenizer::encode: add_special_tokens needs [CLS] and [SEP] in the vocab");
  }
  const size_t num_added = specials ? (b ? 3 : 2) : 0;
  if (options.max_length > 0) {
    KILN_CHECK(options.max_length >= num_added, "BertTokenizer::encode: max_length ",
               options.max_length, " leaves no room for the ", num_added, " special tokens");
    truncate_longest_first(a, b ? &*b : nullptr, options.max_length - num_added);
  }
  Encoding e;
  const size_t total = a.size() + (b ? b->size() : 0) + num_added;
  e.ids.reserve(std::max(total, options.pad_to));
  if (specials) e.ids.push_back(cls_id_);
  e.ids.insert(e.ids.end(), a.begin(), a.end());
  if (specials) e.ids.push_back(sep_id_);
  const size_t first_size = e.ids.size();
  if (b) {
    e.ids.insert(e.ids.end(), b->begin(), b->end());
    if (specials) e.ids.push_back(sep_id_);
  }
  e.type_ids.assign(e.ids.size(), 0);
  std::fill(e.type_ids.begin() + static_cast<std::ptrdiff_t>(first_size), e.type_ids.end(), 1);
  e.attention_mask.assign(e.ids.size(), 1);
  pad(e, options.pad_to);
  return e;
}

void BertTokenizer::pad(Encoding& e, size_t length) const {
  if (e.ids.size() >= length) return;
  KILN_CHECK(pad_id_ >= 0, "BertTokenizer: padding needs a [PAD] token in the vocab");
  e.ids.resize(length, pad_id_);
  e.type_ids.resize(length, 0);
  e.attention_mask.resize(length, 0);
}

Encoding BertTokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                               const EncodeOptions& options) const {
  std::optional<std::vector<int32_t>> b_ids;
  if (b) b_ids = encode_ids(*b);
  return assemble(encode_ids(a), std::move(b_ids), options);
}

std::vector<Encoding> BertTokenizer::encode_batch(const std::vector<std::string>& texts,
                                                  const EncodeOptions& options) const {
  std::vector<Encoding> out(texts.size());
  parallel_for(static_cast<int64_t>(texts.size()), batch_grain(texts.size()),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   out[static_cast<size_t>(i)] = encode(texts[static_cast<size_t>(i)], {}, options);
               });
  if (options.pad_to_longest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.size());
    for (Encoding& e : out) pad(e, longest);
  }
  return out;
}

std::vector<Encoding> BertTokenizer::encode_batch(
    const std::vector<std::pair<std::string, std::string>>& pairs,
    const EncodeOptions& options) const {
  std::vector<Encoding> out(pairs.size());
  parallel_for(static_cast<int64_t>(pairs.size()), batch_grain(pairs.size()),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i) {
                   const auto& [a, b] = pairs[static_cast<size_t>(i)];
                   out[static_cast<size_t>(i)] = encode(a, std::string_view(b), options);
                 }
               });
  if (options.pad_to_longest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.size());
    for (Encoding& e : out) pad(e, longest);
  }
  return out;
}

std::vector<std::vector<int32_t>> BertTokenizer::encode_ids_batch(
    const std::vector<std::string>& texts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  parallel_for(static_cast<int64_t>(texts.size()), batch_grain(texts.size()),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   encode_ids(texts[static_cast<size_t>(i)], out[static_cast<size_t>(i)]);
               });
  return out;
}

bool BertTokenizer::is_special_id(int32_t id) const {
  const std::string& token = vocab_.token(id);
  for (const auto& special : specials_)
    if (special.first == token) return true;
  return false;
}

SpecialAround BertTokenizer::special_around() const {
  KILN_CHECK(cls_id_ >= 0 && sep_id_ >= 0, "BertTokenizer: special tokens need [CLS] and [SEP] in the vocab");
  return {{cls_id_}, {sep_id_}};
}

std::map<std::string, std::string> BertTokenizer::files() const {
  std::string vocab;
  for (const std::string& t : vocab_.tokens()) vocab += t + "\n";
  const nlohmann::json config = {{"do_lower_case", lowercase()}, {"tokenizer_class", "BertTokenizer"}};
  return {{"vocab.txt", vocab}, {"tokenizer_config.json", config.dump(2) + "\n"}};
}

std::string BertTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const std::string& prefix = wordpiece_.continuation_prefix();
  std::string out, piece;
  bool first = true;
  for (int32_t id : ids) {
    const std::string& token = vocab_.token(id);
    if (skip_special_tokens && is_special_id(id)) continue;
    piece.clear();
    if (first) {
      piece.append(token);
    } else if (token.compare(0, prefix.size(), prefix) == 0) {
      piece.append(token, prefix.size());
    } else {
      piece.push_back(' ');
      piece.append(token);
    }
    cleanup_piece(piece);
    out += piece;
    first = false;
  }
  return out;
}

}  // namespace kiln::data
