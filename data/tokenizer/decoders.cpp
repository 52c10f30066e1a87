// HF tokenizers' decoders and decoder_from_json (decoders.h; Notes
// [WordPiece cleanup] and [Decoder JSON] there).
#include "kiln/data/tokenizer/decoders.h"

#include <cstdint>
#include <utility>

#include "core/error.h"
#include "kiln/data/tokenizer/byte_level.h"

namespace kiln::data::tok {

std::string Decoder::decode(std::vector<std::string> tokens) const {
  decode_chain(tokens);
  size_t n = 0;
  for (const std::string& t : tokens) n += t.size();
  std::string out;
  out.reserve(n);
  for (const std::string& t : tokens) out += t;
  return out;
}

namespace {

// One code point of `s` at i, advancing i; false (i unchanged) when the bytes
// at i are not well-formed UTF-8.
bool next_code_point(std::string_view s, size_t& i, char32_t& c) {
  if (utf8_step(s, i) <= 0) return false;
  c = decode_utf8(s, i);
  return true;
}

// The token as well-formed UTF-8 (decoders.h: ill-formed bytes read as U+FFFD).
std::string valid(const std::string& t) { return is_valid_utf8(t) ? t : to_valid_utf8(t); }

// The byte offset of each code point of valid UTF-8 `s`, then s.size().
std::vector<size_t> boundaries(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    decode_utf8(s, i);
  }
  out.push_back(s.size());
  return out;
}

// A hex digit's value, or -1.
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HF's byte-fallback token: 6 bytes "<0x" HH ">", HH as u8::from_str_radix(HH,
// 16) reads it (an optional '+' before at least one digit); -1 otherwise.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const std::string_view digits =
      t[3] == '+' ? std::string_view(t).substr(4, 1) : std::string_view(t).substr(3, 2);
  int v = 0;
  for (char c : digits) {
    const int d = hex_value(c);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

std::string rust_replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) {
    // A match at every character boundary (each ill-formed byte its own character).
    out.reserve(s.size() + (s.size() + 1) * to.size());
    out += to;
    for (size_t i = 0; i < s.size();) {
      size_t j = i + 1;
      while (j < s.size() && j < i + 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      out.append(s.substr(i, j - i));
      out += to;
      i = j;
    }
    return out;
  }
  out.reserve(s.size());
  size_t last = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, last)) {
    out.append(s.substr(last, at - last));
    out += to;
    last = at + from.size();
  }
  out.append(s.substr(last));
  return out;
}

std::string wordpiece_cleanup(std::string_view s) {
  static constexpr std::pair<std::string_view, std::string_view> kSteps[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  std::string out(s);
  for (const auto& [from, to] : kSteps) out = rust_replace(out, from, to);
  return out;
}

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string mapped;
    bool all = true;
    for (size_t i = 0; i < t.size() && all;) {
      char32_t c = 0;
      const int b = next_code_point(t, i, c) ? byte_level_byte(c) : -1;
      if (b < 0)
        all = false;
      else
        mapped += static_cast<char>(b);
    }
    bytes += all ? mapped : t;
  }
  tokens.assign(1, to_valid_utf8(bytes));
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string t = valid(tokens[k]);
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const size_t start = i;
      const char32_t c = decode_utf8(t, i);
      if (c != replacement_)
        out.append(t, start, i - start);
      else if (k != 0 || prepend_never_)
        out += ' ';
    }
    tokens[k] = std::move(out);
  }
}

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t k = 0; k < tokens.size(); ++k) {
    std::string& t = tokens[k];
    if (k != 0) {
      if (t.compare(0, prefix_.size(), prefix_) == 0)
        t.erase(0, prefix_.size());
      else
        t.insert(t.begin(), ' ');
    }
    if (cleanup_) t = wordpiece_cleanup(t);
  }
}

void BpeDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t k = 0; k < tokens.size(); ++k)
    tokens[k] = rust_replace(tokens[k], suffix_, k + 1 == tokens.size() ? "" : " ");
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (is_valid_utf8(run))
      out.push_back(run);
    else
      out.insert(out.end(), run.size(), "\xEF\xBF\xBD");
    run.clear();
  };
  for (std::string& t : tokens) {
    const int b = fallback_byte(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const std::string& t : tokens) joined += t;
  tokens.assign(1, std::move(joined));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    const std::string t = valid(token);
    const std::vector<size_t> at = boundaries(t);
    const size_t n = at.size() - 1;  // code points
    auto cp = [&](size_t k) {
      size_t i = at[k];
      return decode_utf8(t, i);
    };
    size_t start_cut = 0;
    for (size_t k = 0; k < n && k < start_; ++k) {
      if (cp(k) != content_) break;
      start_cut = k + 1;
    }
    size_t stop_cut = n;
    for (size_t k = 0; k < stop_; ++k) {
      KILN_CHECK(k < n, "Strip decoder: stop=", stop_, " runs past the start of the token \"",
                 t, "\" (", n, " characters, all stripped; HF panics)");
      const size_t index = n - k - 1;
      if (cp(index) != content_) break;
      stop_cut = index;
    }
    KILN_CHECK(start_cut <= stop_cut, "Strip decoder: start=", start_, " and stop=", stop_,
               " overlap in the token \"", t, "\" (HF panics)");
    token = t.substr(at[start_cut], at[stop_cut] - at[start_cut]);
  }
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    const std::string t = valid(token);
    std::string out;
    for (const Match& m : find_regex_matches(regex_, t)) {
      if (m.is_match)
        out += content_;
      else
        out.append(t, m.span.begin, m.span.end - m.span.begin);
    }
    token = std::move(out);
  }
}

void CtcDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (k > 0 && tokens[k] == tokens[k - 1]) continue;
    std::string r = rust_replace(tokens[k], pad_, "");
    if (cleanup_) r = rust_replace(wordpiece_cleanup(r), delimiter_, " ");
    if (!r.empty()) out.push_back(std::move(r));
  }
  tokens = std::move(out);
}

void SequenceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (const auto& d : steps_) d->decode_chain(tokens);
}

// ---- JSON (Note [Decoder JSON]) ------------------------------------------------------

