// Gradient checkpointing in the models (Note [Gradient checkpointing in the
// models], nn/module.h): every family's layers checkpointed in training give
// bitwise the loss and gradients of the same step without (same seed,
// dropout on); eval, no-grad and the KV cache are left alone; the trainer
// with --gradient-checkpointing logs the same losses and saves the same model.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "kiln.h"
#include "test_util.h"
#include "train/causal_lm_task.h"
#include "train/metric_log.h"
#include "train/mlm_task.h"
#include "train/trainer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::bitwise_equal;

// How many "checkpoint" nodes the graph behind t holds.
int checkpoint_nodes(const Tensor& t) {
  std::set<const Node*> seen;
  std::vector<const Node*> stack;
  if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  int n = 0;
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    n += node->name() == "checkpoint";
    for (const Edge& e : node->next_edges)
      if (e.fn) stack.push_back(e.fn.get());
  }
  return n;
}

struct Step {
  Tensor loss;
  nn::NamedTensors grads;
  int checkpoints = 0;
};

// One training step's loss and gradients, from the same seed each time.
Step step(nn::Module& model, bool checkpointing, const std::function<Tensor()>& loss_of) {
  model.train();
  model.zero_grad();
  model.set_gradient_checkpointing(checkpointing);
  manual_seed(1234);
  Step s;
  s.loss = loss_of();
  s.checkpoints = checkpoint_nodes(s.loss);
  s.loss.backward();
  for (const auto& [name, p] : model.named_parameters()) s.grads.emplace_back(name, p.grad());
  return s;
}

void expect_same_step(nn::Module& model, int layers, const std::function<Tensor()>& loss_of) {
  const Step plain = step(model, false, loss_of), ckpt = step(model, true, loss_of);
  EXPECT_EQ(plain.checkpoints, 0);
  EXPECT_EQ(ckpt.checkpoints, layers);
  EXPECT_TRUE(bitwise_equal(ckpt.loss, plain.loss));
  ASSERT_EQ(ckpt.grads.size(), plain.grads.size());
  int compared = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    SCOPED_TRACE(plain.grads[i].first);
    ASSERT_EQ(ckpt.grads[i].second.defined(), plain.grads[i].second.defined());
    if (!plain.grads[i].second.defined()) continue;
    EXPECT_TRUE(bitwise_equal(ckpt.grads[i].second, plain.grads[i].second));
    ++compared;
  }
  EXPECT_GT(compared, 4 * layers);
  // the dropout masks matter: another seed gives another loss
  model.set_gradient_checkpointing(true);
  manual_seed(99);
  EXPECT_FALSE(bitwise_equal(loss_of(), plain.loss));
  // eval and no-grad are plain forwards
  model.eval();
  EXPECT_EQ(checkpoint_nodes(loss_of()), 0);
  model.train();
  NoGradGuard ng;
  EXPECT_FALSE(loss_of().requires_grad());
}

// Token ids (2, 12) in [3, 99), the second row padded after 9 tokens.
struct Batch {
  Tensor ids, mask, labels;
};
Batch batch() {
  manual_seed(5);
  Batch b;
  b.ids = randint(3, 99, {2, 12});
  std::vector<int64_t> m(24, 1);
  for (int t = 9; t < 12; ++t) m[static_cast<size_t>(12 + t)] = 0;
  b.mask = tensor_from(m, {2, 12});
  std::vector<int64_t> lab = b.ids.to_vector<int64_t>();
  for (size_t i = 0; i < lab.size(); ++i)
    if (i % 3 == 1 || (i >= 12 && i % 12 >= 9)) lab[i] = -100;
  b.labels = tensor_from(lab, {2, 12});
  return b;
}

void expect_masked_lm(const json& config, int layers) {
  manual_seed(7);
  auto model = nn::AutoModelForMaskedLM::from_config(ModelConfig::from_json_string(config.dump()));
  const Batch b = batch();
  expect_same_step(*model, layers, [&] { return model->forward(b.ids, b.mask, Tensor(), b.labels).loss; });
}

