// Token classification data (data/token_data.h): the real CoNLL-2003 files
// from KILN_DATA (counts and label set), word-to-subword alignment against
// Hugging Face `tokenizers` (tests/reference/conll_align_reference.py with
// KILN_PYTHON), label_all_tokens, windows, collation, predictions back to
// words, and every reader error with its file:line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "hostile_util.h"
#include "test_util.h"

namespace kiln::data {
namespace {
namespace fs = std::filesystem;

using ::kiln::testing::data_file;  // KILN_DATA/rel, an error when missing
using ::kiln::testing::quoted;
using ::kiln::testing::ScratchPath;

const BertTokenizer& bert() {
  static const BertTokenizer tok = BertTokenizer::from_vocab_file(data_file("vocab/bert-base-uncased-vocab.txt"));
  return tok;
}

const std::vector<std::string> kConllLabels = {"B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC",
                                               "I-MISC", "I-ORG", "I-PER", "O"};

ConllDataset conll(const std::string& split, const std::vector<std::string>& label_set = {}) {
  ConllOptions o;
  o.label_set = label_set;
  return read_conll(data_file("conll2003/" + split + ".txt"), o);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::vector<int32_t> ints(const std::string& s) {
  std::vector<int32_t> out;
  std::istringstream in(s);
  int32_t v;
  while (in >> v) out.push_back(v);
  return out;
}

// Per position: the word of every subword (HF's word_ids, -1 for None),
// rebuilt from word_index, which marks first subwords only.
std::vector<int32_t> all_word_ids(const TokenEncoding& t) {
  std::vector<int32_t> out;
  int32_t word = -1;
  for (size_t p = 0; p < t.word_index.size(); ++p) {
    if (t.word_index[p] >= 0) word = t.word_index[p];
    const bool special = p == 0 || p + 1 == t.word_index.size();
    out.push_back(special ? -1 : word);
  }
  return out;
}

TEST(TokenData, Conll2003CountsAndLabels) {
  const ConllDataset train = conll("train");
  EXPECT_EQ(train.size(), 14041u);
  EXPECT_EQ(train.label_set, kConllLabels);  // the 9 IOB2 tags, sorted as run_ner's get_label_list
  EXPECT_EQ(train.num_words(), 203621u);
  const ConllSentence& first = train.sentences[0];
  EXPECT_EQ(first.line, 1u);
  EXPECT_EQ(first.words, (std::vector<std::string>{"EU", "rejects", "German", "call", "to", "boycott", "British",
                                                   "lamb", "."}));
  EXPECT_EQ(first.labels, (std::vector<int32_t>{2, 8, 1, 8, 8, 8, 1, 8, 8}));  // B-ORG O B-MISC O ...
  EXPECT_EQ(train.sentences[1].words, (std::vector<std::string>{"Peter", "Blackburn"}));
  EXPECT_EQ(train.sentences[1].labels, (std::vector<int32_t>{3, 7}));  // B-PER I-PER
  EXPECT_EQ(train.sentences[1].line, 11u);
  std::map<int32_t, size_t> counts;
  for (const ConllSentence& s : train.sentences) {
    ASSERT_EQ(s.words.size(), s.labels.size());
    for (int32_t l : s.labels) ++counts[l];
  }
  EXPECT_EQ(counts[8], 169578u);  // O
  EXPECT_EQ(counts[3], 6600u);    // B-PER

  const ConllDataset dev = conll("dev", train.label_set), test = conll("test", train.label_set);
  EXPECT_EQ(dev.size(), 3250u);
  EXPECT_EQ(test.size(), 3453u);
  EXPECT_EQ(dev.label_set, kConllLabels);
  EXPECT_EQ(conll("test").label_set, kConllLabels);  // every tag occurs in each split

  ConllOptions words_only;
  words_only.labeled = false;
  const ConllDataset unlabeled = read_conll(data_file("conll2003/dev.txt"), words_only);
  EXPECT_EQ(unlabeled.size(), 3250u);
  EXPECT_TRUE(unlabeled.label_set.empty());
  EXPECT_TRUE(unlabeled.sentences[0].labels.empty());
  EXPECT_EQ(unlabeled.sentences[0].words, dev.sentences[0].words);

  ConllOptions pos;  // the POS column as labels
  pos.label_column = 2;
  const ConllDataset dev_pos = read_conll(data_file("conll2003/dev.txt"), pos);
  EXPECT_GT(dev_pos.num_labels(), 40u);
  EXPECT_TRUE(std::is_sorted(dev_pos.label_set.begin(), dev_pos.label_set.end()));
}

// Runs the reference script on a CoNLL file; returns its lines.
std::vector<std::string> hf_alignment(const std::string& conll_path, const std::string& tag) {
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "tokenizer_golden";
  fs::create_directories(dir);
  const std::string out = (dir / ("conll_" + tag + "." + std::to_string(::getpid()) + ".txt")).string();
  const std::string cmd = quoted(::kiln::testing::python()) + " " +
                          quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/conll_align_reference.py") +
                          " --vocab " + quoted(data_file("vocab/bert-base-uncased-vocab.txt")) + " --input " +
                          quoted(conll_path) + " --output " + quoted(out);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
  std::ifstream in(out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  fs::remove(out);
  return lines;
}

// Compares encode_conll (no windows) with the reference, both label modes;
// returns the number of sentences that differ.
size_t compare_with_hf(const ConllDataset& ds, const std::vector<std::string>& golden, const std::string& what) {
  EXPECT_EQ(golden.size(), ds.size()) << what;
  const std::vector<TokenEncoding> first = encode_conll(ds, bert(), 0), all = encode_conll(ds, bert(), 0, true);
  EXPECT_EQ(first.size(), ds.size());
  EXPECT_EQ(all.size(), ds.size());
  size_t mismatches = 0;
  for (size_t s = 0; s < ds.size() && s < golden.size() && s < first.size() && s < all.size(); ++s) {
    const std::vector<std::string> f = split(golden[s], '|');
    if (f.size() != 5) {
      ADD_FAILURE() << what << ": bad golden line " << golden[s];
      return ds.size();
    }
    const bool same = std::to_string(ds.sentences[s].words.size()) == f[0] && first[s].encoding.ids == ints(f[1]) &&
                      all_word_ids(first[s]) == ints(f[2]) && first[s].labels == ints(f[3]) &&
                      all[s].labels == ints(f[4]) && all[s].encoding.ids == first[s].encoding.ids &&
                      first[s].sentence == s;
    if (!same && ++mismatches <= 5) {
      std::string words;
      for (const std::string& w : ds.sentences[s].words) words += w + " ";
      ADD_FAILURE() << what << " sentence " << s << " (line " << ds.sentences[s].line << "): " << words
                    << "\n  hf:   " << golden[s];
    }
  }
  std::cout << "[conll alignment] " << what << ": " << ds.size() << " sentences, " << mismatches
            << " mismatches\n";
  return mismatches;
}

TEST(TokenData, AlignmentMatchesHfWordIds) {
  const ConllDataset train = conll("train");
  for (const char* split_name : {"train", "dev", "test"}) {
    SCOPED_TRACE(split_name);
    const ConllDataset ds = conll(split_name, train.label_set);
    const std::string path = data_file(std::string("conll2003/") + split_name + ".txt");
    EXPECT_EQ(compare_with_hf(ds, hf_alignment(path, split_name), split_name), 0u);
  }

  // Words that split (punctuation, hyphens, URLs), accents, CJK, a special
  // token inside a word, long and unknown words.
  ScratchPath dir("token_data");
  const std::string tricky = dir.write("tricky.txt",
                                       "-DOCSTART- -X- -X- O\n\n"
                                       "U.S.-based\tB-LOC\n"
                                       "Ça\tO\nmarche\tO\n!!!\tO\n"
                                       "http://emm.newsbrief.eu\tB-MISC\n\n"
                                       "東京都\tB-LOC\n"
                                       "[MASK]x\tO\n[CLS]\tO\n"
                                       "naïve\tB-PER\nCAFÉ's\tI-PER\n"
                                       "supercalifragilisticexpialidocious\tO\n" +
                                           std::string(120, 'a') + "\tO\n"
                                                                   "1,000,000\tO\n");
  const ConllDataset t = read_conll(tricky);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(compare_with_hf(t, hf_alignment(tricky, "tricky"), "tricky"), 0u);
}

TEST(TokenData, LabelAllTokensTurnsBIntoI) {
  ConllDataset ds;
  ds.path = "mem";
  ds.label_set = {"B-LOC", "B-X", "I-LOC", "O"};  // B-X has no I-X
  ds.sentences.push_back({{"Washington-based", "U.S.", "is"}, {0, 1, 3}, 1});
  EXPECT_EQ(b_to_i_labels(ds.label_set), (std::vector<int32_t>{2, 1, 2, 3}));
  const std::vector<TokenEncoding> first = encode_conll(ds, bert(), 0), all = encode_conll(ds, bert(), 0, true);
  ASSERT_EQ(first.size(), 1u);
  // washington - based | u . s . | is
  EXPECT_EQ(bert().tokenize("Washington-based U.S. is"),
            (std::vector<std::string>{"washington", "-", "based", "u", ".", "s", ".", "is"}));
  const int32_t I = kIgnoreLabel;
  EXPECT_EQ(first[0].labels, (std::vector<int32_t>{I, 0, I, I, 1, I, I, I, 3, I}));
  EXPECT_EQ(all[0].labels, (std::vector<int32_t>{I, 0, 2, 2, 1, 1, 1, 1, 3, I}));
  EXPECT_EQ(first[0].word_index, (std::vector<int32_t>{-1, 0, -1, -1, 1, -1, -1, -1, 2, -1}));
  EXPECT_EQ(all[0].word_index, first[0].word_index);
  EXPECT_EQ(first[0].encoding.type_ids, std::vector<int32_t>(10, 0));
  EXPECT_EQ(first[0].encoding.attention_mask, std::vector<int32_t>(10, 1));

  // A word with no subword at all becomes one [UNK] (HF would drop it).
  ConllDataset zw;
  zw.label_set = {"A", "B"};
  zw.sentences.push_back({{"a", "\xE2\x80\x8B", "\x01", "b"}, {0, 1, 0, 1}, 1});
  const std::vector<TokenEncoding> z = encode_conll(zw, bert(), 0);
  ASSERT_EQ(z.size(), 1u);
  EXPECT_EQ(z[0].encoding.ids, (std::vector<int32_t>{bert().cls_id(), bert().token_to_id("a"), bert().unk_id(),
                                                     bert().unk_id(), bert().token_to_id("b"), bert().sep_id()}));
  EXPECT_EQ(z[0].word_index, (std::vector<int32_t>{-1, 0, 1, 2, 3, -1}));
  EXPECT_EQ(z[0].labels, (std::vector<int32_t>{I, 0, 1, 0, 1, I}));

  // Unlabeled sentences: no labels anywhere, first subwords still marked.
  ConllDataset unlabeled;
  unlabeled.sentences.push_back({{"U.S.", "x"}, {}, 1});
  const std::vector<TokenEncoding> u = encode_conll(unlabeled, bert(), 0, true);
  EXPECT_EQ(u[0].labels, std::vector<int32_t>(u[0].encoding.size(), I));
  EXPECT_EQ(u[0].word_index, (std::vector<int32_t>{-1, 0, -1, -1, -1, 1, -1}));

  ConllDataset bad = ds;
  bad.sentences[0].labels = {0, 9, 3};
  EXPECT_KILN_ERROR(encode_conll(bad, bert(), 0), "mem:1", "label id 9 is outside the label set");
  bad.sentences[0].labels = {0};
  EXPECT_KILN_ERROR(encode_conll(bad, bert(), 0), "mem:1", "3 words but 1 labels");
  EXPECT_KILN_ERROR(encode_conll(ds, bert(), 2), "max_length 2");
}

// Every word's first subword in exactly one window, windows within bounds,
// [CLS] ... [SEP], and the windows' contents together = the whole sentence.
void check_windows(const ConllDataset& ds, const std::vector<TokenEncoding>& windows, size_t max_length,
                   bool label_all_tokens) {
  const std::vector<TokenEncoding> whole = encode_conll(ds, bert(), 0, label_all_tokens);
  ASSERT_EQ(whole.size(), ds.size());
  size_t i = 0;
  for (size_t s = 0; s < ds.size(); ++s) {
    std::vector<int32_t> ids, labels, word_index;
    std::vector<int> seen(ds.sentences[s].words.size(), 0);
    ASSERT_LT(i, windows.size());
    while (i < windows.size() && windows[i].sentence == s) {
      const TokenEncoding& w = windows[i++];
      ASSERT_LE(w.encoding.size(), max_length);
      ASSERT_GE(w.encoding.size(), 3u);
      EXPECT_EQ(w.encoding.ids.front(), bert().cls_id());
      EXPECT_EQ(w.encoding.ids.back(), bert().sep_id());
      EXPECT_EQ(w.labels.front(), kIgnoreLabel);
      EXPECT_EQ(w.labels.back(), kIgnoreLabel);
      ASSERT_EQ(w.labels.size(), w.encoding.size());
      ASSERT_EQ(w.word_index.size(), w.encoding.size());
      ids.insert(ids.end(), w.encoding.ids.begin() + 1, w.encoding.ids.end() - 1);
      labels.insert(labels.end(), w.labels.begin() + 1, w.labels.end() - 1);
      word_index.insert(word_index.end(), w.word_index.begin() + 1, w.word_index.end() - 1);
      for (int32_t wi : w.word_index)
        if (wi >= 0) ++seen[static_cast<size_t>(wi)];
    }
    EXPECT_EQ(seen, std::vector<int>(seen.size(), 1)) << "sentence " << s;
    const TokenEncoding& one = whole[s];
    EXPECT_EQ(ids, std::vector<int32_t>(one.encoding.ids.begin() + 1, one.encoding.ids.end() - 1));
    EXPECT_EQ(labels, std::vector<int32_t>(one.labels.begin() + 1, one.labels.end() - 1));
    EXPECT_EQ(word_index, std::vector<int32_t>(one.word_index.begin() + 1, one.word_index.end() - 1));
  }
  EXPECT_EQ(i, windows.size());
}

TEST(TokenData, WindowsSplitLongSentencesAtWordBoundaries) {
  const ConllDataset dev = conll("dev");
  for (size_t max_length : {3u, 8u, 16u, 64u}) {
    SCOPED_TRACE(max_length);
    const std::vector<TokenEncoding> w = encode_conll(dev, bert(), max_length);
    EXPECT_GT(w.size(), dev.size());
    check_windows(dev, w, max_length, false);
    if (max_length == 16) check_windows(dev, encode_conll(dev, bert(), max_length, true), max_length, true);
    // A window starts inside a word only when the word alone overflowed the
    // window before it, which is then full.
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].word_index[1] >= 0) continue;
      ASSERT_GT(i, 0u);
      EXPECT_EQ(w[i - 1].sentence, w[i].sentence);
      EXPECT_EQ(w[i - 1].encoding.size(), max_length) << "window " << i;
    }
  }
  // The longest dev sentence has 144 subwords: one window each at 512, not at 128.
  EXPECT_EQ(encode_conll(dev, bert(), 512).size(), dev.size());
  EXPECT_GT(encode_conll(dev, bert(), 128).size(), dev.size());

