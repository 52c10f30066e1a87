// WordCache: a bounded, thread-friendly cache from a word (a pre-token) to a
// model's result for it, as packed items; BPE and Unigram keep one each.
//
// Note [Word cache]: words (fewer than kMaxWordBytes bytes, as HF's
// MAX_LENGTH) are kept per model in kSlots slots; a thread always uses the
// slot of its own sequence number, so threads rarely share a slot and its
// mutex and memory stay with one core (HF keeps a thread-local cache
// instead, which outlives the model). A slot has two generations: words are
// inserted into the current one; when it holds `capacity` words it becomes
// the previous one (the old previous one is freed) and a new current one
// starts; a word found only in the previous generation is copied into the
// current one. So recently used words survive, and memory is bounded: a
// generation also ends at 16 * capacity key bytes or 4 * capacity items,
// so a slot holds at most about 2 * (16 + 4 * sizeof(Item) + 8) * capacity
// bytes, the cache at most kSlots times that. A cache only returns what the
// model computed for the same string: results never depend on it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/string_id_map.h"

namespace kiln::data::tok {

template <typename Item>
class WordCache {
 public:
  static constexpr size_t kSlots = 16;
  static constexpr size_t kMaxWordBytes = 256;

  // (Capped so that entry numbers and item offsets fit their 32 bits.)
  explicit WordCache(size_t capacity)
      : capacity_(std::min(capacity, size_t{1} << 22)), slots_(new Slot[kSlots]) {}

  static bool cacheable(std::string_view word) { return word.size() < kMaxWordBytes; }

  // The calling thread's sequence number, which picks its slot: callers
  // keep it with their other per-thread scratch (one thread_local read).
  static uint32_t thread_index() {
    static std::atomic<uint32_t> next_thread{0};
    thread_local const uint32_t me = next_thread.fetch_add(1, std::memory_order_relaxed);
    return me;
  }

  // Copies the items of `word` into `out`; false when absent. `thread` is
  // the caller's thread_index().
  bool find(uint32_t thread, std::string_view word, std::vector<Item>& out) {
    Slot& s = slots_[thread % kSlots];
    std::lock_guard<std::mutex> lock(s.mu);
    auto [p, n] = s.current.find(word);
    if (!p) {
      std::tie(p, n) = s.previous.find(word);
      if (!p) return false;
      out.assign(p, p + n);
      add(s, word, out.data(), n);  // may free `previous`: copied first
      return true;
    }
    out.assign(p, p + n);
    return true;
  }

  void insert(uint32_t thread, std::string_view word, const Item* items, size_t n) {
    Slot& s = slots_[thread % kSlots];
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.current.index.find(word) < 0) add(s, word, items, n);
  }

 private:
  struct Generation {
    StringIdMap index;                // word -> entry
    std::vector<Item> items;          // all entries back to back
    std::vector<uint32_t> starts{0};  // entry k is items[starts[k], starts[k + 1])
    size_t key_bytes = 0;
    size_t size() const { return starts.size() - 1; }
    // The items of `word`, or {nullptr, 0}.
    std::pair<const Item*, size_t> find(std::string_view word) const {
      const int32_t k = index.find(word);
      if (k < 0) return {nullptr, 0};
      const uint32_t b = starts[static_cast<size_t>(k)], e = starts[static_cast<size_t>(k) + 1];
      return {items.data() + b, e - b};
    }
    void add(std::string_view word, const Item* p, size_t n) {
      key_bytes += word.size();
      index.insert(word, static_cast<int32_t>(size()));
      items.insert(items.end(), p, p + n);
      starts.push_back(static_cast<uint32_t>(items.size()));
    }
  };
  struct alignas(64) Slot {
    std::mutex mu;
    Generation current, previous;
  };

  void add(Slot& s, std::string_view word, const Item* p, size_t n) {
    // Full: `capacity` words, or (long words) 16 key bytes or 4 items a word.
    if (s.current.size() >= capacity_ || s.current.key_bytes + word.size() > 16 * capacity_ ||
        s.current.items.size() + n > 4 * capacity_) {
      s.previous = std::move(s.current);
      s.current = Generation();
    }
    s.current.add(word, p, n);
  }

  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace kiln::data::tok
