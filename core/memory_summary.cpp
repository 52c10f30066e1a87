// kiln::memory_summary() (core/memory_summary.h): every caching allocator's
// state in one table per allocator, as torch.cuda.memory_summary().
#include "core/memory_summary.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/device.h"
#include "core/memory/caching_allocator.h"
#include "cuda/cuda.h"

namespace kiln {
namespace {

std::string row(const char* metric, const std::string& current, const std::string& peak = "") {
  char buf[160];
  std::snprintf(buf, sizeof buf, "| %-28s | %16s | %16s |\n", metric, current.c_str(), peak.c_str());
  return buf;
}

const char* const kRule = "|==============================================================|\n";

std::string table(const std::string& title, const memory::AllocatorStats& s) {
  using memory::format_bytes;
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * s.fragmentation());
  std::string t = kRule;
  char head[96];
  std::snprintf(head, sizeof head, "| %-60s |\n", title.c_str());
  t += head;
  t += kRule;
  t += row("Metric", "Current", "Peak");
  t += row("Allocated memory", format_bytes(s.allocated_bytes), format_bytes(s.peak_allocated_bytes));
  t += row("  from small pool", format_bytes(s.small_pool_allocated_bytes));
  t += row("  from large pool", format_bytes(s.large_pool_allocated_bytes));
  t += row("Requested memory", format_bytes(s.requested_bytes));
  t += row("Reserved memory", format_bytes(s.reserved_bytes), format_bytes(s.peak_reserved_bytes));
  t += row("  small pool", format_bytes(s.small_pool_reserved_bytes));
  t += row("  large pool", format_bytes(s.large_pool_reserved_bytes));
  t += row("Cached free", format_bytes(s.cached_bytes));
  t += row("  largest free block", format_bytes(s.largest_free_block));
  t += row("Awaiting stream events", format_bytes(s.pending_bytes));
  t += row("Quarantined", format_bytes(s.quarantined_bytes));
  t += row("Fragmentation", frag);
  t += row("Live allocations", std::to_string(s.active_blocks));
  t += row("Segments (small/large)", std::to_string(s.small_segments) + "/" + std::to_string(s.large_segments));
  t += row("Allocations / frees", std::to_string(s.allocations) + " / " + std::to_string(s.frees));
  t += row("Device reserves / releases",
           std::to_string(s.device_reserves) + " / " + std::to_string(s.device_releases));
  t += row("OOM retries", std::to_string(s.alloc_retries));
  t += row("  waits for stream events", std::to_string(s.event_syncs));
  t += row("  cache flushes", std::to_string(s.cache_flushes));
  t += row("OOM errors", std::to_string(s.oom_errors));
  t += row("Device errors survived", std::to_string(s.device_errors));
  return t;
}

}  // namespace

std::string memory_summary() {
  std::string s = table("CPU host allocator", cpu_memory_stats());
  // Every CUDA device the CUDA backend sees (none without one).
  if (cuda_built() && cuda::is_available()) {
    for (int d = 0; d < cuda::device_count(); ++d)
      s += table("cuda:" + std::to_string(d) + " (" + cuda::device_name(d) + ")", cuda::memory_stats(d));
    s += table("CUDA pinned host allocator", cuda::pinned_memory_stats());
  }
  s += kRule;
  return s;
}

std::size_t resident_peak_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
  return 0;
}

}  // namespace kiln
