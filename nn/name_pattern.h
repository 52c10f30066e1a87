// Regular expressions over module and parameter names (LoRA's target_modules
// in PEFT's string form, --freeze): PCRE2, whose syntax is Perl's and so
// Python's `re` for the patterns people write (".*\.(query|value)$",
// "layer\.[0-5]\."). A pattern that does not compile is one kiln::Error
// naming the flag or file it came from and PCRE2's message.
#pragma once

#include <memory>
#include <string>

struct pcre2_real_code_8;  // PCRE2's compiled pattern (pcre2_code)

namespace kiln::nn {

class NamePattern {
 public:
  // `source` names where the pattern came from ("--freeze", "adapter_config.json target_modules").
  NamePattern(const std::string& pattern, const std::string& source);
  // The whole name matches (Python's re.fullmatch).
  bool full_match(const std::string& name) const;
  // Some part of the name matches (Python's re.search).
  bool search(const std::string& name) const;
  const std::string& pattern() const { return pattern_; }

 private:
  bool match(const std::string& name, bool whole) const;
  struct Free {
    void operator()(pcre2_real_code_8* c) const;
  };
  std::string pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;
};

}  // namespace kiln::nn
