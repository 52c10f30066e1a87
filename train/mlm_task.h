// Masked-language-model pretraining (`kiln pretrain`, `kiln evaluate` on text).
//
// Data (TrainingArguments):
//  - train_file empty: the synthetic corpus of data/synthetic_corpus.h
//    (seed = --seed; validation: another 10% as many documents from seed + 1),
//    the embedded default of `make demo`;
//  - train_file a folder with index.json: a prepared corpus (`kiln prepare`);
//  - train_file a text file: prepared into OUTPUT/corpus-train first (and
//    validation_file into OUTPUT/corpus-validation) with the model's tokenizer.
// Without a validation file, the last validation_split_percentage % of the
// packed training examples are held out (none when it is 0).
// Examples: Note [Packing] and Note [Masking] in data/pretraining.h, at
// max_seq_length, without next-sentence pairs. Evaluation masks each
// validation example with a generator seeded from (seed, example index), so
// every evaluation sees the same masks.
//
// Model: --model DIR (a masked-LM or base checkpoint of any family the Auto
// layer builds, nn/auto.h: BertForMaskedLM, BertForPreTraining, BertModel,
// RobertaForMaskedLM, ...; missing heads start fresh) or a new model from
// --config (a config.json of such a family, or a BERT preset name with
// vocab_size set to the tokenizer's); the
// synthetic corpus without --config uses a small default
// (L2 H128 A2 F512, 128 positions).
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

class MlmTask final : public TextPretrainingTask {
 public:
  // for_training = false (kiln evaluate): needs only the model and the
  // validation data (validation_file). With a process group of several
  // ranks, rank 0 prepares text files and the others wait for it.
  MlmTask(const TrainingArguments& args, std::ostream& out, bool for_training = true,
          dist::ProcessGroupPtr group = nullptr);

  nn::Module& model() override { return *model_; }
  ModelConfig model_config() const override { return config_; }
  std::string kind() const override { return "mlm"; }
  std::map<std::string, double> evaluate() override { return evaluate_counts().summary(); }

  // Accuracy of predicting the most frequent token everywhere (synthetic
  // corpus only; NaN otherwise): what masked-LM accuracy is without context.
  double unigram_baseline() const { return unigram_baseline_; }

 private:
  MicroBatch forward_batch(const data::PretrainingBatch& batch) const override;
  ModelConfig config_;
  std::shared_ptr<nn::MaskedLanguageModel> model_;
  double unigram_baseline_;
};

// Masked-LM loss, accuracy counts and tokens of one batch (forward only; the
// loss keeps its graph when grad mode is on). A batch without any masked
// token (labels all -100: e.g. only [UNK] tokens, or whole-word masking
// finding no word short enough) has loss 0 and gives zero gradients, not
// NaN (Note [No masked tokens] in train/mlm_task.cpp).
MicroBatch mlm_forward(const nn::MaskedLanguageModel& model, const data::PretrainingBatch& batch);

}  // namespace kiln::train
