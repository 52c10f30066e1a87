// CoNLL reader, word-to-subword alignment, windows, collation and the way
// back from subword predictions to words (data/token_data.h).
#include "data/token_data.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <string_view>

#include "core/error.h"
#include "core/file_util.h"
#include "core/parallel.h"

namespace kiln::data {
namespace fs = std::filesystem;

namespace {

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos; }

// The columns of a token line: maximal runs of characters other than ' ' and '\t'.
void split_columns(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t begin = line.find_first_not_of(" \t", pos);
    if (begin == std::string_view::npos) break;
    size_t end = line.find_first_of(" \t", begin);
    if (end == std::string_view::npos) end = line.size();
    out.push_back(line.substr(begin, end - begin));
    pos = end;
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

const char* plural(size_t n) { return n == 1 ? "" : "s"; }

}  // namespace

size_t ConllDataset::num_words() const {
  size_t n = 0;
  for (const ConllSentence& s : sentences) n += s.words.size();
  return n;
}

ConllDataset read_conll(const std::string& path, const ConllOptions& options) {
  const bool labeled = options.labeled;
  KILN_CHECK(!labeled || options.label_column >= 0, "read_conll: ", path, ": label column ", options.label_column,
             " is not a column (1-based; 0 means the last column)");
  KILN_CHECK(!labeled || options.label_column != 1, "read_conll: ", path,
             ": label column 1 is the word column (1-based; 0 means the last column)");
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "read_conll: '", path, "' does not exist");
  // Note [Bounded input]: a regular file only, at most max_file_bytes.
  std::string text = read_file_bounded(path, "read_conll: '" + path + "'", options.max_file_bytes);
  size_t pos = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;

  ConllDataset ds;
  ds.path = path;
  // Label ids while reading: positions in options.label_set, or provisional
  // ids in order of first appearance, renumbered in sorted order at the end.
  std::map<std::string, int32_t, std::less<>> ids;
  std::vector<std::string> seen;  // provisional id -> label
  const bool given = !options.label_set.empty();
  if (given)
    for (size_t i = 0; i < options.label_set.size(); ++i)
      ids.emplace(options.label_set[i], static_cast<int32_t>(i));

  size_t columns = 0, columns_line = 0;  // of the first token line
  std::vector<std::string_view> fields;
  ConllSentence current;
  const auto end_sentence = [&] {
    if (current.words.empty()) return;
    ds.sentences.push_back(std::move(current));
    current = ConllSentence();
  };
  for (size_t number = 1; pos < text.size(); ++number) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    KILN_CHECK(end - pos <= options.max_line_bytes, "read_conll: ", path, ":", number, ": line of ", end - pos,
               " bytes, over the limit of ", options.max_line_bytes);
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank(line)) {
      end_sentence();
      continue;
    }
    split_columns(line, fields);  // not blank: at least one column
    if (fields[0] == "-DOCSTART-") {
      end_sentence();
      continue;
    }
    if (current.words.empty()) current.line = number;
    current.words.emplace_back(fields[0]);
    if (!labeled) continue;
    if (columns == 0) {
      columns = fields.size();
      columns_line = number;
      KILN_CHECK(columns >= 2, "read_conll: ", path, ":", number,
                 ": 1 column: a labeled file needs a word and a label column (read it unlabeled for words only)");
      KILN_CHECK(options.label_column <= static_cast<int64_t>(columns), "read_conll: ", path, ":", number,
                 ": label column ", options.label_column, " is out of range: the line has ", columns, " columns");
    } else {
      KILN_CHECK(fields.size() == columns, "read_conll: ", path, ":", number, ": ", fields.size(), " column",
                 plural(fields.size()), ", expected ", columns, " like line ", columns_line);
    }
    const std::string_view label =
        options.label_column == 0 ? fields.back() : fields[static_cast<size_t>(options.label_column - 1)];
    auto it = ids.find(label);
    if (it == ids.end()) {
      KILN_CHECK(!given, "read_conll: ", path, ":", number, ": label '", label, "' is not in the label set {",
                 join(options.label_set), "}");
      it = ids.emplace(std::string(label), static_cast<int32_t>(seen.size())).first;
      seen.emplace_back(label);
    }
    current.labels.push_back(it->second);
  }
  end_sentence();
  KILN_CHECK(!ds.sentences.empty(), "read_conll: ", path, ": no sentence (no token line)");

  if (!labeled) return ds;
  if (given) {
    ds.label_set = options.label_set;
    return ds;
  }
  // Sorted distinct labels (run_ner's get_label_list); renumber.
  ds.label_set = seen;
  std::sort(ds.label_set.begin(), ds.label_set.end());
  std::vector<int32_t> renumber(seen.size());
  for (size_t i = 0; i < ds.label_set.size(); ++i)
    renumber[static_cast<size_t>(ids.at(ds.label_set[i]))] = static_cast<int32_t>(i);
  for (ConllSentence& s : ds.sentences)
    for (int32_t& l : s.labels) l = renumber[static_cast<size_t>(l)];
  return ds;
}