void expect_causal_lm(const json& config, int layers) {
  manual_seed(7);
  auto model = nn::AutoModelForCausalLM::from_config(ModelConfig::from_json_string(config.dump()));
  const Batch b = batch();
  expect_same_step(*model, layers, [&] { return model->forward(b.ids, b.mask, b.labels).loss; });
  // generation on the KV cache (under no-grad) is what it was without the flag
  model->eval();
  NoGradGuard ng;
  auto generate_logits = [&](bool checkpointing) {
    model->set_gradient_checkpointing(checkpointing);
    nn::KVCache cache;
    model->forward(b.ids.slice(1, 0, 5), Tensor(), Tensor(), &cache);
    EXPECT_EQ(cache.length(), 5);
    return model->forward(b.ids.slice(1, 5, 6), Tensor(), Tensor(), &cache).logits;
  };
  EXPECT_TRUE(bitwise_equal(generate_logits(true), generate_logits(false)));
}

TEST(GradientCheckpointing, BertGradientsAreBitwiseThoseWithout) {
  expect_masked_lm({{"model_type", "bert"}, {"vocab_size", 99}, {"hidden_size", 32}, {"num_hidden_layers", 3},
                    {"num_attention_heads", 4}, {"intermediate_size", 37}, {"max_position_embeddings", 64},
                    {"type_vocab_size", 2}},
                   3);
}

TEST(GradientCheckpointing, RobertaGradientsAreBitwiseThoseWithout) {
  expect_masked_lm({{"model_type", "roberta"}, {"vocab_size", 99}, {"hidden_size", 32}, {"num_hidden_layers", 2},
                    {"num_attention_heads", 4}, {"intermediate_size", 37}, {"max_position_embeddings", 64},
                    {"type_vocab_size", 1}, {"pad_token_id", 1}},
                   2);
}

TEST(GradientCheckpointing, DistilBertGradientsAreBitwiseThoseWithout) {
  expect_masked_lm({{"model_type", "distilbert"}, {"vocab_size", 99}, {"dim", 32}, {"n_layers", 3}, {"n_heads", 4},
                    {"hidden_dim", 37}, {"max_position_embeddings", 64}},
                   3);
}

TEST(GradientCheckpointing, ModernBertGradientsAreBitwiseThoseWithout) {
  expect_masked_lm({{"model_type", "modernbert"}, {"vocab_size", 99}, {"hidden_size", 32},
                    {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"intermediate_size", 40},
                    {"max_position_embeddings", 64}, {"local_attention", 4}, {"global_attn_every_n_layers", 2},
                    {"attention_dropout", 0.1}, {"mlp_dropout", 0.1}, {"embedding_dropout", 0.1},
                    {"pad_token_id", 0}, {"bos_token_id", 1}, {"cls_token_id", 1}, {"eos_token_id", 2},
                    {"sep_token_id", 2}},
                   4);
}

TEST(GradientCheckpointing, Gpt2GradientsAreBitwiseThoseWithout) {
  expect_causal_lm({{"model_type", "gpt2"}, {"vocab_size", 99}, {"n_positions", 64}, {"n_embd", 32}, {"n_layer", 3},
                    {"n_head", 4}, {"bos_token_id", 0}, {"eos_token_id", 0}},
                   3);
}

