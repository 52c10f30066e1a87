// Sequence classification fine-tuning (`kiln finetune`, `kiln evaluate` and
// `kiln predict` on a labelled file): single-label classification,
// regression and multi-label classification, the three problem types of
// transformers' *ForSequenceClassification (nn/heads.h), for every family the
// Auto layer builds (nn/auto.h).
//
// Data: train_file / validation_file in TSV, CSV or JSONL (Note [Labeled
// file formats] in data/finetune_data.h; --no-header for headerless TSV/CSV,
// the column flags then 1-based), columns from text_column / pair_column /
// label_column or detected.
//
// Note [Problem types]
//  - --task regression, or a label column of numbers with a fractional part
//    (STS-B's "3.800"; transformers' run_glue treats a float column as
//    regression): one output, mean-squared error; metrics mse, Pearson,
//    Spearman and their mean (combined_score), as run_glue reports STS-B.
//  - --multi-label: each example holds zero or more labels (comma-separated,
//    or a JSON array in JSONL); one sigmoid output per label, binary
//    cross-entropy; a label is predicted when its logit is > 0 (probability
//    > 0.5); metrics micro and macro F1, per-label F1 and exact-match accuracy.
//  - otherwise single-label: cross-entropy; accuracy, F1 and MCC.
// The label set comes from the model config's id2label when it is a
// fine-tuned classifier, else from the training file; a validation label
// outside it is an error naming the file and line. A fine-tuned model's
// problem_type decides for evaluation, and flags that contradict it are an
// error. The saved config has architectures [the family's class, e.g.
// "BertForSequenceClassification" or "RobertaForSequenceClassification"],
// problem_type and id2label / label2id (regression: {"0": "LABEL_0"}, as
// transformers), so transformers loads the result as the same problem.
// Sequences are truncated to max_seq_length and padded per batch.
#pragma once
#include <memory>
#include <optional>
#include <ostream>

#include "kiln/data/dataloader.h"
#include "kiln/data/finetune_data.h"
#include "kiln/nn/heads.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

class ClassificationTask final : public TrainTask {
 public:
  // for_training = false (kiln evaluate, predict): needs only --model, a
  // fine-tuned classifier (evaluate() is empty without --validation-file).
  ClassificationTask(const TrainingArguments& args, std::ostream& out, bool for_training = true);
  ~ClassificationTask() override;

  nn::Module& model() override { return *model_; }
  ModelConfig model_config() const override { return config_; }
  // "classification", "regression" or "multi-label-classification".
  std::string kind() const override;
  size_t batches_per_epoch() const override { return train_loader_ ? train_loader_->num_batches() : 0; }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  void load_loader_state(const data::LoaderState& state) override { train_loader_->load_state(state); }
  void start_epoch(int64_t epoch) override { train_loader_->set_epoch(epoch); }
  std::optional<MicroBatch> forward_next() override;
  std::map<std::string, double> evaluate() override;
  double loader_wait_seconds() const override { return train_loader_ ? train_loader_->wait_seconds() : 0.0; }
  std::map<std::string, std::string> extra_files() const override { return tokenizer_files_; }

  const std::vector<std::string>& label_set() const { return label_set_; }
  // "regression", "single_label_classification" or "multi_label_classification".
  const std::string& problem_type() const { return problem_type_; }
  // Reads a file with the task's column flags, without labels (a label column
  // is ignored), for kiln predict.
  data::LabeledDataset read_inputs(const std::string& path) const;
  // Logits (N, num_labels) of every example of `dataset`, in order, in eval mode.
  Tensor predict(const data::LabeledDataset& dataset);

 private:
  using Loader = data::DataLoader<data::LabeledEncoding, data::ClassificationBatch>;
  std::unique_ptr<Loader> make_loader(std::shared_ptr<const data::Dataset<data::LabeledEncoding>> set, bool shuffle,
                                      int64_t batch_size) const;
  data::LabeledFileOptions file_options(bool labelled = true) const;
  data::LabelKind label_kind() const;
  TrainingArguments args_;
  ModelConfig config_;
  std::shared_ptr<nn::SequenceClassifier> model_;
  std::map<std::string, std::string> tokenizer_files_;
  std::vector<std::string> label_set_;
  std::string problem_type_ = "single_label_classification";
  std::unique_ptr<data::TextTokenizer> tokenizer_;
  int32_t pad_id_ = 0;
  std::shared_ptr<const data::Dataset<data::LabeledEncoding>> train_set_, valid_set_;
  std::unique_ptr<Loader> train_loader_;
};

// Loss, correct count and tokens of one batch: correct examples (single
// label), exact matches (multi-label), none counted for regression.
// `logits` (when given) receives the batch's logits (B, num_labels) on the CPU.
MicroBatch classification_forward(const nn::SequenceClassifier& model,
                                  const data::ClassificationBatch& batch, Tensor* logits = nullptr);

}  // namespace kiln::train
