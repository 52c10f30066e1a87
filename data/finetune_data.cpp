// Labeled TSV / CSV / JSONL readers and dynamic padding (data/finetune_data.h).
#include "data/finetune_data.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"

namespace kiln::data {
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "read_labeled_file: '", path, "' does not exist");
  // Note [Bounded input]: a regular file only (a FIFO would block the open).
  std::string text = read_file_bounded(path, "read_labeled_file: '" + path + "'", kNoByteLimit);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  return text;
}

TableFormat format_of(const std::string& path, TableFormat format) {
  if (format != TableFormat::Auto) return format;
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".tsv") return TableFormat::Tsv;
  if (ext == ".csv") return TableFormat::Csv;
  if (ext == ".jsonl" || ext == ".ndjson") return TableFormat::Jsonl;
  fail("read_labeled_file: cannot tell the format of '", path, "' from its extension \"", ext,
       "\" (expected .tsv, .csv or .jsonl)");
}

// Calls fn(line, line_number) for each line of text, without its '\n' or a trailing '\r'.
template <typename Fn>
void for_each_line(const std::string& text, Fn fn) {
  size_t begin = 0, number = 1;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    fn(std::string_view(text).substr(begin, stop - begin), number++);
    begin = end + 1;
  }
}

void check_width(const Table& t, size_t fields, size_t line, const std::string& name, const char* how) {
  KILN_CHECK(fields == t.columns.size(), name, ":", line, ": expected ", t.columns.size(), " ", how, " fields, got ",
             fields);
}

// Column names "1", "2", ..., "n" of a file without a header.
std::vector<std::string> numbered_columns(size_t n) {
  std::vector<std::string> columns;
  for (size_t i = 1; i <= n; ++i) columns.push_back(std::to_string(i));
  return columns;
}

Table parse_tsv(const std::string& text, const std::string& name, bool no_header) {
  Table t;
  bool header = true;
  for_each_line(text, [&](std::string_view line, size_t number) {
    if (line.empty()) return;
    std::vector<std::string> fields;
    size_t begin = 0;
    while (true) {
      const size_t tab = line.find('\t', begin);
      fields.emplace_back(line.substr(begin, tab == std::string_view::npos ? std::string_view::npos : tab - begin));
      if (tab == std::string_view::npos) break;
      begin = tab + 1;
    }
    if (header) {
      header = false;
      if (!no_header) {
        t.columns = std::move(fields);
        return;
      }
      t.columns = numbered_columns(fields.size());
    }
    check_width(t, fields.size(), number, name, "tab-separated");
    t.rows.push_back(std::move(fields));
    t.row_lines.push_back(number);
  });
  KILN_CHECK(!header, name, no_header ? ": empty file (no row)" : ": empty file (no header line)");
  return t;
}

std::string json_field(const nlohmann::ordered_json& v, const std::string& key, const std::string& name, size_t line) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_null()) return {};
  fail(name, ":", line, ": field \"", key, "\" is not a string or a number",
       v.is_array() ? " (a JSON array is read only as the labels of a multi-label file)" : "");
}

// The labels of a JSON array (multi-label files): strings, or numbers in their JSON text form.
std::vector<std::string> json_label_array(const nlohmann::ordered_json& v, const std::string& key,
                                          const std::string& name, size_t line) {
  std::vector<std::string> labels;
  for (const auto& item : v) {
    KILN_CHECK(item.is_string() || item.is_number(), name, ":", line, ": an element of the array \"", key,
               "\" is not a string or a number");
    labels.push_back(item.is_string() ? item.get<std::string>() : item.dump());
  }
  return labels;
}

