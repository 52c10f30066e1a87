// Decoders trained by kiln on real data (train/causal_lm_task.h): blocks of
// the concatenated token stream as run_clm builds them (Note [Causal-LM
// blocks]), and a GPT-2-shaped decoder trained from scratch on WikiText-2
// with the real GPT-2 tokenizer, whose validation loss must fall well below
// the unigram baseline (what a model without context scores), and which then
// samples text through the KV cache. Small shapes (L2 H64): this tests that a
// decoder trains end to end, not how well.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/causal_lm.h"
#include "data/tokenizer/pipeline_tokenizer.h"
#include "kiln.h"
#include "nn/auto.h"
#include "test_util.h"
#include "train/causal_lm_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

TEST(CausalLmDataset, BlocksReadTheCorpusInOrderAndDropTheTail) {
  // 3 documents, 11 tokens: blocks of 4 are [1..4], [5..8]; 9, 10, 11 are the tail
  auto corpus = std::make_shared<data::InMemoryCorpus>(
      std::vector<std::vector<std::vector<int32_t>>>{{{1, 2, 3}, {4, 5}}, {{6}, {7, 8, 9, 10}}, {{11}}}, 20,
      data::SpecialTokenIds{});
  data::CausalLmDataset blocks(corpus, 4);
  ASSERT_EQ(blocks.size(), 2u);
  Generator g(0);
  EXPECT_EQ(blocks.get(0, g).input_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  const data::PretrainingExample e = blocks.get(1, g);
  EXPECT_EQ(e.input_ids, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(e.labels, e.input_ids);  // the model shifts
  EXPECT_EQ(e.token_type_ids, (std::vector<int32_t>(4, 0)));
  EXPECT_EQ(e.next_sentence_label, -1);
  EXPECT_EQ(data::CausalLmDataset(corpus, 11).size(), 1u);
  EXPECT_EQ(data::CausalLmDataset(corpus, 12).size(), 0u);
  EXPECT_KILN_ERROR(blocks.get(2, g), "example 2 out of range (2 examples)");
  EXPECT_KILN_ERROR(data::CausalLmDataset(corpus, 1), "block size must be >= 2");
}

TEST(DecoderTraining, Gpt2LearnsWikiTextBelowTheUnigramBaselineAndSamples) {
#ifdef KILN_SANITIZE_BUILD
  GTEST_SKIP() << "minutes under ASan/UBSan; the release ctest runs it";
#endif
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "decoder_training_gpt2";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // WikiText-2 valid: the first ~300 KB to train on, the next ~40 KB to validate
  {
    std::ifstream in(testing::data_file("wikitext-2/valid.txt"));
    std::ofstream train_out(dir / "train.txt"), valid_out(dir / "valid.txt");
    std::string line;
    size_t bytes = 0;
    while (std::getline(in, line) && bytes < 340'000) {
      (bytes < 300'000 ? train_out : valid_out) << line << "\n";
      bytes += line.size() + 1;
    }
  }
  const std::string tokenizer = testing::data_file("tokenizers/gpt2/tokenizer.json");
  std::ofstream(dir / "config.json") << nlohmann::json{{"model_type", "gpt2"}, {"vocab_size", 50257},
                                                        {"n_positions", 64},  {"n_embd", 64},
                                                        {"n_layer", 2},       {"n_head", 2},
                                                        {"bos_token_id", 50256}, {"eos_token_id", 50256}}
                                              .dump();
  train::TrainingArguments a;
  a.task = "causal-lm";
  a.config = (dir / "config.json").string();
  a.tokenizer = tokenizer;
  a.train_file = (dir / "train.txt").string();
  a.validation_file = (dir / "valid.txt").string();
  a.output_dir = (dir / "run").string();
  a.max_seq_length = 64;
  a.batch_size = 8;
  a.lr = 3e-3;
  a.warmup_steps = 10;
  a.max_steps = 150;
  a.logging_steps = 25;
  a.save_steps = 0;
  std::ostringstream log;
  double baseline = 0;
  train::TrainResult r;
  {
    train::CausalLmTask task(a, log);
    baseline = task.unigram_baseline_loss();
    r = train::train(a, task, log);
  }
  ASSERT_TRUE(r.finished) << log.str();
  const double loss = r.eval.at("loss");
  // The bar: half a nat below the best unigram model (about 6.7 nats here;
  // perplexity 40% lower); a model that learned nothing past token
  // frequencies cannot reach it. This run reaches about 6.0.
  EXPECT_LT(loss, baseline - 0.5) << "validation loss " << loss << ", unigram baseline " << baseline << "\n" << log.str();
  EXPECT_NEAR(r.eval.at("perplexity"), std::exp(loss), 1e-6 * std::exp(loss));
  EXPECT_GT(r.eval.at("accuracy"), 0.0);

  // The saved model is a GPT2LMHeadModel directory with its tokenizer; it samples text.
  const std::string out = (dir / "run").string();
  EXPECT_EQ(nn::task_name_of(out), "causal-lm");
  auto model = nn::AutoModelForCausalLM::from_pretrained(out);
  model->eval();
  auto tok = data::open_text_tokenizer(out);
  std::vector<int64_t> prompt;
  for (int32_t id : tok->encode("The game").ids) prompt.push_back(id);
  nn::GenerationConfig g;
  g.max_new_tokens = 20;
  g.do_sample = true;
  g.top_k = 40;
  Generator gen(3);
  const nn::DecoderStep step = [&](const Tensor& ids, nn::KVCache* cache) {
    return model->forward(ids, Tensor(), Tensor(), cache).logits;
  };
  const std::vector<int64_t> ids =
      nn::generate(step, tensor_from(prompt, {1, static_cast<int64_t>(prompt.size())}), g, &gen).to_vector<int64_t>();
  std::vector<int32_t> continuation(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end());
  const std::string text = tok->decode(continuation);
  EXPECT_FALSE(text.empty());
  std::cout << "sampled: The game" << text << "\n";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
