// bench_allocator: latency of one allocate+free pair of the caching allocator
// on its cached path (host heap as the "device", one stream), per size class.
// Prints one line per size: median and p99 over N timed pairs (default 1e6;
// first argument overrides), the timer's own cost included. Target: median
// < 1 us. For context, the same with caching off (straight to the heap) over
// N/10 pairs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "core/memory/host_memory.h"

using kiln::memory::CachingAllocator;
using Clock = std::chrono::steady_clock;

namespace {

struct Latency {
  double median_ns, p99_ns, mean_ns;
};

Latency summarize(std::vector<std::int64_t>& ns) {
  std::sort(ns.begin(), ns.end());
  double sum = 0;
  for (auto v : ns) sum += static_cast<double>(v);
  return {static_cast<double>(ns[ns.size() / 2]), static_cast<double>(ns[ns.size() * 99 / 100]),
          sum / static_cast<double>(ns.size())};
}

Latency time_pairs(CachingAllocator& alloc, std::size_t bytes, std::size_t pairs) {
  const kiln::memory::Stream stream{1};
  for (int i = 0; i < 1000; ++i) alloc.free(alloc.allocate(bytes, stream));  // warm the cache
  std::vector<std::int64_t> ns(pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto t0 = Clock::now();
    void* p = alloc.allocate(bytes, stream);
    alloc.free(p);
    const auto t1 = Clock::now();
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  return summarize(ns);
}

double timer_overhead_ns() {
  std::vector<std::int64_t> ns(100000);
  for (auto& v : ns) {
    const auto t0 = Clock::now();
    const auto t1 = Clock::now();
    v = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  return summarize(ns).median_ns;
}

std::unique_ptr<CachingAllocator> make(CachingAllocator::Caching caching) {
  CachingAllocator::Options options;
  options.caching = caching;
  return std::make_unique<CachingAllocator>(std::make_unique<kiln::memory::HostHeapMemory>(),
                                            options);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  if (pairs < 100) {
    std::fprintf(stderr, "bench_allocator: need at least 100 pairs, got '%s'\n", argv[1]);
    return 2;
  }
  const std::size_t kSizes[] = {512, 4096, 64 << 10, 1 << 20, 4 << 20, 32 << 20};
  std::printf("timer overhead (median, included below): %.0f ns\n", timer_overhead_ns());
  auto cached = make(CachingAllocator::Caching::Enabled);
  for (std::size_t bytes : kSizes) {
    const Latency l = time_pairs(*cached, bytes, pairs);
    std::printf("cached   %-10s %-5s pool  pairs %zu  median %6.0f ns  p99 %6.0f ns  mean %6.0f ns\n",
                kiln::memory::format_bytes(bytes).c_str(),
                bytes <= kiln::memory::kSmallRequestLimit ? "small" : "large", pairs, l.median_ns,
                l.p99_ns, l.mean_ns);
  }
  auto direct = make(CachingAllocator::Caching::Disabled);
  for (std::size_t bytes : kSizes) {
    const Latency l = time_pairs(*direct, bytes, pairs / 10);
    std::printf("uncached %-10s (heap)      pairs %zu  median %6.0f ns  p99 %6.0f ns  mean %6.0f ns\n",
                kiln::memory::format_bytes(bytes).c_str(), pairs / 10, l.median_ns, l.p99_ns,
                l.mean_ns);
  }
  return 0;
}
