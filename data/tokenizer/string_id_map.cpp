#include "data/tokenizer/string_id_map.h"

#include "core/error.h"

namespace kiln::data {

void StringIdMap::grow() {
  const size_t capacity = slots_.empty() ? 64 : slots_.size() * 2;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.id == kNotFound) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].id != kNotFound) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void StringIdMap::insert(std::string_view key, int32_t id) {
  KILN_CHECK(id >= 0, "StringIdMap::insert: ids must be >= 0, got ", id);
  KILN_CHECK(arena_.size() + key.size() < UINT32_MAX, "StringIdMap::insert: keys exceed 4 GiB");
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(key);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.id == kNotFound) break;
    if (s.hash == h && std::string_view(arena_.data() + s.offset, s.length) == key) {
      s.id = id;
      return;
    }
  }
  slots_[i] = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  ++size_;
  if (key.size() > max_key_length_) max_key_length_ = key.size();
}

}  // namespace kiln::data
