// Sequence classification fine-tuning (`kiln finetune`, `kiln evaluate` on a
// labelled file).
//
// Data: train_file / validation_file in TSV, CSV or JSONL (Note [Labeled
// file formats] in data/finetune_data.h), columns from text_column /
// pair_column / label_column or detected. The label set comes from the model
// config's id2label when it has one (a fine-tuned model), else from the
// training file; a validation label outside it is an error naming the file
// and line. Sequences are truncated to max_seq_length and padded per batch
// (dynamic padding).
//
// Model: BertForSequenceClassification from --model DIR (a fresh classifier
// when the directory has none, as transformers does). The saved config gets
// architectures ["BertForSequenceClassification"] and id2label / label2id, so
// transformers loads the result with the right number of labels.
#pragma once
#include <memory>
#include <optional>
#include <ostream>

#include "kiln/data/dataloader.h"
#include "kiln/data/finetune_data.h"
#include "kiln/nn/bert.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

class ClassificationTask final : public TrainTask {
 public:
  // for_training = false (kiln evaluate): needs only --model and --validation-file.
  ClassificationTask(const TrainingArguments& args, std::ostream& out, bool for_training = true);
  ~ClassificationTask() override;

  nn::Module& model() override { return *model_; }
  const BertConfig& config() const override { return config_; }
  std::string kind() const override { return "classification"; }
  size_t batches_per_epoch() const override { return train_loader_->num_batches(); }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  void load_loader_state(const data::LoaderState& state) override { train_loader_->load_state(state); }
  void start_epoch(int64_t epoch) override { train_loader_->set_epoch(epoch); }
  std::optional<MicroBatch> forward_next() override;
  std::map<std::string, double> evaluate() override;
  double loader_wait_seconds() const override { return train_loader_->wait_seconds(); }
  std::map<std::string, std::string> extra_files() const override { return tokenizer_files_; }

  const std::vector<std::string>& label_set() const { return label_set_; }

 private:
  using Loader = data::DataLoader<data::LabeledEncoding, data::ClassificationBatch>;
  std::unique_ptr<Loader> make_loader(std::shared_ptr<const data::Dataset<data::LabeledEncoding>> set, bool shuffle,
                                      int64_t batch_size) const;
  TrainingArguments args_;
  BertConfig config_;
  std::shared_ptr<nn::BertForSequenceClassification> model_;
  std::map<std::string, std::string> tokenizer_files_;
  std::vector<std::string> label_set_;
  int32_t pad_id_ = 0;
  std::shared_ptr<const data::Dataset<data::LabeledEncoding>> train_set_, valid_set_;
  std::unique_ptr<Loader> train_loader_;
};

// Classification loss, correct count and tokens of one batch.
MicroBatch classification_forward(const nn::BertForSequenceClassification& model,
                                  const data::ClassificationBatch& batch, std::vector<int64_t>* predictions = nullptr);

}  // namespace kiln::train