  // Exact window layout: 3 + 1 + 2 + 40 + 1 subwords with windows of 6.
  ConllDataset ds;
  ds.label_set = {"B-X", "I-X", "O"};
  ds.sentences.push_back({{"a b c", "d", "U.", std::string(40, '-'), "e"}, {2, 0, 2, 0, 2}, 1});
  const std::vector<TokenEncoding> w = encode_conll(ds, bert(), 8, true);
  check_windows(ds, w, 8, true);
  std::vector<size_t> sizes;
  for (const TokenEncoding& t : w) sizes.push_back(t.encoding.size() - 2);
  // [a b c d u .] [------] x6 [---- e]
  EXPECT_EQ(sizes, (std::vector<size_t>{6, 6, 6, 6, 6, 6, 6, 5}));
  EXPECT_EQ(w[0].word_index, (std::vector<int32_t>{-1, 0, -1, -1, 1, 2, -1, -1}));
  EXPECT_EQ(w[1].word_index[1], 3);
  EXPECT_EQ(w[1].labels[1], 0);  // the long word's label on its first subword, B-X
  EXPECT_EQ(w[1].labels[2], 1);  // label_all_tokens: I-X after it
  EXPECT_EQ(w[2].word_index, std::vector<int32_t>(8, -1));
  EXPECT_EQ(w[2].labels, (std::vector<int32_t>{kIgnoreLabel, 1, 1, 1, 1, 1, 1, kIgnoreLabel}));
  EXPECT_EQ(w[7].word_index, (std::vector<int32_t>{-1, -1, -1, -1, -1, 4, -1}));
  // A word that fits no more after the window's content starts the next window.
  ConllDataset fit;
  fit.sentences.push_back({{"a b c", "d e f g"}, {}, 1});
  const std::vector<TokenEncoding> f = encode_conll(fit, bert(), 8);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].encoding.size(), 5u);
  EXPECT_EQ(f[1].word_index, (std::vector<int32_t>{-1, 1, -1, -1, -1, -1}));
}

