#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/backend.h"
#include "core/error.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/host_memory.h"
#include "core/memory_summary.h"

namespace kiln {
namespace {

// CPU memory comes from the caching allocator (core/memory/) over the C heap:
// a freed block is reused by the next request of a similar size, so the many
// same-sized temporaries of a training step cost no page faults after the
// first step. KILN_CACHING_ALLOCATOR=0 turns caching off (the sanitizer builds
// do, so that AddressSanitizer sees every use after free).
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator()
      : impl_(new memory::CachingAllocator(std::make_unique<memory::HostHeapMemory>(),
                                           {memory::CachingAllocator::Caching::FromEnvironment, false})) {}
  void* allocate(size_t nbytes) override { return nbytes == 0 ? nullptr : impl_->allocate(nbytes); }
  void deallocate(void* ptr) override { impl_->free(ptr); }
  memory::CachingAllocator& impl() { return *impl_; }

 private:
  // Never destroyed: tensors in static objects may be freed after main returns.
  memory::CachingAllocator* impl_;
};

CpuAllocator& the_cpu_allocator() {
  static CpuAllocator alloc;
  return alloc;
}

}  // namespace

Allocator& cpu_allocator() { return the_cpu_allocator(); }

memory::AllocatorStats cpu_memory_stats() { return the_cpu_allocator().impl().stats(); }
std::string cpu_memory_summary() { return the_cpu_allocator().impl().memory_summary(); }
void cpu_reset_peak_memory_stats() { the_cpu_allocator().impl().reset_peak_stats(); }

namespace detail {
std::pair<std::size_t, std::size_t> cpu_memory_usage() { return the_cpu_allocator().impl().usage(); }
}  // namespace detail

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&backend(device).allocator()) {
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::shared_ptr<void> keep_alive)
    : data_(data), nbytes_(nbytes), device_(device), keep_alive_(std::move(keep_alive)) {}

StorageImpl::~StorageImpl() {
  if (allocator_ && data_) allocator_->deallocate(data_);
}

}  // namespace kiln
