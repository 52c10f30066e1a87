#include "data/tokenizer/basic_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

#include "core/error.h"

namespace kiln::data {
namespace {

// What the cleaning + pre-tokenization steps do with one ASCII byte.
enum AsciiClass : uint8_t { kDrop, kSpace, kPunct, kWordChar };

struct AsciiTable {
  std::array<uint8_t, 128> cls{};
  std::array<char, 128> lower{};
  AsciiTable() {
    for (int c = 0; c < 128; ++c) {
      const bool punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                         (c >= 123 && c <= 126);
      if (c == '\t' || c == '\n' || c == '\r' || c == ' ')
        cls[c] = kSpace;
      else if (c < 32 || c == 127)
        cls[c] = kDrop;  // Cc (includes NUL, \v, \f, 0x1C-0x1F)
      else
        cls[c] = punct ? kPunct : kWordChar;
      lower[c] = static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
  }
};

const AsciiTable& ascii_table() {
  static const AsciiTable table;
  return table;
}

// HF's is_bert_punc: ASCII punctuation (which includes the symbols $+<=>^`|~)
// or a P* general category.
bool is_punct(int32_t cp, int category) {
  if (cp < 128) return ascii_table().cls[static_cast<size_t>(cp)] == kPunct;
  return category >= UTF8PROC_CATEGORY_PC && category <= UTF8PROC_CATEGORY_PO;
}

// Mutable state of one split() call: the word being built plus the run of
// decomposed non-starters (ccc != 0) awaiting canonical ordering.
// Marks are only ever pending in lowercase mode (cased mode has no NFD).
class Splitter {
 public:
  Splitter(WordList& out, bool lowercase)
      : out_(out), lowercase_(lowercase), word_begin_(out.bytes.size()) {}

  void run(std::string_view text) {
    const AsciiTable& table = ascii_table();
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
      const uint8_t c = p[i];
      if (c < 0x80) {
        // A dropped control leaves the mark run intact (cleaning precedes NFD).
        if (!pending_.empty() && table.cls[c] != kDrop) flush_pending();
        switch (table.cls[c]) {
          case kWordChar:
            out_.bytes.push_back(lowercase_ ? table.lower[c] : static_cast<char>(c));
            ++word_chars_;
            break;
          case kSpace:
            end_word();
            break;
          case kPunct:
            end_word();
            out_.bytes.push_back(static_cast<char>(c));
            word_chars_ = 1;
            end_word();
            break;
          default:
            break;
        }
        ++i;
        continue;
      }
      utf8proc_int32_t cp = 0;
      const utf8proc_ssize_t len =
          utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(n - i), &cp);
      if (len <= 0) {  // not well-formed: drop this byte (as if it were U+FFFD)
        ++i;
        continue;
      }
      i += static_cast<size_t>(len);
      code_point(cp);
    }
    flush_pending();
    end_word();
  }

 private:
  void code_point(int32_t cp) {
    if (cp == 0xFFFD) return;
    const utf8proc_property_t* prop = utf8proc_get_property(cp);
    switch (prop->category) {
      case UTF8PROC_CATEGORY_ZS:
      case UTF8PROC_CATEGORY_ZL:
      case UTF8PROC_CATEGORY_ZP:
        flush_pending();
        end_word();
        return;
      case UTF8PROC_CATEGORY_CC:
      case UTF8PROC_CATEGORY_CF:
      case UTF8PROC_CATEGORY_CS:
      case UTF8PROC_CATEGORY_CO:
        return;
      default:
        break;
    }
    if (BasicTokenizer::is_cjk(cp)) {
      flush_pending();
      end_word();
      normalize(cp, prop);
      flush_pending();
      end_word();
      return;
    }
    normalize(cp, prop);
  }

  // Step 3 of the header: NFD, then per decomposed code point emit().
  void normalize(int32_t cp, const utf8proc_property_t* prop) {
    if (!lowercase_) {
      emit(cp, prop);
      return;
    }
    utf8proc_int32_t buf[32];
    int boundclass = 0;
    const utf8proc_ssize_t len =
        utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, &boundclass);
    KILN_CHECK(len > 0 && len <= 32, "BasicTokenizer: cannot decompose U+", std::hex, cp);
    for (utf8proc_ssize_t k = 0; k < len; ++k) {
      const utf8proc_property_t* dprop = buf[k] == cp ? prop : utf8proc_get_property(buf[k]);
      // Mn is dropped whatever its place, so only kept marks need ordering
      // (a stable sort followed by a filter equals the filter then the sort).
      if (dprop->category == UTF8PROC_CATEGORY_MN) continue;
      if (dprop->combining_class == 0) {
        flush_pending();
        emit(buf[k], dprop);
      } else {
        pending_.push_back({buf[k], dprop});
      }
    }
  }

  // Canonical ordering of the pending run (stable by combining class), then emit.
  void flush_pending() {
    if (pending_.empty()) return;
    std::stable_sort(pending_.begin(), pending_.end(), [](const Pending& x, const Pending& y) {
      return x.prop->combining_class < y.prop->combining_class;
    });
    for (const Pending& m : pending_) emit(m.cp, m.prop);
    pending_.clear();
  }

  // A fully decomposed code point: strip Mn + lowercase (lowercase mode),
  // then punctuation splitting; appends to the current word.
  void emit(int32_t cp, const utf8proc_property_t* prop) {
    if (lowercase_) {
      if (prop->category == UTF8PROC_CATEGORY_MN) return;
      const int32_t lower = utf8proc_tolower(cp);
      if (lower != cp) {
        cp = lower;
        prop = utf8proc_get_property(cp);
      }
    }
    if (is_punct(cp, prop->category)) {
      end_word();
      append(cp);
      end_word();
      return;
    }
    append(cp);
  }

  void append(int32_t cp) {
    uint8_t utf8[4];
    const utf8proc_ssize_t len = utf8proc_encode_char(cp, utf8);
    out_.bytes.append(reinterpret_cast<const char*>(utf8), static_cast<size_t>(len));
    ++word_chars_;
  }

  void end_word() {
    const size_t end = out_.bytes.size();
    if (end > word_begin_) {
      KILN_CHECK(end < UINT32_MAX, "BasicTokenizer: text too long (", end, " bytes)");
      out_.words.push_back({static_cast<uint32_t>(word_begin_),
                            static_cast<uint32_t>(end - word_begin_), word_chars_});
    }
    word_begin_ = end;
    word_chars_ = 0;
  }

  struct Pending {
    int32_t cp;
    const utf8proc_property_t* prop;
  };

  WordList& out_;
  const bool lowercase_;
  size_t word_begin_;
  uint32_t word_chars_ = 0;
  std::vector<Pending> pending_;  // kept (non-Mn) marks with ccc != 0
};

}  // namespace

void BasicTokenizer::split(std::string_view text, WordList& out) const {
  Splitter(out, lowercase_).run(text);
}

}  // namespace kiln::data