TEST(TokenData, PredictionsBackToWords) {
  const ConllDataset train = conll("train");
  const ConllDataset dev = conll("dev", train.label_set);
  const std::vector<TokenEncoding> windows = encode_conll(dev, bert(), 12);
  // A fake model: the gold label at first subwords, a wrong one elsewhere,
  // rows padded past the window as a batch's would be.
  std::vector<std::vector<int64_t>> predictions;
  for (const TokenEncoding& t : windows) {
    std::vector<int64_t> row(t.encoding.size() + 3, 4);
    for (size_t p = 0; p < t.word_index.size(); ++p)
      if (t.word_index[p] >= 0) row[p] = dev.sentences[t.sentence].labels[static_cast<size_t>(t.word_index[p])];
    predictions.push_back(row);
  }
  const std::vector<std::vector<int32_t>> words = word_predictions(dev, windows, predictions);
  ASSERT_EQ(words.size(), dev.size());
  for (size_t s = 0; s < dev.size(); ++s) ASSERT_EQ(words[s], dev.sentences[s].labels) << s;

  // One sentence alone.
  std::vector<const TokenEncoding*> of_first;
  for (const TokenEncoding& t : windows)
    if (t.sentence == 0) of_first.push_back(&t);
  EXPECT_EQ(words_from_windows(dev.sentences[0].words.size(), of_first,
                               std::span<const std::vector<int64_t>>(predictions.data(), of_first.size())),
            dev.sentences[0].labels);

  // A lost window, a short row, a prediction outside the label set, counts.
  size_t second = 1;  // the second window of a sentence, holding a word's first subword
  while (windows[second].sentence != windows[second - 1].sentence ||
         std::all_of(windows[second].word_index.begin(), windows[second].word_index.end(),
                     [](int32_t w) { return w < 0; }))
    ++second;
  std::vector<TokenEncoding> missing = windows;
  std::vector<std::vector<int64_t>> missing_pred = predictions;
  missing.erase(missing.begin() + static_cast<std::ptrdiff_t>(second));
  missing_pred.erase(missing_pred.begin() + static_cast<std::ptrdiff_t>(second));
  EXPECT_KILN_ERROR(word_predictions(dev, missing, missing_pred), "dev.txt:", "got no prediction");
  std::vector<std::vector<int64_t>> short_row = predictions;
  short_row[0].resize(2);
  EXPECT_KILN_ERROR(word_predictions(dev, windows, short_row), "dev.txt:1:", "prediction row 2");
  std::vector<std::vector<int64_t>> out_of_range = predictions;
  out_of_range[0][1] = 9;
  EXPECT_KILN_ERROR(word_predictions(dev, windows, out_of_range), "dev.txt:1:", "prediction 9, outside [0, 9)");
  EXPECT_KILN_ERROR(word_predictions(dev, windows, {}), "encodings but 0 prediction rows");
  std::vector<TokenEncoding> no_last(windows.begin(), windows.end() - 1);
  std::vector<std::vector<int64_t>> no_last_pred(predictions.begin(), predictions.end() - 1);
  while (!no_last.empty() && no_last.back().sentence == dev.size() - 1) {
    no_last.pop_back();
    no_last_pred.pop_back();
  }
  EXPECT_KILN_ERROR(word_predictions(dev, no_last, no_last_pred), "has no window");
  std::vector<const TokenEncoding*> twice = {of_first[0], of_first[0]};
  std::vector<std::vector<int64_t>> twice_pred = {predictions[0], predictions[0]};
  EXPECT_KILN_ERROR(words_from_windows(dev.sentences[0].words.size(), twice, twice_pred), "in two places");
}

