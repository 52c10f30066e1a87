// Regex over Oniguruma (regex.h; Note [Regex budget]).
#include "kiln/data/tokenizer/regex.h"

#include <oniguruma.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "kiln/data/tokenizer/byte_level.h"

namespace kiln::data::tok {
namespace {

std::mutex& onig_mutex() {
  static std::mutex m;
  return m;
}

// Initializes Oniguruma for UTF-8 once; callers hold onig_mutex().
void ensure_initialized() {
  static bool done = false;
  if (done) return;
  OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
  KILN_CHECK(onig_initialize(encodings, 1) == ONIG_NORMAL, "Oniguruma: initialization failed");
  done = true;
}

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN + 1] = {0};
  if (info)
    onig_error_code_to_str(buf, code, info);
  else
    onig_error_code_to_str(buf, code);
  return reinterpret_cast<const char*>(buf);
}

// Per-call search state.
struct Search {
  OnigRegion* region = onig_region_new();
  OnigMatchParam* param = onig_new_match_param();
  ~Search() {
    if (region) onig_region_free(region, 1);
    if (param) onig_free_match_param(param);
  }
  Search() = default;
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;
};

// The first search limit tried per call; the GPT-2 pattern needs at most 16.
constexpr uint64_t kFirstSearchLimit = 64;

// Note [PCRE2 accelerator]: Oniguruma patterns and their PCRE2 spellings.
// \s and \S become classes without U+180E; [^\s\p{L}\p{N}] gains it.
struct Accelerated {
  std::string_view oniguruma, pcre2;
};
constexpr Accelerated kAccelerated[] = {
    {kGpt2Pattern,
     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?(?:[^\\s\\p{L}\\p{N}]|\\x{180E})+"
     "|[^\\S\\x{180E}]+(?![\\S\\x{180E}])|[^\\S\\x{180E}]+"},
    // SentencePiece tokenizers' Replace normalizer (XLM-R, T5, ALBERT): runs of spaces.
    {" {2,}", " {2,}"},
};

}  // namespace

std::vector<std::string_view> accelerated_patterns() {
  std::vector<std::string_view> out;
  for (const Accelerated& a : kAccelerated) out.push_back(a.oniguruma);
  return out;
}

namespace {

pcre2_code* compile_pcre2(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  KILN_CHECK(code, "regex: the PCRE2 spelling of a built-in pattern does not compile (error ",
             error, " at ", offset, ")");
  // Without JIT (a platform without it) PCRE2's interpreter is still exact.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

// The onig crate's FindMatches iterator over `search(from)`, the leftmost
// match starting at or after byte `from`.
template <typename Search>
void find_iter(std::string_view s, Search&& search, std::vector<Span>& out) {
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= s.size()) {
    const std::optional<Span> m = search(last_end);
    if (!m) break;
    if (m->begin == m->end && have_last && last_match_end == m->end) {
      // An empty match where the last one ended: step over one code point.
      if (last_end < s.size()) {
        size_t i = last_end;
        decode_utf8(s, i);
        last_end = std::min(i, s.size());
      } else {
        last_end = s.size() + 1;
      }
      continue;
    }
    last_end = m->end;
    last_match_end = m->end;
    have_last = true;
    out.push_back(*m);
  }
}

}  // namespace

void Regex::FreeFast::operator()(pcre2_real_code_8* r) const { pcre2_code_free(r); }

bool Regex::find_all_fast(std::string_view s, std::vector<Span>& out) const {
  struct MatchData {
    pcre2_match_data* p = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(p); }
  };
  thread_local MatchData md;
  KILN_CHECK(md.p, "regex /", pattern_, "/: out of memory");
  bool failed = false;
  const auto* str = reinterpret_cast<PCRE2_SPTR>(s.data());
  find_iter(
      s,
      [&](size_t from) -> std::optional<Span> {
        const int r = pcre2_match(fast_.get(), str, s.size(), from, PCRE2_NO_UTF_CHECK, md.p, nullptr);
        if (r == PCRE2_ERROR_NOMATCH) return std::nullopt;
        if (r < 0) {
          failed = true;
          return std::nullopt;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.p);
        return Span{ov[0], ov[1]};
      },
      out);
  return !failed;
}

