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
#include "kiln/train/trainer.h"

namespace kiln::train {

class MlmTask final : public TrainTask {
 public:
  // for_training = false (kiln evaluate): needs only the model and the
  // validation data (validation_file). With a process group of several
  // ranks, rank 0 prepares text files and the others wait for it.
  MlmTask(const TrainingArguments& args, std::ostream& out, bool for_training = true,
          dist::ProcessGroupPtr group = nullptr);
  ~MlmTask() override;

  nn::Module& model() override { return *model_; }
  ModelConfig model_config() const override { return config_; }
  std::string kind() const override { return "mlm"; }
  size_t batches_per_epoch() const override { return train_loader_->num_batches(); }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  void load_loader_state(const data::LoaderState& state) override { train_loader_->load_state(state); }
  void start_epoch(int64_t epoch) override { train_loader_->set_epoch(epoch); }
  std::optional<MicroBatch> forward_next() override;
  std::map<std::string, double> evaluate() override;
  double loader_wait_seconds() const override { return train_loader_->wait_seconds(); }
  std::map<std::string, std::string> extra_files() const override { return tokenizer_files_; }

  // Accuracy of predicting the most frequent token everywhere (synthetic
  // corpus only; NaN otherwise): what masked-LM accuracy is without context.
  double unigram_baseline() const { return unigram_baseline_; }
  size_t num_train_examples() const { return train_set_ ? train_set_->size() : 0; }
  size_t num_validation_examples() const { return valid_set_ ? valid_set_->size() : 0; }

 private:
  using Loader = data::DataLoader<data::PretrainingExample, data::PretrainingBatch>;
  std::unique_ptr<Loader> make_loader(std::shared_ptr<const data::Dataset<data::PretrainingExample>> set,
                                      std::shared_ptr<const data::Sampler> sampler, int64_t batch_size) const;
  TrainingArguments args_;
  ModelConfig config_;
  std::shared_ptr<nn::MaskedLanguageModel> model_;
  std::map<std::string, std::string> tokenizer_files_;
  int32_t pad_id_ = 0;
  double unigram_baseline_;
  std::shared_ptr<const data::Dataset<data::PretrainingExample>> train_set_, valid_set_;
  std::unique_ptr<Loader> train_loader_;
  std::string temp_dir_;  // corpora prepared for evaluation without --output-dir; removed by the destructor
};

// Masked-LM loss, accuracy counts and tokens of one batch (forward only; the
// loss keeps its graph when grad mode is on). A batch without any masked
// token (labels all -100: e.g. only [UNK] tokens, or whole-word masking
// finding no word short enough) has loss 0 and gives zero gradients, not
// NaN (Note [No masked tokens] in train/mlm_task.cpp).
MicroBatch mlm_forward(const nn::MaskedLanguageModel& model, const data::PretrainingBatch& batch);

}  // namespace kiln::train
