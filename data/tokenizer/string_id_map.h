// StringIdMap: a read-mostly hash map from byte strings to int32 ids, looked
// up by std::string_view without allocating (the WordPiece hot path).
//
// Invariants: keys are stored once in a contiguous arena; the slot table is
// open-addressed with linear probing and its capacity is a power of two at
// least twice the number of keys, so every probe sequence ends at an empty
// slot. Inserting an existing key overwrites its id (last insert wins).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data {

class StringIdMap {
 public:
  static constexpr int32_t kNotFound = -1;

  void insert(std::string_view key, int32_t id);
  // The id stored for `key`, or kNotFound.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return kNotFound;
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id == kNotFound) return kNotFound;
      if (s.hash == h && s.length == key.size() &&
          std::string_view(arena_.data() + s.offset, s.length) == key)
        return s.id;
    }
  }
  size_t size() const { return size_; }
  // Length in bytes of the longest key (0 when empty).
  size_t max_key_length() const { return max_key_length_; }

  static uint64_t hash(std::string_view key) {
    // 8 bytes at a time, each word mixed by a multiply-xorshift step; the length
    // seeds the state so keys that differ only by trailing zero bytes differ.
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
    uint64_t h = key.size() * kMul;
    const char* p = key.data();
    size_t n = key.size();
    while (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
      p += 8;
      n -= 8;
    }
    if (n > 0) {
      uint64_t w = 0;
      std::memcpy(&w, p, n);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = kNotFound;
  };
  void grow();

  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
  size_t max_key_length_ = 0;
};

}  // namespace kiln::data
