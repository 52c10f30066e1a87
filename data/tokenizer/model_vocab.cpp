#include "kiln/data/tokenizer/model_vocab.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/error.h"

namespace kiln::data::tok {

TokenVocab TokenVocab::from_json(const Json& j, const std::string& where) {
  json_object(j, where);
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Json& v = it.value();
    int64_t id = 0;
    if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId))
      id = static_cast<int64_t>(v.get<uint64_t>());  // the common case, no path string built
    else
      id = json_as_int(v, where + "[\"" + it.key() + "\"]", 0, kMaxTokenId);
    entries.emplace_back(it.key(), static_cast<int32_t>(id));
  }
  return from_entries(std::move(entries), "tokenizer.json: " + where);
}

TokenVocab TokenVocab::from_entries(std::vector<std::pair<std::string, int32_t>> entries,
                                    const std::string& what) {
  KILN_CHECK(entries.size() <= static_cast<size_t>(kMaxTokenId), what, ": too many tokens (",
             entries.size(), ")");
  TokenVocab v;
  // A repeated string keeps its last entry: walk backwards, keeping the first
  // occurrence of each string seen that way.
  for (size_t k = entries.size(); k-- > 0;) {
    auto& [s, id] = entries[k];
    KILN_CHECK(id >= 0 && id <= kMaxTokenId, what, ": id ", id, " of \"", s, "\" outside [0, ",
               kMaxTokenId, "]");
    if (v.map_.find(s) != kiln::data::StringIdMap::kNotFound) continue;
    v.map_.insert(s, id);
    v.strings_.push_back(std::move(s));
    v.ids_.push_back(id);
  }
  std::reverse(v.strings_.begin(), v.strings_.end());
  std::reverse(v.ids_.begin(), v.ids_.end());
  int32_t max_id = -1;
  for (int32_t id : v.ids_) max_id = std::max(max_id, id);
  const size_t m = v.strings_.size();
  v.dense_ = max_id < 0 || static_cast<uint64_t>(max_id) < 2 * static_cast<uint64_t>(m) + 4096;
  if (v.dense_) {
    v.by_id_.assign(static_cast<size_t>(max_id + 1), -1);
    for (size_t k = 0; k < m; ++k) {
      int32_t& slot = v.by_id_[static_cast<size_t>(v.ids_[k])];
      if (slot >= 0) v.fail_shared_id(what, static_cast<size_t>(slot), k);
      slot = static_cast<int32_t>(k);
    }
  } else {
    v.sorted_.reserve(m);
    for (size_t k = 0; k < m; ++k) v.sorted_.emplace_back(v.ids_[k], static_cast<int32_t>(k));
    std::sort(v.sorted_.begin(), v.sorted_.end());
    for (size_t i = 1; i < m; ++i)
      if (v.sorted_[i - 1].first == v.sorted_[i].first)
        v.fail_shared_id(what, static_cast<size_t>(v.sorted_[i - 1].second),
                         static_cast<size_t>(v.sorted_[i].second));
  }
  return v;
}

void TokenVocab::fail_shared_id(const std::string& what, size_t a, size_t b) const {
  // Name the two tokens in a stable (sorted) order.
  const std::string& x = std::min(strings_[a], strings_[b]);
  const std::string& y = std::max(strings_[a], strings_[b]);
  fail(what, ": tokens \"", x, "\" and \"", y, "\" both have id ", ids_[a],
       " (kiln requires one token per id)");
}

const std::string* TokenVocab::sparse_token(int32_t id) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(id, INT32_MIN));
  if (it == sorted_.end() || it->first != id) return nullptr;
  return &strings_[static_cast<size_t>(it->second)];
}

}  // namespace kiln::data::tok
