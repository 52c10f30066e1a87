// Bounded JSON parsing with nlohmann-json, for text from files kiln does not
// trust (Note [Bounded input], core/file_util.h).
//
//   const nlohmann::json j = kiln::read_json_file(path, path);              // defaults
//   kiln::JsonLimits limits;
//   limits.max_bytes = 1 << 20;
//   const auto state = kiln::parse_ordered_json_bounded(text, "trainer_state.json", limits);
//
// Note [Bounded JSON]: nlohmann builds the whole document before its caller
// can look at it, and a document costs far more memory than its text (~100 MB
// of '[' would be gigabytes of nested arrays). So before and during parsing:
//  - text longer than limits.max_bytes is refused without parsing;
//  - a NUL byte is refused (JSON text never holds one);
//  - the parse is aborted, by throwing from nlohmann's parser callback, as
//    soon as an object or array opens at depth limits.max_depth (the
//    top-level value is depth 0, so at most max_depth levels nest), so no
//    later step (dump, a recursive walk) recurses without bound either;
//  - with limits.reject_duplicate_keys, a key repeated within one object is
//    an error (nlohmann would silently keep the last one).
// Errors are kiln::Error: "<what>: not valid JSON: ...", "<what>: JSON
// nested deeper than 64 levels", "<what>: duplicate key 'k' ...", "<what>:
// JSON text is N bytes, over the limit of M bytes".
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr uint64_t kMaxJsonBytes = uint64_t{16} << 20;  // 16 MiB

struct JsonLimits {
  uint64_t max_bytes = kMaxJsonBytes;
  int max_depth = kMaxJsonDepth;
  bool reject_duplicate_keys = true;
};

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what,
                                  const JsonLimits& limits = {});
// The same, keeping the order of object keys.
nlohmann::ordered_json parse_ordered_json_bounded(std::string_view text, const std::string& what,
                                                  const JsonLimits& limits = {});

// read_file_bounded(path, what, limits.max_bytes) (a regular file only), then
// parse_json_bounded.
nlohmann::json read_json_file(const std::string& path, const std::string& what,
                              const JsonLimits& limits = {});

}  // namespace kiln
