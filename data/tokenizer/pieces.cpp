// Pieces (pieces.h; Note [Fast pre-tokenization]).
#include "kiln/data/tokenizer/pieces.h"

namespace kiln::data::tok {

void Pieces::reset(const NormalizedString& split) {
  clear();
  text.assign(split.get());
  src.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) src[i] = static_cast<uint32_t>(i);
  // Kept even when empty, as PreTokenizedString keeps an empty split until a
  // pre-tokenizer step drops it (an empty Sequence keeps it).
  spans.push_back({0, text.size()});
  shifts.push_back(split.original_shift());
}

bool plain_alignments(const NormalizedString& s) {
  const std::vector<Span>& a = s.alignments();
  if (s.size() > UINT32_MAX) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].begin >= a[i].end) return false;
    if (i > 0 && (a[i].begin < a[i - 1].begin || a[i].end < a[i - 1].end)) return false;
  }
  return true;
}

}  // namespace kiln::data::tok
