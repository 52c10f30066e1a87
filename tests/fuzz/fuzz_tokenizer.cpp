// Fuzz target: BertTokenizer on arbitrary bytes.
//
// Input layout: byte 0 = flags (bit 0 cased, bit 1 pair split at the first
// tab, bit 2 no special tokens, bit 3 decode keeps specials), byte 1 =
// max_length (mod 64), byte 2 = pad_to (mod 96), the rest = text.
// The vocab is built in memory (no file needed); set KILN_VOCAB to a
// vocab.txt to fuzz with that instead.
//
// Properties: tokenizing never throws and yields ids inside the vocab;
// an ill-formed UTF-8 byte acts as U+FFFD (same ids as the text with each
// replaced by U+FFFD);
// encode() throws kiln::Error only when max_length leaves no room for the
// special tokens, and otherwise returns consistent, truncated, padded
// vectors; decode() of those ids never throws.
#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/bert_tokenizer.h"

namespace {

using kiln::data::BertTokenizer;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
  std::abort();
}

kiln::data::Vocab make_vocab() {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 33; c < 127; ++c) {
    tokens.emplace_back(1, c);
    tokens.push_back(std::string("##") + c);
  }
  for (const char* t :
       {"the", "un", "##able", "##aff", "hello", "world", "##ing", "##s", "é",    "##é", "中",
        "文",  "ß",  "σ",      "ς",     "ᄀ",    "##ᅡ",  "😀",     "ab",  "##ab", "abc", "##"})
    tokens.emplace_back(t);
  return kiln::data::Vocab::from_tokens(std::move(tokens));
}

struct Tokenizers {
  std::unique_ptr<BertTokenizer> lower, cased;
  Tokenizers() {
    if (const char* path = std::getenv("KILN_VOCAB")) {
      lower = std::make_unique<BertTokenizer>(BertTokenizer::from_vocab_file(path, true));
      cased = std::make_unique<BertTokenizer>(BertTokenizer::from_vocab_file(path, false));
    } else {
      lower = std::make_unique<BertTokenizer>(make_vocab(), true);
      cased = std::make_unique<BertTokenizer>(make_vocab(), false);
    }
  }
};

// `text` with each byte that does not start a well-formed UTF-8 sequence
// replaced by U+FFFD (what HF sees after Python's errors="replace" decoding).
std::string with_replacement_chars(std::string_view text) {
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    utf8proc_int32_t cp;
    const auto len = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (len <= 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, static_cast<size_t>(len)));
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers tokenizers;
  if (size < 3) return 0;
  const uint8_t flags = data[0];
  const BertTokenizer& tok = (flags & 1) ? *tokenizers.cased : *tokenizers.lower;
  const std::string_view text(reinterpret_cast<const char*>(data) + 3, size - 3);
  const auto vocab_size = static_cast<int32_t>(tok.vocab_size());

  std::vector<int32_t> ids;
  try {
    ids = tok.encode_ids(text);
    require(ids == tok.encode_ids(with_replacement_chars(text)),
            "ill-formed bytes act as U+FFFD (dropped by cleaning, but they split special tokens)");
  } catch (const kiln::Error&) {
    require(false, "encode_ids does not throw");
  }
  for (int32_t id : ids) require(id >= 0 && id < vocab_size, "ids are inside the vocab");

  kiln::data::EncodeOptions options;
  options.add_special_tokens = (flags & 4) == 0;
  options.max_length = data[1] % 64;
  options.pad_to = data[2] % 96;
  std::string_view a = text;
  std::optional<std::string_view> b;
  if (flags & 2) {
    const size_t tab = text.find('\t');
    if (tab != std::string_view::npos) {
      a = text.substr(0, tab);
      b = text.substr(tab + 1);
    }
  }
  const size_t num_added = options.add_special_tokens ? (b ? 3 : 2) : 0;
  kiln::data::Encoding e;
  try {
    e = tok.encode(a, b, options);
  } catch (const kiln::Error&) {
    require(options.max_length > 0 && options.max_length < num_added,
            "encode throws only when max_length < number of special tokens");
    return 0;
  }
  require(e.type_ids.size() == e.ids.size() && e.attention_mask.size() == e.ids.size(),
          "encoding vectors have equal length");
  const auto real =
      static_cast<size_t>(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1));
  require(std::all_of(e.attention_mask.begin(),
                      e.attention_mask.begin() + static_cast<std::ptrdiff_t>(real),
                      [](int32_t m) { return m == 1; }),
          "padding only at the end");
  require(options.max_length == 0 || real <= options.max_length, "truncated to max_length");
  require(e.ids.size() >= options.pad_to, "padded to pad_to");
  if (!b && options.max_length == 0) require(real == ids.size() + num_added, "specials added once");
  for (int32_t id : e.ids) require(id >= 0 && id < vocab_size, "encode ids are inside the vocab");
  try {
    (void)tok.decode(e.ids, (flags & 8) == 0);
  } catch (const kiln::Error&) {
    require(false, "decode of encoded ids does not throw");
  }
  return 0;
}
