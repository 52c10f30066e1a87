// DataLoader: batches from a Dataset in BatchSampler order, made inline or by
// N worker threads with bounded prefetch, resumable mid-epoch.
//
//   auto ds = std::make_shared<MyDataset>(...);             // Dataset<Example>
//   auto bs = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(ds->size(), seed), 32);
//   DataLoader<Example, Batch> loader(ds, bs, collate, {.num_workers = 4, .seed = seed});
//   for (int64_t epoch = loader.epoch();; loader.set_epoch(++epoch))
//     while (std::optional<Batch> b = loader.next()) train_step(*b);
//
// Invariants:
//  - next() returns batch k = state().batches_consumed of epoch(), i.e. the
//    batch sampler's batches(epoch)[k], then advances; nullopt once the epoch
//    is used up (and again on every call until set_epoch / load_state).
//  - the stream of batches is a pure function of (dataset, batch sampler,
//    collate, options.seed, epoch): the same for any num_workers, prefetch or
//    timing (Note [Loader randomness] in data/dataset.h, Note [Loader threads]
//    in data/loader_run.h).
//  - a loader restored with load_state(state()) returns exactly the batches the
//    saved one had not returned yet; consumed batches are never loaded.
//  - at most num_workers * prefetch_factor batches are in flight (claimed by a
//    worker but not yet returned by next()).
//  - next(), set_epoch(), load_state(), stop() are for one consumer thread;
//    the loader is not safe to share between consumers.
//  - workers start lazily on the first next() of an epoch (or after a stop)
//    and are joined at the epoch's end, on set_epoch / load_state / stop and
//    in the destructor; a stop takes effect between two examples.
//
// Errors (all kiln::Error, thrown by next()):
//  - an example's get() throws: "DataLoader: worker failed on sample <index>:
//    <message>" (also with num_workers = 0); collate throws: "DataLoader:
//    collate failed on batch <k> ...". The workers are joined, the state is
//    left at batch k, and the next next() retries it.
//  - with workers and timeout_seconds > 0, batch k not ready within the timeout
//    after next() starts waiting: "DataLoader: timed out after <t> s
//    (timeout_seconds) waiting for batch <k> of epoch <e>; a worker is loading
//    sample <index>" (or "no worker has started it"). A thread cannot be
//    interrupted, so the workers are abandoned instead of joined: they stop at
//    their next example boundary and exit in the background (they co-own all
//    they touch); the next next() starts fresh workers at batch k.
//
// Extension point: `transfer` (optional) runs on each batch in the consumer
// thread inside next(), after the batch is taken: the place for copying into
// pinned host memory and starting an asynchronous host-to-device copy. Its
// exceptions propagate unchanged; the batch counts as consumed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/data/dataset.h"
#include "kiln/data/loader_run.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t num_workers = 0;      // >= 0; 0: batches are made inline by next()
  int64_t prefetch_factor = 2;  // >= 1; batches in flight per worker
  double timeout_seconds = 0;   // >= 0; 0: wait forever (workers only)
  uint64_t seed = 0;            // per-example generators (Note [Loader randomness])
};

// kiln::Error naming the offending field.
void check_options(const DataLoaderOptions& options);

// Where a loader is in its stream; goes into checkpoints.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batches_consumed = 0;  // batches of `epoch` already returned by next()
  // Note [Elastic epochs] (data/sampler.h): `epoch` continues from this
  // position of its global order (a resume on another number of ranks); 0
  // for an epoch run from its start. batches_consumed counts from there.
  int64_t epoch_start = 0;

  // {"epoch": ..., "batches_consumed": ...} (+ "epoch_start" when not 0)
  std::map<std::string, int64_t> to_map() const;
  // kiln::Error when a key is missing or a value is negative ("epoch_start" may be absent: 0).
  static LoaderState from_map(const std::map<std::string, int64_t>& map);
  bool operator==(const LoaderState&) const = default;
};

template <typename Example, typename Batch>
class DataLoader {
 public:
  using Collate = std::function<Batch(std::vector<Example>&&)>;
  using Transfer = std::function<Batch(Batch&&)>;

  // Non-null dataset and batch sampler, a non-empty collate and valid options,
  // else kiln::Error. Starts no thread.
  DataLoader(std::shared_ptr<const Dataset<Example>> dataset, std::shared_ptr<const BatchSampler> batch_sampler,
             Collate collate, DataLoaderOptions options = {}, Transfer transfer = {})
      : dataset_(std::move(dataset)),
        batch_sampler_(std::move(batch_sampler)),
        collate_(std::move(collate)),
        transfer_(std::move(transfer)),
        options_(options) {
    KILN_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
    KILN_CHECK(batch_sampler_ != nullptr, "DataLoader: batch sampler is null");
    KILN_CHECK(collate_ != nullptr, "DataLoader: collate function is empty");
    check_options(options_);
  }
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  ~DataLoader() { stop(); }

