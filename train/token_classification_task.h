// Token classification fine-tuning (named-entity recognition):
// `kiln finetune --task token-classification`, `kiln evaluate` and
// `kiln predict` on CoNLL files.
//
// Data: train_file / validation_file in CoNLL layout (data/token_data.h: one
// token per line, the label in the last column or --label-column N, blank
// lines between sentences). Words are aligned to subwords as transformers'
// run_ner does (the label on a word's first subword, -100 on the rest, or
// every subword with --label-all-tokens); a sentence longer than
// max_seq_length is cut into windows at word boundaries, so every word is
// trained on and evaluated exactly once (none is truncated away).
// The label set is the fine-tuned model's id2label when it has one, else the
// training file's labels in sorted order (run_ner's get_label_list); a
// validation label outside it is an error naming the file and line.
//
// Evaluation is per word: a word's prediction is the argmax at its first
// subword, and entity-level precision, recall and F1 (plus token accuracy)
// are seqeval's (train/task_metrics.h), over the words of every sentence.
//
// Model: the family's *ForTokenClassification (nn/auto.h; a fresh classifier
// head when --model is a base model). The saved config has architectures
// [that class, e.g. "BertForTokenClassification"] and id2label / label2id, so
// transformers' AutoModelForTokenClassification loads the directory.
#pragma once
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/data/token_data.h"
#include "kiln/nn/heads.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

class TokenClassificationTask final : public TrainTask {
 public:
  // for_training = false (kiln evaluate / predict): needs only --model, a
  // fine-tuned token classifier; validation_file may then be empty (predict).
  TokenClassificationTask(const TrainingArguments& args, std::ostream& out, bool for_training = true);
  ~TokenClassificationTask() override;

  nn::Module& model() override { return *model_; }
  ModelConfig model_config() const override { return config_; }
  std::string kind() const override { return "token-classification"; }
  size_t batches_per_epoch() const override { return train_loader_ ? train_loader_->num_batches() : 0; }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  void load_loader_state(const data::LoaderState& state) override { train_loader_->load_state(state); }
  void start_epoch(int64_t epoch) override { train_loader_->set_epoch(epoch); }
  std::optional<MicroBatch> forward_next() override;
  // "precision", "recall", "f1" (seqeval, entity level), "accuracy" (words), "loss".
  std::map<std::string, double> evaluate() override;
  double loader_wait_seconds() const override { return train_loader_ ? train_loader_->wait_seconds() : 0.0; }
  std::map<std::string, std::string> extra_files() const override { return tokenizer_files_; }

  const std::vector<std::string>& label_set() const { return label_set_; }
  // The predicted label id of every word of every sentence of `sentences`
  // (labels, if any, are not used), in eval mode without gradients.
  std::vector<std::vector<int32_t>> predict(const data::ConllDataset& sentences);
  // Reads `path` as words (kiln predict: other columns are ignored).
  data::ConllDataset read_words(const std::string& path) const;

 private:
  using Loader = data::DataLoader<data::TokenEncoding, data::TokenClassificationBatch>;
  std::unique_ptr<Loader> make_loader(std::shared_ptr<const data::Dataset<data::TokenEncoding>> set, bool shuffle,
                                      int64_t batch_size) const;
  // Runs the model over `encodings` in order; fills per-word predictions of
  // `sentences` and returns the mean loss over labelled positions (NaN when none).
  double run_eval(const data::ConllDataset& sentences, const std::vector<data::TokenEncoding>& encodings,
                  std::vector<std::vector<int32_t>>& word_predictions);
  data::ConllOptions file_options() const;

  TrainingArguments args_;
  ModelConfig config_;
  std::unique_ptr<data::TextTokenizer> tokenizer_;
  std::shared_ptr<nn::TokenClassifier> model_;
  std::map<std::string, std::string> tokenizer_files_;
  std::vector<std::string> label_set_;
  int32_t pad_id_ = 0;
  std::shared_ptr<const data::Dataset<data::TokenEncoding>> train_set_;
  std::optional<data::ConllDataset> valid_;
  std::vector<data::TokenEncoding> valid_encodings_;
  std::unique_ptr<Loader> train_loader_;
};

// Loss, correct count (over labelled positions) and tokens of one batch;
// `predictions` (when given) receives the argmax label of every position, (B * T) row-major.
MicroBatch token_classification_forward(const nn::TokenClassifier& model,
                                        const data::TokenClassificationBatch& batch,
                                        std::vector<int64_t>* predictions = nullptr);

}  // namespace kiln::train
