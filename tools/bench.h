// `kiln bench NAME`: each benchmark lives in tools/bench_NAME.cpp and
// registers a CLI11 sub-subcommand of `bench` through BenchRegistrar.
// Benchmarks print figures; they never assert timings.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

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

}  // namespace kiln::tools
