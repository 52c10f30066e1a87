// Fine-tuning data: labeled text (or text pairs) from TSV, CSV or JSONL files
// in GLUE's layout, and dynamic padding of encoded batches.
//
// Note [Labeled file formats] (chosen by extension unless options.format says)
//  - .tsv: a header line of column names, then one row per line, fields split
//    on tabs with no quoting (as GLUE's own readers do: SST-2 / MNLI text holds
//    bare quote characters);
//  - .csv: RFC 4180: a header row; fields separated by commas; a field in
//    double quotes may hold commas, line breaks and "" (one quote); rows end
//    in LF or CRLF;
//  - .jsonl: one JSON object per non-blank line; its keys are the columns
//    (the first object's keys are used for auto-detection); values are
//    strings or numbers (numbers are used in their JSON text form, so the
//    label 1 reads as "1").
// Every format: a UTF-8 byte-order mark at the start is skipped, a trailing
// '\r' is dropped, blank lines (TSV/CSV: empty; JSONL: whitespace-only) are
// skipped, and every row must have exactly the header's number of fields.
//
// Note [Column detection]
//  - text_column unset: the first pair of columns present among
//    (sentence1, sentence2), (question1, question2), (premise, hypothesis),
//    (question, sentence), (text_a, text_b) gives text and pair columns (when
//    pair_column is unset too); otherwise the first present of sentence,
//    content, text, review, sentence1, question, premise, text_a; otherwise
//    the first column that is not the label column or "idx"/"id"/"index".
//  - pair_column unset with text_column given: the partner of text_column in
//    the pairs above, if present; set it to "" for no pair column.
//  - label_column: "label" by default; "" reads an unlabeled file (labels -1).
//
// Note [Label sets]
//  - options.label_set given: label id = position in it; any other label is
//    an error (use the train file's label_set for dev/test files);
//  - else when every label is a non-negative decimal integer (< 100,000):
//    id = the integer, label_set = "0", "1", ..., max (GLUE's 0/1 labels stay
//    0/1 even when a split lacks a class);
//  - else label_set = the distinct labels in sorted (byte) order.
// Labels are compared after trimming surrounding whitespace.
//
// Errors are kiln::Error with "file:line" (the row's first physical line) for:
// a missing or unreadable file, a missing column, a row with the wrong number
// of fields or a missing JSON key, malformed CSV quoting or JSON, an empty
// label, and a label outside options.label_set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/tokenizer/bert_tokenizer.h"

namespace kiln::data {

enum class TableFormat { Auto, Tsv, Csv, Jsonl };

struct LabeledFileOptions {
  std::optional<std::string> text_column;  // unset: auto-detect
  std::optional<std::string> pair_column;  // unset: auto-detect; "": none
  std::string label_column = "label";      // "": unlabeled
  std::vector<std::string> label_set;      // empty: derived from the file
  TableFormat format = TableFormat::Auto;  // Auto: by extension
};

struct LabeledExample {
  std::string text;
  std::string text_pair;  // "" when the dataset has no pair column
  int32_t label = -1;     // index into LabeledDataset::label_set; -1 when unlabeled
  size_t line = 0;        // 1-based line of the row in its file
};

struct LabeledDataset {
  std::string path;
  std::string text_column, pair_column, label_column;  // as resolved; "" when absent
  std::vector<std::string> label_set;                  // label id -> label string
  std::vector<LabeledExample> examples;

  size_t size() const { return examples.size(); }
  size_t num_labels() const { return label_set.size(); }
  bool has_pair() const { return !pair_column.empty(); }
};

// Reads a labeled file (Notes [Labeled file formats], [Column detection], [Label sets]).
LabeledDataset read_labeled_file(const std::string& path, const LabeledFileOptions& options = {});

// A table: header names and rows of fields, each with its first line number.
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> row_lines;
};
// The table layer of read_labeled_file (also for tests of the CSV parser).
Table read_table(const std::string& path, TableFormat format = TableFormat::Auto);
// Parses CSV text (RFC 4180); `name` is used in error messages.
Table parse_csv(const std::string& text, const std::string& name);

// ---- encoding and dynamic padding -----------------------------------------

struct LabeledEncoding {
  Encoding encoding;  // [CLS] text [SEP] (pair [SEP]), no padding
  int32_t label = -1;
};

// Encodes every example (in parallel) with [CLS]/[SEP] and truncation to
// max_length (0: none).
std::vector<LabeledEncoding> encode_labeled(const LabeledDataset& dataset, const BertTokenizer& tokenizer,
                                            size_t max_length);

// int64 tensors on the CPU; B sequences padded to T = the longest, rounded up
// to a multiple of pad_to_multiple_of.
struct PaddedBatch {
  Tensor input_ids;       // (B, T), pad_id in padding
  Tensor attention_mask;  // (B, T), 1 for tokens, 0 for padding
  Tensor token_type_ids;  // (B, T), 0 in padding
};

struct ClassificationBatch {
  PaddedBatch inputs;
  Tensor labels;  // (B) int64
};

// Calls f on every tensor of the batch (Note [Batch staging], data/device_staging.h).
template <typename F>
void for_each_tensor(ClassificationBatch& b, F&& f) {
  for (Tensor* t : {&b.inputs.input_ids, &b.inputs.attention_mask, &b.inputs.token_type_ids, &b.labels}) f(*t);
}

// Dynamic padding. Empty input, an Encoding whose three vectors differ in
// length, or pad_to_multiple_of == 0: kiln::Error.
PaddedBatch pad_encodings(std::span<const Encoding> encodings, int32_t pad_id, size_t pad_to_multiple_of = 1);
PaddedBatch pad_encodings(std::span<const Encoding* const> encodings, int32_t pad_id, size_t pad_to_multiple_of = 1);
// A collate function for DataLoader<LabeledEncoding, ClassificationBatch>.
ClassificationBatch collate_classification(const std::vector<LabeledEncoding>& examples, int32_t pad_id,
                                           size_t pad_to_multiple_of = 1);

}  // namespace kiln::data
