// Normal forms with alignment changes (Note [Normal form changes] in
// unicode_normalize.h), on utf8proc's decomposition and composition data.
#include "kiln/data/tokenizer/unicode_normalize.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/error.h"

namespace kiln::data::tok {

namespace {

// One code point of the decomposed text with its combining class and change.
struct Item {
  char32_t c;
  int64_t change;
  uint8_t ccc;
};

uint8_t combining_class(char32_t c) {
  return static_cast<uint8_t>(utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class);
}

// Appends the full decomposition of `c` (first code point change 0, the rest 1).
void decompose_char(char32_t c, bool compat, std::vector<Item>& out) {
  if (c < 0x80) {
    out.push_back({c, 0, 0});
    return;
  }
  const utf8proc_option_t options =
      static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  utf8proc_int32_t buf[32];
  int boundclass = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32, options,
                                               &boundclass);
  // The longest decomposition in Unicode 15 is 18 code points (U+FDFA);
  // a larger result would need a bigger buffer.
  KILN_CHECK(n >= 1 && n <= 32, "unicode normalization: utf8proc cannot decompose U+", std::hex,
             static_cast<uint32_t>(c), " (", std::dec, n, ")");
  for (utf8proc_ssize_t k = 0; k < n; ++k) {
    const auto d = static_cast<char32_t>(buf[k]);
    out.push_back({d, k == 0 ? 0 : 1, combining_class(d)});
  }
}

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = 11172;

// The primary composite of the pair, if any.
std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount) {
    if (b >= kVBase && b < kVBase + kVCount)
      return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    return std::nullopt;
  }
  if (a >= kSBase && a < kSBase + kSCount) {
    // T must be a real trailing consonant: U+11A7 itself does not compose.
    if ((a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) return a + (b - kTBase);
    return std::nullopt;
  }
  // utf8proc composes an already decomposed buffer; for a starter and one
  // more code point it yields one code point exactly when they compose
  // (UTF8PROC_STABLE honours the composition exclusions).
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  const utf8proc_ssize_t n = utf8proc_normalize_utf32(
      buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  if (n == 1) return static_cast<char32_t>(buf[0]);
  return std::nullopt;
}

std::vector<Item> decompose(std::string_view s, bool compat) {
  std::vector<Item> items;
  items.reserve(s.size() + s.size() / 4);
  for (size_t i = 0; i < s.size();) decompose_char(decode_utf8(s, i), compat, items);
  // Canonical ordering: stable-sort each run of non-starters by class.
  for (size_t b = 0; b < items.size();) {
    if (items[b].ccc == 0) {
      ++b;
      continue;
    }
    size_t e = b;
    while (e < items.size() && items[e].ccc != 0) ++e;
    if (e - b > 1)
      std::stable_sort(items.begin() + static_cast<std::ptrdiff_t>(b),
                       items.begin() + static_cast<std::ptrdiff_t>(e),
                       [](const Item& x, const Item& y) { return x.ccc < y.ccc; });
    b = e;
  }
  return items;
}

// Canonical composition of decomposed, ordered items (the crate's
// Recompositions: `composee` is the current starter, `blocked` the marks
// that could not join it, `last_ccc` the class of the last blocked one).
std::vector<CharChange> compose(const std::vector<Item>& items) {
  std::vector<CharChange> out;
  out.reserve(items.size());
  std::optional<CharChange> composee;
  std::vector<CharChange> blocked;
  int last_ccc = -1;  // -1: nothing blocked since the starter
  auto flush_blocked = [&] {
    out.insert(out.end(), blocked.begin(), blocked.end());
    blocked.clear();
  };
  for (const Item& it : items) {
    if (!composee) {
      if (it.ccc != 0)
        out.push_back({it.c, it.change});
      else
        composee = CharChange{it.c, it.change};
      continue;
    }
    if (last_ccc >= 0 && last_ccc >= it.ccc) {  // blocked from the starter
      if (it.ccc == 0) {
        out.push_back(*composee);
        flush_blocked();
        composee = CharChange{it.c, it.change};
        last_ccc = -1;
      } else {
        blocked.push_back({it.c, it.change});
        last_ccc = it.ccc;
      }
      continue;
    }
    if (const std::optional<char32_t> r = compose_pair(composee->c, it.c)) {
      composee = CharChange{*r, composee->change + it.change - 1};
      continue;
    }
    if (last_ccc < 0 && it.ccc == 0) {
      out.push_back(*composee);
      composee = CharChange{it.c, it.change};
      continue;
    }
    blocked.push_back({it.c, it.change});
    last_ccc = it.ccc;
  }
  if (composee) out.push_back(*composee);
  flush_blocked();
  return out;
}

}  // namespace

std::vector<CharChange> normal_form_changes(std::string_view s, NormalForm form) {
  const bool compat = form == NormalForm::kNFKD || form == NormalForm::kNFKC;
  const std::vector<Item> items = decompose(s, compat);
  if (form == NormalForm::kNFC || form == NormalForm::kNFKC) return compose(items);
  std::vector<CharChange> out;
  out.reserve(items.size());
  for (const Item& it : items) out.push_back({it.c, it.change});
  return out;
}

void apply_normal_form(NormalizedString& s, NormalForm form) {
  s.transform(normal_form_changes(s.get(), form), 0);
}

std::string normal_form(std::string_view s, NormalForm form) {
  std::string out;
  out.reserve(s.size());
  for (const CharChange& c : normal_form_changes(s, form)) append_utf8(out, c.c);
  return out;
}

}  // namespace kiln::data::tok
