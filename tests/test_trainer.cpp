// The training loop (train/trainer.h) with its two tasks, in-process:
// exact resume (also past a damaged checkpoint and an interrupted re-save),
// learning on the synthetic corpus, fine-tuning a small classifier, batches
// without masked tokens, and the errors for bad runs and bad data (an output
// directory at the input model, another vocabulary on resume).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/classification_task.h"
#include "train/metric_log.h"
#include "train/mlm_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using train::TrainingArguments;

using testing::read_bytes;
fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("trainer", name); }

// A small synthetic pretraining run: L2 H128 demo model, short sequences.
TrainingArguments synthetic_args(const fs::path& out) {
  TrainingArguments a;
  a.output_dir = out.string();
  a.synthetic_documents = 300;
  a.max_seq_length = 32;
  a.batch_size = 8;
  a.lr = 1e-3;
  a.warmup_steps = 2;
  a.max_steps = 6;
  a.logging_steps = 1;
  a.save_steps = 3;
  a.workers = 2;
  a.seed = 7;
  return a;
}

train::TrainResult run_mlm(const TrainingArguments& a) {
  std::ostringstream log;
  train::MlmTask task(a, log);
  return train::train(a, task, log);
}

// Note [Exact resume]: 2N steps straight == N steps, a new process-like
// restart from checkpoint N, N more steps; with different worker counts.
void check_exact_resume(const std::string& amp) {
  const fs::path straight = fresh_dir("straight" + amp), resumed = fresh_dir("resumed" + amp);
  TrainingArguments a = synthetic_args(straight);
  a.amp = amp;
  const train::TrainResult full = run_mlm(a);
  ASSERT_TRUE(full.finished);
  ASSERT_EQ(full.step, 6);

  TrainingArguments b = synthetic_args(resumed);
  b.amp = amp;
  b.workers = 0;
  b.stop_after_steps = 3;
  const train::TrainResult first = run_mlm(b);
  EXPECT_FALSE(first.finished);
  EXPECT_EQ(first.step, 3);
  EXPECT_FALSE(fs::exists(resumed / "model.safetensors"));  // no final model from a stopped run
  b.stop_after_steps = 0;
  b.resume = true;
  b.workers = 1;
  const train::TrainResult second = run_mlm(b);
  EXPECT_TRUE(second.finished);
  EXPECT_EQ(second.step, 6);

  const auto s = train::read_metrics_jsonl(straight / "metrics.jsonl");
  const auto r = train::read_metrics_jsonl(resumed / "metrics.jsonl");
  ASSERT_EQ(s.at("loss").values.size(), 6u);
  ASSERT_EQ(r.at("loss").values.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(s.at("loss").values[i], r.at("loss").values[i]) << "step " << i + 1;  // bitwise
    EXPECT_EQ(s.at("lr").values[i], r.at("lr").values[i]) << "step " << i + 1;
  }
  EXPECT_EQ(read_bytes(straight / "model.safetensors"), read_bytes(resumed / "model.safetensors"));
  EXPECT_EQ(read_bytes(straight / "checkpoint-6" / "optimizer.safetensors"),
            read_bytes(resumed / "checkpoint-6" / "optimizer.safetensors"));
  EXPECT_EQ(full.eval.at("mlm_accuracy"), second.eval.at("mlm_accuracy"));
  // the final directory is a complete Hugging Face model directory
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "training.svg"})
    EXPECT_TRUE(fs::exists(resumed / f)) << f;
  auto model = nn::from_pretrained<nn::BertForMaskedLM>(resumed.string());
  const std::string vocab = read_bytes(resumed / "vocab.txt");
  EXPECT_EQ(model->bert->config.vocab_size, std::count(vocab.begin(), vocab.end(), '\n'));
  if (amp == "fp16") {  // the loss scale is part of the state
    EXPECT_EQ(s.at("loss_scale").values, r.at("loss_scale").values);
    TrainingArguments other = b;
    other.amp = "none";
    EXPECT_KILN_ERROR(run_mlm(other), "was written with --amp fp16");
  }
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

TEST(Trainer, ResumeIsBitwiseExact) { check_exact_resume("none"); }
TEST(Trainer, ResumeIsBitwiseExactWithLossScaling) { check_exact_resume("fp16"); }