// JSONL rows. When array_column is non-empty, that column's value may be a
// JSON array: its row's (*arrays)[r] holds the elements (nullopt otherwise)
// and the table's field is "".
Table parse_jsonl(const std::string& text, const std::string& name, const std::string& array_column = {},
                  std::vector<std::optional<std::vector<std::string>>>* arrays = nullptr) {
  Table t;
  bool header = true;
  for_each_line(text, [&](std::string_view line, size_t number) {
    if (line.find_first_not_of(" \t\r\f\v") == std::string_view::npos) return;
    // Note [Bounded JSON]: the depth limit stops the parse; a line is at most kMaxJsonBytes.
    const nlohmann::ordered_json object =
        parse_ordered_json_bounded(line, name + ":" + std::to_string(number));
    KILN_CHECK(object.is_object(), name, ":", number, ": expected a JSON object per line");
    if (header) {
      for (const auto& item : object.items()) t.columns.push_back(item.key());
      header = false;
    }
    std::vector<std::string> fields;
    std::optional<std::vector<std::string>> array;
    for (const std::string& column : t.columns) {
      const auto it = object.find(column);
      KILN_CHECK(it != object.end(), name, ":", number, ": missing key \"", column, "\" (present in the first row)");
      if (it->is_array() && !array_column.empty() && column == array_column) {
        array = json_label_array(*it, column, name, number);
        fields.emplace_back();
      } else {
        fields.push_back(json_field(*it, column, name, number));
      }
    }
    if (arrays) arrays->push_back(std::move(array));
    t.rows.push_back(std::move(fields));
    t.row_lines.push_back(number);
  });
  KILN_CHECK(!header, name, ": empty file (no JSON object)");
  return t;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n\f\v");
  return std::string(s.substr(b, e - b + 1));
}