TEST(TokenData, CollateTokenClassification) {
  ConllDataset ds;
  ds.label_set = {"B", "I", "O"};
  ds.sentences.push_back({{"hello", "world"}, {0, 2}, 1});
  ds.sentences.push_back({{"U.S.", "a", "b", "c"}, {0, 1, 2, 2}, 4});
  const std::vector<TokenEncoding> enc = encode_conll(ds, bert(), 0);
  ASSERT_EQ(enc.size(), 2u);
  TokenClassificationBatch b = collate_token_classification(enc, bert().pad_id(), 4);
  // The longest, [CLS] u . s . a b c [SEP], is 9: padded to 12.
  ASSERT_EQ(enc[1].encoding.size(), 9u);
  EXPECT_EQ(b.inputs.input_ids.sizes(), (Shape{2, 12}));
  EXPECT_EQ(b.labels.sizes(), (Shape{2, 12}));
  EXPECT_EQ(b.labels.dtype(), DType::Int64);
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
  const std::vector<int64_t> ids = b.inputs.input_ids.to_vector<int64_t>();
  const int64_t I = kIgnoreLabel;
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 12),
            (std::vector<int64_t>{I, 0, 2, I, I, I, I, I, I, I, I, I}));
  EXPECT_EQ(std::vector<int64_t>(labels.begin() + 12, labels.end()),
            (std::vector<int64_t>{I, 0, I, I, I, 1, 2, 2, I, I, I, I}));
  EXPECT_EQ(ids[4], bert().pad_id());
  EXPECT_EQ(ids[12 + 8], bert().sep_id());
  int tensors = 0;
  for_each_tensor(b, [&](Tensor& x) {
    ++tensors;
    EXPECT_EQ(x.sizes(), (Shape{2, 12}));
  });
  EXPECT_EQ(tensors, 4);

  EXPECT_KILN_ERROR(collate_token_classification({}, 0), "empty batch");
  std::vector<TokenEncoding> bad = enc;
  bad[1].labels.pop_back();
  EXPECT_KILN_ERROR(collate_token_classification(bad, 0), "example 1 has 8 labels for 9 ids");
}

