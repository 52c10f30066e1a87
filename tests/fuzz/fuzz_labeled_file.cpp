// Fuzz target: read_labeled_file (data/finetune_data.h: TSV, CSV, JSONL,
// column detection and label sets).
//
// Input layout: byte 0 = options, the rest = the file, written as input.tsv,
// input.csv or input.jsonl (format detection by extension, as `kiln finetune`
// does). Options: bits 0-1 format (0 .tsv, 1 .csv, 2 .jsonl, 3 .csv),
// bit 2 unlabeled (label_column ""), bit 3 a given label_set {"0", "1",
// "neutral"} (as a dev file gets the train file's), bit 4 text_column
// "sentence", bit 5 pair_column "" (no pair), bit 6 no_header with
// text_column "1" and (labeled) label_column "2" (overriding bit 4), bit 7
// label_kind MultiLabel.
//
// Properties: reading either succeeds or throws kiln::Error; an accepted file
// has examples with strictly increasing line numbers inside the file, labels
// inside the label set (all -1 and no label set when unlabeled), a given
// label_set kept as is, a derived one sorted and distinct or "0".."max";
// a Float (regression) file has finite values, labels -1 and no label set; a
// multi-label file has ascending, distinct label ids inside its label set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/finetune_data.h"
#include "scratch.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_labeled_file", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const std::string_view text = kiln_fuzz::as_text(data + 1, size - 1);
  static const char* const kExtensions[] = {".tsv", ".csv", ".jsonl", ".csv"};
  const std::string path = scratch.fresh_dir() + "/input" + kExtensions[flags & 3];
  kiln_fuzz::write_file(path, text);

  kiln::data::LabeledFileOptions options;
  if (flags & 4) options.label_column = "";
  if (flags & 8) options.label_set = {"0", "1", "neutral"};
  if (flags & 16) options.text_column = "sentence";
  if (flags & 32) options.pair_column = "";
  if (flags & 64) {
    options.no_header = true;
    options.text_column = "1";
    if (!options.label_column.empty()) options.label_column = "2";
  }
  if (flags & 128) options.label_kind = kiln::data::LabelKind::MultiLabel;
  kiln::data::LabeledDataset ds;
  try {
    ds = kiln::data::read_labeled_file(path, options);
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;  // rejected cleanly
  }

  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  size_t last_line = 0;
  for (const kiln::data::LabeledExample& e : ds.examples) {
    require(e.line > last_line && e.line <= lines, "line numbers increase inside the file");
    last_line = e.line;
    if (options.label_column.empty()) {
      require(e.label == -1, "unlabeled examples have label -1");
    } else if (ds.kind == kiln::data::LabelKind::Float) {
      require(e.label == -1 && std::isfinite(e.value), "regression examples have finite values and label -1");
    } else if (ds.kind == kiln::data::LabelKind::MultiLabel) {
      require(e.label == -1, "multi-label examples have label -1");
      for (size_t i = 0; i < e.labels.size(); ++i)
        require(e.labels[i] >= 0 && static_cast<size_t>(e.labels[i]) < ds.num_labels() &&
                    (i == 0 || e.labels[i - 1] < e.labels[i]),
                "multi-labels ascending, distinct, inside the label set");
    } else {
      require(e.label >= 0 && static_cast<size_t>(e.label) < ds.num_labels(), "labels inside the label set");
    }
    if (!ds.has_pair()) require(e.text_pair.empty(), "no pair text without a pair column");
  }
  require(!ds.text_column.empty(), "a text column was resolved");
  require(ds.kind != kiln::data::LabelKind::Auto, "the label kind is resolved");
  if (options.label_column.empty()) {
    require(ds.label_set.empty(), "no label set when unlabeled");
  } else if (ds.kind == kiln::data::LabelKind::Float) {
    require(ds.label_set.empty() && options.label_set.empty(), "no label set for regression");
  } else if (!options.label_set.empty()) {
    require(ds.label_set == options.label_set, "a given label set is kept");
  } else {
    const auto& set = ds.label_set;
    bool numeric = ds.kind == kiln::data::LabelKind::Class;
    for (size_t i = 0; i < set.size(); ++i) numeric = numeric && set[i] == std::to_string(i);
    require(numeric || (std::is_sorted(set.begin(), set.end()) &&
                        std::adjacent_find(set.begin(), set.end()) == set.end()),
            "a derived label set is 0..max, or sorted and distinct");
  }
  return 0;
}
