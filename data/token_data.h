// Token classification data (NER): CoNLL-style files, word-to-subword
// alignment with labels as Hugging Face's run_ner does it, windows for long
// sentences, dynamic padding, and predictions mapped back to words.
//
//   ConllDataset train = read_conll("conll2003/train.txt");
//   ConllOptions dev_options;
//   dev_options.label_set = train.label_set;            // dev/test use train's ids
//   ConllDataset dev = read_conll("conll2003/dev.txt", dev_options);
//   std::vector<TokenEncoding> enc = encode_conll(train, tokenizer, 128);
//   TokenClassificationBatch b = collate_token_classification(batch_of_enc, tokenizer.pad_id());
//   ... predictions (B, T) -> rows ...
//   std::vector<std::vector<int32_t>> words = word_predictions(dev, dev_enc, rows);
//
// Note [CoNLL files]
// One token per line, as HF run_ner's users feed it (CoNLL-2003: "EU NNP B-ORG"):
//  - columns are separated by any run of spaces and tabs (leading and
//    trailing ones ignored); the word is the first column, the label the last
//    one or the 1-based options.label_column;
//  - a line of whitespace only (spaces, tabs, \r, \f, \v) ends a sentence;
//    several in a row, or at the start or end of the file, give no empty
//    sentence;
//  - a line whose first column is -DOCSTART- ends the sentence before it and
//    is skipped (the blank line after it is an ordinary blank line);
//  - a UTF-8 byte-order mark at the start is skipped; a trailing '\r' of a
//    line is dropped (CRLF files);
//  - labeled files: every token line has the column count of the file's first
//    token line (at least 2); unlabeled files (options.labeled = false, for
//    `kiln predict`) read the first column only and ignore the rest, so a
//    one-column file is fine;
//  - label ids: options.label_set given: the position in it, any other label
//    is an error (use the train file's label_set for dev and test files); else
//    label_set = the distinct labels in sorted (byte) order, as run_ner's
//    get_label_list sorts them.
// Caps against hostile input (Note [Bounded input], core/file_util.h): the file
// must be a regular file of at most options.max_file_bytes (default
// kMaxConllFileBytes, 256 MiB; CoNLL-2003's train file is 3.3 MB) and no line
// may exceed options.max_line_bytes (default kMaxConllLineBytes, 1 MiB). The
// file is read whole; the dataset then takes at most a few tens of bytes per
// byte of file (worst cases: one-character words, each a std::string, or a
// distinct label on every line); CoNLL-2003 takes about twice its size (36
// bytes per word for 16-byte lines).
// Errors are one kiln::Error naming the file (and line where there is one):
//   "read_conll: 'f' does not exist", or file_util's "cannot open" / "is not a
//   regular file" / "over the limit";
//   "read_conll: f:7: 3 columns, expected 4 like line 1";
//   "read_conll: f:1: label column 5 is out of range: the line has 3 columns";
//   "read_conll: f:1: 1 column: a labeled file needs a word and a label column";
//   "read_conll: f:9: label 'B-FOO' is not in the label set {B-LOC, ...}";
//   "read_conll: f:3: line of 2000000 bytes, over the limit of 1048576";
//   "read_conll: f: no sentence (no token line)".
//
// Note [Word alignment]
// encode_conll aligns labels to WordPiece subwords exactly as transformers'
// tokenizer(words, is_split_into_words=True) on a BERT fast tokenizer and
// run_ner's tokenize_and_align_labels do:
//  - each word is encoded on its own (TextTokenizer::encode_ids: special-token
//    matching, normalization, pre-tokenization, the model), so punctuation
//    inside a word ("U.S.") splits it into several pieces, all of that word;
//  - the word's label goes on its first subword; the other subwords and
//    [CLS]/[SEP] get -100 (kIgnoreLabel), which the loss skips;
//  - label_all_tokens: every subword gets its word's label, except that a
//    B-X label becomes I-X on the continuation subwords when I-X is in the
//    label set (run_ner's b_to_i_label);
//  - a word that yields no subword at all (only zero-width or control
//    characters, e.g. U+200B) becomes one [UNK], so that every word gets a
//    prediction. This differs from HF, which drops such a word (its label is
//    then never seen, and seqeval sees one word fewer).
// Windows: a sentence whose subwords do not fit in max_length - 2 is split at
// word boundaries into consecutive, non-overlapping windows of at most
// max_length - 2 subwords, each encoded [CLS] ... [SEP]. A word longer than
// that on its own is split across windows: its first subword (and label)
// opens the first of them, the rest continue in the next ones. Nothing is
// truncated, so every word's first subword is in exactly one window and every
// word is evaluated exactly once. (HF run_ner truncates instead.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/finetune_data.h"
#include "kiln/data/tokenizer/bert_tokenizer.h"

