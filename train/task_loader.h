// The DataLoader every training task builds over its examples: batches drawn
// by a sampler, collated on --workers threads with --seed, and staged for the
// model's device (pinned and copied on a side stream for a GPU: Note [Batch
// staging] in data/device_staging.h). Internal, like device_staging.h.
#pragma once

#include <functional>
#include <memory>

#include "data/device_staging.h"
#include "kiln/data/dataloader.h"
#include "kiln/train/task_util.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

// The training order (training_sampler: shuffled by --seed, sharded across
// ranks) when `shuffle`, else the dataset's own order.
inline std::shared_ptr<const data::Sampler> task_sampler(const TrainingArguments& args, size_t size, bool shuffle) {
  if (shuffle) return training_sampler(args, size);
  return std::make_shared<data::SequentialSampler>(size);
}

template <typename Example, typename Batch>
std::unique_ptr<data::DataLoader<Example, Batch>> make_task_loader(
    std::shared_ptr<const data::Dataset<Example>> set, std::shared_ptr<const data::Sampler> sampler,
    int64_t batch_size, std::function<Batch(std::vector<Example>&&)> collate, const nn::Module& model,
    const TrainingArguments& args) {
  const Device device = model_device(model);
  return std::make_unique<data::DataLoader<Example, Batch>>(
      std::move(set), std::make_shared<data::BatchSampler>(std::move(sampler), batch_size),
      data::pinned_collate<Example, Batch>(std::move(collate), device),
      data::DataLoaderOptions{.num_workers = args.workers, .seed = args.seed},
      data::device_transfer<Batch>(device));
}

}  // namespace kiln::train
