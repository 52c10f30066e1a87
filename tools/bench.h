// `kiln bench NAME`: each benchmark lives in tools/bench_NAME.cpp and
// registers a CLI11 sub-subcommand of `bench` through BenchRegistrar.
// Benchmarks print figures; they never assert timings.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln.h"
#include "tools/command.h"

namespace kiln::tools {

struct BenchRegistry {
  static std::vector<std::pair<std::string, CommandSetup>>& all() {
    static std::vector<std::pair<std::string, CommandSetup>> benches;
    return benches;
  }
};

struct BenchRegistrar {
  BenchRegistrar(std::string name, CommandSetup setup) {
    BenchRegistry::all().emplace_back(std::move(name), std::move(setup));
  }
};

// Median wall time in seconds of `reps` runs of fn, after `warmup` runs.
template <typename F>
double median_seconds(F&& fn, int reps, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The memory of the steps run between start() and print(), on the caching
// allocator (the CPU allocator's, or the CUDA device's):
//   start_mib: bytes live at start() (model, optimizer state, gradients);
//   peak_mib: their peak since; step_peak_mib = peak_mib - start_mib, what
//     the steps add at their worst (activations, gradients, temporaries);
//   saved_mib: the most bytes a forward left alive for its backward (live
//     after the forward minus live before it, the step marking both with
//     forward_begin() and forward_end()): the activation memory;
//   peak_rss_mib: the process's peak resident set (getrusage ru_maxrss: never
//     reset, so run one configuration per process).
// Prints `bench NAME-memory KEYS start_mib=... peak_mib=... step_peak_mib=...
// saved_mib=... peak_rss_mib=...`.
class StepMemory {
 public:
  explicit StepMemory(Device device) : device_(device) {}
  void start() {
    if (device_.is_cpu()) cpu_reset_peak_memory_stats();
    else cuda::reset_peak_memory_stats(device_.index);
    start_ = allocated();
    saved_ = 0;
  }
  void forward_begin() { before_forward_ = allocated(); }
  void forward_end() { saved_ = std::max(saved_, allocated() - std::min(allocated(), before_forward_)); }
  void print(const char* name, const std::string& keys) const {
    const std::size_t peak = device_.is_cpu() ? cpu_memory_stats().peak_allocated_bytes
                                              : cuda::memory_stats(device_.index).peak_allocated_bytes;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const double mib = 1024.0 * 1024.0;
    std::printf("bench %s-memory %s start_mib=%.1f peak_mib=%.1f step_peak_mib=%.1f saved_mib=%.1f peak_rss_mib=%.1f\n",
                name, keys.c_str(), static_cast<double>(start_) / mib, static_cast<double>(peak) / mib,
                static_cast<double>(peak - std::min(peak, start_)) / mib, static_cast<double>(saved_) / mib,
                static_cast<double>(ru.ru_maxrss) / 1024.0);
    std::fflush(stdout);
  }

 private:
  std::size_t allocated() const {
    return device_.is_cpu() ? detail::cpu_memory_usage().first : cuda::memory_stats(device_.index).allocated_bytes;
  }
  Device device_;
  std::size_t start_ = 0, before_forward_ = 0, saved_ = 0;
};

}  // namespace kiln::tools