namespace kiln::data {

inline constexpr uint64_t kMaxConllFileBytes = uint64_t{256} << 20;  // 256 MiB
inline constexpr size_t kMaxConllLineBytes = size_t{1} << 20;        // 1 MiB
// The label of positions without one (continuation subwords, [CLS], [SEP],
// padding), as PyTorch's CrossEntropyLoss ignore_index and HF's -100.
inline constexpr int32_t kIgnoreLabel = -100;

struct ConllOptions {
  int64_t label_column = 0;  // 0: the last column; else 1-based (>= 2)
  bool labeled = true;       // false: words only (`kiln predict`); other columns ignored
  // Given: label id = position (any other label is an error naming file:line);
  // empty: the sorted distinct labels of the file.
  std::vector<std::string> label_set;
  uint64_t max_file_bytes = kMaxConllFileBytes;
  size_t max_line_bytes = kMaxConllLineBytes;
};

struct ConllSentence {
  std::vector<std::string> words;
  std::vector<int32_t> labels;  // one id per word into ConllDataset::label_set; empty when unlabeled
  size_t line = 0;              // 1-based line of the sentence's first token
};

struct ConllDataset {
  std::string path;
  std::vector<std::string> label_set;  // label id -> label; empty when unlabeled
  std::vector<ConllSentence> sentences;

  size_t size() const { return sentences.size(); }
  size_t num_labels() const { return label_set.size(); }
  size_t num_words() const;  // over all sentences
};

// Reads a CoNLL file (Note [CoNLL files]).
ConllDataset read_conll(const std::string& path, const ConllOptions& options = {});

// One window of one sentence, encoded (Note [Word alignment]).
struct TokenEncoding {
  Encoding encoding;            // [CLS] subwords [SEP] (the tokenizer's special_around()), type ids 0, no padding
  std::vector<int32_t> labels;  // per position: a label id, or kIgnoreLabel where none
  // Per position: the index within the sentence of the word whose FIRST
  // subword this is, -1 elsewhere ([CLS], [SEP], continuation subwords).
  std::vector<int32_t> word_index;
  size_t sentence = 0;  // index in ConllDataset::sentences
};

// The b_to_i_label map of run_ner: for label id i, the id of "I-X" when label
// i is "B-X" and "I-X" is in label_set, else i.
std::vector<int32_t> b_to_i_labels(const std::vector<std::string>& label_set);

// The windows of one sentence (words, and labels or empty), as encode_conll
// makes them; `sentence` is copied into each. max_length: at most this many
// ids per window including the special tokens ([CLS] and [SEP]: >= 3), or 0
// for one window per sentence. b_to_i: b_to_i_labels(label_set), read with
// label_all_tokens (a label id outside it stays as it is). kiln::Error when
// max_length leaves no room for a subword, a BERT vocab lacks [CLS] or
// [SEP], or labels is neither empty nor one per word.
std::vector<TokenEncoding> encode_words(const std::vector<std::string>& words, const std::vector<int32_t>& labels,
                                        const TextTokenizer& tokenizer, size_t max_length, bool label_all_tokens,
                                        const std::vector<int32_t>& b_to_i, size_t sentence = 0);

// The windows of every sentence, in sentence order (windows of a sentence in
// word order), max_length as for encode_words (HF run_ner's max_seq_length;
// 0: no windows). Sentences are encoded in parallel on kiln's thread pool; the
// result does not depend on the thread count. kiln::Error as encode_words,
// and "file:line: label id 9 is outside the label set (4 labels)" for a
// sentence built by hand with a bad id.
std::vector<TokenEncoding> encode_conll(const ConllDataset& dataset, const TextTokenizer& tokenizer,
                                        size_t max_length, bool label_all_tokens = false);

// ---- batches ---------------------------------------------------------------

struct TokenClassificationBatch {
  PaddedBatch inputs;  // (B, T) int64 each
  Tensor labels;       // (B, T) int64, kIgnoreLabel (-100) where no label and in padding
};

// Calls f on every tensor of the batch (Note [Batch staging], data/device_staging.h).
template <typename F>
void for_each_tensor(TokenClassificationBatch& b, F&& f) {
  for (Tensor* t : {&b.inputs.input_ids, &b.inputs.attention_mask, &b.inputs.token_type_ids, &b.labels}) f(*t);
}

// A collate function for DataLoader<TokenEncoding, TokenClassificationBatch>:
// dynamic padding (pad_encodings) plus the labels. kiln::Error for an empty
// batch or an encoding whose labels differ in length from its ids.
TokenClassificationBatch collate_token_classification(const std::vector<TokenEncoding>& examples, int32_t pad_id,
                                                      size_t pad_to_multiple_of = 1);

// ---- predictions back to words ---------------------------------------------

// One label id per word of a sentence of num_words words, from the
// predictions of its windows: predictions[i][p] is the predicted id at
// position p of windows[i] (a row may be longer than its window, e.g. a row of
// the padded batch; the rest is ignored). Each word takes the prediction at
// its first subword. kiln::Error when a row is shorter than its window, a
// word index is out of range or seen twice, or a word got no prediction
// ("word 3 of 7 got no prediction").
std::vector<int32_t> words_from_windows(size_t num_words, std::span<const TokenEncoding* const> windows,
                                        std::span<const std::vector<int64_t>> predictions);

// words_from_windows for every sentence: encodings as encode_conll gave them
// (windows of a sentence consecutive) and predictions[i] for encodings[i].
// Result[s][w]: the predicted label id of word w of sentence s. kiln::Error as
// above (naming the file and the sentence's line), when the counts differ, a
// sentence has no window, or a prediction is outside [0, num_labels) (for a
// dataset with a label set).
std::vector<std::vector<int32_t>> word_predictions(const ConllDataset& dataset,
                                                   const std::vector<TokenEncoding>& encodings,
                                                   const std::vector<std::vector<int64_t>>& predictions);

}  // namespace kiln::data
