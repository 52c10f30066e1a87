// Helpers shared by the kiln_dist_tests files: the default process group and
// comparisons of tensors across ranks.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dist/process_group.h"
#include "kiln.h"

namespace kiln::dist::testing {

inline ProcessGroup& pg() {
  static ProcessGroupPtr g = default_process_group();
  return *g;
}

// True when every rank holds the same bytes in t (a collective).
inline bool same_on_all_ranks(const Tensor& t) {
  Tensor all = pg().all_gather(t.contiguous());  // [world, ...]
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  const char* p = static_cast<const char*>(all.raw_data());
  bool same = true;
  for (int r = 1; r < pg().size(); ++r) same = same && std::memcmp(p, p + r * bytes, bytes) == 0;
  return same;
}

}  // namespace kiln::dist::testing
