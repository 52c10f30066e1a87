// Labeled TSV / CSV / JSONL readers and dynamic padding (data/finetune_data.h).
#include "data/finetune_data.h"

#include <algorithm>
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

Table parse_tsv(const std::string& text, const std::string& name) {
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
      t.columns = std::move(fields);
      header = false;
      return;
    }
    check_width(t, fields.size(), number, name, "tab-separated");
    t.rows.push_back(std::move(fields));
    t.row_lines.push_back(number);
  });
  KILN_CHECK(!header, name, ": empty file (no header line)");
  return t;
}

std::string json_field(const nlohmann::ordered_json& v, const std::string& key, const std::string& name, size_t line) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_null()) return {};
  fail(name, ":", line, ": field \"", key, "\" is not a string or a number");
}

Table parse_jsonl(const std::string& text, const std::string& name) {
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
    for (const std::string& column : t.columns) {
      const auto it = object.find(column);
      KILN_CHECK(it != object.end(), name, ":", number, ": missing key \"", column, "\" (present in the first row)");
      fields.push_back(json_field(*it, column, name, number));
    }
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

const std::vector<std::pair<std::string, std::string>>& known_pairs() {
  static const std::vector<std::pair<std::string, std::string>> pairs = {{"sentence1", "sentence2"},
                                                                         {"question1", "question2"},
                                                                         {"premise", "hypothesis"},
                                                                         {"question", "sentence"},
                                                                         {"text_a", "text_b"}};
  return pairs;
}

}  // namespace

Table parse_csv(const std::string& text, const std::string& name) {
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
    if (header) {
      t.columns = std::move(record);
      header = false;
    } else {
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
  KILN_CHECK(!header, name, ": empty file (no header row)");
  return t;
}

Table read_table(const std::string& path, TableFormat format) {
  const TableFormat f = format_of(path, format);
  const std::string text = read_file(path);
  switch (f) {
    case TableFormat::Tsv:
      return parse_tsv(text, path);
    case TableFormat::Csv:
      return parse_csv(text, path);
    default:
      return parse_jsonl(text, path);
  }
}

LabeledDataset read_labeled_file(const std::string& path, const LabeledFileOptions& options) {
  const Table table = read_table(path, options.format);
  const auto column_index = [&](const std::string& name) -> std::optional<size_t> {
    const auto it = std::find(table.columns.begin(), table.columns.end(), name);
    if (it == table.columns.end()) return std::nullopt;
    return static_cast<size_t>(it - table.columns.begin());
  };
  const auto require = [&](const std::string& name, const char* role) {
    const auto index = column_index(name);
    if (!index) {
      std::string have;
      for (const std::string& c : table.columns) have += (have.empty() ? "" : ", ") + c;
      fail("read_labeled_file: ", path, ":1: no ", role, " column \"", name, "\" (columns: ", have, ")");
    }
    return *index;
  };

  LabeledDataset ds;
  ds.path = path;
  ds.label_column = options.label_column;
  if (options.text_column) {
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

  std::vector<std::string> labels;
  ds.examples.reserve(table.rows.size());
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    LabeledExample ex;
    ex.text = row[text_index];
    if (pair_index != kAbsent) ex.text_pair = row[pair_index];
    ex.line = table.row_lines[r];
    if (label_index != kAbsent) {
      labels.push_back(trim(row[label_index]));
      KILN_CHECK(!labels.back().empty(), "read_labeled_file: ", path, ":", ex.line, ": empty label");
    }
    ds.examples.push_back(std::move(ex));
  }
  if (label_index == kAbsent) return ds;

  std::map<std::string, int32_t> ids;
  if (!options.label_set.empty()) {
    ds.label_set = options.label_set;
    for (size_t i = 0; i < ds.label_set.size(); ++i) ids.emplace(trim(ds.label_set[i]), static_cast<int32_t>(i));
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
    if (it == ids.end()) {
      std::string allowed;
      for (const std::string& l : ds.label_set) allowed += (allowed.empty() ? "" : ", ") + l;
      fail("read_labeled_file: ", path, ":", ds.examples[r].line, ": label \"", labels[r],
           "\" is not in the label set {", allowed, "}");
    }
    ds.examples[r].label = it->second;
  }
  return ds;
}

// ---- encoding and padding --------------------------------------------------

std::vector<LabeledEncoding> encode_labeled(const LabeledDataset& dataset, const BertTokenizer& tokenizer,
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
  for (size_t i = 0; i < out.size(); ++i) out[i] = {std::move(encodings[i]), dataset.examples[i].label};
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
                                           size_t pad_to_multiple_of) {
  KILN_CHECK(!examples.empty(), "collate_classification: empty batch");
  std::vector<const Encoding*> pointers;
  pointers.reserve(examples.size());
  for (const LabeledEncoding& e : examples) pointers.push_back(&e.encoding);
  ClassificationBatch batch{pad_encodings(std::span<const Encoding* const>(pointers), pad_id, pad_to_multiple_of),
                            empty_tensor({static_cast<int64_t>(examples.size())}, DType::Int64, kCPU)};
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (size_t i = 0; i < examples.size(); ++i) labels[i] = examples[i].label;
  return batch;
}

}  // namespace kiln::data
