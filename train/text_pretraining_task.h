// What kiln's two text-pretraining tasks share (MlmTask, CausalLmTask): the
// examples are data::PretrainingExample blocks of a corpus, batched by
// collate_pretraining; the training loader and its state; the held-out
// split without a validation file; the evaluation loop (counts and
// token-weighted loss in MlmMetrics); the scratch folder corpora are
// prepared into when evaluating without --output-dir. A task supplies the
// model, its forward on one batch, and its metric names.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kiln/data/dataloader.h"
#include "kiln/data/pretraining.h"
#include "kiln/train/metrics.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

class TextPretrainingTask : public TrainTask {
 public:
  ~TextPretrainingTask() override;  // releases the loaders, then removes the scratch folder

  size_t batches_per_epoch() const override { return train_loader_->num_batches(); }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  void load_loader_state(const data::LoaderState& state) override { train_loader_->load_state(state); }
  void start_epoch(int64_t epoch) override { train_loader_->set_epoch(epoch); }
  std::optional<MicroBatch> forward_next() override;
  double loader_wait_seconds() const override { return train_loader_->wait_seconds(); }
  std::map<std::string, std::string> extra_files() const override { return tokenizer_files_; }

  size_t num_train_examples() const { return train_set_ ? train_set_->size() : 0; }
  size_t num_validation_examples() const { return valid_set_ ? valid_set_->size() : 0; }

 protected:
  using ExampleSet = std::shared_ptr<const data::Dataset<data::PretrainingExample>>;
  using Loader = data::DataLoader<data::PretrainingExample, data::PretrainingBatch>;

  explicit TextPretrainingTask(const TrainingArguments& args) : args_(args) {}
  // One batch through the model (the loss attached to the graph when grad mode is on).
  virtual MicroBatch forward_batch(const data::PretrainingBatch& batch) const = 0;

  // Where text files are prepared: --output-dir, else (evaluation of a text
  // file) a scratch folder the destructor removes.
  std::filesystem::path work_dir();
  // train_set_ = `full`, less the last validation_split_percentage % when no
  // validation set was given (those become valid_set_); kiln::Error when no
  // training example is left (`what` describes an example).
  void set_training_data(ExampleSet full, const std::string& what);
  // The loader of the training set (or, evaluating only, of the validation set).
  void make_train_loader();
  std::unique_ptr<Loader> make_loader(ExampleSet set, std::shared_ptr<const data::Sampler> sampler,
                                      int64_t batch_size);
  // forward_batch over the validation set in order, under no-grad in eval mode.
  MlmMetrics evaluate_counts();

  TrainingArguments args_;
  std::map<std::string, std::string> tokenizer_files_;
  int32_t pad_id_ = 0;
  ExampleSet train_set_, valid_set_;
  std::unique_ptr<Loader> train_loader_;

 private:
  std::string scratch_dir_;
};

}  // namespace kiln::train
