#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/backend.h"
#include "core/error.h"

namespace kiln {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail("out of memory: could not allocate ", nbytes, " bytes on cpu");
    return p;
  }
  void deallocate(void* ptr) override { std::free(ptr); }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator alloc;
  return alloc;
}

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
