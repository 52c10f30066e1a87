#include "train/text_pretraining_task.h"

#include <unistd.h>

#include "autograd/grad_mode.h"
#include "train/task_loader.h"
#include "train/task_util.h"

namespace kiln::train {
namespace fs = std::filesystem;

TextPretrainingTask::~TextPretrainingTask() {
  train_loader_.reset();
  valid_set_.reset();
  train_set_.reset();
  if (!scratch_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(scratch_dir_, ec);
  }
}

std::optional<MicroBatch> TextPretrainingTask::forward_next() {
  std::optional<data::PretrainingBatch> batch = train_loader_->next();
  if (!batch) return std::nullopt;
  return forward_batch(*batch);
}

fs::path TextPretrainingTask::work_dir() {
  if (!args_.output_dir.empty() || args_.validation_file.empty() || fs::is_directory(args_.validation_file))
    return args_.output_dir;
  if (scratch_dir_.empty()) scratch_dir_ = (fs::temp_directory_path() / ("kiln-eval-" + std::to_string(::getpid()))).string();
  return scratch_dir_;
}

void TextPretrainingTask::set_training_data(ExampleSet full, const std::string& what) {
  const size_t n = full->size();
  const size_t held_out = valid_set_ ? 0 : n * static_cast<size_t>(args_.validation_split_percentage) / 100;
  if (held_out > 0) {
    valid_set_ = std::make_shared<SubsetDataset<data::PretrainingExample>>(full, n - held_out, n);
    train_set_ = std::make_shared<SubsetDataset<data::PretrainingExample>>(full, 0, n - held_out);
  } else {
    train_set_ = std::move(full);
  }
  KILN_CHECK(train_set_->size() > 0, "--train-file ", args_.train_file, " gives no ", what);
}

void TextPretrainingTask::make_train_loader() {
  ExampleSet set = train_set_ ? train_set_ : valid_set_;  // evaluation only: a loader over the validation data
  train_loader_ = make_loader(set, training_sampler(args_, set->size()), args_.batch_size);
}

std::unique_ptr<TextPretrainingTask::Loader> TextPretrainingTask::make_loader(
    ExampleSet set, std::shared_ptr<const data::Sampler> sampler, int64_t batch_size) {
  const int32_t pad = pad_id_;
  return make_task_loader<data::PretrainingExample, data::PretrainingBatch>(
      std::move(set), std::move(sampler), batch_size,
      [pad](std::vector<data::PretrainingExample>&& ex) { return data::collate_pretraining(ex, pad); },
      model(), args_);
}

MlmMetrics TextPretrainingTask::evaluate_counts() {
  MlmMetrics metrics;
  if (!valid_set_ || valid_set_->size() == 0) return metrics;
  NoGradGuard no_grad;
  model().eval();
  const int64_t batch_size = args_.eval_batch_size > 0 ? args_.eval_batch_size : args_.batch_size;
  std::unique_ptr<Loader> loader =
      make_loader(valid_set_, std::make_shared<data::SequentialSampler>(valid_set_->size()), batch_size);
  while (std::optional<data::PretrainingBatch> b = loader->next()) {
    const MicroBatch mb = forward_batch(*b);
    metrics.add_counts(mb.correct, mb.predicted);
    metrics.add_loss(mb.loss.item<double>(), mb.predicted);
  }
  return metrics;
}

}  // namespace kiln::train
