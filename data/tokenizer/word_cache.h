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
// so a slot holds at most about 2 * (16 + 4 * sizeof(Item) + 8 + 32) *
// capacity bytes (keys, items, padding, hash slots), the cache at most
// kSlots times that. A generation keeps each word's bytes and items side by
// side in one record, named by its hash slot: a lookup reads two places.
// In front of the slots each thread keeps a small direct-mapped table of
// recent short words (Local: no lock, no probing; about 150 KB a thread for
// each Item type), which holds copies of what the slots hold. A cache only returns what the model
// computed for the same string: results never depend on it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/data/tokenizer/string_id_map.h"

namespace kiln::data::tok {

template <typename Item>
class WordCache {
 public:
  static constexpr size_t kSlots = 16;
  static constexpr size_t kMaxWordBytes = 256;

  // The per-thread table in front of the slots: kLocalEntries words of at
  // most kLocalWordBytes bytes and kLocalItems items, direct-mapped by hash.
  static constexpr size_t kLocalEntries = 2048;
  static constexpr size_t kLocalWordBytes = 22;
  static constexpr size_t kLocalItems = 4;

  // A thread's side of every WordCache<Item>: its slot number and its table
  // of recent words (entries name their cache by a number never reused).
  // Callers keep one per thread (thread_local) with their other scratch.
  class Local {
   public:
    Local() : thread_(next_thread()) {}

   private:
    friend class WordCache;
    struct Entry {
      uint64_t owner = 0;  // the cache's id_; 0: empty
      uint64_t hash = 0;
      uint8_t length = 0, count = 0;
      char word[kLocalWordBytes] = {};
      Item items[kLocalItems] = {};
    };
    static uint32_t next_thread() {
      static std::atomic<uint32_t> next{0};
      return next.fetch_add(1, std::memory_order_relaxed);
    }
    uint32_t thread_;
    std::unique_ptr<Entry[]> table_;  // kLocalEntries, made on first use
  };

  // (Capped so that entry numbers and item offsets fit their 32 bits.)
  explicit WordCache(size_t capacity)
      : capacity_(std::min(capacity, size_t{1} << 22)), slots_(new Slot[kSlots]) {}

  static bool cacheable(std::string_view word) { return word.size() < kMaxWordBytes; }

  // Copies the items of `word` into `out`; false when absent.
  bool find(Local& local, std::string_view word, std::vector<Item>& out) {
    const uint64_t h = StringIdMap::hash(word);
    typename Local::Entry* e = local_entry(local, word, h);
    if (e && e->owner == id_ && e->length == word.size() &&
        std::memcmp(e->word, word.data(), word.size()) == 0) {
      out.assign(e->items, e->items + e->count);
      return true;
    }
    {
      Slot& s = slots_[local.thread_ % kSlots];
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.current.find(word, h, out)) {
        if (!s.previous.find(word, h, out)) return false;
        add(s, word, h, out.data(), out.size());  // may free `previous`: copied first
      }
    }
    remember(e, word, out.data(), out.size());
    return true;
  }

