// The caching allocators' state for a person, as torch.cuda.memory_summary():
// the CPU host allocator, every CUDA device's and the pinned host allocator.
//
//   std::cout << kiln::memory_summary();   // `kiln pretrain --memory-summary` prints it at the end
//
// Per allocator: allocated, reserved and cached bytes (current and peak, and
// by pool: small blocks <= 1 MiB, large ones above; Note [Caching allocator]),
// fragmentation (the share of reserved bytes backing no live allocation),
// and the out-of-memory retries and errors (Note [Out-of-memory retry]).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "kiln/core/memory/allocator_stats.h"

namespace kiln {

std::string memory_summary();

// The CPU caching allocator's counters and its own summary (as
// kiln::cuda::memory_stats and memory_summary are a CUDA device's).
memory::AllocatorStats cpu_memory_stats();
std::string cpu_memory_summary();
void cpu_reset_peak_memory_stats();

// The process's peak resident set size in bytes (VmHWM of /proc/self/status;
// 0 where that cannot be read).
std::size_t resident_peak_bytes();

namespace detail {
// (allocated, reserved) bytes of the CPU allocator: what the profiler samples
// at every span end (O(1), unlike cpu_memory_stats()).
std::pair<std::size_t, std::size_t> cpu_memory_usage();
}  // namespace detail

}  // namespace kiln