namespace {

// A field with a serde default: absent is nullptr, null is an error.
const Json* defaulted(const Json& j, std::string_view key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  if (it->is_null()) json_fail(json_path(where, key), "expected a value, got null");
  return &*it;
}

// A Rust `char`: a string of exactly one code point.
char32_t json_char(const Json& j, std::string_view key, const std::string& where) {
  const std::string w = json_path(where, key);
  const std::string s = json_as_string(json_required(j, key, where), w);
  size_t i = 0;
  char32_t c = 0;
  if (s.empty() || !next_code_point(s, i, c) || i != s.size())
    json_fail(w, "expected a single character, got \"" + s + "\"");
  return c;
}

size_t json_usize(const Json& j, std::string_view key, const std::string& where) {
  return static_cast<size_t>(
      json_as_int(json_required(j, key, where), json_path(where, key), 0));
}

std::unique_ptr<Decoder> decoder(const Json& j, const std::string& where, size_t depth);

std::unique_ptr<Decoder> bpe(const Json& j, const std::string& where) {
  return std::make_unique<BpeDecoder>(json_string(j, "suffix", where));
}

std::unique_ptr<Decoder> byte_level(const Json& j, const std::string& where) {
  json_bool(j, "add_prefix_space", where);  // read, unused by the decoder
  json_bool(j, "trim_offsets", where);
  if (const Json* v = defaulted(j, "use_regex", where))
    json_as_bool(*v, json_path(where, "use_regex"));
  return std::make_unique<ByteLevelDecoder>();
}

std::unique_ptr<Decoder> wordpiece(const Json& j, const std::string& where) {
  std::string prefix = json_string(j, "prefix", where);
  return std::make_unique<WordPieceDecoder>(std::move(prefix), json_bool(j, "cleanup", where));
}

std::unique_ptr<Decoder> metaspace(const Json& j, const std::string& where) {
  const char32_t replacement = json_char(j, "replacement", where);
  std::string scheme = "always";
  if (const Json* v = defaulted(j, "prepend_scheme", where)) {
    scheme = json_as_string(*v, json_path(where, "prepend_scheme"));
    if (scheme != "always" && scheme != "first" && scheme != "never")
      json_fail(json_path(where, "prepend_scheme"),
                "unknown prepend_scheme \"" + scheme + "\" (expected first, never or always)");
  }
  if (const Json* v = json_find(j, "add_prefix_space", where)) {
    if (!json_as_bool(*v, json_path(where, "add_prefix_space")) && scheme != "never")
      json_fail(where, "add_prefix_space does not match declared prepend_scheme");
  }
  if (const Json* v = json_find(j, "split", where)) json_as_bool(*v, json_path(where, "split"));
  if (const Json* v = json_find(j, "str_rep", where))
    json_as_string(*v, json_path(where, "str_rep"));
  return std::make_unique<MetaspaceDecoder>(replacement, scheme == "never");
}

std::unique_ptr<Decoder> ctc(const Json& j, const std::string& where) {
  std::string pad = json_string(j, "pad_token", where);
  std::string delimiter = json_string(j, "word_delimiter_token", where);
  return std::make_unique<CtcDecoder>(std::move(pad), std::move(delimiter),
                                      json_bool(j, "cleanup", where));
}

std::unique_ptr<Decoder> replace(const Json& j, const std::string& where) {
  const std::string pw = json_path(where, "pattern");
  const Json& p = json_object(json_required(j, "pattern", where), pw);
  if (p.size() != 1)
    json_fail(pw, "expected {\"String\": ...} or {\"Regex\": ...}, got an object with " +
                      std::to_string(p.size()) + " members");
  const std::string kind = p.begin().key();
  if (kind != "String" && kind != "Regex")
    json_fail(pw, "unknown pattern kind \"" + kind + "\" (expected String or Regex)");
  const std::string pattern = json_as_string(p.begin().value(), json_path(pw, kind));
  std::string content = json_string(j, "content", where);
  try {
    return std::make_unique<ReplaceDecoder>(kind == "String" ? regex_escape(pattern) : pattern,
                                            std::move(content));
  } catch (const kiln::Error& e) {
    json_fail(pw, e.what());
  }
}

std::unique_ptr<Decoder> strip(const Json& j, const std::string& where) {
  const char32_t content = json_char(j, "content", where);
  const size_t start = json_usize(j, "start", where);
  const size_t stop = json_usize(j, "stop", where);
  return std::make_unique<StripDecoder>(content, start, stop);
}

std::unique_ptr<Decoder> sequence(const Json& j, const std::string& where, size_t depth) {
  const std::string w = json_path(where, "decoders");
  const Json& arr = json_as_array(json_required(j, "decoders", where), w);
  std::vector<std::unique_ptr<Decoder>> steps;
  for (size_t i = 0; i < arr.size(); ++i)
    steps.push_back(decoder(arr[i], w + "[" + std::to_string(i) + "]", depth + 1));
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

std::unique_ptr<Decoder> decoder(const Json& j, const std::string& where, size_t depth) {
  json_object(j, where);
  if (depth > kMaxDecoderDepth)
    json_fail(where, "decoders nested more than " + std::to_string(kMaxDecoderDepth) + " deep");
  std::string type;
  if (const Json* t = json_find(j, "type", where); t && t->is_string()) type = t->get<std::string>();
  if (type == "BPEDecoder") return bpe(j, where);
  if (type == "ByteLevel") return byte_level(j, where);
  if (type == "WordPiece") return wordpiece(j, where);
  if (type == "Metaspace") return metaspace(j, where);
  if (type == "CTC") return ctc(j, where);
  if (type == "Sequence") return sequence(j, where, depth);
  if (type == "Replace") return replace(j, where);
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return strip(j, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  // HF's legacy untagged form: the decoders whose "type" is not checked.
  using Reader = std::unique_ptr<Decoder> (*)(const Json&, const std::string&);
  for (Reader read : {Reader{bpe}, Reader{wordpiece}, Reader{ctc}, Reader{replace}, Reader{strip}}) {
    try {
      return read(j, where);
    } catch (const kiln::Error&) {
    }
  }
  if (type.empty()) json_fail(where, "missing field \"type\" (and no decoder's fields)");
  json_fail(where, "unknown decoder type \"" + type + "\"");
}

}  // namespace

std::unique_ptr<Decoder> decoder_from_json(const Json& j, const std::string& where) {
  return decoder(j, where, 0);
}

}  // namespace kiln::data::tok