TEST(TokenData, FileLayoutCrlfTabsSpacesDocstart) {
  ScratchPath dir("token_data");
  // CRLF, a BOM, tabs and runs of spaces mixed, -DOCSTART-, whitespace-only
  // and repeated blank lines, no final newline.
  const std::string crlf = dir.write("crlf.txt",
                                     "\xEF\xBB\xBF-DOCSTART- -X- -X- O\r\n\r\n"
                                     "EU\tNNP  B-ORG\r\n"
                                     "  rejects   VBZ\tO  \r\n"
                                     " \t \r\n\r\n\r\n"
                                     "Peter NNP B-PER\r\n"
                                     "-DOCSTART- -X- -X- O\r\n"
                                     "Blackburn\t\tNNP\t\tI-PER");
  const ConllDataset ds = read_conll(crlf);
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds.label_set, (std::vector<std::string>{"B-ORG", "B-PER", "I-PER", "O"}));
  EXPECT_EQ(ds.sentences[0].words, (std::vector<std::string>{"EU", "rejects"}));
  EXPECT_EQ(ds.sentences[0].labels, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(ds.sentences[0].line, 3u);
  EXPECT_EQ(ds.sentences[1].words, (std::vector<std::string>{"Peter"}));
  EXPECT_EQ(ds.sentences[1].line, 8u);
  EXPECT_EQ(ds.sentences[2].words, (std::vector<std::string>{"Blackburn"}));
  EXPECT_EQ(ds.sentences[2].labels, (std::vector<int32_t>{2}));
  EXPECT_EQ(ds.sentences[2].line, 10u);
  // The same file with LF, spaces only: the same dataset.
  const std::string lf = dir.write("lf.txt",
                                   "EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n\nBlackburn NNP I-PER\n\n\n");
  const ConllDataset same = read_conll(lf);
  ASSERT_EQ(same.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(same.sentences[s].words, ds.sentences[s].words);
    EXPECT_EQ(same.sentences[s].labels, ds.sentences[s].labels);
  }
  ConllOptions pos;
  pos.label_column = 2;
  EXPECT_EQ(read_conll(lf, pos).label_set, (std::vector<std::string>{"NNP", "VBZ"}));
  ConllOptions given;
  given.label_set = {"O", "B-PER", "I-PER", "B-ORG", "B-LOC"};
  const ConllDataset g = read_conll(lf, given);
  EXPECT_EQ(g.label_set, given.label_set);
  EXPECT_EQ(g.sentences[0].labels, (std::vector<int32_t>{3, 0}));

  // Unlabeled: one column is fine, other columns ignored, ragged is fine.
  ConllOptions words_only;
  words_only.labeled = false;
  const std::string one = dir.write("one.txt", "EU\nrejects\n\nPeter\tNNP\nBlackburn x y z\n");
  const ConllDataset u = read_conll(one, words_only);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u.sentences[1].words, (std::vector<std::string>{"Peter", "Blackburn"}));
  EXPECT_TRUE(u.sentences[1].labels.empty());
  EXPECT_TRUE(u.label_set.empty());
}