// ---- alignment and windows -------------------------------------------------

std::vector<int32_t> b_to_i_labels(const std::vector<std::string>& label_set) {
  std::vector<int32_t> out(label_set.size());
  for (size_t i = 0; i < label_set.size(); ++i) {
    out[i] = static_cast<int32_t>(i);
    const std::string& l = label_set[i];
    if (l.rfind("B-", 0) != 0) continue;
    const auto it = std::find(label_set.begin(), label_set.end(), "I-" + l.substr(2));
    if (it != label_set.end()) out[i] = static_cast<int32_t>(it - label_set.begin());
  }
  return out;
}

namespace {

void check_max_length(size_t max_length, const SpecialAround& around) {
  KILN_CHECK(max_length == 0 || max_length >= around.size() + 1, "encode_conll: max_length ", max_length,
             " leaves no room for a subword beside the ", around.size(), " special tokens (at least ",
             around.size() + 1, ", or 0 for no limit)");
}

}  // namespace

std::vector<TokenEncoding> encode_words(const std::vector<std::string>& words, const std::vector<int32_t>& labels,
                                        const TextTokenizer& tokenizer, size_t max_length, bool label_all_tokens,
                                        const std::vector<int32_t>& b_to_i, size_t sentence) {
  const SpecialAround around = tokenizer.special_around();
  check_max_length(max_length, around);
  KILN_CHECK(labels.empty() || labels.size() == words.size(), "encode_conll: sentence ", sentence, " has ",
             words.size(), " words but ", labels.size(), " labels");
  const bool has_labels = !labels.empty();

  // All subwords of the sentence; piece_word[k] = the word of subword k;
  // word_begin[w] = index of word w's first subword (word_begin[n] = total).
  std::vector<int32_t> pieces, piece_word;
  std::vector<size_t> word_begin(words.size() + 1, 0);
  for (size_t w = 0; w < words.size(); ++w) {
    word_begin[w] = pieces.size();
    tokenizer.encode_ids(words[w], pieces);
    if (pieces.size() == word_begin[w]) pieces.push_back(tokenizer.unk_id());  // never lose a word
    piece_word.resize(pieces.size(), static_cast<int32_t>(w));
  }
  word_begin[words.size()] = pieces.size();

  // Window boundaries (subword indexes) at word boundaries where possible.
  const size_t cap = max_length == 0 ? std::numeric_limits<size_t>::max() : max_length - around.size();
  std::vector<std::pair<size_t, size_t>> windows;
  size_t start = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    const size_t b = word_begin[w], e = word_begin[w + 1];
    if (b > start && e - start > cap) {  // the word does not fit after what the window holds
      windows.emplace_back(start, b);
      start = b;
    }
    while (e - start > cap) {  // a word longer than a window on its own
      windows.emplace_back(start, start + cap);
      start += cap;
    }
  }
  if (pieces.size() > start || windows.empty()) windows.emplace_back(start, pieces.size());

  std::vector<TokenEncoding> out(windows.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto [b, e] = windows[i];
    TokenEncoding& t = out[i];
    t.sentence = sentence;
    const size_t n = e - b + around.size();
    t.encoding.ids.reserve(n);
    t.labels.reserve(n);
    t.word_index.reserve(n);
    const auto add_special = [&t](int32_t id) {
      t.encoding.ids.push_back(id);
      t.labels.push_back(kIgnoreLabel);
      t.word_index.push_back(-1);
    };
    for (int32_t id : around.before) add_special(id);
    for (size_t k = b; k < e; ++k) {
      const auto w = static_cast<size_t>(piece_word[k]);
      const bool first = k == word_begin[w];
      t.encoding.ids.push_back(pieces[k]);
      t.word_index.push_back(first ? static_cast<int32_t>(w) : -1);
      int32_t label = kIgnoreLabel;
      if (has_labels && first) {
        label = labels[w];
      } else if (has_labels && label_all_tokens) {
        label = labels[w] >= 0 && static_cast<size_t>(labels[w]) < b_to_i.size()
                    ? b_to_i[static_cast<size_t>(labels[w])]
                    : labels[w];
      }
      t.labels.push_back(label);
    }
    for (int32_t id : around.after) add_special(id);
    t.encoding.type_ids.assign(n, 0);
    t.encoding.attention_mask.assign(n, 1);
  }
  return out;
}

