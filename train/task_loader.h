// The DataLoader every training task builds over its examples: batches drawn
// by a sampler, collated on --workers threads with --seed, and staged for the
// model's device (pinned and copied on a side stream for a GPU: Note [Batch
// staging] in data/device_staging.h). Internal, like device_staging.h.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "data/device_staging.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/token_budget_sampler.h"
#include "kiln/train/task_util.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

// The training order (training_sampler: shuffled by --seed, sharded across
// ranks) when `shuffle`, else the dataset's own order.
inline std::shared_ptr<const data::Sampler> task_sampler(const TrainingArguments& args, size_t size, bool shuffle) {
  if (shuffle) return training_sampler(args, size);
  return std::make_shared<data::SequentialSampler>(size);
}

// The batches: `batch_size` at a time in the sampler's order; or, for a
// shuffled (training) loader under --max-tokens-per-batch, token-budgeted
// batches over the tokens `length` counts per example (Note [Token-budgeted
// batches]), which a task with fixed-length examples does not give (an error).
template <typename Example>
std::shared_ptr<const data::BatchSampler> task_batches(const data::Dataset<Example>& set,
                                                       std::shared_ptr<const data::Sampler> sampler,
                                                       int64_t batch_size, bool shuffle,
                                                       const std::function<int64_t(const Example&)>& length,
                                                       const TrainingArguments& args) {
  if (args.max_tokens_per_batch <= 0 || !shuffle)
    return std::make_shared<data::BatchSampler>(std::move(sampler), batch_size);
  KILN_CHECK(length != nullptr, "--max-tokens-per-batch: the ", args.task,
             " task's examples all have --max-seq-length tokens; token-budgeted batches are for "
             "sequence-classification and token-classification");
  std::vector<int64_t> lengths(set.size());
  Generator unused(0);  // the tasks' encoded examples draw nothing
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = length(set.get(i, unused));
  return std::make_shared<data::TokenBudgetBatchSampler>(
      std::move(lengths), data::TokenBudgetOptions{.max_tokens = args.max_tokens_per_batch,
                                                   .max_batch_size = batch_size,
                                                   .seed = args.seed,
                                                   .rank = args.world_size > 1 ? args.rank : 0,
                                                   .world_size = std::max<int64_t>(1, args.world_size)});
}

template <typename Example, typename Batch>
std::unique_ptr<data::DataLoader<Example, Batch>> make_task_loader(
    std::shared_ptr<const data::Dataset<Example>> set, std::shared_ptr<const data::Sampler> sampler,
    int64_t batch_size, std::function<Batch(std::vector<Example>&&)> collate, const nn::Module& model,
    const TrainingArguments& args, bool shuffle = false,
    const std::function<int64_t(const Example&)>& length = nullptr) {
  const Device device = model_device(model);
  auto batches = task_batches<Example>(*set, std::move(sampler), batch_size, shuffle, length, args);
  return std::make_unique<data::DataLoader<Example, Batch>>(
      std::move(set), std::move(batches),
      data::pinned_collate<Example, Batch>(std::move(collate), device),
      data::DataLoaderOptions{.num_workers = args.workers, .seed = args.seed},
      data::device_transfer<Batch>(device));
}

}  // namespace kiln::train
