// Storage: a block of memory on one device, shared by a tensor and all its
// views. The version counter lives here because every view of the storage sees
// the same in-place writes (Note [Version counter]).
//
// Note [Version counter]: each in-place op bumps the storage's version. Autograd
// records the version when it saves a tensor for backward and checks it again
// when backward unpacks it, so reading a saved tensor that was modified in place
// is an error rather than a silent wrong gradient.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kiln/core/device.h"

namespace kiln {

// The per-device memory source. The CPU one hands out 64-byte aligned memory;
// the CUDA one is the caching allocator (core/memory/).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) = 0;
};

Allocator& cpu_allocator();

class StorageImpl {
 public:
  // Allocates nbytes on device with its allocator.
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `keep_alive` is released with the storage.
  StorageImpl(void* data, size_t nbytes, Device device, std::shared_ptr<void> keep_alive);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;      // null when memory is external
  std::shared_ptr<void> keep_alive_;    // owner of external memory
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace kiln