std::vector<TokenEncoding> encode_conll(const ConllDataset& dataset, const TextTokenizer& tokenizer,
                                        size_t max_length, bool label_all_tokens) {
  check_max_length(max_length, tokenizer.special_around());
  const std::vector<int32_t> b_to_i = b_to_i_labels(dataset.label_set);
  for (size_t s = 0; s < dataset.size(); ++s) {
    const ConllSentence& sentence = dataset.sentences[s];
    KILN_CHECK(sentence.labels.empty() || sentence.labels.size() == sentence.words.size(), "encode_conll: ",
               dataset.path, ":", sentence.line, ": sentence has ", sentence.words.size(), " words but ",
               sentence.labels.size(), " labels");
    for (int32_t l : sentence.labels)
      KILN_CHECK(l >= 0 && static_cast<size_t>(l) < dataset.num_labels(), "encode_conll: ", dataset.path, ":",
                 sentence.line, ": label id ", l, " is outside the label set (", dataset.num_labels(), " labels)");
  }
  std::vector<std::vector<TokenEncoding>> per_sentence(dataset.size());
  const auto n = static_cast<int64_t>(dataset.size());
  const int64_t grain = std::clamp<int64_t>(n / (4 * static_cast<int64_t>(get_num_threads())), 1, 256);
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const ConllSentence& sentence = dataset.sentences[static_cast<size_t>(s)];
      per_sentence[static_cast<size_t>(s)] = encode_words(sentence.words, sentence.labels, tokenizer, max_length,
                                                          label_all_tokens, b_to_i, static_cast<size_t>(s));
    }
  });
  size_t total = 0;
  for (const auto& windows : per_sentence) total += windows.size();
  std::vector<TokenEncoding> out;
  out.reserve(total);
  for (auto& windows : per_sentence)
    for (TokenEncoding& t : windows) out.push_back(std::move(t));
  return out;
}

// ---- batches ---------------------------------------------------------------

TokenClassificationBatch collate_token_classification(const std::vector<TokenEncoding>& examples, int32_t pad_id,
                                                      size_t pad_to_multiple_of) {
  KILN_CHECK(!examples.empty(), "collate_token_classification: empty batch");
  std::vector<const Encoding*> pointers;
  pointers.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    KILN_CHECK(examples[i].labels.size() == examples[i].encoding.ids.size(), "collate_token_classification: example ",
               i, " has ", examples[i].labels.size(), " labels for ", examples[i].encoding.ids.size(), " ids");
    pointers.push_back(&examples[i].encoding);
  }
  TokenClassificationBatch batch{pad_encodings(std::span<const Encoding* const>(pointers), pad_id, pad_to_multiple_of),
                                 {}};
  const Shape shape = batch.inputs.input_ids.sizes();
  const auto t = static_cast<size_t>(shape[1]);
  batch.labels = empty_tensor(shape, DType::Int64, kCPU);
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (size_t i = 0; i < examples.size(); ++i) {
    const std::vector<int32_t>& l = examples[i].labels;
    for (size_t j = 0; j < t; ++j) labels[i * t + j] = j < l.size() ? l[j] : kIgnoreLabel;
  }
  return batch;
}

