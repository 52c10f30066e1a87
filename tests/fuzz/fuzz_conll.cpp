// Fuzz target: read_conll and encode_conll (data/token_data.h: CoNLL files,
// word-to-subword alignment, windows, collation, predictions back to words).
//
// Input layout: byte 0 = options, byte 1 = max_length (mod 32; 0: no
// windows), the rest = the file, written as input.txt. Options: bit 0
// unlabeled, bit 1 a given label_set {"O", "B-PER", "I-PER"} (as a dev file
// gets the train file's), bits 2-3 label_column (0 last, 1 -> 2, 2 -> 3,
// 3 -> 1, the word column: always an error when labeled), bit 4
// max_line_bytes 64, bit 5 label_all_tokens. The vocab is built in memory.
// Seeds: tests/fuzz/corpus/conll/ (written by hand in this layout).
//
// Properties: reading either succeeds or throws kiln::Error; an accepted file
// has sentences of non-empty words without spaces or tabs, first lines
// strictly increasing inside the file, one label per word inside the label
// set (none when unlabeled), a given label set kept as is and a derived one
// sorted, distinct and all used. Encoding throws kiln::Error only for
// max_length 1 or 2; otherwise every window holds at most max_length ids,
// starts with [CLS] and ends with [SEP], every word's first subword is in
// exactly one window and carries the word's label, the gold labels taken as
// predictions come back per word unchanged, and a batch collates to (B, T)
// labels.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_data.h"
#include "scratch.h"

