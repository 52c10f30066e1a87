// PinnedHostAllocator: the host-mode CachingAllocator (see pinned_host.h).
#include "core/memory/pinned_host.h"

namespace kiln::memory {

namespace {
CachingAllocator::Options host_options(CachingAllocator::Caching caching) {
  CachingAllocator::Options options;
  options.caching = caching;
  options.stream_bound = false;
  return options;
}
}  // namespace

PinnedHostAllocator::PinnedHostAllocator(std::unique_ptr<DeviceMemory> host_memory,
                                         CachingAllocator::Caching caching)
    : core_(std::move(host_memory), host_options(caching)) {}

void* PinnedHostAllocator::allocate(std::size_t bytes) { return core_.allocate(bytes); }
void PinnedHostAllocator::free(void* ptr) { core_.free(ptr); }
void PinnedHostAllocator::record_stream(void* ptr, Stream stream) {
  core_.record_stream(ptr, stream);
}
void PinnedHostAllocator::empty_cache() { core_.empty_cache(); }
AllocatorStats PinnedHostAllocator::stats() { return core_.stats(); }
void PinnedHostAllocator::reset_peak_stats() { core_.reset_peak_stats(); }
std::string PinnedHostAllocator::memory_summary() { return core_.memory_summary(); }
std::size_t PinnedHostAllocator::block_size(const void* ptr) { return core_.block_size(ptr); }

}  // namespace kiln::memory
