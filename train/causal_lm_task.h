// Causal-language-model training (`kiln pretrain --task causal-lm`,
// `kiln finetune --task causal-lm`, `kiln evaluate` of a decoder).
//
// Data (TrainingArguments), as MlmTask's: train_file / validation_file a
// prepared corpus folder (`kiln prepare`) or a text file prepared into
// OUTPUT/corpus-train (corpus-validation) with the model's tokenizer; blocks
// of max_seq_length tokens (Note [Causal-LM blocks], data/causal_lm.h).
// Without a validation file the last validation_split_percentage % of the
// training blocks are held out.
//
// Model: --model DIR (a directory of a family with a causal-LM head,
// nn::AutoModelForCausalLM) or a new model from --config (a decoder's
// config.json; its vocab_size must be the tokenizer's).
//
// Metrics: "loss" (mean next-token cross-entropy over the predicted
// tokens), "perplexity" = exp(loss), "accuracy" (next-token argmax).
#pragma once
#include <memory>
#include <optional>
#include <ostream>

#include "kiln/data/dataloader.h"
#include "kiln/data/pretraining.h"
#include "kiln/nn/heads.h"
#include "kiln/train/text_pretraining_task.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

class CausalLmTask final : public TextPretrainingTask {
 public:
  // for_training = false (kiln evaluate): the model and validation_file only.
  CausalLmTask(const TrainingArguments& args, std::ostream& out, bool for_training = true,
               dist::ProcessGroupPtr group = nullptr);

  nn::Module& model() override { return *model_; }
  ModelConfig model_config() const override { return config_; }
  std::string kind() const override { return "causal-lm"; }
  std::map<std::string, double> evaluate() override;

  // The validation loss of the unigram model of the training blocks (token
  // frequencies with add-alpha smoothing, the best alpha of 1, 0.5, 0.1,
  // 0.05, 0.01 on the validation blocks' predicted tokens): what a model
  // scores without any context. NaN when either set is missing.
  double unigram_baseline_loss() const;

 private:
  MicroBatch forward_batch(const data::PretrainingBatch& batch) const override;
  ModelConfig config_;
  std::shared_ptr<nn::CausalLanguageModel> model_;
  int64_t vocab_size_ = 0;
};

// Next-token loss, accuracy counts and tokens of one batch (forward only;
// the loss keeps its graph when grad mode is on): labels are the batch's
// (B, T), shifted by the model (Note [Causal-LM blocks]).
MicroBatch causal_lm_forward(const nn::CausalLanguageModel& model, const data::PretrainingBatch& batch);

}  // namespace kiln::train