TEST(Trainer, SyntheticPretrainingBeatsTheUnigramBaseline) {
  const fs::path out = fresh_dir("learn");
  TrainingArguments a = synthetic_args(out);
  a.synthetic_documents = 2000;
  a.batch_size = 16;
  a.max_steps = 250;
  a.lr = 2e-3;
  a.warmup_steps = 10;
  a.logging_steps = 50;
  a.save_steps = 0;
  std::ostringstream log;
  train::MlmTask task(a, log);
  const train::TrainResult r = train::train(a, task, log);
  ASSERT_TRUE(r.finished) << log.str();
  // Context makes masked tokens far more predictable than unigram frequency
  // (Note [Synthetic language]); 250 small steps already clear the baseline
  // (0.13 at this seed) by a wide margin.
  std::printf("synthetic MLM accuracy %.4f, unigram baseline %.4f\n", r.eval.at("mlm_accuracy"), task.unigram_baseline());
  EXPECT_GT(r.eval.at("mlm_accuracy"), task.unigram_baseline() + 0.07) << log.str();
  const auto m = train::read_metrics_jsonl(out / "metrics.jsonl");
  EXPECT_LT(m.at("loss").values.back(), m.at("loss").values.front());
  fs::remove_all(out);
}

TEST(Trainer, RefusesToMixRunsAndChecksResume) {
  const fs::path out = fresh_dir("refuse");
  TrainingArguments a = synthetic_args(out);
  a.max_steps = 2;
  a.save_steps = 0;
  run_mlm(a);
  const std::string before = read_bytes(out / "model.safetensors");
  EXPECT_KILN_ERROR(run_mlm(a), "already holds a training run");  // without --resume
  EXPECT_EQ(read_bytes(out / "model.safetensors"), before);       // nothing lost

  TrainingArguments other = a;
  other.resume = true;
  other.max_steps = 4;  // another schedule
  EXPECT_KILN_ERROR(run_mlm(other), "spans 2 steps");

  // a checkpoint of another model shape
  const fs::path cfg = out / "bigger.json";
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = nn::load_config(out.string()).vocab_size;
  c.hidden_size = 64;
  c.intermediate_size = 256;
  c.max_position_embeddings = 128;
  c.to_json_file(cfg.string());
  TrainingArguments shape = a;
  shape.resume = true;
  shape.config = cfg.string();
  EXPECT_KILN_ERROR(run_mlm(shape), "another model config: hidden_size is 128 there and 64 here");

  TrainingArguments none = synthetic_args(fresh_dir("none"));
  none.resume = true;
  EXPECT_KILN_ERROR(run_mlm(none), "no checkpoint");
  fs::remove_all(out);
}

// Flips one byte near the end of a file (inside the last tensor of a safetensors file).
void flip_last_bytes(const fs::path& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-3, std::ios::end);
  const auto at = f.tellg();
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(at);
  f.write(&c, 1);
}