bool is_small_uint(const std::string& s) {
  return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A finite number in the whole of s (std::from_chars; one leading '+' allowed).
std::optional<double> parse_number(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') {
    ++begin;
    if (begin == end || *begin == '-') return std::nullopt;  // "+" and "+-1" are not numbers
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

// Auto's test for a non-integer number (Note [Label kinds]).
bool looks_fractional(const std::string& s) { return s.find_first_of(".eE") != std::string::npos; }

// The labels of a multi-label field: comma-separated, each trimmed; "" is none.
std::vector<std::string> split_label_list(const std::string& field, const std::string& name, size_t line) {
  std::vector<std::string> labels;
  if (trim(field).empty()) return labels;
  size_t begin = 0;
  while (true) {
    const size_t comma = field.find(',', begin);
    labels.push_back(trim(std::string_view(field).substr(begin, comma == std::string::npos ? comma : comma - begin)));
    KILN_CHECK(!labels.back().empty(), "read_labeled_file: ", name, ":", line, ": empty label in the list '", field,
               "'");
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return labels;
}

std::string join_labels(const std::vector<std::string>& labels) {
  std::string out;
  for (const std::string& l : labels) out += (out.empty() ? "" : ", ") + l;
  return out;
}

const std::vector<std::pair<std::string, std::string>>& known_pairs() {
  static const std::vector<std::pair<std::string, std::string>> pairs = {{"sentence1", "sentence2"},
                                                                         {"question1", "question2"},
                                                                         {"premise", "hypothesis"},
                                                                         {"question", "sentence"},
                                                                         {"text_a", "text_b"}};
  return pairs;
}

}  // namespace

Table parse_csv(const std::string& text, const std::string& name, bool no_header) {
  Table t;
  std::vector<std::string> record;
  std::string field;
  size_t pos = 0, line = 1, record_line = 1;
  bool header = true;
  const size_t n = text.size();
  const auto end_record = [&] {
    if (record.size() == 1 && record[0].empty()) {  // a blank line
      record.clear();
      return;
    }
    if (header && !no_header) {
      t.columns = std::move(record);
      header = false;
    } else {
      if (header) {
        t.columns = numbered_columns(record.size());
        header = false;
      }
      check_width(t, record.size(), record_line, name, "comma-separated");
      t.rows.push_back(std::move(record));
      t.row_lines.push_back(record_line);
    }
    record.clear();
  };
  while (pos < n) {
    // One field starts at pos.
    field.clear();
    if (record.empty()) record_line = line;
    if (text[pos] == '"') {
      const size_t open_line = line;
      ++pos;
      while (true) {
        KILN_CHECK(pos < n, name, ":", open_line, ": unterminated quoted field");
        const char c = text[pos];
        if (c == '"') {
          if (pos + 1 < n && text[pos + 1] == '"') {
            field.push_back('"');
            pos += 2;
            continue;
          }
          ++pos;
          break;
        }
        if (c == '\n') ++line;
        field.push_back(c);
        ++pos;
      }
      const bool at_end = pos == n || text[pos] == ',' || text[pos] == '\n' ||
                          (text[pos] == '\r' && (pos + 1 == n || text[pos + 1] == '\n'));
      KILN_CHECK(at_end, name, ":", line, ": unexpected character '", text[pos],
                 "' after a closing quote (a quote inside a quoted field must be doubled)");
    } else {
      while (pos < n && text[pos] != ',' && text[pos] != '\n' &&
             !(text[pos] == '\r' && (pos + 1 == n || text[pos + 1] == '\n')))
        field.push_back(text[pos++]);
    }
    record.push_back(field);
    if (pos == n) break;
    if (text[pos] == ',') {
      ++pos;
      if (pos == n) record.emplace_back();  // a trailing comma: one more empty field
      continue;
    }
    if (text[pos] == '\r') ++pos;
    if (pos < n && text[pos] == '\n') {
      ++pos;
      ++line;
    }
    end_record();
  }
  if (!record.empty()) end_record();
  KILN_CHECK(!header, name, no_header ? ": empty file (no row)" : ": empty file (no header row)");
  return t;
}

namespace {

// read_table, plus the label arrays of a multi-label JSONL file (parse_jsonl).
Table read_table_impl(const std::string& path, TableFormat format, bool no_header, const std::string& array_column,
                      std::vector<std::optional<std::vector<std::string>>>* arrays) {
  const TableFormat f = format_of(path, format);
  KILN_CHECK(!no_header || f != TableFormat::Jsonl, "read_labeled_file: ", path,
             ": --no-header is for TSV and CSV files (a JSONL file names its columns in every object)");
  const std::string text = read_file(path);
  switch (f) {
    case TableFormat::Tsv:
      return parse_tsv(text, path, no_header);
    case TableFormat::Csv:
      return parse_csv(text, path, no_header);
    default:
      return parse_jsonl(text, path, array_column, arrays);
  }
}

}  // namespace

Table read_table(const std::string& path, TableFormat format, bool no_header) {
  return read_table_impl(path, format, no_header, {}, nullptr);
}

namespace {

// Class labels (Note [Label sets]): sets ds.label_set and each example's label.
void assign_class_labels(LabeledDataset& ds, const std::vector<std::string>& labels,
                         const std::vector<std::string>& given) {
  std::map<std::string, int32_t> ids;
  if (!given.empty()) {
    ds.label_set = given;
    for (size_t i = 0; i < ds.label_set.size(); ++i) ids.emplace(trim(ds.label_set[i]), static_cast<int32_t>(i));
    // transformers' default names (LABEL_0, LABEL_1, ...: a model trained on integer labels, as run_glue
    // leaves them, or a PEFT adapter's head) take the integer labels as their ids
    bool defaults = true;
    for (size_t i = 0; i < given.size() && defaults; ++i) defaults = trim(given[i]) == "LABEL_" + std::to_string(i);
    if (defaults)
      for (size_t i = 0; i < given.size(); ++i) ids.emplace(std::to_string(i), static_cast<int32_t>(i));
  } else if (std::all_of(labels.begin(), labels.end(), is_small_uint) && !labels.empty()) {
    int32_t max_label = 0;
    for (const std::string& l : labels) max_label = std::max(max_label, static_cast<int32_t>(std::stoi(l)));
    for (int32_t i = 0; i <= max_label; ++i) {
      ds.label_set.push_back(std::to_string(i));
      ids.emplace(ds.label_set.back(), i);
    }
    for (const std::string& l : labels) ids.emplace(l, static_cast<int32_t>(std::stoi(l)));  // "01" and the like
  } else {
    std::vector<std::string> distinct = labels;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    ds.label_set = distinct;
    for (size_t i = 0; i < distinct.size(); ++i) ids.emplace(distinct[i], static_cast<int32_t>(i));
  }
  for (size_t r = 0; r < labels.size(); ++r) {
    const auto it = ids.find(labels[r]);
    if (it == ids.end())
      fail("read_labeled_file: ", ds.path, ":", ds.examples[r].line, ": label \"", labels[r],
           "\" is not in the label set {", join_labels(ds.label_set), "}");
    ds.examples[r].label = it->second;
  }
}

// Multi-label labels (Note [Label kinds]): sets ds.label_set and each example's labels.
void assign_multi_labels(LabeledDataset& ds, const std::vector<std::vector<std::string>>& labels,
                         const std::vector<std::string>& given) {
  std::map<std::string, int32_t> ids;
  if (!given.empty()) {
    ds.label_set = given;
  } else {
    std::vector<std::string> distinct;
    for (const auto& row : labels) distinct.insert(distinct.end(), row.begin(), row.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    ds.label_set = std::move(distinct);
  }
  for (size_t i = 0; i < ds.label_set.size(); ++i) ids.emplace(trim(ds.label_set[i]), static_cast<int32_t>(i));
  for (size_t r = 0; r < labels.size(); ++r) {
    std::vector<int32_t>& out = ds.examples[r].labels;
    for (const std::string& l : labels[r]) {
      const auto it = ids.find(l);
      if (it == ids.end())
        fail("read_labeled_file: ", ds.path, ":", ds.examples[r].line, ": label \"", l,
             "\" is not in the label set {", join_labels(ds.label_set), "}");
      out.push_back(it->second);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

}  // namespace

LabeledDataset read_labeled_file(const std::string& path, const LabeledFileOptions& options) {
  const bool multi = options.label_kind == LabelKind::MultiLabel;
  std::vector<std::optional<std::vector<std::string>>> arrays;  // JSONL multi-label arrays, per row
  const Table table = read_table_impl(path, options.format, options.no_header,
                                      multi ? options.label_column : std::string(), multi ? &arrays : nullptr);
  const auto column_index = [&](const std::string& name) -> std::optional<size_t> {
    const auto it = std::find(table.columns.begin(), table.columns.end(), name);
    if (it == table.columns.end()) return std::nullopt;
    return static_cast<size_t>(it - table.columns.begin());
  };
  const auto require = [&](const std::string& name, const char* role) {
    if (options.no_header) {
      // Columns are "1".."n": say whether the name is no index or one out of range.
      const bool digits = is_small_uint(name) && name[0] != '0';
      KILN_CHECK(digits, "read_labeled_file: ", path, ": the ", role, " column \"", name,
                 "\" is not a column index: without a header (--no-header) the columns are numbered 1 to ",
                 table.columns.size());
      const auto index = column_index(name);
      KILN_CHECK(index, "read_labeled_file: ", path, ": ", role, " column ", name,
                 " is out of range: the file has ", table.columns.size(), " columns");
      return *index;
    }
    const auto index = column_index(name);
    if (!index) fail("read_labeled_file: ", path, ":1: no ", role, " column \"", name, "\" (columns: ",
                     join_labels(table.columns), ")");
    return *index;
  };

  LabeledDataset ds;
  ds.path = path;
  ds.label_column = options.label_column;
  if (options.no_header) {
    KILN_CHECK(options.text_column && !options.text_column->empty(), "read_labeled_file: ", path,
               ": a file without a header (--no-header) needs --text-column, a 1-based column index (the file has ",
               table.columns.size(), " columns)");
    ds.text_column = *options.text_column;
    ds.pair_column = options.pair_column.value_or("");
  } else if (options.text_column) {
    ds.text_column = *options.text_column;
    if (options.pair_column) {
      ds.pair_column = *options.pair_column;
    } else {
      for (const auto& [a, b] : known_pairs())
        if (a == ds.text_column && column_index(b)) ds.pair_column = b;
    }
  } else {
    for (const auto& [a, b] : known_pairs())
      if (ds.text_column.empty() && column_index(a) && column_index(b)) {
        ds.text_column = a;
        ds.pair_column = options.pair_column.value_or(b);
      }
    if (ds.text_column.empty()) {
      for (const char* name : {"sentence", "content", "text", "review", "sentence1", "question", "premise", "text_a"})
        if (ds.text_column.empty() && column_index(name)) ds.text_column = name;
    }
    if (ds.text_column.empty()) {
      for (const std::string& c : table.columns)
        if (ds.text_column.empty() && c != options.label_column && c != "idx" && c != "id" && c != "index")
          ds.text_column = c;
    }
    KILN_CHECK(!ds.text_column.empty(), "read_labeled_file: ", path, ":1: no text column found");
    if (options.pair_column) ds.pair_column = *options.pair_column;
  }
  const size_t text_index = require(ds.text_column, "text");
  constexpr size_t kAbsent = static_cast<size_t>(-1);
  const size_t pair_index = ds.pair_column.empty() ? kAbsent : require(ds.pair_column, "text-pair");
  const size_t label_index = ds.label_column.empty() ? kAbsent : require(ds.label_column, "label");
  const bool labeled = label_index != kAbsent;

  std::vector<std::string> labels;                   // Class, Float: the trimmed label of each row
  std::vector<std::vector<std::string>> label_lists;  // MultiLabel: the labels of each row
  ds.examples.reserve(table.rows.size());
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    LabeledExample ex;
    ex.text = row[text_index];
    if (pair_index != kAbsent) ex.text_pair = row[pair_index];
    ex.line = table.row_lines[r];
    if (labeled) {
      KILN_CHECK(!trim(ex.text).empty(), "read_labeled_file: ", path, ":", ex.line, ": empty text (column \"",
                 ds.text_column, "\")");
      KILN_CHECK(pair_index == kAbsent || !trim(ex.text_pair).empty(), "read_labeled_file: ", path, ":", ex.line,
                 ": empty text (pair column \"", ds.pair_column, "\")");
      if (multi) {
        label_lists.push_back(r < arrays.size() && arrays[r] ? *arrays[r]
                                                              : split_label_list(row[label_index], path, ex.line));
        for (std::string& l : label_lists.back()) {
          l = trim(l);
          KILN_CHECK(!l.empty(), "read_labeled_file: ", path, ":", ex.line, ": empty label in the array");
        }
      } else {
        labels.push_back(trim(row[label_index]));
        KILN_CHECK(!labels.back().empty(), "read_labeled_file: ", path, ":", ex.line, ": empty label");
      }
    }
    ds.examples.push_back(std::move(ex));
  }
  if (!labeled) {
    ds.kind = options.label_kind == LabelKind::Auto ? LabelKind::Class : options.label_kind;
    return ds;
  }
  if (multi) {
    ds.kind = LabelKind::MultiLabel;
    assign_multi_labels(ds, label_lists, options.label_set);
    return ds;
  }

  ds.kind = options.label_kind;
  if (ds.kind == LabelKind::Auto) {
    const bool numbers = !labels.empty() && options.label_set.empty() &&
                         std::all_of(labels.begin(), labels.end(), [](const std::string& l) {
                           return parse_number(l).has_value();
                         });
    ds.kind = numbers && std::any_of(labels.begin(), labels.end(), looks_fractional) ? LabelKind::Float
                                                                                       : LabelKind::Class;
  }
  if (ds.kind == LabelKind::Float) {
    for (size_t r = 0; r < labels.size(); ++r) {
      const std::optional<double> v = parse_number(labels[r]);
      KILN_CHECK(v, "read_labeled_file: ", path, ":", ds.examples[r].line, ": label '", labels[r],
                 "' is not a number (a regression file's labels are finite numbers)");
      ds.examples[r].value = *v;
    }
    return ds;
  }
  assign_class_labels(ds, labels, options.label_set);
  return ds;
}

// ---- encoding and padding --------------------------------------------------

std::vector<LabeledEncoding> encode_labeled(const LabeledDataset& dataset, const TextTokenizer& tokenizer,
                                            size_t max_length) {
  EncodeOptions options;
  options.max_length = max_length;
  std::vector<Encoding> encodings;
  if (dataset.has_pair()) {
    std::vector<std::pair<std::string, std::string>> pairs;
    pairs.reserve(dataset.size());
    for (const LabeledExample& e : dataset.examples) pairs.emplace_back(e.text, e.text_pair);
    encodings = tokenizer.encode_batch(pairs, options);
  } else {
    std::vector<std::string> texts;
    texts.reserve(dataset.size());
    for (const LabeledExample& e : dataset.examples) texts.push_back(e.text);
    encodings = tokenizer.encode_batch(texts, options);
  }
  std::vector<LabeledEncoding> out(encodings.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const LabeledExample& e = dataset.examples[i];
    out[i] = {std::move(encodings[i]), e.label, static_cast<float>(e.value), e.labels};
  }
  return out;
}

PaddedBatch pad_encodings(std::span<const Encoding* const> encodings, int32_t pad_id, size_t pad_to_multiple_of) {
  KILN_CHECK(!encodings.empty(), "pad_encodings: empty batch");
  KILN_CHECK(pad_to_multiple_of >= 1, "pad_encodings: pad_to_multiple_of must be >= 1");
  size_t longest = 0;
  for (size_t i = 0; i < encodings.size(); ++i) {
    const Encoding& e = *encodings[i];
    KILN_CHECK(e.type_ids.size() == e.ids.size() && e.attention_mask.size() == e.ids.size(), "pad_encodings: encoding ",
               i, " has vectors of unequal length (", e.ids.size(), ", ", e.type_ids.size(), ", ",
               e.attention_mask.size(), ")");
    longest = std::max(longest, e.ids.size());
  }
  const size_t t = (longest + pad_to_multiple_of - 1) / pad_to_multiple_of * pad_to_multiple_of;
  const Shape shape{static_cast<int64_t>(encodings.size()), static_cast<int64_t>(t)};
  PaddedBatch batch{empty_tensor(shape, DType::Int64, kCPU), empty_tensor(shape, DType::Int64, kCPU),
                    empty_tensor(shape, DType::Int64, kCPU)};
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* mask = batch.attention_mask.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  for (size_t i = 0; i < encodings.size(); ++i) {
    const Encoding& e = *encodings[i];
    for (size_t j = 0; j < t; ++j) {
      const bool real = j < e.ids.size();
      ids[i * t + j] = real ? e.ids[j] : pad_id;
      mask[i * t + j] = real ? e.attention_mask[j] : 0;
      types[i * t + j] = real ? e.type_ids[j] : 0;
    }
  }
  return batch;
}

PaddedBatch pad_encodings(std::span<const Encoding> encodings, int32_t pad_id, size_t pad_to_multiple_of) {
  std::vector<const Encoding*> pointers;
  pointers.reserve(encodings.size());
  for (const Encoding& e : encodings) pointers.push_back(&e);
  return pad_encodings(std::span<const Encoding* const>(pointers), pad_id, pad_to_multiple_of);
}

ClassificationBatch collate_classification(const std::vector<LabeledEncoding>& examples, int32_t pad_id,
                                           size_t pad_to_multiple_of, LabelKind kind, size_t num_labels) {
  KILN_CHECK(!examples.empty(), "collate_classification: empty batch");
  KILN_CHECK(kind != LabelKind::Auto, "collate_classification: the label kind must be resolved (pass LabeledDataset::kind)");
  KILN_CHECK(kind != LabelKind::MultiLabel || num_labels >= 1,
             "collate_classification: a multi-label batch needs num_labels >= 1");
  std::vector<const Encoding*> pointers;
  pointers.reserve(examples.size());
  for (const LabeledEncoding& e : examples) pointers.push_back(&e.encoding);
  const auto b = static_cast<int64_t>(examples.size());
  ClassificationBatch batch{pad_encodings(std::span<const Encoding* const>(pointers), pad_id, pad_to_multiple_of), {}};
  switch (kind) {
    case LabelKind::Float: {
      batch.labels = empty_tensor({b}, DType::Float32, kCPU);
      float* values = batch.labels.data_ptr<float>();
      for (size_t i = 0; i < examples.size(); ++i) values[i] = examples[i].value;
      break;
    }
    case LabelKind::MultiLabel: {
      batch.labels = empty_tensor({b, static_cast<int64_t>(num_labels)}, DType::Float32, kCPU);
      float* indicator = batch.labels.data_ptr<float>();
      std::fill(indicator, indicator + examples.size() * num_labels, 0.0f);
      for (size_t i = 0; i < examples.size(); ++i)
        for (int32_t id : examples[i].labels) {
          KILN_CHECK(id >= 0 && static_cast<size_t>(id) < num_labels, "collate_classification: example ", i,
                     " has label id ", id, ", outside [0, ", num_labels, ")");
          indicator[i * num_labels + static_cast<size_t>(id)] = 1.0f;
        }
      break;
    }
    default: {
      batch.labels = empty_tensor({b}, DType::Int64, kCPU);
      int64_t* labels = batch.labels.data_ptr<int64_t>();
      for (size_t i = 0; i < examples.size(); ++i) labels[i] = examples[i].label;
    }
  }
  return batch;
}

}  // namespace kiln::data
