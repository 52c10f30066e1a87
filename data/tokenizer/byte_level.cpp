// GPT-2's byte-level alphabet and the ByteLevel pre-tokenizer (byte_level.h).
#include "kiln/data/tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

namespace kiln::data::tok {
namespace {

struct ByteTable {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteTable() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b)
      to_char[static_cast<size_t>(b)] = printable(b) ? static_cast<char32_t>(b) : next++;
    for (int b = 0; b < 256; ++b)
      to_byte.emplace(to_char[static_cast<size_t>(b)], static_cast<uint8_t>(b));
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

}  // namespace kiln::data::tok
