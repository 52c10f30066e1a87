#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace kiln {
namespace {

thread_local bool t_inside_parallel = false;

// A fixed set of workers that take chunk indices from a shared counter.
// One job runs at a time; a caller that finds the pool busy runs inline.
//
// Note [Pool jobs]: each job has its own chunk counter and completion count
// (struct Job), and a worker works only on the job it picked up when it woke.
// A worker that wakes late, after its job has finished and the next one has
// started, finds its old job's counter exhausted and goes back to sleep; it
// can never take or count a chunk of the new job. (With one counter shared
// by all jobs, such a worker could claim a chunk between the new job's
// fields being set and its counter being reset, so the chunk ran twice and
// the completion count overshot: the caller then waited forever.)
class ThreadPool {
 public:
  explicit ThreadPool(int threads) { resize(threads); }
  ~ThreadPool() { stop_workers(); }

  int size() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> job_guard(job_mutex_);
    stop_workers();
    threads_ = threads;
    stopping_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  // Returns false (and does nothing) when another job holds the pool.
  bool try_run(int64_t chunks, const std::function<void(int64_t)>& body) {
    std::unique_lock<std::mutex> job_guard(job_mutex_, std::try_to_lock);
    if (!job_guard.owns_lock()) return false;
    auto job = std::make_shared<Job>(&body, chunks);
    {
      std::lock_guard<std::mutex> lk(mutex_);
      job_ = job;
      ++generation_;
    }
    cv_.notify_all();
    work(*job);
    std::unique_lock<std::mutex> lk(mutex_);
    done_cv_.wait(lk, [&] { return job->done == job->chunks; });
    job_.reset();
    if (job->error) std::rethrow_exception(job->error);
    return true;
  }

 private:
  struct Job {
    Job(const std::function<void(int64_t)>* b, int64_t c) : body(b), chunks(c) {}
    const std::function<void(int64_t)>* body;  // valid while chunks are left
    const int64_t chunks;
    std::atomic<int64_t> next{0};
    int64_t done = 0;  // guarded by mutex_
    std::exception_ptr error;  // guarded by mutex_
  };

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  void worker_loop() {
    t_inside_parallel = true;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lk(mutex_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      if (job) work(*job);
    }
  }

  void work(Job& job) {
    const bool was_inside = t_inside_parallel;
    t_inside_parallel = true;
    int64_t finished = 0;
    for (;;) {
      const int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) break;
      try {
        (*job.body)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
      ++finished;
    }
    t_inside_parallel = was_inside;
    if (finished > 0) {
      std::lock_guard<std::mutex> lk(mutex_);
      job.done += finished;
      if (job.done == job.chunks) done_cv_.notify_all();
    }
  }

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  std::shared_ptr<Job> job_;  // the running job, guarded by mutex_
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

ThreadPool& pool() {
  static ThreadPool p(default_threads());
  return p;
}

}  // namespace

int get_num_threads() { return pool().size(); }

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected n >= 1, got ", n);
  if (n != pool().size()) pool().resize(n);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = num_chunks(n, grain);
  auto run_chunk = [&](int64_t c) { fn(c * grain, std::min(n, (c + 1) * grain)); };
  if (chunks == 1 || t_inside_parallel || pool().size() == 1) {
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
    return;
  }
  std::function<void(int64_t)> body = run_chunk;
  if (!pool().try_run(chunks, body)) {
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
  }
}

}  // namespace kiln
