// Fine-tuning data (data/finetune_data.h): SST-2 and STS-B from KILN_DATA
// (default ../shared/data; a missing file fails), the CSV parser's quoting
// rules, TSV/JSONL readers, headerless files, column detection, label sets and
// kinds (class, regression, multi-label), errors with file:line, and dynamic
// padding and collation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data/finetune_data.h"
#include "hostile_util.h"
#include "test_util.h"

namespace kiln::data {
namespace {
namespace fs = std::filesystem;

using ::kiln::testing::data_file;  // KILN_DATA/rel, an error when missing

const BertTokenizer& bert() {
  static const BertTokenizer tok = BertTokenizer::from_vocab_file(data_file("vocab/bert-base-uncased-vocab.txt"));
  return tok;
}

class TempFiles {
 public:
  TempFiles() : dir_(fs::temp_directory_path() / ("kiln_finetune_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~TempFiles() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

 private:
  fs::path dir_;
};

TEST(FinetuneData, Sst2TrainAndDev) {
  const LabeledDataset train = read_labeled_file(data_file("sst2/train.tsv"));
  EXPECT_EQ(train.size(), 67349u);
  EXPECT_EQ(train.text_column, "sentence");
  EXPECT_FALSE(train.has_pair());
  EXPECT_EQ(train.label_set, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(train.kind, LabelKind::Class);  // Auto: integer labels
  EXPECT_EQ(train.examples[0].text, "hide new secretions from the parental units");  // CRLF stripped
  EXPECT_EQ(train.examples[0].label, 0);
  EXPECT_EQ(train.examples[0].line, 2u);
  EXPECT_EQ(train.examples[2].label, 1);
  size_t positive = 0;
  for (const auto& e : train.examples) positive += e.label == 1;
  EXPECT_EQ(positive, 37569u);

  LabeledFileOptions dev_opt;
  dev_opt.label_set = train.label_set;
  const LabeledDataset dev = read_labeled_file(data_file("sst2/dev.tsv"), dev_opt);
  EXPECT_EQ(dev.size(), 872u);
  EXPECT_EQ(dev.text_column, "content");  // named differently from train's column
  EXPECT_EQ(dev.examples[0].text, "one long string of cliches .");
  size_t dev_positive = 0;
  for (const auto& e : dev.examples) dev_positive += e.label == 1;
  EXPECT_EQ(dev_positive, 444u);

  // Encode + dynamic padding of a few rows.
  const LabeledDataset head{dev.path, dev.text_column, "",
                            "label",  dev.label_set,   {dev.examples.begin(), dev.examples.begin() + 5}};
  const std::vector<LabeledEncoding> enc = encode_labeled(head, bert(), 128);
  ASSERT_EQ(enc.size(), 5u);
  size_t longest = 0;
  for (size_t i = 0; i < enc.size(); ++i) {
    EXPECT_EQ(enc[i].encoding.ids, bert().encode(head.examples[i].text).ids);
    EXPECT_EQ(enc[i].label, head.examples[i].label);
    longest = std::max(longest, enc[i].encoding.size());
  }
  const ClassificationBatch batch = collate_classification(enc, bert().pad_id(), 8);
  const int64_t t = static_cast<int64_t>((longest + 7) / 8 * 8);
  EXPECT_EQ(batch.inputs.input_ids.sizes(), (Shape{5, t}));
  EXPECT_EQ(batch.inputs.input_ids.dtype(), DType::Int64);
  EXPECT_EQ(batch.labels.sizes(), (Shape{5}));
  const auto ids = batch.inputs.input_ids.to_vector<int64_t>(), mask = batch.inputs.attention_mask.to_vector<int64_t>();
  for (size_t i = 0; i < 5; ++i)
    for (size_t j = 0; j < static_cast<size_t>(t); ++j) {
      const bool real = j < enc[i].encoding.size();
      EXPECT_EQ(ids[i * static_cast<size_t>(t) + j], real ? enc[i].encoding.ids[j] : bert().pad_id());
      EXPECT_EQ(mask[i * static_cast<size_t>(t) + j], real ? 1 : 0);
    }
  EXPECT_EQ(batch.labels.to_vector<int64_t>()[0], head.examples[0].label);
}

TEST(FinetuneData, CsvQuotingRules) {
  const Table t = parse_csv(
      "text,label\r\n"
      "plain,0\r\n"
      "\"with, comma\",1\n"
      "\"doubled \"\"quotes\"\"\",0\n"
      "\"embedded\nnew line\",1\n"
      "\n"  // blank line skipped
      "\"\",0\n"
      "bare \"quote inside,1\n"
      "last,\"\"",
      "mem.csv");
  ASSERT_EQ(t.columns, (std::vector<std::string>{"text", "label"}));
  const std::vector<std::vector<std::string>> want = {{"plain", "0"},
                                                      {"with, comma", "1"},
                                                      {"doubled \"quotes\"", "0"},
                                                      {"embedded\nnew line", "1"},
                                                      {"", "0"},
                                                      {"bare \"quote inside", "1"},
                                                      {"last", ""}};
  EXPECT_EQ(t.rows, want);
  EXPECT_EQ(t.row_lines, (std::vector<size_t>{2, 3, 4, 5, 8, 9, 10}));
  const Table trailing = parse_csv("a,b\n1,\n", "x.csv");
  EXPECT_EQ(trailing.rows, (std::vector<std::vector<std::string>>{{"1", ""}}));

  EXPECT_KILN_ERROR(parse_csv("a,b\n1,2\n\"open,3\n4,5\n", "bad.csv"), "bad.csv:3", "unterminated quoted field");
  EXPECT_KILN_ERROR(parse_csv("a,b\n1,2\n3\n", "bad.csv"), "bad.csv:3", "expected 2", "got 1");
  EXPECT_KILN_ERROR(parse_csv("a,b\n\"x\"y,2\n", "bad.csv"), "bad.csv:2", "after a closing quote");
  EXPECT_KILN_ERROR(parse_csv("a,b\n\"multi\nline\",2,3\n", "bad.csv"), "bad.csv:2", "got 3");
  EXPECT_KILN_ERROR(parse_csv("", "empty.csv"), "empty.csv", "empty file");
}

TEST(FinetuneData, CsvJsonlAndPairs) {
  TempFiles files;
  const std::string csv = files.write("pairs.csv",
                                      "\xEF\xBB\xBF"
                                      "idx,sentence1,sentence2,label\n"
                                      "0,\"A man, sitting.\",A person sits.,entailment\n"
                                      "1,It rains.,\"It's \"\"dry\"\".\",contradiction\n"
                                      "2,x,y,neutral\n");
  const LabeledDataset ds = read_labeled_file(csv);
  EXPECT_EQ(ds.text_column, "sentence1");
  EXPECT_EQ(ds.pair_column, "sentence2");
  EXPECT_EQ(ds.label_set, (std::vector<std::string>{"contradiction", "entailment", "neutral"}));  // sorted
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds.examples[0].text, "A man, sitting.");
  EXPECT_EQ(ds.examples[1].text_pair, "It's \"dry\".");
  EXPECT_EQ(ds.examples[0].label, 1);
  EXPECT_EQ(ds.examples[1].label, 0);

  LabeledFileOptions given;
  given.label_set = {"entailment", "neutral", "contradiction"};
  EXPECT_EQ(read_labeled_file(csv, given).examples[1].label, 2);
  given.label_set = {"entailment", "contradiction"};
  EXPECT_KILN_ERROR(read_labeled_file(csv, given), "pairs.csv:4", "label \"neutral\" is not in the label set");
  LabeledFileOptions no_pair;
  no_pair.pair_column = "";
  EXPECT_FALSE(read_labeled_file(csv, no_pair).has_pair());

  const std::string jsonl = files.write("qnli.jsonl",
                                        "{\"question\": \"Who?\", \"sentence\": \"Me.\", \"label\": 1}\n"
                                        "\n"
                                        "{\"label\": 0, \"sentence\": \"You.\", \"question\": \"Who else?\", "
                                        "\"extra\": [1]}\n"
                                        "{\"question\": \"Why?\", \"sentence\": \"So.\", \"label\": \"2\"}\n");
  const LabeledDataset q = read_labeled_file(jsonl);
  EXPECT_EQ(q.text_column, "question");
  EXPECT_EQ(q.pair_column, "sentence");
  EXPECT_EQ(q.label_set, (std::vector<std::string>{"0", "1", "2"}));  // integers keep their value
  EXPECT_EQ(q.examples[1].text, "Who else?");
  EXPECT_EQ(q.examples[1].line, 3u);
  EXPECT_EQ(q.examples[0].label, 1);
  EXPECT_EQ(q.examples[2].label, 2);
  const auto enc = encode_labeled(q, bert(), 0);
  EXPECT_EQ(enc[0].encoding.ids, bert().encode("Who?", std::string_view("Me.")).ids);
  EXPECT_EQ(enc[0].encoding.type_ids.back(), 1);

  const std::string missing_key = files.write("bad.jsonl", "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\"}\n");
  EXPECT_KILN_ERROR(read_labeled_file(missing_key), "bad.jsonl:2", "missing key \"label\"");
  const std::string bad_json = files.write("bad2.jsonl", "{\"text\": \"a\", \"label\": 0}\n{\"text\": \n");
  EXPECT_KILN_ERROR(read_labeled_file(bad_json), "bad2.jsonl:2", "not valid JSON");
  const std::string nested = files.write("bad3.jsonl", "{\"text\": {\"a\": 1}, \"label\": 0}\n");
  EXPECT_KILN_ERROR(read_labeled_file(nested), "bad3.jsonl:1", "not a string or a number");
}

TEST(FinetuneData, TsvErrorsNameFileAndLine) {
  TempFiles files;
  EXPECT_KILN_ERROR(read_labeled_file("/nonexistent/train.tsv"), "/nonexistent/train.tsv", "does not exist");
  const std::string ragged = files.write("ragged.tsv", "sentence\tlabel\na\t0\nb\t1\textra\n");
  EXPECT_KILN_ERROR(read_labeled_file(ragged), "ragged.tsv:3", "expected 2 tab-separated fields, got 3");
  const std::string no_label = files.write("nolabel.tsv", "sentence\tscore\na\t0\n");
  EXPECT_KILN_ERROR(read_labeled_file(no_label), "nolabel.tsv:1", "no label column \"label\"", "sentence, score");
  LabeledFileOptions unlabeled;
  unlabeled.label_column = "";
  const LabeledDataset u = read_labeled_file(no_label, unlabeled);
  EXPECT_EQ(u.text_column, "sentence");
  EXPECT_EQ(u.examples[0].label, -1);
  EXPECT_TRUE(u.label_set.empty());
  LabeledFileOptions wrong_text;
  wrong_text.text_column = "review";
  EXPECT_KILN_ERROR(read_labeled_file(no_label, wrong_text), "no text column \"review\"");
  const std::string empty_label = files.write("empty_label.tsv", "sentence\tlabel\na\t0\nb\t \n");
  EXPECT_KILN_ERROR(read_labeled_file(empty_label), "empty_label.tsv:3", "empty label");
  const std::string odd = files.write("data.txt", "a\tb\n");
  EXPECT_KILN_ERROR(read_labeled_file(odd), "data.txt", "extension");
  LabeledFileOptions as_tsv;
  as_tsv.format = TableFormat::Tsv;
  as_tsv.label_column = "b";
  EXPECT_EQ(read_labeled_file(odd, as_tsv).text_column, "a");  // first non-label column
  const std::string quotes = files.write("mnli.tsv", "sentence\tlabel\nHe said \"hi\tx\n");
  const LabeledDataset q = read_labeled_file(quotes);  // TSV has no quoting: the quote is text
  EXPECT_EQ(q.examples[0].text, "He said \"hi");
  EXPECT_EQ(q.label_set, (std::vector<std::string>{"x"}));
  LabeledFileOptions strict;
  strict.label_set = {"0", "1"};
  const std::string three = files.write("three.tsv", "sentence\tlabel\na\t0\nb\t2\n");
  EXPECT_KILN_ERROR(read_labeled_file(three, strict), "three.tsv:3", "label \"2\" is not in the label set {0, 1}");
  // transformers' default names take integer labels as their ids (a PEFT adapter's head, run_glue's models)
  LabeledFileOptions defaults;
  defaults.label_set = {"LABEL_0", "LABEL_1", "LABEL_2"};
  const LabeledDataset d = read_labeled_file(three, defaults);
  EXPECT_EQ(d.examples[0].label, 0);
  EXPECT_EQ(d.examples[1].label, 2);
  defaults.label_set = {"LABEL_0", "LABEL_1"};
  EXPECT_KILN_ERROR(read_labeled_file(three, defaults), "three.tsv:3", "label \"2\" is not in the label set");
}

// Note [Bounded input]: a FIFO blocked read_labeled_file in open() until some writer came.
TEST(FinetuneData, HostileInputFiles) {
  kiln::testing::ScratchPath dir("finetune");
  for (const char* name : {"train.tsv", "train.csv", "train.jsonl"}) {
    SCOPED_TRACE(name);
    const std::string fifo = dir.fifo(name);
    EXPECT_FIFO_REFUSED(read_labeled_file(fifo));
  }
  const std::string as_dir = (dir.path() / "dir.tsv").string();
  fs::create_directories(as_dir);
  EXPECT_KILN_ERROR(read_labeled_file(as_dir), "dir.tsv", "is not a regular file (a directory)");
  // A JSONL line is parsed with the depth limit (the parse stops there) and no duplicate keys.
  const std::string deep = dir.write("deep.jsonl", "{\"text\": \"a\", \"label\": 0}\n{\"text\": " +
                                                       std::string(100000, '[') + "}\n");
  EXPECT_KILN_ERROR(read_labeled_file(deep), "deep.jsonl:2: JSON nested deeper than 64 levels");
  const std::string dup = dir.write("dup.jsonl", "{\"text\": \"a\", \"label\": 0, \"label\": 1}\n");
  EXPECT_KILN_ERROR(read_labeled_file(dup), "dup.jsonl:1: duplicate key 'label'");
}

TEST(FinetuneData, PadEncodingsChecksItsInput) {
  std::vector<Encoding> none;
  EXPECT_KILN_ERROR(pad_encodings(none, 0), "empty batch");
  std::vector<Encoding> bad(1);
  bad[0].ids = {101, 102};
  bad[0].type_ids = {0};
  bad[0].attention_mask = {1, 1};
  EXPECT_KILN_ERROR(pad_encodings(bad, 0), "unequal length");
  bad[0].type_ids = {0, 0};
  EXPECT_KILN_ERROR(pad_encodings(bad, 0, 0), "pad_to_multiple_of");
  const PaddedBatch b = pad_encodings(bad, 0, 1);
  EXPECT_EQ(b.input_ids.to_vector<int64_t>(), (std::vector<int64_t>{101, 102}));
}

// STS-B's GLUE files: no header, 10 tab-separated columns, the sentences in 8
// and 9, the score in 10.
LabeledFileOptions stsb_options() {
  LabeledFileOptions o;
  o.no_header = true;
  o.text_column.emplace("8");
  o.pair_column.emplace("9");
  o.label_column = "10";
  return o;
}

TEST(FinetuneData, StsbHeaderlessRegression) {
  const LabeledFileOptions o = stsb_options();
  const LabeledDataset train = read_labeled_file(data_file("stsb/train.tsv"), o);
  EXPECT_EQ(train.size(), 4249u);
  EXPECT_EQ(train.kind, LabelKind::Float);  // Auto: "5.000" is a float label
  EXPECT_TRUE(train.label_set.empty());
  EXPECT_TRUE(train.has_pair());
  EXPECT_EQ(train.examples[0].line, 1u);  // no header: the first line is a row
  EXPECT_EQ(train.examples[0].text, "A plane is taking off.");
  EXPECT_EQ(train.examples[0].text_pair, "An air plane is taking off.");
  EXPECT_EQ(train.examples[0].value, 5.0);
  EXPECT_EQ(train.examples[0].label, -1);
  EXPECT_EQ(train.examples[1].value, 3.8);
  EXPECT_EQ(train.examples.back().value, 0.0);  // "0": an integer among floats
  EXPECT_EQ(train.examples.back().text, "Putin spokesman: Doping charges appear unfounded");
  EXPECT_EQ(train.examples.back().line, 4249u);
  double lo = 5, hi = 0;
  for (const LabeledExample& e : train.examples) {
    lo = std::min(lo, e.value);
    hi = std::max(hi, e.value);
  }
  EXPECT_EQ(lo, 0.0);
  EXPECT_EQ(hi, 5.0);

  const LabeledDataset dev = read_labeled_file(data_file("stsb/dev.tsv"), o);
  EXPECT_EQ(dev.size(), 1500u);
  EXPECT_EQ(dev.kind, LabelKind::Float);
  EXPECT_EQ(dev.examples[0].value, 4.25);
  EXPECT_EQ(dev.examples[0].text, "A man is playing the cello.");
  EXPECT_EQ(dev.examples.back().value, 0.0);

  LabeledFileOptions as_float = o;
  as_float.label_kind = LabelKind::Float;
  EXPECT_EQ(read_labeled_file(data_file("stsb/dev.tsv"), as_float).examples[1].value, 2.2);
  LabeledFileOptions as_class = o;  // the same column as classes: the distinct strings
  as_class.label_kind = LabelKind::Class;
  const LabeledDataset classes = read_labeled_file(data_file("stsb/dev.tsv"), as_class);
  EXPECT_EQ(classes.kind, LabelKind::Class);
  EXPECT_EQ(classes.label_set[classes.examples[0].label], "4.250");

  // Encoding and collation carry the values: labels (B) float32.
  const LabeledDataset head{dev.path,      dev.text_column, dev.pair_column, dev.label_column, {},
                            {dev.examples.begin(), dev.examples.begin() + 3}, LabelKind::Float};
  const std::vector<LabeledEncoding> enc = encode_labeled(head, bert(), 64);
  EXPECT_EQ(enc[0].value, 4.25f);
  EXPECT_EQ(enc[0].encoding.ids, bert().encode(head.examples[0].text, std::string_view(head.examples[0].text_pair)).ids);
  const ClassificationBatch b = collate_classification(enc, bert().pad_id(), 1, LabelKind::Float);
  EXPECT_EQ(b.labels.dtype(), DType::Float32);
  EXPECT_EQ(b.labels.sizes(), (Shape{3}));
  const std::vector<float> values = b.labels.to_vector<float>();
  EXPECT_EQ(values, (std::vector<float>{static_cast<float>(head.examples[0].value),
                                        static_cast<float>(head.examples[1].value),
                                        static_cast<float>(head.examples[2].value)}));
}

TEST(FinetuneData, HeaderlessAndLabelKindErrors) {
  TempFiles files;
  const std::string stsb = data_file("stsb/train.tsv");
  LabeledFileOptions o;
  o.no_header = true;
  EXPECT_KILN_ERROR(read_labeled_file(stsb, o), "stsb/train.tsv", "needs --text-column", "--no-header");
  o.text_column = "8";
  o.label_column = "11";
  EXPECT_KILN_ERROR(read_labeled_file(stsb, o), "stsb/train.tsv", "label column 11 is out of range: the file has 10 columns");
  o.label_column = "label";
  EXPECT_KILN_ERROR(read_labeled_file(stsb, o), "stsb/train.tsv", "label column \"label\" is not a column index",
                    "numbered 1 to 10");
  o.label_column = "0";
  EXPECT_KILN_ERROR(read_labeled_file(stsb, o), "label column \"0\" is not a column index");
  o.label_column = "10";
  o.pair_column = "12";
  EXPECT_KILN_ERROR(read_labeled_file(stsb, o), "text-pair column 12 is out of range: the file has 10 columns");

  // Headerless CSV; JSONL cannot be headerless.
  const std::string csv = files.write("nohead.csv", "\"a, b\",1.5\nc,2\n");
  LabeledFileOptions c;
  c.no_header = true;
  c.text_column = "1";
  c.label_column = "2";
  const LabeledDataset cd = read_labeled_file(csv, c);
  ASSERT_EQ(cd.size(), 2u);
  EXPECT_EQ(cd.examples[0].text, "a, b");
  EXPECT_EQ(cd.kind, LabelKind::Float);
  EXPECT_EQ(cd.examples[1].value, 2.0);
  EXPECT_FALSE(cd.has_pair());  // no detection without a header
  EXPECT_EQ(read_table(csv, TableFormat::Auto, true).columns, (std::vector<std::string>{"1", "2"}));
  const std::string jsonl = files.write("x.jsonl", "{\"text\": \"a\", \"label\": 1}\n");
  EXPECT_KILN_ERROR(read_labeled_file(jsonl, c), "x.jsonl", "--no-header is for TSV and CSV files");

  // Regression labels that are not numbers.
  const std::string scores = files.write("scores.tsv", "sentence\tlabel\na\t1.5\nb\tabc\nc\t1e999\n");
  LabeledFileOptions f;
  f.label_kind = LabelKind::Float;
  EXPECT_KILN_ERROR(read_labeled_file(scores, f), "scores.tsv:3: label 'abc' is not a number");
  EXPECT_EQ(read_labeled_file(scores).kind, LabelKind::Class);  // Auto: not all numbers
  const std::string big = files.write("big.tsv", "sentence\tlabel\na\t1.5\nc\t1e999\n");
  EXPECT_KILN_ERROR(read_labeled_file(big, f), "big.tsv:3: label '1e999' is not a number");
  const std::string odd = files.write("odd.tsv", "sentence\tlabel\na\t+2.5\nb\t-1e-3\nc\t 7 \nd\tnan\n");
  EXPECT_KILN_ERROR(read_labeled_file(odd, f), "odd.tsv:5: label 'nan' is not a number");
  const std::string fine = files.write("fine.tsv", "sentence\tlabel\na\t+2.5\nb\t-1e-3\nc\t 7 \n");
  const LabeledDataset fd = read_labeled_file(fine);
  EXPECT_EQ(fd.kind, LabelKind::Float);
  EXPECT_EQ(fd.examples[0].value, 2.5);
  EXPECT_EQ(fd.examples[1].value, -0.001);
  EXPECT_EQ(fd.examples[2].value, 7.0);
  const std::string plus = files.write("plus.tsv", "sentence\tlabel\na\t+-1.5\n");
  EXPECT_KILN_ERROR(read_labeled_file(plus, f), "plus.tsv:2: label '+-1.5' is not a number");
  LabeledFileOptions given;  // a given label set means classes
  given.label_set = {"1.5", "-1e-3", "7", "+2.5"};
  EXPECT_EQ(read_labeled_file(fine, given).kind, LabelKind::Class);
  EXPECT_EQ(read_labeled_file(fine, given).examples[0].label, 3);

  // Empty text in a labeled file, in the text or the pair column.
  const std::string empty_text = files.write("empty_text.tsv", "sentence\tlabel\na\t0\n \t1\n");
  EXPECT_KILN_ERROR(read_labeled_file(empty_text), "empty_text.tsv:3: empty text");
  const std::string empty_pair = files.write("empty_pair.csv", "sentence1,sentence2,label\na,b,0\nc,\"  \",1\n");
  EXPECT_KILN_ERROR(read_labeled_file(empty_pair), "empty_pair.csv:3: empty text", "sentence2");
  LabeledFileOptions unlabeled;  // unlabeled files (predict) keep such rows
  unlabeled.label_column = "";
  EXPECT_EQ(read_labeled_file(empty_text, unlabeled).size(), 2u);
  EXPECT_EQ(read_labeled_file(empty_text, unlabeled).kind, LabelKind::Class);
}

TEST(FinetuneData, MultiLabelFiles) {
  TempFiles files;
  LabeledFileOptions m;
  m.label_kind = LabelKind::MultiLabel;
  const std::string tsv = files.write("multi.tsv",
                                      "text\tlabel\n"
                                      "a\tsports, politics\n"
                                      "b\t\n"
                                      "c\t politics \n"
                                      "d\tarts,sports,arts\n");
  const LabeledDataset ds = read_labeled_file(tsv, m);
  EXPECT_EQ(ds.kind, LabelKind::MultiLabel);
  EXPECT_EQ(ds.label_set, (std::vector<std::string>{"arts", "politics", "sports"}));
  ASSERT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds.examples[0].labels, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(ds.examples[1].labels.empty());  // an empty field: no label
  EXPECT_EQ(ds.examples[2].labels, (std::vector<int32_t>{1}));
  EXPECT_EQ(ds.examples[3].labels, (std::vector<int32_t>{0, 2}));  // ascending, each once
  EXPECT_EQ(ds.examples[0].label, -1);

  LabeledFileOptions given = m;
  given.label_set = {"sports", "politics", "arts", "science"};
  const LabeledDataset g = read_labeled_file(tsv, given);
  EXPECT_EQ(g.label_set, given.label_set);
  EXPECT_EQ(g.examples[0].labels, (std::vector<int32_t>{0, 1}));
  given.label_set = {"sports", "politics"};
  EXPECT_KILN_ERROR(read_labeled_file(tsv, given), "multi.tsv:5: label \"arts\" is not in the label set");
  const std::string gap = files.write("gap.csv", "text,label\na,\"x,,y\"\n");
  EXPECT_KILN_ERROR(read_labeled_file(gap, m), "gap.csv:2: empty label in the list 'x,,y'");

  const std::string jsonl = files.write("multi.jsonl",
                                        "{\"text\": \"a\", \"label\": [\"x\", \"y\"]}\n"
                                        "{\"text\": \"b\", \"label\": []}\n"
                                        "{\"text\": \"c\", \"label\": \"y, z\"}\n"
                                        "{\"text\": \"d\", \"label\": null}\n"
                                        "{\"text\": \"e\", \"label\": [3, \"x,w\"]}\n"
                                        "{\"text\": \"f\", \"label\": \"\"}\n");
  const LabeledDataset j = read_labeled_file(jsonl, m);
  EXPECT_EQ(j.label_set, (std::vector<std::string>{"3", "x", "x,w", "y", "z"}));  // array items are not split
  ASSERT_EQ(j.size(), 6u);
  EXPECT_EQ(j.examples[0].labels, (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(j.examples[1].labels.empty());
  EXPECT_EQ(j.examples[2].labels, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(j.examples[3].labels.empty());
  EXPECT_EQ(j.examples[4].labels, (std::vector<int32_t>{0, 2}));
  EXPECT_TRUE(j.examples[5].labels.empty());
  const std::string nested = files.write("nested.jsonl", "{\"text\": \"a\", \"label\": [[\"x\"]]}\n");
  EXPECT_KILN_ERROR(read_labeled_file(nested, m), "nested.jsonl:1: an element of the array \"label\"");
  const std::string blank = files.write("blank.jsonl", "{\"text\": \"a\", \"label\": [\" \"]}\n");
  EXPECT_KILN_ERROR(read_labeled_file(blank, m), "blank.jsonl:1: empty label");
  EXPECT_KILN_ERROR(read_labeled_file(jsonl), "multi.jsonl:1", "not a string or a number",
                    "multi-label");  // an array without MultiLabel
  LabeledFileOptions text_array = m;  // only the label column may hold an array
  const std::string text_arr = files.write("text_array.jsonl", "{\"text\": [\"a\"], \"label\": \"x\"}\n");
  EXPECT_KILN_ERROR(read_labeled_file(text_arr, text_array), "text_array.jsonl:1", "field \"text\"");

  // Collation: (B, L) float32 indicators.
  const std::vector<LabeledEncoding> enc = encode_labeled(ds, bert(), 0);
  EXPECT_EQ(enc[3].labels, (std::vector<int32_t>{0, 2}));
  const ClassificationBatch b = collate_classification(enc, bert().pad_id(), 1, LabelKind::MultiLabel, 3);
  EXPECT_EQ(b.labels.dtype(), DType::Float32);
  EXPECT_EQ(b.labels.sizes(), (Shape{4, 3}));
  EXPECT_EQ(b.labels.to_vector<float>(), (std::vector<float>{0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1}));
  const ClassificationBatch wider = collate_classification(enc, bert().pad_id(), 1, LabelKind::MultiLabel, 4);
  EXPECT_EQ(wider.labels.sizes(), (Shape{4, 4}));
  EXPECT_KILN_ERROR(collate_classification(enc, 0, 1, LabelKind::MultiLabel, 2), "example 0 has label id 2");
  EXPECT_KILN_ERROR(collate_classification(enc, 0, 1, LabelKind::MultiLabel, 0), "num_labels >= 1");
  EXPECT_KILN_ERROR(collate_classification(enc, 0, 1, LabelKind::Auto), "label kind must be resolved");
  const ClassificationBatch classes = collate_classification(enc, bert().pad_id());
  EXPECT_EQ(classes.labels.dtype(), DType::Int64);
  EXPECT_EQ(classes.labels.sizes(), (Shape{4}));
}

}  // namespace
}  // namespace kiln::data
