// Internal to the CUDA backend (host code, no CUDA types, so the CPU tests
// reach it in every build: tests/test_lru_cache.cpp): a bounded, thread-safe
// map that forgets its least recently used entry first. cuda/gemm_lt.cpp keeps
// its cuBLASLt plans and workspaces in two (Note [cuBLASLt plan cache]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace kiln::cuda::detail {

template <typename K, typename V, typename Less = std::less<K>>
class LruCache {
 public:
  // capacity >= 1 entries.
  explicit LruCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value kept for `key`, which becomes the most recently used; nullopt if none.
  std::optional<V> find(const K& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return std::nullopt;
    }
    ++hits_;
    items_.splice(items_.begin(), items_, it->second);
    return it->second->second;
  }

  // Keeps `value` for `key` unless a value is kept already (another thread
  // may have put one there since find()); returns the value kept. Entries
  // beyond the capacity go, least recently used first; their values are
  // destroyed after the lock is released.
  V insert(const K& key, V value) {
    std::vector<V> evicted;
    V kept;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        items_.splice(items_.begin(), items_, it->second);
        return it->second->second;
      }
      items_.emplace_front(key, std::move(value));
      index_.emplace(key, items_.begin());
      while (items_.size() > capacity_) {
        index_.erase(items_.back().first);
        evicted.push_back(std::move(items_.back().second));
        items_.pop_back();
        ++evictions_;
      }
      kept = items_.front().second;
    }
    return kept;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  uint64_t hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }
  uint64_t misses() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return misses_;
  }
  uint64_t evictions() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return evictions_;
  }

 private:
  using Items = std::list<std::pair<K, V>>;  // most recently used first

  mutable std::mutex mutex_;
  const size_t capacity_;
  Items items_;
  std::map<K, typename Items::iterator, Less> index_;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace kiln::cuda::detail
