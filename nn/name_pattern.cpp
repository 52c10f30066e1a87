#include "nn/name_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace kiln::nn {

void NamePattern::Free::operator()(pcre2_real_code_8* c) const { pcre2_code_free(c); }

NamePattern::NamePattern(const std::string& pattern, const std::string& source) : pattern_(pattern) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF, &code,
                                &offset, nullptr);
  if (!c) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    fail(source, ": the regular expression '", pattern, "' does not compile at offset ", offset, ": ",
         reinterpret_cast<const char*>(msg));
  }
  code_.reset(c, Free());
}

bool NamePattern::match(const std::string& name, bool whole) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_.get(), nullptr);
  KILN_CHECK(md != nullptr, "NamePattern: out of memory");
  const uint32_t options = whole ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0;
  const int r = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, options, md,
                            nullptr);
  pcre2_match_data_free(md);
  KILN_CHECK(r >= 0 || r == PCRE2_ERROR_NOMATCH, "the regular expression '", pattern_, "' failed on '", name,
             "' (PCRE2 error ", r, ")");
  return r >= 0;
}

bool NamePattern::full_match(const std::string& name) const { return match(name, true); }
bool NamePattern::search(const std::string& name) const { return match(name, false); }

}  // namespace kiln::nn
