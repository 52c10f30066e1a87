// Regex: the regular expressions of HF tokenizers' pre-tokenizers and
// normalizers, run by Oniguruma exactly as HF's utils/onig.rs (SysRegex, the
// `onig` crate) runs them, so that every match equals HF's.
//
//  - Compiled with onig_new: UTF-8, ONIG_OPTION_NONE, ONIG_SYNTAX_DEFAULT
//    (Ruby syntax), which is the onig crate's Regex::new. A pattern that does
//    not compile is a kiln::Error carrying Oniguruma's message.
//  - find_all is the onig crate's find_iter: leftmost matches searched from
//    the end of the previous one, on the whole string (so look-behind sees
//    the text before); an empty match right where the previous match ended
//    is skipped by moving on one code point.
//  - find_regex_matches is HF's Pattern::find_matches for a SysRegex: the
//    pieces between and at the matches, covering the string, empty matches
//    kept as empty pieces.
//
// Note [Oniguruma version]: HF's wheel bundles Oniguruma 6.9.10-dev (the
// onig_sys crate, Unicode 16.0); the system library here is 6.9.8 (Unicode
// 14.0). Matches differ (1) on code points assigned in Unicode 15.0-16.0
// (about 9400, e.g. Garay U+10D40.., Todhri U+105C0.., U+0897): \p{L},
// \p{N}, \w, \X know them there, not here; (2) on [[:punct:]], which became
// \p{P} + \p{S} in 6.9.9 (here the ASCII symbols $+<=>^`|~ are not in it).
//
// Thread safety: compilation is serialized (onig_new touches Oniguruma's
// global tables, as the onig crate's REGEX_NEW_MUTEX does); searching only
// reads the compiled program, with a region and match parameters per call,
// so one Regex may be searched from many threads at once.
//
// Note [Regex budget]: Oniguruma backtracks. HF keeps Oniguruma's default
// limits: at most 10^7 backtracking steps ("retries") per match attempt and
// no limit per search, and panics (Python: PanicException) when the per-match
// limit is hit. We keep that per-match limit, so a pattern that is
// catastrophic at one position fails here exactly where HF fails (as a
// kiln::Error). Without a limit per search, a pattern that costs many steps
// at every start position runs for minutes per MB in HF ((?:x+x+)+y|x: about
// 115 us per byte), up to 10^7 steps per position at worst; here the whole
// find_all has a budget of kBudgetBase + kBudgetPerByte steps
// per byte of input, charged per onig_search call: each call starts with a
// small search limit that doubles on ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER, and
// is charged every limit it tried (an upper bound of at most about four
// times the steps it took). Real patterns take a few steps per call (the
// GPT-2 pattern at most 16 on WikiText), far inside the budget; running out
// of it is a kiln::Error where HF would still be searching.
//
// Note [PCRE2 accelerator]: Oniguruma takes about 250 ns per match of
// GPT-2's pattern, more than all the rest of byte-level BPE. For the
// patterns in a short table (regex.cpp: kAccelerated; GPT-2's, which the
// ByteLevel pre-tokenizer and many Split pre-tokenizers use, and the runs of
// spaces SentencePiece tokenizers' Replace normalizer collapses), a Regex also
// compiles a PCRE2 spelling (JIT, about 35 ns per match) that matches
// exactly what Oniguruma matches: both are backtracking engines with
// leftmost-first alternation and greedy repeats, so the spellings differ
// only where their character classes differ. Those classes were compared on
// every code point (PCRE2 10.42's \s also holds U+180E, Oniguruma 6.9.8's
// does not; the spelling excludes it), and tests/test_tok_regex.cpp repeats
// that comparison for each accelerated pattern, every code point in several
// contexts, against the libraries the build links. find_all runs the same
// find_iter loop over either engine, and falls back to Oniguruma for a text
// that is not valid UTF-8 or when PCRE2 reports any error (its match limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/normalized.h"

struct re_pattern_buffer;  // Oniguruma's compiled regex (OnigRegexType)
struct pcre2_real_code_8;  // PCRE2's compiled pattern (pcre2_code)

namespace kiln::data::tok {

// The patterns with a PCRE2 spelling (Note [PCRE2 accelerator]).
std::vector<std::string_view> accelerated_patterns();

class Regex {
 public:
  // Oniguruma's default per-match limit, which HF runs with.
  static constexpr uint64_t kRetryLimitInMatch = 10'000'000;
  static constexpr uint64_t kBudgetBase = 100'000'000;
  static constexpr uint64_t kBudgetPerByte = 256;

  // `accelerate`: use the PCRE2 spelling when the pattern has one (Note
  // [PCRE2 accelerator]); false runs Oniguruma alone (tests compare both).
  explicit Regex(std::string_view pattern, bool accelerate = true);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }
  bool accelerated() const { return fast_ != nullptr; }

  // The byte spans of the successive matches in `s` (valid UTF-8), as the
  // onig crate's find_iter; kiln::Error when Oniguruma fails (the retry
  // limit, Note [Regex budget]).
  std::vector<Span> find_all(std::string_view s) const;
  // The same into `out` (cleared first), for callers that reuse one vector.
  void find_all(std::string_view s, std::vector<Span>& out) const;

 private:
  struct Free {
    void operator()(re_pattern_buffer* r) const;
  };
  struct FreeFast {
    void operator()(pcre2_real_code_8* r) const;
  };
  // The PCRE2 loop; false when PCRE2 failed (find_all then uses Oniguruma).
  bool find_all_fast(std::string_view s, std::vector<Span>& out) const;
  std::string pattern_;
  std::unique_ptr<re_pattern_buffer, Free> reg_;
  std::unique_ptr<pcre2_real_code_8, FreeFast> fast_;
};

// HF's Pattern::find_matches for a SysRegex: ordered pieces covering `s`, the
// matches flagged is_match; an empty `s` gives the one piece [0, 0).
Matches find_regex_matches(const Regex& re, std::string_view s);

// Rust's regex::escape: a backslash before each of \.+*?()|[]{}^$#&-~. HF's
// Split compiles a String pattern as the Oniguruma regex of its escape.
std::string regex_escape(std::string_view literal);

}  // namespace kiln::data::tok
