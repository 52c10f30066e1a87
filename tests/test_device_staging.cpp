// Batch staging for a CUDA device (data/device_staging.h, Note [Batch
// staging]): on the CPU the loader is untouched; asking for CUDA where there
// is none is one clear error; on a GPU (skipped elsewhere) batches arrive on
// the device, from pinned memory, equal to the CPU loader's, for 0 and 2
// workers.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cuda/cuda.h"
#include "data/dataloader.h"
#include "data/device_staging.h"
#include "data/finetune_data.h"
#include "data/pretraining.h"
#include "ops/ops.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using testing::kGpu;

// Example i: 3 + i % 5 tokens, labels on every other position, NSP label i % 2.
std::shared_ptr<FunctionDataset<PretrainingExample>> pretraining_examples(size_t n) {
  return std::make_shared<FunctionDataset<PretrainingExample>>(n, [](size_t i, Generator&) {
    const size_t len = 3 + i % 5;
    PretrainingExample e;
    for (size_t t = 0; t < len; ++t) {
      e.input_ids.push_back(static_cast<int32_t>(10 + i + t));
      e.token_type_ids.push_back(t < len / 2 ? 0 : 1);
      e.labels.push_back(t % 2 ? static_cast<int32_t>(20 + t) : kIgnoreIndex);
    }
    e.next_sentence_label = static_cast<int32_t>(i % 2);
    return e;
  });
}

using Loader = DataLoader<PretrainingExample, PretrainingBatch>;
using Collate = Loader::Collate;

Collate plain_collate() {
  return [](std::vector<PretrainingExample>&& ex) { return collate_pretraining(ex, 0); };
}

std::unique_ptr<Loader> make_loader(Device device, int64_t workers) {
  auto ds = pretraining_examples(23);
  return std::make_unique<Loader>(
      ds, std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(ds->size()), 4),
      pinned_collate<PretrainingExample, PretrainingBatch>(plain_collate(), device),
      DataLoaderOptions{.num_workers = workers, .seed = 7}, device_transfer<PretrainingBatch>(device));
}

std::vector<Tensor> tensors_of(PretrainingBatch& b) {
  std::vector<Tensor> out;
  for_each_tensor(b, [&](Tensor& t) { out.push_back(t); });
  return out;
}

TEST(DeviceStaging, ForEachTensorVisitsEveryMember) {
  PretrainingBatch p;
  int n = 0;
  for_each_tensor(p, [&](Tensor&) { ++n; });
  EXPECT_EQ(n, 5);
  ClassificationBatch c;
  c.labels = zeros({2}, TensorOptions(DType::Int64));
  n = 0;
  int defined = 0;
  for_each_tensor(c, [&](Tensor& t) { ++n, defined += t.defined() ? 1 : 0; });
  EXPECT_EQ(n, 4);
  EXPECT_EQ(defined, 1);
}

TEST(DeviceStaging, CpuLeavesTheLoaderAsItIs) {
  EXPECT_FALSE(device_transfer<PretrainingBatch>(kCPU));  // no hook at all
  auto staged = make_loader(kCPU, 2);
  auto ds = pretraining_examples(23);
  Loader plain(ds, std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(ds->size()), 4),
               plain_collate(), DataLoaderOptions{.num_workers = 0, .seed = 7});
  int batches = 0;
  while (std::optional<PretrainingBatch> a = staged->next()) {
    std::optional<PretrainingBatch> b = plain.next();
    ASSERT_TRUE(b.has_value());
    std::vector<Tensor> ta = tensors_of(*a), tb = tensors_of(*b);
    for (size_t i = 0; i < ta.size(); ++i) {
      EXPECT_TRUE(ta[i].device().is_cpu());
      EXPECT_TRUE(testing::bitwise_equal(ta[i], tb[i])) << "batch " << batches << " tensor " << i;
    }
    ++batches;
  }
  EXPECT_FALSE(plain.next().has_value());
  EXPECT_EQ(batches, 6);
}

TEST(DeviceStaging, MissingCudaIsOneClearErrorAtConstruction) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  const char* why = cuda_built() ? "no such CUDA device" : "built without CUDA";
  EXPECT_KILN_ERROR(make_loader(kGpu, 0), "DataLoader staging for cuda:0", why);
  EXPECT_KILN_ERROR(device_transfer<ClassificationBatch>(kGpu), "DataLoader staging", why);
}

TEST(DeviceStaging, GpuBatchesArePinnedCopiedAndEqualToTheCpuOnes) {
  KILN_REQUIRE_CUDA();
  // The worker-side collate pins.
  Collate pin = pinned_collate<PretrainingExample, PretrainingBatch>(plain_collate(), kGpu);
  std::vector<PretrainingExample> ex{pretraining_examples(2)->get(0, default_generator()),
                                     pretraining_examples(2)->get(1, default_generator())};
  PretrainingBatch pinned = pin(std::move(ex));
  for (const Tensor& t : tensors_of(pinned)) EXPECT_TRUE(cuda::is_pinned(t));

  auto reference = make_loader(kCPU, 0);
  for (int64_t workers : {0, 2}) {
    auto staged = make_loader(kGpu, workers);
    reference->set_epoch(0);
    int batches = 0;
    while (std::optional<PretrainingBatch> a = staged->next()) {
      std::optional<PretrainingBatch> b = reference->next();
      ASSERT_TRUE(b.has_value());
      std::vector<Tensor> ta = tensors_of(*a), tb = tensors_of(*b);
      for (size_t i = 0; i < ta.size(); ++i) {
        EXPECT_EQ(ta[i].device(), kGpu);
        // Read on the compute stream, which waited for the copy stream.
        EXPECT_TRUE(testing::bitwise_equal(ta[i].to(kCPU), tb[i])) << "workers " << workers << " batch " << batches;
      }
      ++batches;
    }
    EXPECT_EQ(batches, 6);
  }
}

}  // namespace
}  // namespace kiln::data