TEST(GradientCheckpointing, LlamaGradientsAreBitwiseThoseWithout) {
  expect_causal_lm({{"model_type", "llama"}, {"vocab_size", 99}, {"hidden_size", 32}, {"intermediate_size", 48},
                    {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                    {"max_position_embeddings", 64}, {"attention_dropout", 0.1}, {"bos_token_id", 1},
                    {"eos_token_id", 2}},
                   3);
}

// Frozen embeddings (the layers' inputs need no gradient): the layers still
// checkpoint and their parameters get the gradients of a plain step.
TEST(GradientCheckpointing, FrozenEmbeddingsStillCheckpointAndTrainTheLayers) {
  manual_seed(7);
  auto model = nn::AutoModelForMaskedLM::from_config(ModelConfig::from_json_string(
      json{{"model_type", "bert"}, {"vocab_size", 99}, {"hidden_size", 32}, {"num_hidden_layers", 2},
           {"num_attention_heads", 4}, {"intermediate_size", 37}, {"max_position_embeddings", 64},
           {"type_vocab_size", 2}}
          .dump()));
  for (auto& [name, p] : model->named_parameters())
    if (name.find("embeddings") != std::string::npos) p.set_requires_grad(false);
  const Batch b = batch();
  expect_same_step(*model, 2, [&] { return model->forward(b.ids, b.mask, Tensor(), b.labels).loss; });
}

// ---- the trainer: --gradient-checkpointing changes nothing but memory ----------

void expect_same_training(train::TrainingArguments a, const std::function<train::TrainResult(train::TrainingArguments&)>& run) {
  const fs::path plain = testing::fresh_dir("gradient_checkpointing", a.task + "_plain"),
                 ckpt = testing::fresh_dir("gradient_checkpointing", a.task + "_ckpt");
  a.output_dir = plain.string();
  ASSERT_TRUE(run(a).finished);
  a.output_dir = ckpt.string();
  a.gradient_checkpointing = true;
  EXPECT_EQ(a.to_json().at("gradient_checkpointing"), true);
  ASSERT_TRUE(run(a).finished);
  const auto p = train::read_metrics_jsonl(plain / "metrics.jsonl");
  const auto c = train::read_metrics_jsonl(ckpt / "metrics.jsonl");
  ASSERT_EQ(p.at("loss").values.size(), static_cast<size_t>(a.max_steps));
  ASSERT_EQ(c.at("loss").values.size(), p.at("loss").values.size());
  for (size_t i = 0; i < p.at("loss").values.size(); ++i)
    EXPECT_EQ(c.at("loss").values[i], p.at("loss").values[i]) << "step " << i + 1;  // bitwise
  EXPECT_EQ(testing::read_bytes(ckpt / "model.safetensors"), testing::read_bytes(plain / "model.safetensors"));
  fs::remove_all(plain);
  fs::remove_all(ckpt);
}

train::TrainingArguments small_run() {
  train::TrainingArguments a;
  a.synthetic_documents = 200;
  a.max_seq_length = 32;
  a.batch_size = 4;
  a.grad_accum = 2;
  a.lr = 1e-3;
  a.warmup_steps = 1;
  a.max_steps = 4;
  a.logging_steps = 1;
  a.save_steps = 0;
  a.workers = 0;
  a.seed = 3;
  return a;
}

TEST(GradientCheckpointing, TrainerMaskedLmLogsTheSameLosses) {
  expect_same_training(small_run(), [](train::TrainingArguments& a) {
    std::ostringstream log;
    train::MlmTask task(a, log);
    return train::train(a, task, log);
  });
}

TEST(GradientCheckpointing, TrainerCausalLmLogsTheSameLosses) {
  const fs::path dir = testing::fresh_dir("gradient_checkpointing", "gpt2_config");
  fs::create_directories(dir);
  const fs::path cfg = dir / "config.json";
  std::ofstream(cfg) << json{{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 64}, {"n_embd", 32}, {"n_layer", 2},
                             {"n_head", 4}}
                            .dump();
  train::TrainingArguments a = small_run();
  a.task = "causal-lm";
  a.config = cfg.string();
  a.tokenizer = testing::data_file("tokenizers/gpt2/tokenizer.json");
  a.train_file = testing::data_file("wikitext-2/valid.txt");
  a.max_steps = 3;
  expect_same_training(a, [](train::TrainingArguments& args) {
    std::ostringstream log;
    train::CausalLmTask task(args, log);
    return train::train(args, task, log);
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