namespace {

using kiln::data::BertTokenizer;

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_conll", what); }

const BertTokenizer& tokenizer() {
  static const BertTokenizer tok = [] {
    std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (char c = 33; c < 127; ++c) {
      tokens.emplace_back(1, c);
      tokens.push_back(std::string("##") + c);
    }
    for (const char* t : {"eu", "rejects", "german", "peter", "##s", "##ing", "the", "u", "é", "中"})
      tokens.emplace_back(t);
    return BertTokenizer(kiln::data::Vocab::from_tokens(std::move(tokens)), true);
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const size_t max_length = data[1] % 32;
  const std::string_view text = kiln_fuzz::as_text(data + 2, size - 2);
  const std::string path = scratch.fresh_dir() + "/input.txt";
  kiln_fuzz::write_file(path, text);

  kiln::data::ConllOptions options;
  options.labeled = (flags & 1) == 0;
  if (flags & 2) options.label_set = {"O", "B-PER", "I-PER"};
  static const int64_t kLabelColumns[] = {0, 2, 3, 1};
  options.label_column = kLabelColumns[(flags >> 2) & 3];
  if (flags & 16) options.max_line_bytes = 64;
  const bool label_all_tokens = (flags & 32) != 0;
  kiln::data::ConllDataset ds;
  try {
    ds = kiln::data::read_conll(path, options);
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;  // rejected cleanly
  }

  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  require(options.labeled || ds.label_set.empty(), "no label set when unlabeled");
  require(!options.labeled || options.label_column != 1, "the word column is never a label column");
  require(!ds.sentences.empty(), "an accepted file has a sentence");
  std::vector<size_t> used(ds.num_labels(), 0);
  size_t last_line = 0;
  for (const kiln::data::ConllSentence& s : ds.sentences) {
    require(s.line > last_line && s.line <= lines, "sentence lines increase inside the file");
    last_line = s.line;
    require(!s.words.empty(), "no empty sentence");
    for (const std::string& w : s.words)
      require(!w.empty() && w.find_first_of(" \t\n") == std::string::npos, "words are columns");
    require(options.labeled ? s.labels.size() == s.words.size() : s.labels.empty(), "one label per word");
    for (int32_t l : s.labels) {
      require(l >= 0 && static_cast<size_t>(l) < ds.num_labels(), "labels inside the label set");
      ++used[static_cast<size_t>(l)];
    }
  }
  if (!options.label_set.empty() && options.labeled) {
    require(ds.label_set == options.label_set, "a given label set is kept");
  } else {
    require(std::is_sorted(ds.label_set.begin(), ds.label_set.end()) &&
                std::adjacent_find(ds.label_set.begin(), ds.label_set.end()) == ds.label_set.end(),
            "a derived label set is sorted and distinct");
    require(std::find(used.begin(), used.end(), size_t{0}) == used.end(), "every derived label is used");
  }

  std::vector<kiln::data::TokenEncoding> windows;
  const bool bad_length = max_length == 1 || max_length == 2;
  try {
    windows = kiln::data::encode_conll(ds, tokenizer(), max_length, label_all_tokens);
  } catch (const kiln::Error&) {
    require(bad_length, "encode_conll fails only for max_length 1 or 2");
    return 0;
  }
  require(!bad_length, "max_length 1 or 2 is refused");
  const BertTokenizer& tok = tokenizer();
  std::vector<std::vector<int>> seen(ds.size());
  for (size_t s = 0; s < ds.size(); ++s) seen[s].assign(ds.sentences[s].words.size(), 0);
  std::vector<std::vector<int64_t>> gold;
  size_t last_sentence = 0;
  for (const kiln::data::TokenEncoding& t : windows) {
    require(t.sentence < ds.size() && t.sentence >= last_sentence, "windows in sentence order");
    last_sentence = t.sentence;
    const size_t n = t.encoding.size();
    require(n >= 2 && (max_length == 0 || n <= max_length), "window within max_length");
    require(t.encoding.ids.front() == tok.cls_id() && t.encoding.ids.back() == tok.sep_id(), "[CLS] ... [SEP]");
    require(t.labels.size() == n && t.word_index.size() == n && t.encoding.type_ids.size() == n &&
                t.encoding.attention_mask.size() == n,
            "per-position vectors of one length");
    const kiln::data::ConllSentence& s = ds.sentences[t.sentence];
    std::vector<int64_t> row(n, 0);
    for (size_t p = 0; p < n; ++p) {
      require(t.encoding.ids[p] >= 0 && static_cast<size_t>(t.encoding.ids[p]) < tok.vocab_size(), "ids in vocab");
      const int32_t w = t.word_index[p];
      if (w < 0) {
        require(label_all_tokens || t.labels[p] == kiln::data::kIgnoreLabel, "-100 off first subwords");
        continue;
      }
      require(static_cast<size_t>(w) < s.words.size(), "word index inside the sentence");
      ++seen[t.sentence][static_cast<size_t>(w)];
      const int32_t label = s.labels.empty() ? kiln::data::kIgnoreLabel : s.labels[static_cast<size_t>(w)];
      require(t.labels[p] == label, "a word's label on its first subword");
      row[p] = s.labels.empty() ? 0 : label;
    }
    gold.push_back(std::move(row));
  }
  for (const auto& words : seen)
    require(std::all_of(words.begin(), words.end(), [](int c) { return c == 1; }),
            "every word's first subword in exactly one window");
  const std::vector<std::vector<int32_t>> back = kiln::data::word_predictions(ds, windows, gold);
  for (size_t s = 0; s < ds.size(); ++s)
    require(ds.sentences[s].labels.empty() || back[s] == ds.sentences[s].labels, "gold labels come back per word");

  const std::vector<kiln::data::TokenEncoding> batch(windows.begin(),
                                                     windows.begin() + std::min<std::ptrdiff_t>(8, windows.size()));
  const kiln::data::TokenClassificationBatch b = kiln::data::collate_token_classification(batch, tok.pad_id(), 8);
  require(b.labels.sizes() == b.inputs.input_ids.sizes() &&
              b.labels.sizes()[0] == static_cast<int64_t>(batch.size()) && b.labels.sizes()[1] % 8 == 0,
          "labels (B, T) like the inputs");
  return 0;
}
