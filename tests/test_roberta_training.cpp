// A RoBERTa-shaped encoder trained by kiln on real data, through the Auto
// layer (nn/auto.h) and the same tasks as BERT: an XLM-R config (model_type
// "xlm-roberta": RoBERTa's network, padding-offset positions, one token type)
// with the real XLM-R tokenizer (Unigram, 250,002 tokens, <pad> = 1) is
// pretrained from scratch on WikiText-2 valid (masked LM), saved, and that
// kiln-pretrained checkpoint fine-tuned on the first 2,000 SST-2 training
// sentences; SST-2 dev accuracy must clear the majority class (51%) by a
// margin only learning gives. Small shapes (L2 H64): this tests that the
// family trains end to end, not how well.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "train/classification_task.h"
#include "train/mlm_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

TEST(RobertaTraining, PretrainedOnWikiTextThenFineTunedOnSst2) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan (about a minute in the release build)";
#endif
  const std::string tokenizer = testing::data_file("tokenizers/xlm-roberta/tokenizer.json");
  const fs::path dir = fs::temp_directory_path() / ("kiln_roberta_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json config = {
      {"model_type", "xlm-roberta"}, {"vocab_size", 250002},        {"hidden_size", 64},
      {"num_hidden_layers", 2},      {"num_attention_heads", 2},    {"intermediate_size", 256},
      {"max_position_embeddings", 66}, {"type_vocab_size", 1},      {"pad_token_id", 1},
      {"bos_token_id", 0},           {"eos_token_id", 2},           {"layer_norm_eps", 1e-5}};
  std::ofstream(dir / "config.json") << config.dump(2);

  // 1. masked-LM pretraining from scratch
  train::TrainingArguments p;
  p.config = (dir / "config.json").string();
  p.tokenizer = tokenizer;
  p.train_file = testing::data_file("wikitext-2/valid.txt");
  p.output_dir = (dir / "pretrained").string();
  p.max_seq_length = 64;
  p.batch_size = 16;
  p.lr = 2e-3;
  p.warmup_steps = 5;
  p.max_steps = 60;
  p.logging_steps = 5;
  p.save_steps = 0;
  p.validation_split_percentage = 2;
  std::ostringstream plog;
  {
    train::MlmTask task(p, plog);
    const train::TrainResult r = train::train(p, task, plog);
    ASSERT_TRUE(r.finished) << plog.str();
    // a model that learned nothing is at ln(250002) = 12.43 nats
    std::printf("XLM-R-shaped MLM on WikiText-2: held-out loss %.3f after 60 steps\n", r.eval.at("loss"));
    EXPECT_LT(r.eval.at("loss"), 12.43 - 2.0) << plog.str();
  }
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(dir / "pretrained" / "config.json"));
  EXPECT_EQ(saved["model_type"], "xlm-roberta");
  EXPECT_EQ(saved["architectures"], nlohmann::json::array({"XLMRobertaForMaskedLM"}));

  // 2. fine-tuning the kiln-pretrained checkpoint on SST-2
  {
    std::ifstream in(testing::data_file("sst2/train.tsv"));
    std::ofstream out(dir / "train_2k.tsv");
    std::string line;
    for (int i = 0; i <= 2000 && std::getline(in, line); ++i) out << line << "\n";  // header + 2,000 rows
  }
  train::TrainingArguments f;
  f.model = (dir / "pretrained").string();
  f.train_file = (dir / "train_2k.tsv").string();
  f.validation_file = testing::data_file("sst2/dev.tsv");
  f.output_dir = (dir / "sst2").string();
  f.max_seq_length = 64;
  f.batch_size = 32;
  f.lr = 2e-3;
  f.warmup_ratio = 0.1;
  f.epochs = 3;
  f.save_steps = 0;
  f.logging_steps = 16;
  std::ostringstream flog;
  train::ClassificationTask task(f, flog);
  const train::TrainResult r = train::train(f, task, flog);
  ASSERT_TRUE(r.finished) << flog.str();
  std::printf("XLM-R-shaped SST-2 dev after 2,000 sentences x 3 epochs: accuracy %.4f\n", r.eval.at("accuracy"));
  EXPECT_GE(r.eval.at("accuracy"), 0.60) << flog.str();
  const nlohmann::json fine = nlohmann::json::parse(std::ifstream(dir / "sst2" / "config.json"));
  EXPECT_EQ(fine["architectures"], nlohmann::json::array({"XLMRobertaForSequenceClassification"}));
  EXPECT_EQ(fine["pad_token_id"], 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