TEST(TokenData, ReaderErrorsNameFileAndLine) {
  ScratchPath dir("token_data");
  EXPECT_KILN_ERROR(read_conll("/nonexistent/train.txt"), "/nonexistent/train.txt", "does not exist");
  const std::string ragged = dir.write("ragged.txt", "EU NNP I B-ORG\nx y z w\n\na b c d\n\n\nx y z\n");
  EXPECT_KILN_ERROR(read_conll(ragged), "ragged.txt:7: 3 columns, expected 4 like line 1");
  const std::string one_col = dir.write("one.txt", "\nEU\nrejects\n");
  EXPECT_KILN_ERROR(read_conll(one_col), "one.txt:2: 1 column: a labeled file needs a word and a label column");
  ConllOptions far;
  far.label_column = 5;
  EXPECT_KILN_ERROR(read_conll(ragged, far), "ragged.txt:1: label column 5 is out of range: the line has 4 columns");
  ConllOptions word_col;
  word_col.label_column = 1;
  EXPECT_KILN_ERROR(read_conll(ragged, word_col), "ragged.txt", "label column 1 is the word column");
  ConllOptions negative;
  negative.label_column = -1;
  EXPECT_KILN_ERROR(read_conll(ragged, negative), "label column -1 is not a column");
  ConllOptions given;
  given.label_set = {"O", "B-PER"};
  const std::string unknown = dir.write("unknown.txt", "a O\nb B-PER\n\nc B-FOO\n");
  EXPECT_KILN_ERROR(read_conll(unknown, given), "unknown.txt:4: label 'B-FOO' is not in the label set {O, B-PER}");
  for (const std::string& text : {std::string(), std::string("\n \n\t\r\n"), std::string("-DOCSTART- -X- O\n\n"),
                                  std::string("\xEF\xBB\xBF")}) {
    const std::string empty = dir.write("empty.txt", text);
    EXPECT_KILN_ERROR(read_conll(empty), "empty.txt: no sentence");
  }
  ConllOptions small;
  small.max_line_bytes = 16;
  const std::string long_line = dir.write("long.txt", "a O\n" + std::string(17, 'x') + " O\n");
  EXPECT_KILN_ERROR(read_conll(long_line, small), "long.txt:2: line of 19 bytes, over the limit of 16");
  small.max_file_bytes = 10;
  EXPECT_KILN_ERROR(read_conll(long_line, small), "long.txt", "over the limit of 10 bytes");
  EXPECT_KILN_ERROR(read_conll(dir.path().string()), "is not a regular file (a directory)");
  const std::string fifo = dir.fifo("fifo.txt");
  EXPECT_FIFO_REFUSED(read_conll(fifo));
}

}  // namespace
}  // namespace kiln::data
