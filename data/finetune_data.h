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
//    label 1 reads as "1"); the label of a multi-label file may also be an
//    array (Note [Label kinds]).
// Every format: a UTF-8 byte-order mark at the start is skipped, a trailing
// '\r' is dropped, blank lines (TSV/CSV: empty; JSONL: whitespace-only) are
// skipped, and every row must have exactly the header's number of fields.
// options.no_header (TSV/CSV only, as STS-B's GLUE files): there is no header
// line, the first line is a row and the columns are named "1", "2", ...
// (1-based), so text_column, pair_column and label_column take indexes (STS-B:
// text "8", pair "9", label "10"). There is no detection then: text_column
// must be given, pair_column defaults to none and label_column to "label",
// which is not an index, so it must be given too ("" for an unlabeled file).
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
// Note [Label kinds] (options.label_kind; the result is LabeledDataset::kind)
//  - Class: one label per row, an id into label_set (Note [Label sets]);
//  - Float (regression, STS-B): the label, trimmed, must be a finite number
//    in its whole (std::from_chars, an optional leading '+'); it goes to
//    LabeledExample::value; label stays -1 and label_set empty;
//  - MultiLabel: zero or more labels per row, LabeledExample::labels (ids into
//    label_set, ascending, each once). TSV/CSV: the field holds labels
//    separated by commas, each trimmed (an empty or whitespace-only field is
//    no label; an empty item between commas is an error); JSONL: a JSON
//    array of strings or numbers, or a string split on commas as above (null
//    or [] is no label). label_set = the distinct labels in sorted (byte)
//    order, or options.label_set (any other label is an error);
//  - Auto (the default): Float when label_set is not given, every label is a
//    number as above and at least one holds a '.', 'e' or 'E' (as HF's
//    run_glue treats a float label column as regression: STS-B's "5.000"),
//    else Class. Auto never gives MultiLabel. An unlabeled file gets Class
//    for Auto, else the kind asked for.
//
// Note [Label sets] (Class)
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
// label (Class, Float), a label that is not a number (Float: "file:line:
// label 'abc' is not a number"), a label outside options.label_set, and, in a
// labeled file, empty text (after trimming) in the text or the pair column
// ("file:line: empty text"). Without a header: "file: a file without a header
// (--no-header) needs --text-column, a 1-based column index", a column name
// that is not an index, and "file: label column 11 is out of range: the file
// has 10 columns".
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

// What a label column holds (Note [Label kinds]).
enum class LabelKind { Auto, Class, Float, MultiLabel };

struct LabeledFileOptions {
  std::optional<std::string> text_column;  // unset: auto-detect
  std::optional<std::string> pair_column;  // unset: auto-detect; "": none
  std::string label_column = "label";      // "": unlabeled
  std::vector<std::string> label_set;      // empty: derived from the file
  TableFormat format = TableFormat::Auto;  // Auto: by extension
  bool no_header = false;                  // TSV/CSV without a header line: columns "1", "2", ...
  LabelKind label_kind = LabelKind::Auto;  // Auto: Float or Class, detected
};

struct LabeledExample {
  std::string text;
  std::string text_pair;        // "" when the dataset has no pair column
  int32_t label = -1;           // Class: index into LabeledDataset::label_set; -1 when unlabeled or not Class
  double value = 0;             // Float: the label's value; 0 otherwise
  std::vector<int32_t> labels;  // MultiLabel: ids into label_set, ascending, distinct; empty otherwise
  size_t line = 0;              // 1-based line of the row in its file
};

struct LabeledDataset {
  std::string path;
  std::string text_column, pair_column, label_column;  // as resolved; "" when absent
  std::vector<std::string> label_set;                  // label id -> label string (empty for Float)
  std::vector<LabeledExample> examples;
  LabelKind kind = LabelKind::Class;                   // resolved: Class, Float or MultiLabel

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
// no_header (TSV/CSV; JSONL is a kiln::Error): the first row is data and the
// columns are named "1", "2", ...
Table read_table(const std::string& path, TableFormat format = TableFormat::Auto, bool no_header = false);
// Parses CSV text (RFC 4180); `name` is used in error messages.
Table parse_csv(const std::string& text, const std::string& name, bool no_header = false);

// ---- encoding and dynamic padding -----------------------------------------

struct LabeledEncoding {
  Encoding encoding;  // [CLS] text [SEP] (pair [SEP]), no padding
  int32_t label = -1;           // LabeledExample::label
  float value = 0;              // LabeledExample::value (Float)
  std::vector<int32_t> labels;  // LabeledExample::labels (MultiLabel)
};

// Encodes every example (in parallel) with [CLS]/[SEP] and truncation to
// max_length (0: none).
std::vector<LabeledEncoding> encode_labeled(const LabeledDataset& dataset, const TextTokenizer& tokenizer,
                                            size_t max_length);

// int64 tensors on the CPU; B sequences padded to T = the longest, rounded up
// to a multiple of pad_to_multiple_of.
struct PaddedBatch {
  Tensor input_ids;       // (B, T), pad_id in padding
  Tensor attention_mask;  // (B, T), 1 for tokens, 0 for padding
  Tensor token_type_ids;  // (B, T), 0 in padding
};

// The batch of every label kind (Note [Label kinds]); labels on the CPU:
//  - Class:      (B) int64, the label ids (-1 for unlabeled rows);
//  - Float:      (B) float32, the values (regression);
//  - MultiLabel: (B, L) float32, L = num_labels, 1 where the row has the
//                label and 0 elsewhere (BCE-with-logits targets).
struct ClassificationBatch {
  PaddedBatch inputs;
  Tensor labels;
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
// A collate function for DataLoader<LabeledEncoding, ClassificationBatch>;
// `kind` is the dataset's (LabeledDataset::kind) and picks the labels tensor
// as described at ClassificationBatch; num_labels (MultiLabel only, >= 1) is
// L. kiln::Error for an empty batch, kind Auto, MultiLabel with num_labels 0,
// or a multi-label id outside [0, num_labels).
ClassificationBatch collate_classification(const std::vector<LabeledEncoding>& examples, int32_t pad_id,
                                           size_t pad_to_multiple_of = 1, LabelKind kind = LabelKind::Class,
                                           size_t num_labels = 0);

}  // namespace kiln::data
