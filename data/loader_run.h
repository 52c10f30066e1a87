// The machinery behind DataLoader (data/dataloader.h): making one batch, and
// the state one epoch's worker threads share with the consumer.
//
// Note [Loader threads]
// One LoaderRun serves one epoch from a start batch on. Worker threads claim
// batch numbers from a shared counter (next_claim) and the consumer takes them
// strictly in order (next_take). Batch k lives in slots[k % capacity]; a worker
// may claim k only while k < next_take + capacity, so at most `capacity`
// batches are claimed-but-not-taken (the prefetch bound) and batch k's slot is
// free, since batch k - capacity was taken already.
// Everything a worker touches is owned by the LoaderRun (the dataset through
// shared ownership), which the worker co-owns: an abandoned worker (after a
// timeout) can finish its current get() after the DataLoader is gone. Workers
// check `stopping` between examples and before collating, so after a stop they
// run no further user code beyond the get() already in progress.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/data/dataset.h"

namespace kiln::data::detail {

// "DataLoader: worker failed on sample <index>: <what>"
std::string sample_failure_message(size_t index, const std::string& what);
// "DataLoader: collate failed on batch <batch> of epoch <epoch>: <what>"
std::string collate_failure_message(size_t batch, int64_t epoch, const std::string& what);
// Names the timeout, the batch and the sample being loaded (-1: not started).
std::string timeout_message(double seconds, size_t batch, int64_t epoch, int64_t sample);

// Batch `batch` of `epoch` (examples `indices`): each example with its own
// generator (Note [Loader randomness]), then collated. `on_sample(index)` runs
// before each example. Returns nullopt when *stop turns true between examples
// or before collating. Failures throw kiln::Error naming the sample (or batch).
template <typename Example, typename Batch, typename OnSample>
std::optional<Batch> make_batch(const Dataset<Example>& dataset,
                                const std::function<Batch(std::vector<Example>&&)>& collate,
                                const std::vector<size_t>& indices, uint64_t seed, int64_t epoch, size_t batch,
                                const std::atomic<bool>* stop, OnSample&& on_sample) {
  auto stopped = [&] { return stop != nullptr && stop->load(std::memory_order_acquire); };
  std::vector<Example> examples;
  examples.reserve(indices.size());
  const size_t n = dataset.size();
  for (size_t index : indices) {
    if (stopped()) return std::nullopt;
    on_sample(index);
    try {
      KILN_CHECK(index < n, "index out of range for a dataset of size ", n);
      Generator rng(example_seed(seed, epoch, index));
      examples.push_back(dataset.get(index, rng));
    } catch (const std::exception& e) {
      throw Error(sample_failure_message(index, e.what()));
    } catch (...) {
      throw Error(sample_failure_message(index, "unknown exception"));
    }
  }
  if (stopped()) return std::nullopt;
  try {
    return collate(std::move(examples));
  } catch (const std::exception& e) {
    throw Error(collate_failure_message(batch, epoch, e.what()));
  } catch (...) {
    throw Error(collate_failure_message(batch, epoch, "unknown exception"));
  }
}

template <typename Example, typename Batch>
struct LoaderRun {
  using Collate = std::function<Batch(std::vector<Example>&&)>;

  struct Slot {
    enum class Status { kEmpty, kLoading, kReady, kFailed };
    Status status = Status::kEmpty;     // guarded by mutex
    std::optional<Batch> batch;         // kReady; guarded by mutex
    std::string error;                  // kFailed; guarded by mutex
    std::atomic<int64_t> sample{-1};    // index being loaded while kLoading
  };

  LoaderRun(std::shared_ptr<const Dataset<Example>> dataset_, Collate collate_,
            std::vector<std::vector<size_t>> batches_, uint64_t seed_, int64_t epoch_, size_t first_batch,
            size_t capacity_)
      : dataset(std::move(dataset_)),
        collate(std::move(collate_)),
        batches(std::move(batches_)),
        seed(seed_),
        epoch(epoch_),
        capacity(capacity_),
        next_claim(first_batch),
        next_take(first_batch),
        slots(capacity_) {}

  Slot& slot(size_t batch) { return slots[batch % capacity]; }

  // Sets `stopping` and wakes every worker.
  void request_stop() {
    {
      std::lock_guard<std::mutex> lk(mutex);
      stopping.store(true, std::memory_order_release);
    }
    work_cv.notify_all();
  }

  // Immutable while the run exists.
  const std::shared_ptr<const Dataset<Example>> dataset;
  const Collate collate;
  const std::vector<std::vector<size_t>> batches;  // the whole epoch
  const uint64_t seed;
  const int64_t epoch;
  const size_t capacity;  // >= 1

  std::mutex mutex;
  std::condition_variable work_cv;   // workers: a slot freed, or stop
  std::condition_variable ready_cv;  // consumer: a batch finished
  size_t next_claim;                 // guarded by mutex
  size_t next_take;                  // guarded by mutex
  std::vector<Slot> slots;           // batch k in slots[k % capacity]
  std::atomic<bool> stopping{false};  // written under mutex
};

// A worker thread's body: claim, make, publish, until the epoch is claimed or
// the run stops (Note [Loader threads]).
template <typename Example, typename Batch>
void worker_main(std::shared_ptr<LoaderRun<Example, Batch>> run) {
  using Status = typename LoaderRun<Example, Batch>::Slot::Status;
  LoaderRun<Example, Batch>& r = *run;
  for (;;) {
    size_t k = 0;
    {
      std::unique_lock<std::mutex> lk(r.mutex);
      r.work_cv.wait(lk, [&] {
        return r.stopping.load() || r.next_claim >= r.batches.size() || r.next_claim < r.next_take + r.capacity;
      });
      if (r.stopping.load() || r.next_claim >= r.batches.size()) return;
      k = r.next_claim++;
      r.slot(k).status = Status::kLoading;
    }
    auto& slot = r.slot(k);
    std::optional<Batch> batch;
    std::string error;
    bool failed = false;
    try {
      batch = make_batch<Example, Batch>(*r.dataset, r.collate, r.batches[k], r.seed, r.epoch, k, &r.stopping,
                                         [&](size_t index) { slot.sample.store(static_cast<int64_t>(index)); });
      if (!batch) return;  // stopped
    } catch (const std::exception& e) {
      failed = true;
      error = e.what();
    } catch (...) {
      failed = true;
      error = "DataLoader: worker failed with an unknown exception";
    }
    {
      std::lock_guard<std::mutex> lk(r.mutex);
      slot.status = failed ? Status::kFailed : Status::kReady;
      slot.batch = std::move(batch);
      slot.error = std::move(error);
    }
    r.ready_cv.notify_all();
  }
}

}  // namespace kiln::data::detail
