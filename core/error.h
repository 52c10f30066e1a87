// kiln::Error — the one exception type the library throws for bad input.
//
// Invariant: every check on user-supplied shapes, dtypes, devices, indices,
// files and flags throws kiln::Error whose message names the op (or file) and
// the offending values. Nothing in the library aborts the process on bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}
}  // namespace detail

// Throws kiln::Error with the streamed arguments joined into one message.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::str_cat(args...));
}

}  // namespace kiln

// KILN_CHECK(cond, parts...): throw kiln::Error(parts...) unless cond holds.
#define KILN_CHECK(cond, ...)                    \
  do {                                           \
    if (!(cond)) ::kiln::fail(__VA_ARGS__);      \
  } while (0)
