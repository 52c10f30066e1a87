// Batches for a CUDA device: pinned host staging in the loader's workers and
// asynchronous host-to-device copies on a side stream (Note [Batch staging]).
//
//   auto collate = data::pinned_collate<Example, Batch>(my_collate, device);
//   DataLoader<Example, Batch> loader(ds, bs, collate, options, data::device_transfer<Batch>(device));
//   Batch b = *loader.next();   // b's tensors are on `device`, ready on its current stream
//
// A Batch type takes part by offering `for_each_tensor(Batch&, F)` (found by
// argument-dependent lookup) that calls F on every Tensor member, defined or
// not (data/pretraining.h, data/finetune_data.h). For a CPU device both
// helpers change nothing: the collate is returned as is and the transfer is
// empty. Asking for CUDA in a build without it is a kiln::Error "built
// without CUDA" at construction, not at the first batch.
//
// Note [Batch staging]
// ~~~~~~~~~~~~~~~~~~~~
// PyTorch's DataLoader(pin_memory=True) + tensor.to(device, non_blocking=True),
// with the copy on its own stream:
//  1. pin (worker thread): after collate, every tensor of the batch is copied
//     into page-locked memory from the pinned caching allocator (cuda/cuda.h),
//     so the consumer never pins and the copy below can be asynchronous;
//  2. copy (consumer thread, inside DataLoader::next): each tensor is
//     allocated on the device while the copy stream is current and copied
//     with non_blocking = true; the copy stream records an event and the
//     device's current (compute) stream waits on it. next() returns at once:
//     the host goes on queueing the step while the GPU still runs the end of
//     the previous step on the compute stream and this batch's copy on the
//     copy stream, side by side;
//  3. lifetimes: record_stream(device tensor, compute stream) keeps the
//     allocator from handing the batch's device memory to the copy stream
//     again before the step that reads it has run; the pinned source is kept
//     from reuse until its copy is done (cuda::copy with non_blocking).
// The batch's values do not depend on any of this: staging changes when the
// bytes move, never which bytes (the stream of batches stays a pure function
// of the loader's inputs, as data/dataloader.h promises).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

// `t` pinned (a pinned copy; undefined and already-pinned tensors as they are).
Tensor pin_tensor(const Tensor& t);
// `t` on `device` through the staging copy stream of step 2 above (undefined
// tensors and tensors already there as they are). `device` is a CUDA device.
Tensor stage_to_device(const Tensor& t, Device device);
// kiln::Error unless `device` is the CPU or an available CUDA device.
void check_staging_device(Device device);

// The loader's collate followed by step 1 when `device` is CUDA; `collate` itself for the CPU.
template <typename Example, typename Batch>
std::function<Batch(std::vector<Example>&&)> pinned_collate(std::function<Batch(std::vector<Example>&&)> collate,
                                                            Device device) {
  check_staging_device(device);
  if (device.is_cpu()) return collate;
  return [collate = std::move(collate)](std::vector<Example>&& examples) {
    Batch batch = collate(std::move(examples));
    for_each_tensor(batch, [](Tensor& t) { t = pin_tensor(t); });
    return batch;
  };
}

// The loader's transfer hook doing step 2 for a CUDA `device`; empty (no hook) for the CPU.
template <typename Batch>
std::function<Batch(Batch&&)> device_transfer(Device device) {
  check_staging_device(device);
  if (device.is_cpu()) return {};
  return [device](Batch&& batch) {
    for_each_tensor(batch, [device](Tensor& t) { t = stage_to_device(t, device); });
    return std::move(batch);
  };
}

}  // namespace kiln::data
