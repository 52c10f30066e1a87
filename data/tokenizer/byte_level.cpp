// GPT-2's byte-level alphabet and the ByteLevel pre-tokenizer (byte_level.h).
#include "kiln/data/tokenizer/byte_level.h"

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

namespace kiln::data::tok {
namespace {

struct ByteTable {
  std::array<char32_t, 256> to_char{};
  struct Utf8 {
    char bytes[2];
    uint8_t size;
  };
  std::array<Utf8, 256> utf8{};  // to_char in UTF-8 (every one is 1 or 2 bytes)
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteTable() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b)
      to_char[static_cast<size_t>(b)] = printable(b) ? static_cast<char32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) {
      to_byte.emplace(to_char[static_cast<size_t>(b)], static_cast<uint8_t>(b));
      std::string u;
      append_utf8(u, to_char[static_cast<size_t>(b)]);
      Utf8& e = utf8[static_cast<size_t>(b)];
      e.size = static_cast<uint8_t>(u.size());
      for (size_t k = 0; k < u.size() && k < 2; ++k) e.bytes[k] = u[k];
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

char32_t byte_level_char(uint8_t b) { return table().to_char[b]; }

int byte_level_byte(char32_t c) {
  const auto& m = table().to_byte;
  const auto it = m.find(c);
  return it == m.end() ? -1 : it->second;
}

const Regex& gpt2_regex() {
  static const Regex re(kGpt2Pattern);
  return re;
}

void byte_level_encode(NormalizedString& n) {
  const std::string& s = n.get();
  std::vector<CharChange> dest;
  dest.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    decode_utf8(s, i);
    for (size_t k = begin; k < i && k < s.size(); ++k)
      dest.push_back({byte_level_char(static_cast<uint8_t>(s[k])), k > begin ? 1 : 0});
  }
  n.transform(dest, 0);
}

void ByteLevelPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([this](size_t, NormalizedString&& n) {
    if (add_prefix_space_ && (n.get().empty() || n.get().front() != ' ')) n.prepend(" ");
    if (!use_regex_) {
      std::vector<NormalizedString> one;
      one.push_back(std::move(n));
      return one;
    }
    return n.split(find_regex_matches(gpt2_regex(), n.get()), SplitBehavior::kIsolated);
  });
  s.normalize(byte_level_encode);
}

// pre_tokenize on Pieces (Note [Fast pre-tokenization]): prepend(" ") makes
// the space replace the first code point, which is inserted again after it;
// byte_level_encode's first byte of each code point replaces it, the others
// are insertions (aligned as the code point's last byte).
void ByteLevelPreTokenizer::pre_tokenize_pieces(const NormalizedString& split, const Pieces& in,
                                                Pieces& out) const {
  const ByteTable& t = table();
  thread_local Pieces w;                 // scratch for a piece given a prefix space
  thread_local std::vector<Span> found;  // the regex's matches in one piece
  out.clear();
  for (size_t k = 0; k < in.spans.size(); ++k) {
    const Span& p = in.spans[k];
    if (p.begin == p.end) continue;  // dropped, as pre_tokenize drops it
    // The piece's text and sources: `in`'s own, or (a prefix space) w's.
    std::string_view wt = in.view(p);
    const uint32_t* wsrc = in.src.data() + p.begin;
    if (add_prefix_space_ && in.text[p.begin] != ' ') {
      size_t first = p.begin;
      decode_utf8(in.text, first);
      w.clear();
      w.append(" ", in.src[p.begin]);
      w.append(in.view({p.begin, first}), in.src[first - 1]);
      w.append(in, first, p.end);
      wt = w.text;
      wsrc = w.src.data();
    }
    // Each piece [b, e) of wt, byte-level encoded into `out`.
    auto emit = [&](size_t b, size_t e) {
      if (b == e) return;
      const size_t begin = out.text.size();
      // At most two bytes per input byte, written in place.
      out.text.resize(begin + 2 * (e - b));
      out.src.resize(out.text.size());
      char* text = out.text.data();
      uint32_t* src = out.src.data();
      size_t at = begin;
      for (size_t i = b; i < e;) {
        const size_t cb = i;
        if (static_cast<unsigned char>(wt[i]) < 0x80)
          ++i;
        else
          decode_utf8(wt, i);
        i = std::min(i, e);
        for (size_t j = cb; j < i; ++j) {
          const ByteTable::Utf8& u = t.utf8[static_cast<uint8_t>(wt[j])];
          const uint32_t source = j == cb ? wsrc[cb] : wsrc[i - 1];
          text[at] = u.bytes[0];
          src[at++] = source;
          if (u.size == 2) {
            text[at] = u.bytes[1];
            src[at++] = source;
          }
        }
      }
      out.text.resize(at);
      out.src.resize(at);
      // (without the regex the piece is not sliced: it keeps its shift)
      out.close(begin, use_regex_ ? split.original_shift() + split.alignments()[wsrc[b]].begin
                                  : in.shifts[k]);
    };
    if (!use_regex_) {
      emit(0, wt.size());
      continue;
    }
    // split(Isolated): each match a piece, and each stretch between matches.
    gpt2_regex().find_all(wt, found);
    size_t at = 0;
    for (const Span& m : found) {
      emit(at, m.begin);
      emit(m.begin, m.end);
      at = m.end;
    }
    emit(at, wt.size());
  }
}

}  // namespace kiln::data::tok
