// Bounded JSON parsing (Note [Bounded JSON], core/json_util.h).
#include "core/json_util.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"

namespace kiln {
namespace {

// Thrown from the parser callback to stop nlohmann at once; never leaves this file.
struct TooDeep {};

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& what, const JsonLimits& limits) {
  KILN_CHECK(text.size() <= limits.max_bytes, what, ": JSON text is ", text.size(),
             " bytes, over the limit of ", limits.max_bytes, " bytes");
  const size_t nul = text.find('\0');
  KILN_CHECK(nul == std::string_view::npos, what, ": not valid JSON: NUL byte at offset ", nul);

  std::vector<std::set<std::string>> open_objects;  // keys seen, per object being parsed
  std::optional<std::string> duplicate;
  bool duplicate_at_top = false;
  typename Json::parser_callback_t callback = [&](int depth, nlohmann::json::parse_event_t event,
                                                  Json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= limits.max_depth)
      throw TooDeep{};
    if (!limits.reject_duplicate_keys) return true;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty() && !duplicate) {
      const std::string& key = parsed.template get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) {
        duplicate = key;
        duplicate_at_top = open_objects.size() == 1;
      }
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
  } catch (const TooDeep&) {
    fail(what, ": JSON nested deeper than ", limits.max_depth, " levels");
  } catch (const nlohmann::json::exception& e) {
    fail(what, ": not valid JSON: ", e.what());
  }
  if (duplicate)
    fail(what, ": duplicate key '", *duplicate, "' ",
         duplicate_at_top ? "at the top level" : "in a nested object");
  return j;
}

}  // namespace

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what,
                                  const JsonLimits& limits) {
  return parse_bounded<nlohmann::json>(text, what, limits);
}

nlohmann::ordered_json parse_ordered_json_bounded(std::string_view text, const std::string& what,
                                                  const JsonLimits& limits) {
  return parse_bounded<nlohmann::ordered_json>(text, what, limits);
}

nlohmann::json read_json_file(const std::string& path, const std::string& what,
                              const JsonLimits& limits) {
  return parse_json_bounded(read_file_bounded(path, what, limits.max_bytes), what, limits);
}

}  // namespace kiln