void Regex::Free::operator()(re_pattern_buffer* r) const {
  std::lock_guard<std::mutex> lock(onig_mutex());
  onig_free(r);
}

Regex::Regex(std::string_view pattern, bool accelerate) : pattern_(pattern) {
  if (accelerate)
    for (const Accelerated& a : kAccelerated)
      if (a.oniguruma == pattern_) fast_.reset(compile_pcre2(a.pcre2));
  std::lock_guard<std::mutex> lock(onig_mutex());
  ensure_initialized();
  OnigRegex reg = nullptr;
  OnigErrorInfo info{};
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern_.data());
  const int r = onig_new(&reg, p, p + pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                         ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    if (reg) onig_free(reg);
    fail("regex /", pattern_, "/: ", onig_message(r, &info));
  }
  reg_.reset(reg);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<Span> Regex::find_all(std::string_view s) const {
  std::vector<Span> out;
  find_all(s, out);
  return out;
}

void Regex::find_all(std::string_view s, std::vector<Span>& out) const {
  out.clear();
  if (fast_ && is_valid_utf8(s)) {
    if (find_all_fast(s, out)) return;
    out.clear();  // PCRE2 failed (its match limit): Oniguruma decides
  }
  Search st;
  KILN_CHECK(st.region && st.param, "regex /", pattern_, "/: out of memory");
  const auto* str = reinterpret_cast<const OnigUChar*>(s.data());
  const OnigUChar* end = str + s.size();
  uint64_t budget = kBudgetBase + kBudgetPerByte * static_cast<uint64_t>(s.size());

  // One onig_search from byte `from`: the match, or nullopt.
  auto search = [&](size_t from) -> std::optional<Span> {
    uint64_t limit = std::min(kFirstSearchLimit, budget);
    for (;;) {
      if (limit == 0)  // (0 would mean "unlimited" to Oniguruma)
        fail("regex /", pattern_, "/: backtracking budget of ",
             kBudgetBase + kBudgetPerByte * s.size(), " steps exceeded on a ", s.size(),
             "-byte input (Note [Regex budget])");
      onig_initialize_match_param(st.param);
      onig_set_retry_limit_in_match_of_match_param(st.param, kRetryLimitInMatch);
      onig_set_retry_limit_in_search_of_match_param(st.param, static_cast<unsigned long>(limit));
      onig_region_clear(st.region);
      const int r = onig_search_with_param(reg_.get(), str, end, str + from, end, st.region,
                                           ONIG_OPTION_NONE, st.param);
      budget -= limit;
      if (r >= 0) {
        KILN_CHECK(st.region->num_regs > 0 && st.region->beg[0] >= 0 &&
                       st.region->end[0] >= st.region->beg[0] &&
                       static_cast<size_t>(st.region->end[0]) <= s.size(),
                   "regex /", pattern_, "/: Oniguruma returned a bad match");
        return Span{static_cast<size_t>(st.region->beg[0]), static_cast<size_t>(st.region->end[0])};
      }
      if (r == ONIG_MISMATCH) return std::nullopt;
      if (r != ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER)
        fail("regex /", pattern_, "/: search failed on a ", s.size(),
             "-byte input: ", onig_message(r, nullptr));
      limit = std::min(limit * 2, budget);
    }
  };

  find_iter(s, search, out);
}

Matches find_regex_matches(const Regex& re, std::string_view s) {
  if (s.empty()) return {{{0, 0}, false}};
  Matches out;
  size_t prev = 0;
  for (const Span& m : re.find_all(s)) {
    if (prev != m.begin) out.push_back({{prev, m.begin}, false});
    out.push_back({m, true});
    prev = m.end;
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, false});
  return out;
}

std::string regex_escape(std::string_view literal) {
  static constexpr std::string_view kMeta = "\\.+*?()|[]{}^$#&-~";
  std::string out;
  out.reserve(literal.size() * 2);
  for (char c : literal) {
    if (kMeta.find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace kiln::data::tok