// --resume recovers a checkpoint an interrupted re-save left aside (Note
// [Atomic checkpoints]) and skips one that fails its manifest (Note
// [Checkpoint manifest]), and the run still ends bitwise where a straight
// run does.
TEST(Trainer, ResumeRecoversAnAsideCopyAndSkipsADamagedCheckpoint) {
  const fs::path straight = fresh_dir("skip_straight"), resumed = fresh_dir("skip_resumed");
  TrainingArguments a = synthetic_args(straight);
  a.save_steps = 2;
  a.workers = 0;
  ASSERT_TRUE(run_mlm(a).finished);

  TrainingArguments b = synthetic_args(resumed);
  b.save_steps = 2;
  b.workers = 0;
  b.stop_after_steps = 4;
  EXPECT_EQ(run_mlm(b).step, 4);
  // killed between the two renames of a re-save of step 4
  fs::rename(resumed / "checkpoint-4", resumed / ".checkpoint-4.aside");
  b.resume = true;
  b.stop_after_steps = 1;
  {
    std::ostringstream log;
    train::MlmTask task(b, log);
    EXPECT_EQ(train::train(b, task, log).step, 5) << log.str();
    EXPECT_NE(log.str().find("recovered " + (resumed / "checkpoint-4").string()), std::string::npos) << log.str();
    EXPECT_NE(log.str().find("resuming from " + (resumed / "checkpoint-4").string() + " at step 4"),
              std::string::npos)
        << log.str();
  }
  flip_last_bytes(resumed / "checkpoint-5" / "model.safetensors");
  b.stop_after_steps = 0;
  std::ostringstream log;
  train::MlmTask task(b, log);
  const train::TrainResult r = train::train(b, task, log);
  EXPECT_TRUE(r.finished);
  EXPECT_NE(log.str().find("skipping checkpoint-5: "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("model.safetensors is damaged"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("resuming from " + (resumed / "checkpoint-4").string()), std::string::npos) << log.str();
  EXPECT_EQ(read_bytes(straight / "model.safetensors"), read_bytes(resumed / "model.safetensors"));
  EXPECT_EQ(read_bytes(straight / "checkpoint-6" / "optimizer.safetensors"),
            read_bytes(resumed / "checkpoint-6" / "optimizer.safetensors"));
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

TEST(Trainer, BadArgumentsNameTheFlag) {
  TrainingArguments a = synthetic_args(fresh_dir("flags"));
  a.batch_size = 0;
  EXPECT_KILN_ERROR(a.validate(), "--batch-size must be >= 1");
  a = synthetic_args(fresh_dir("flags"));
  a.optimizer = "adam";
  EXPECT_KILN_ERROR(a.validate(), "--optimizer must be adamw, lamb or sgd");
  a = synthetic_args(fresh_dir("flags"));
  a.max_seq_length = 1000;  // the demo model has 128 positions
  std::ostringstream log;
  EXPECT_KILN_ERROR(train::MlmTask(a, log), "--max-seq-length 1000 exceeds the 128 tokens the model's max_position_embeddings (128) allow");
  a = synthetic_args(fresh_dir("flags"));
  a.train_file = "/nonexistent/corpus.txt";
  a.vocab = "/nonexistent/vocab.txt";
  EXPECT_KILN_ERROR(train::MlmTask(a, log), "vocab.txt");
}

// ---- fine-tuning a small classifier ---------------------------------------

struct ClassifierFixture {
  fs::path dir = fresh_dir("cls");
  fs::path model = dir / "model";
  ClassifierFixture() {
    // A vocabulary of words; sentences with "good" are label "pos", with "bad" "neg".
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "the",
                                      "movie", "film",  "was",   "is",    "very",   "not",  "plot", "acting"};
    fs::create_directories(dir);
    {
      std::ofstream v(dir / "vocab.txt");
      for (auto& t : vocab) v << t << "\n";
    }
    BertConfig c = BertConfig::preset("bert-tiny");
    c.vocab_size = static_cast<int64_t>(vocab.size());
    c.max_position_embeddings = 32;
    manual_seed(1);
    nn::BertModel base(c);
    nn::save_pretrained(base, c, model.string(), (dir / "vocab.txt").string());
    write_split("train.tsv", 64, 0);
    write_split("dev.tsv", 32, 1000);
  }
  void write_split(const std::string& name, int n, int offset) const {
    const char* nouns[] = {"movie", "film", "plot", "acting"};
    const char* verbs[] = {"was", "is"};
    std::ofstream f(dir / name);
    f << "sentence\tlabel\n";
    for (int i = 0; i < n; ++i) {
      const int k = i + offset;
      const bool pos = (k * 7 + k / 3) % 2 == 0;
      f << "the " << nouns[k % 4] << " " << verbs[(k / 4) % 2] << (k % 3 == 0 ? " very " : " ") << (pos ? "good" : "bad")
        << "\t" << (pos ? "pos" : "neg") << "\n";
    }
  }
  TrainingArguments args(const std::string& out) const {
    TrainingArguments a;
    a.model = model.string();
    a.train_file = (dir / "train.tsv").string();
    a.validation_file = (dir / "dev.tsv").string();
    a.output_dir = (dir / out).string();
    a.max_seq_length = 16;
    a.batch_size = 8;
    a.lr = 1e-3;
    a.epochs = 4;
    a.logging_steps = 8;
    a.save_steps = 0;
    a.workers = 1;
    return a;
  }
  ~ClassifierFixture() { fs::remove_all(dir); }
};

TEST(Trainer, FinetuneLearnsAndEvaluateReadsTheSavedLabels) {
  ClassifierFixture fx;
  TrainingArguments a = fx.args("out");
  std::ostringstream log;
  train::ClassificationTask task(a, log);
  EXPECT_EQ(task.label_set(), (std::vector<std::string>{"neg", "pos"}));
  const train::TrainResult r = train::train(a, task, log);
  ASSERT_TRUE(r.finished) << log.str();
  EXPECT_EQ(r.step, 32);  // ceil(4 epochs * 8 batches)
  EXPECT_GE(r.eval.at("accuracy"), 0.95) << log.str();
  EXPECT_GE(r.eval.at("f1"), 0.95);

  // The saved directory is a fine-tuned classifier: kiln evaluate's path.
  const BertConfig saved = nn::load_config(a.output_dir);
  EXPECT_EQ(saved.architectures, std::vector<std::string>{"BertForSequenceClassification"});
  TrainingArguments e;
  e.model = a.output_dir;
  e.validation_file = a.validation_file;
  e.max_seq_length = 16;
  e.workers = 0;
  train::ClassificationTask eval_task(e, log, /*for_training=*/false);
  EXPECT_EQ(eval_task.label_set(), task.label_set());
  EXPECT_EQ(eval_task.evaluate().at("accuracy"), r.eval.at("accuracy"));
}

TEST(Trainer, FinetuneRejectsBadData) {
  ClassifierFixture fx;
  std::ostringstream log;
  {  // a validation label outside the training label set, named with file:line
    std::ofstream f(fx.dir / "odd.tsv");
    f << "sentence\tlabel\nthe movie was good\tpos\nthe film is bad\tmeh\n";
  }
  TrainingArguments a = fx.args("bad1");
  a.validation_file = (fx.dir / "odd.tsv").string();
  EXPECT_KILN_ERROR(train::ClassificationTask(a, log), "odd.tsv:3");
  {  // a malformed row
    std::ofstream f(fx.dir / "broken.tsv");
    f << "sentence\tlabel\nthe movie was good\tpos\textra\n";
  }
  a = fx.args("bad2");
  a.train_file = (fx.dir / "broken.tsv").string();
  EXPECT_KILN_ERROR(train::ClassificationTask(a, log), "broken.tsv:2");
  a = fx.args("bad3");
  a.max_seq_length = 64;  // the model has 32 positions
  EXPECT_KILN_ERROR(train::ClassificationTask(a, log), "exceeds the 32 tokens the model's max_position_embeddings (32) allow");
  a = fx.args("bad4");
  a.train_file = (fx.dir / "missing.tsv").string();
  EXPECT_KILN_ERROR(train::ClassificationTask(a, log), "missing.tsv");
  a = fx.args("bad5");
  a.model = (fx.dir / "nomodel").string();
  EXPECT_KILN_ERROR(train::ClassificationTask(a, log), "nomodel");
}

// The final save would overwrite the weights the run starts from, and
// --overwrite-output-dir would delete them: an output directory that is,
// lies inside or contains the --model directory is refused before anything is written.
TEST(Trainer, RefusesAnOutputDirAtTheInputModel) {
  ClassifierFixture fx;
  const std::string weights = read_bytes(fx.model / "model.safetensors");
  std::ostringstream log;
  TrainingArguments a = fx.args("unused");
  a.max_steps = 2;
  a.output_dir = fx.model.string();
  {
    train::ClassificationTask task(a, log);
    EXPECT_KILN_ERROR(train::train(a, task, log), "are the same directory", "pretrained weights");
  }
  EXPECT_EQ(read_bytes(fx.model / "model.safetensors"), weights);
  EXPECT_FALSE(fs::exists(fx.model / "metrics.jsonl"));
  a.output_dir = fx.model.string() + "/./";
  EXPECT_KILN_ERROR(train::check_output_dir_apart_from_model(a), "are the same directory");
  a.output_dir = (fx.model / "finetuned").string();
  EXPECT_KILN_ERROR(train::check_output_dir_apart_from_model(a), "lies inside the input model directory");
  a.output_dir = fx.dir.string();
  EXPECT_KILN_ERROR(train::check_output_dir_apart_from_model(a), "contains the input model directory");
  fs::create_directory_symlink(fx.model, fx.dir / "link");
  a.output_dir = (fx.dir / "link").string();
  EXPECT_KILN_ERROR(train::check_output_dir_apart_from_model(a), "are the same directory");
  a.output_dir = (fx.dir / "link" / "sub").string();
  EXPECT_KILN_ERROR(train::check_output_dir_apart_from_model(a), "lies inside");
  a.output_dir = (fx.dir / "elsewhere").string();
  EXPECT_NO_THROW(train::check_output_dir_apart_from_model(a));
  a.output_dir = (fx.dir / "model-2").string();  // a common prefix is not containment
  EXPECT_NO_THROW(train::check_output_dir_apart_from_model(a));
}

// Resume checks the vocabulary against the one the run started with: same
// size (so the model shapes agree), two tokens swapped.
TEST(Trainer, ResumeRefusesAnotherVocabulary) {
  ClassifierFixture fx;
  TrainingArguments a = fx.args("vocab");
  a.max_steps = 4;
  a.stop_after_steps = 2;
  std::ostringstream log;
  {
    train::ClassificationTask task(a, log);
    EXPECT_EQ(train::train(a, task, log).step, 2);
  }
  std::vector<std::string> lines;
  {
    std::istringstream in(read_bytes(fx.dir / "vocab.txt"));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines[5], "good");
  std::swap(lines[5], lines[6]);
  {
    std::ofstream out(fx.dir / "vocab2.txt");
    for (const std::string& line : lines) out << line << "\n";
  }
  a.resume = true;
  a.stop_after_steps = 0;
  a.vocab = (fx.dir / "vocab2.txt").string();
  train::ClassificationTask task(a, log);
  EXPECT_KILN_ERROR(train::train(a, task, log), "checkpoint-2", "the run started with another vocabulary",
                    "vocab.txt CRC-32C");
}

// ---- batches without masked tokens ------------------------------------------

// Note [No masked tokens]: zero loss and exactly zero gradients, not NaN.
TEST(Mlm, BatchWithoutMaskedTokensHasZeroLossAndGradient) {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = 30;
  c.max_position_embeddings = 16;
  manual_seed(5);
  nn::BertForMaskedLM model(c);
  Generator gen(9);
  data::PretrainingBatch batch;
  batch.input_ids = randint(5, 30, {2, 8}, TensorOptions(DType::Int64), &gen);
  batch.attention_mask = ones({2, 8}, TensorOptions(DType::Int64));
  batch.token_type_ids = zeros({2, 8}, TensorOptions(DType::Int64));
  batch.labels = full({2, 8}, -100.0, TensorOptions(DType::Int64));
  const train::MicroBatch mb = train::mlm_forward(model, batch);
  EXPECT_EQ(mb.predicted, 0);
  EXPECT_EQ(mb.tokens, 16);
  EXPECT_EQ(mb.loss.item<double>(), 0.0);
  mb.loss.backward();
  size_t with_grad = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.grad().defined()) continue;
    ++with_grad;
    for (double g : p.grad().to_vector<double>()) ASSERT_EQ(g, 0.0) << name;
  }
  EXPECT_GT(with_grad, 0u);
}

// Text of words outside the vocabulary is all [UNK], which is never masked:
// every batch has no prediction target. Training used to stop at step 1 with
// "training diverged: the loss is nan".
TEST(Mlm, TrainingOnBatchesWithoutMaskedTokensDoesNotDiverge) {
  const fs::path dir = fresh_dir("nomask");
  fs::create_directories(dir);
  std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\n";
  {
    std::ofstream text(dir / "unknown.txt");
    for (int d = 0; d < 12; ++d) text << "zork quux blorp\nfrob nitz\n\n";
  }
  TrainingArguments a;
  a.output_dir = (dir / "out").string();
  a.train_file = (dir / "unknown.txt").string();
  a.vocab = (dir / "vocab.txt").string();
  a.config = "bert-tiny";
  a.max_seq_length = 16;
  a.batch_size = 2;
  a.max_steps = 3;
  a.save_steps = 0;
  a.logging_steps = 1;
  a.workers = 0;
  a.validation_split_percentage = 0;
  std::ostringstream log;
  train::MlmTask task(a, log);
  const train::TrainResult r = train::train(a, task, log);
  EXPECT_TRUE(r.finished) << log.str();
  EXPECT_EQ(r.last_loss, 0.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