  void insert(Local& local, std::string_view word, const Item* items, size_t n) {
    const uint64_t h = StringIdMap::hash(word);
    {
      Slot& s = slots_[local.thread_ % kSlots];
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.current.contains(word, h)) add(s, word, h, items, n);
    }
    remember(local_entry(local, word, h), word, items, n);
  }

 private:
  // The table entry `word` maps to (its hash set), or nullptr for a long word.
  typename Local::Entry* local_entry(Local& local, std::string_view word, uint64_t h) const {
    if (word.size() > kLocalWordBytes) return nullptr;
    if (!local.table_) local.table_.reset(new typename Local::Entry[kLocalEntries]);
    typename Local::Entry* e = &local.table_[h & (kLocalEntries - 1)];
    if (e->hash != h) e->owner = 0;  // another word's: a miss
    e->hash = h;
    return e;
  }
  void remember(typename Local::Entry* e, std::string_view word, const Item* items, size_t n) const {
    if (!e || n > kLocalItems) {
      if (e) e->owner = 0;
      return;
    }
    e->owner = id_;
    e->length = static_cast<uint8_t>(word.size());
    std::memcpy(e->word, word.data(), word.size());
    e->count = static_cast<uint8_t>(n);
    std::copy(items, items + n, e->items);
  }
  static uint64_t next_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  static_assert(std::is_trivially_copyable_v<Item>);
  // One generation: open addressing with linear probing (at most half the
  // slots used); a slot names its word's record in `records`, the word's
  // bytes and then (aligned) its items.
  struct Generation {
    static constexpr uint32_t kEmpty = UINT32_MAX;
    struct HashSlot {
      uint64_t hash = 0;
      uint32_t record = kEmpty;  // offset in records
      uint16_t length = 0;       // the word's bytes (< kMaxWordBytes)
      uint16_t count = 0;        // its items (capped below)
    };
    std::vector<HashSlot> table;
    std::vector<unsigned char> records;
    size_t words = 0, key_bytes = 0, item_count = 0;
    size_t size() const { return words; }

    static size_t items_at(size_t record, size_t length) {
      const size_t a = alignof(Item);
      return (record + length + a - 1) / a * a;
    }
    // The slot of `word` (hash h), or the empty one where it would go.
    size_t slot_of(std::string_view word, uint64_t h) const {
      const size_t mask = table.size() - 1;
      for (size_t i = h & mask;; i = (i + 1) & mask) {
        const HashSlot& t = table[i];
        if (t.record == kEmpty ||
            (t.hash == h && t.length == word.size() &&
             std::memcmp(records.data() + t.record, word.data(), word.size()) == 0))
          return i;
      }
    }
    bool contains(std::string_view word, uint64_t h) const {
      return !table.empty() && table[slot_of(word, h)].record != kEmpty;
    }
    // Copies the items of `word` into `out`; false when absent.
    bool find(std::string_view word, uint64_t h, std::vector<Item>& out) const {
      if (table.empty()) return false;
      const HashSlot* t = &table[slot_of(word, h)];
      if (t->record == kEmpty) return false;
      out.resize(t->count);
      if (t->count)
        std::memcpy(out.data(), records.data() + items_at(t->record, t->length),
                    t->count * sizeof(Item));
      return true;
    }
    // (Absent words only.)
    void add(std::string_view word, uint64_t h, const Item* p, size_t n) {
      if (2 * (words + 1) > table.size()) grow();
      const size_t record = records.size();
      const size_t at = items_at(record, word.size());
      records.resize(at + n * sizeof(Item));
      std::memcpy(records.data() + record, word.data(), word.size());
      if (n) std::memcpy(records.data() + at, p, n * sizeof(Item));
      table[slot_of(word, h)] = {h, static_cast<uint32_t>(record), static_cast<uint16_t>(word.size()),
           static_cast<uint16_t>(n)};
      ++words;
      key_bytes += word.size();
      item_count += n;
    }
    void grow() {
      std::vector<HashSlot> old = std::move(table);
      table.assign(old.empty() ? 64 : 2 * old.size(), HashSlot{});
      const size_t mask = table.size() - 1;
      for (const HashSlot& t : old) {
        if (t.record == kEmpty) continue;
        size_t i = t.hash & mask;
        while (table[i].record != kEmpty) i = (i + 1) & mask;
        table[i] = t;
      }
    }
  };
  struct alignas(64) Slot {
    std::mutex mu;
    Generation current, previous;
  };

  void add(Slot& s, std::string_view word, uint64_t h, const Item* p, size_t n) {
    if (n > UINT16_MAX) return;  // (not kept: a record counts its items in 16 bits)
    // Full: `capacity` words, or (long words) 16 key bytes or 4 items a word.
    if (s.current.size() >= capacity_ || s.current.key_bytes + word.size() > 16 * capacity_ ||
        s.current.item_count + n > 4 * capacity_) {
      s.previous = std::move(s.current);
      s.current = Generation();
    }
    s.current.add(word, h, p, n);
  }

  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  const uint64_t id_ = next_id();
};

}  // namespace kiln::data::tok
