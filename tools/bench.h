// `kiln bench NAME`: each benchmark lives in tools/bench_NAME.cpp and
// registers a CLI11 sub-subcommand of `bench` through BenchRegistrar.
// Benchmarks print figures; they never assert timings.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
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
// With enable_phases() (`--memory`), the step marks its phases
// (phase_begin(Forward), (Backward), (Optimizer), phase_end()) and each
// phase's peaks are taken on their own: the allocator's peak reset at the
// phase's start, and the resident peak too (VmHWM of /proc/self/status,
// reset by writing 5 to /proc/self/clear_refs; rss_reset=0 where Linux
// refuses, the peak then being the process's). A second line prints them:
// `bench NAME-memory-phases KEYS forward_peak_mib=... forward_peak_rss_mib=...
// backward_... optimizer_... rss_reset=0|1` (the largest over the steps).
class StepMemory {
 public:
  enum Phase { Forward, Backward, Optimizer, kPhases };
  explicit StepMemory(Device device) : device_(device) {}
  void enable_phases() { phases_ = true; }
  void start() {
    reset_allocator_peak();
    start_ = allocated();
    saved_ = 0;
    overall_peak_ = 0;
  }
  void forward_begin() { before_forward_ = allocated(); }
  void forward_end() { saved_ = std::max(saved_, allocated() - std::min(allocated(), before_forward_)); }
  void phase_begin(Phase p) {
    if (!phases_) return;
    phase_end();
    current_ = p;
    reset_allocator_peak();
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    rss_reset_ = static_cast<bool>(clear);
  }
  void phase_end() {
    if (!phases_ || current_ == kPhases) return;
    const std::size_t peak = allocator_peak();
    overall_peak_ = std::max(overall_peak_, peak);
    alloc_peak_[current_] = std::max(alloc_peak_[current_], peak);
    rss_peak_[current_] = std::max(rss_peak_[current_], resident_peak());
    current_ = kPhases;
  }
  void print(const char* name, const std::string& keys) const {
    const std::size_t peak = phases_ ? overall_peak_ : allocator_peak();
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("bench %s-memory %s start_mib=%.1f peak_mib=%.1f step_peak_mib=%.1f saved_mib=%.1f peak_rss_mib=%.1f\n",
                name, keys.c_str(), mib(start_), mib(peak), mib(peak - std::min(peak, start_)), mib(saved_),
                static_cast<double>(ru.ru_maxrss) / 1024.0);
    if (phases_) {
      std::printf("bench %s-memory-phases %s", name, keys.c_str());
      const char* names[kPhases] = {"forward", "backward", "optimizer"};
      for (int p = 0; p < kPhases; ++p)
        std::printf(" %s_peak_mib=%.1f %s_peak_rss_mib=%.1f", names[p], mib(alloc_peak_[p]), names[p], mib(rss_peak_[p]));
      std::printf(" rss_reset=%d\n", rss_reset_ ? 1 : 0);
    }
    std::fflush(stdout);
  }

 private:
  static double mib(std::size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
  std::size_t allocated() const {
    return device_.is_cpu() ? detail::cpu_memory_usage().first : cuda::memory_stats(device_.index).allocated_bytes;
  }
  std::size_t allocator_peak() const {
    return device_.is_cpu() ? cpu_memory_stats().peak_allocated_bytes
                            : cuda::memory_stats(device_.index).peak_allocated_bytes;
  }
  void reset_allocator_peak() const {
    if (device_.is_cpu()) cpu_reset_peak_memory_stats();
    else cuda::reset_peak_memory_stats(device_.index);
  }
  static std::size_t resident_peak() { return resident_peak_bytes(); }
  Device device_;
  std::size_t start_ = 0, before_forward_ = 0, saved_ = 0, overall_peak_ = 0;
  bool phases_ = false, rss_reset_ = false;
  Phase current_ = kPhases;
  std::size_t alloc_peak_[kPhases] = {}, rss_peak_[kPhases] = {};
};

}  // namespace kiln::tools
