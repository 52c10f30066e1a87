// Encoder families trained by kiln on real data, through the Auto layer
// (nn/auto.h) and the same tasks as BERT: a model of each family is
// pretrained from scratch on WikiText-2 valid (masked LM) from a config.json,
// saved, and that kiln-pretrained checkpoint fine-tuned on the first 2,000
// SST-2 training sentences; SST-2 dev accuracy must clear the majority class
// (51%) by a margin only learning gives. Small shapes (L2 H64): this tests
// that each family trains end to end, not how well.
//   - XLM-R (model_type "xlm-roberta": RoBERTa's network, padding-offset
//     positions, one token type) with the real XLM-R tokenizer (Unigram,
//     250,002 tokens, <pad> = 1);
//   - DistilBERT (no token types, no pooler) with BERT's WordPiece vocabulary;
//   - ModernBERT (rotary embeddings, GeGLU, a local-attention layer) with the
//     same vocabulary.
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
using nlohmann::json;

struct EncoderRun {
  double mlm_loss = 0;  // held-out masked-LM loss after pretraining
  double accuracy = 0;  // SST-2 dev accuracy after fine-tuning
  json pretrained_config, finetuned_config;
};

// Pretrains `config` from scratch (tokenizer: a tokenizer.json, or a BERT
// vocab.txt), then fine-tunes the checkpoint on SST-2; both in dir.
EncoderRun pretrain_then_finetune(const fs::path& dir, const json& config, const std::string& tokenizer,
                                  const std::string& vocab) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  EncoderRun run;

  // 1. masked-LM pretraining from scratch
  train::TrainingArguments p;
  p.config = (dir / "config.json").string();
  p.tokenizer = tokenizer;
  p.vocab = vocab;
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
    EXPECT_TRUE(r.finished) << plog.str();
    run.mlm_loss = r.finished ? r.eval.at("loss") : 1e9;
  }
  run.pretrained_config = json::parse(std::ifstream(dir / "pretrained" / "config.json"));

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
  EXPECT_TRUE(r.finished) << flog.str();
  run.accuracy = r.finished ? r.eval.at("accuracy") : 0.0;
  run.finetuned_config = json::parse(std::ifstream(dir / "sst2" / "config.json"));
  return run;
}

TEST(RobertaTraining, PretrainedOnWikiTextThenFineTunedOnSst2) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan (about a minute in the release build)";
#endif
  const fs::path dir = fs::temp_directory_path() / ("kiln_roberta_" + std::to_string(::getpid()));
  const json config = {
      {"model_type", "xlm-roberta"}, {"vocab_size", 250002},        {"hidden_size", 64},
      {"num_hidden_layers", 2},      {"num_attention_heads", 2},    {"intermediate_size", 256},
      {"max_position_embeddings", 66}, {"type_vocab_size", 1},      {"pad_token_id", 1},
      {"bos_token_id", 0},           {"eos_token_id", 2},           {"layer_norm_eps", 1e-5}};
  const EncoderRun r =
      pretrain_then_finetune(dir, config, testing::data_file("tokenizers/xlm-roberta/tokenizer.json"), "");
  // a model that learned nothing is at ln(250002) = 12.43 nats
  std::printf("XLM-R-shaped MLM on WikiText-2: held-out loss %.3f after 60 steps\n", r.mlm_loss);
  EXPECT_LT(r.mlm_loss, 12.43 - 2.0);
  EXPECT_EQ(r.pretrained_config["model_type"], "xlm-roberta");
  EXPECT_EQ(r.pretrained_config["architectures"], json::array({"XLMRobertaForMaskedLM"}));
  std::printf("XLM-R-shaped SST-2 dev after 2,000 sentences x 3 epochs: accuracy %.4f\n", r.accuracy);
  EXPECT_GE(r.accuracy, 0.60);
  EXPECT_EQ(r.finetuned_config["architectures"], json::array({"XLMRobertaForSequenceClassification"}));
  EXPECT_EQ(r.finetuned_config["pad_token_id"], 1);
  fs::remove_all(dir);
}

TEST(DistilBertTraining, PretrainedOnWikiTextThenFineTunedOnSst2) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan";
#endif
  const fs::path dir = fs::temp_directory_path() / ("kiln_distilbert_" + std::to_string(::getpid()));
  const json config = {{"model_type", "distilbert"}, {"vocab_size", 30522}, {"dim", 64},
                       {"n_layers", 2},              {"n_heads", 2},        {"hidden_dim", 256},
                       {"max_position_embeddings", 64}};
  const EncoderRun r =
      pretrain_then_finetune(dir, config, "", testing::data_file("vocab/bert-base-uncased-vocab.txt"));
  // a model that learned nothing is at ln(30522) = 10.33 nats
  std::printf("DistilBERT-shaped MLM on WikiText-2: held-out loss %.3f after 60 steps\n", r.mlm_loss);
  EXPECT_LT(r.mlm_loss, 10.33 - 2.0);
  EXPECT_EQ(r.pretrained_config["model_type"], "distilbert");
  EXPECT_EQ(r.pretrained_config["architectures"], json::array({"DistilBertForMaskedLM"}));
  std::printf("DistilBERT-shaped SST-2 dev after 2,000 sentences x 3 epochs: accuracy %.4f\n", r.accuracy);
  EXPECT_GE(r.accuracy, 0.60);
  EXPECT_EQ(r.finetuned_config["architectures"], json::array({"DistilBertForSequenceClassification"}));
  EXPECT_EQ(r.finetuned_config["n_layers"], 2);
  fs::remove_all(dir);
}

TEST(ModernBertTraining, PretrainedOnWikiTextThenFineTunedOnSst2) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "too slow under ASan/UBSan";
#endif
  const fs::path dir = fs::temp_directory_path() / ("kiln_modernbert_" + std::to_string(::getpid()));
  // BERT's special ids: [PAD] 0, [CLS] 101, [SEP] 102; layer 1 attends a window of 8 tokens each side
  const json config = {{"model_type", "modernbert"},  {"vocab_size", 30522},          {"hidden_size", 64},
                       {"num_hidden_layers", 2},      {"num_attention_heads", 2},     {"intermediate_size", 128},
                       {"max_position_embeddings", 64}, {"global_attn_every_n_layers", 2}, {"local_attention", 16},
                       {"pad_token_id", 0},           {"bos_token_id", 101},          {"cls_token_id", 101},
                       {"eos_token_id", 102},         {"sep_token_id", 102}};
  const EncoderRun r =
      pretrain_then_finetune(dir, config, "", testing::data_file("vocab/bert-base-uncased-vocab.txt"));
  std::printf("ModernBERT-shaped MLM on WikiText-2: held-out loss %.3f after 60 steps\n", r.mlm_loss);
  EXPECT_LT(r.mlm_loss, 10.33 - 2.0);  // ln(30522) = 10.33 nats learns nothing
  EXPECT_EQ(r.pretrained_config["model_type"], "modernbert");
  EXPECT_EQ(r.pretrained_config["architectures"], json::array({"ModernBertForMaskedLM"}));
  std::printf("ModernBERT-shaped SST-2 dev after 2,000 sentences x 3 epochs: accuracy %.4f\n", r.accuracy);
  EXPECT_GE(r.accuracy, 0.60);
  EXPECT_EQ(r.finetuned_config["architectures"], json::array({"ModernBertForSequenceClassification"}));
  EXPECT_EQ(r.finetuned_config["local_attention"], 16);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