  // The next batch of the current epoch, or nullopt at its end.
  std::optional<Batch> next() {
    profiler::RecordScope span("DataLoader::next", profiler::Category::Loader);  // the consumer's wait
    const auto t0 = std::chrono::steady_clock::now();
    struct AddWait {
      double& total;
      std::chrono::steady_clock::time_point t0;
      ~AddWait() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    } add_wait{wait_seconds_, t0};

    if (!run_) {
      std::vector<std::vector<size_t>> batches =
          batch_sampler_->batches_from(epoch_, static_cast<size_t>(epoch_start_));
      if (consumed_ >= batches.size()) return std::nullopt;
      start_run(std::move(batches));
    }
    const size_t k = consumed_;
    Batch batch = workers_.empty() ? make_inline(k) : take_from_workers(k);
    ++consumed_;
    if (consumed_ >= run_->batches.size()) stop_run();  // epoch done: workers have exited
    if (transfer_) return transfer_(std::move(batch));
    return batch;
  }

  // Starts epoch `epoch` (>= 0) from its first batch.
  void set_epoch(int64_t epoch) {
    KILN_CHECK(epoch >= 0, "DataLoader: epoch must be >= 0, got ", epoch);
    stop_run();
    epoch_ = epoch;
    consumed_ = 0;
    epoch_start_ = 0;
  }

  LoaderState state() const { return {epoch_, static_cast<int64_t>(consumed_), epoch_start_}; }

  // Continues from `state` (as saved by state()); kiln::Error when
  // batches_consumed exceeds the batches per epoch.
  void load_state(const LoaderState& state) {
    KILN_CHECK(state.epoch >= 0, "DataLoader: load_state: epoch must be >= 0, got ", state.epoch);
    KILN_CHECK(state.batches_consumed >= 0 && static_cast<size_t>(state.batches_consumed) <= num_batches(),
               "DataLoader: load_state: batches_consumed ", state.batches_consumed, " is outside [0, ",
               num_batches(), "] (batches per epoch)");
    KILN_CHECK(state.epoch_start >= 0, "DataLoader: load_state: epoch_start must be >= 0, got ", state.epoch_start);
    stop_run();
    epoch_ = state.epoch;
    consumed_ = static_cast<size_t>(state.batches_consumed);
    epoch_start_ = state.epoch_start;
  }

  // Joins the workers (finishing at most their current examples) and drops
  // prefetched batches; the next next() resumes at state().
  void stop() { stop_run(); }

  int64_t epoch() const { return epoch_; }
  size_t num_batches() const { return batch_sampler_->size(); }
  // Cumulative seconds spent inside next() (waiting for or making batches).
  double wait_seconds() const { return wait_seconds_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  using Run = detail::LoaderRun<Example, Batch>;
  using Status = typename Run::Slot::Status;

  void start_run(std::vector<std::vector<size_t>> batches) {
    const auto workers = static_cast<size_t>(options_.num_workers);
    const size_t capacity = workers == 0 ? 1 : workers * static_cast<size_t>(options_.prefetch_factor);
    run_ = std::make_shared<Run>(dataset_, collate_, std::move(batches), options_.seed, epoch_, consumed_, capacity);
    try {
      for (size_t w = 0; w < workers; ++w) workers_.emplace_back(detail::worker_main<Example, Batch>, run_);
    } catch (...) {
      stop_run();
      throw;
    }
  }

  // Stops the workers and forgets the run; join = false abandons them.
  void stop_run(bool join = true) {
    if (!run_) return;
    run_->request_stop();
    for (std::thread& t : workers_) {
      if (join)
        t.join();
      else
        t.detach();
    }
    workers_.clear();
    run_.reset();
  }

  Batch make_inline(size_t k) {
    std::optional<Batch> b = detail::make_batch<Example, Batch>(*dataset_, collate_, run_->batches[k], options_.seed,
                                                                epoch_, k, nullptr, [](size_t) {});
    return std::move(*b);
  }

  Batch take_from_workers(size_t k) {
    Run& r = *run_;
    auto& slot = r.slot(k);
    std::unique_lock<std::mutex> lk(r.mutex);
    auto done = [&] { return slot.status == Status::kReady || slot.status == Status::kFailed; };
    if (options_.timeout_seconds > 0) {
      if (!r.ready_cv.wait_for(lk, std::chrono::duration<double>(options_.timeout_seconds), done)) {
        const int64_t sample = slot.status == Status::kLoading ? slot.sample.load() : -1;
        lk.unlock();
        stop_run(/*join=*/false);
        throw Error(detail::timeout_message(options_.timeout_seconds, k, epoch_, sample));
      }
    } else {
      r.ready_cv.wait(lk, done);
    }
    if (slot.status == Status::kFailed) {
      const std::string message = slot.error;
      lk.unlock();
      stop_run();
      throw Error(message);
    }
    Batch batch = std::move(*slot.batch);
    slot.batch.reset();
    slot.status = Status::kEmpty;
    slot.sample.store(-1);
    r.next_take = k + 1;
    lk.unlock();
    r.work_cv.notify_all();
    return batch;
  }

  std::shared_ptr<const Dataset<Example>> dataset_;
  std::shared_ptr<const BatchSampler> batch_sampler_;
  Collate collate_;
  Transfer transfer_;
  DataLoaderOptions options_;

  int64_t epoch_ = 0;
  size_t consumed_ = 0;         // batches of epoch_ returned so far
  int64_t epoch_start_ = 0;     // Note [Elastic epochs]
  double wait_seconds_ = 0;
  std::shared_ptr<Run> run_;    // null: no run (none started, or stopped)
  std::vector<std::thread> workers_;
};

}  // namespace kiln::data
