// PinnedHostAllocator: caching allocator for page-locked host memory, the
// staging buffers of host<->device copies (the data loader's, later).
//
// It is the CachingAllocator in host mode (Options::stream_bound = false; see
// Note [Caching allocator]): the host reads and writes a pinned block
// directly, so blocks belong to no stream. The rule: after queuing an async
// copy that reads or writes a pinned block on a stream, call
// record_stream(ptr, stream); when the block is freed, an event is recorded on
// each such stream and the block is reused only once all of them completed.
// A block freed without record_stream() is reusable at once.
//
// Sizes and pools are the device allocator's (512-byte rounding, 2 MiB small
// segments, large segments); the memory comes from the given DeviceMemory:
// make_cuda_pinned_host_memory() (cudaHostAlloc) with CUDA, HostHeapMemory
// (core/memory/host_memory.h) without, or a simulated one in tests.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/memory/caching_allocator.h"

namespace kiln::memory {

class PinnedHostAllocator {
 public:
  // caching: as CachingAllocator::Options::caching (default: the environment).
  explicit PinnedHostAllocator(std::unique_ptr<DeviceMemory> host_memory,
                               CachingAllocator::Caching caching =
                                   CachingAllocator::Caching::FromEnvironment);

  // A block of at least `bytes` bytes (nullptr for 0); OutOfMemoryError when
  // the host memory is exhausted even after releasing the cache.
  void* allocate(std::size_t bytes);
  // nullptr is a no-op; a pointer not live here is a kiln::Error.
  void free(void* ptr);
  // An async copy on `stream` uses the live block `ptr`: reuse waits for it.
  void record_stream(void* ptr, Stream stream);
  void empty_cache();

  AllocatorStats stats();
  void reset_peak_stats();
  std::string memory_summary();
  std::size_t block_size(const void* ptr);
  bool caching_enabled() const { return core_.caching_enabled(); }

 private:
  CachingAllocator core_;
};

}  // namespace kiln::memory