// ---- predictions back to words ---------------------------------------------

std::vector<int32_t> words_from_windows(size_t num_words, std::span<const TokenEncoding* const> windows,
                                        std::span<const std::vector<int64_t>> predictions) {
  KILN_CHECK(windows.size() == predictions.size(), "words_from_windows: ", windows.size(), " windows but ",
             predictions.size(), " prediction rows");
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> words(num_words, kNone);
  for (size_t i = 0; i < windows.size(); ++i) {
    const std::vector<int32_t>& index = windows[i]->word_index;
    KILN_CHECK(predictions[i].size() >= index.size(), "words_from_windows: window ", i, " has ", index.size(),
               " positions but its prediction row ", predictions[i].size());
    for (size_t p = 0; p < index.size(); ++p) {
      const int32_t w = index[p];
      if (w < 0) continue;
      KILN_CHECK(static_cast<size_t>(w) < num_words, "words_from_windows: window ", i, " names word ", w,
                 " of a sentence of ", num_words, " words");
      KILN_CHECK(words[static_cast<size_t>(w)] == kNone, "words_from_windows: word ", w,
                 " has its first subword in two places");
      words[static_cast<size_t>(w)] = predictions[i][p];
    }
  }
  std::vector<int32_t> out(num_words);
  for (size_t w = 0; w < num_words; ++w) {
    KILN_CHECK(words[w] != kNone, "words_from_windows: word ", w, " of ", num_words, " got no prediction");
    KILN_CHECK(words[w] >= std::numeric_limits<int32_t>::min() && words[w] <= std::numeric_limits<int32_t>::max(),
               "words_from_windows: word ", w, " has prediction ", words[w], ", not a label id");
    out[w] = static_cast<int32_t>(words[w]);
  }
  return out;
}

std::vector<std::vector<int32_t>> word_predictions(const ConllDataset& dataset,
                                                   const std::vector<TokenEncoding>& encodings,
                                                   const std::vector<std::vector<int64_t>>& predictions) {
  KILN_CHECK(encodings.size() == predictions.size(), "word_predictions: ", encodings.size(), " encodings but ",
             predictions.size(), " prediction rows");
  std::vector<std::vector<int32_t>> out(dataset.size());
  std::vector<bool> done(dataset.size(), false);
  size_t i = 0;
  while (i < encodings.size()) {
    const size_t s = encodings[i].sentence;
    KILN_CHECK(s < dataset.size(), "word_predictions: encoding ", i, " names sentence ", s, " of ", dataset.size());
    const ConllSentence& sentence = dataset.sentences[s];
    KILN_CHECK(!done[s], "word_predictions: ", dataset.path, ":", sentence.line,
               ": the windows of this sentence are not consecutive");
    size_t j = i;
    std::vector<const TokenEncoding*> windows;
    while (j < encodings.size() && encodings[j].sentence == s) windows.push_back(&encodings[j++]);
    try {
      out[s] = words_from_windows(sentence.words.size(), windows,
                                  std::span<const std::vector<int64_t>>(predictions.data() + i, j - i));
    } catch (const Error& e) {
      fail("word_predictions: ", dataset.path, ":", sentence.line, ": ", e.what());
    }
    if (dataset.num_labels() > 0)
      for (size_t w = 0; w < out[s].size(); ++w)
        KILN_CHECK(out[s][w] >= 0 && static_cast<size_t>(out[s][w]) < dataset.num_labels(), "word_predictions: ",
                   dataset.path, ":", sentence.line, ": word ", w, " has prediction ", out[s][w], ", outside [0, ",
                   dataset.num_labels(), ")");
    done[s] = true;
    i = j;
  }
  for (size_t s = 0; s < dataset.size(); ++s)
    KILN_CHECK(done[s], "word_predictions: ", dataset.path, ":", dataset.sentences[s].line,
               ": sentence ", s, " has no window");
  return out;
}

}  // namespace kiln::data
