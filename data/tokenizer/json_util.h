// Reading tokenizer.json fields with one clear kiln::Error per mistake.
//
// nlohmann::json throws its own exceptions on a wrong type; a hostile
// tokenizer.json must instead give a kiln::Error that names the field, as
// "tokenizer.json: model.vocab: expected an object, got array". Every stage's
// from_json reads through these helpers, passing `where` (the dotted path of
// the object it reads, e.g. "normalizer.normalizers[2]").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"

namespace kiln::data::tok {

using Json = nlohmann::json;

inline std::string json_type(const Json& j) { return j.type_name(); }

[[noreturn]] inline void json_fail(std::string_view where, std::string_view what) {
  fail("tokenizer.json: ", where, ": ", what);
}

inline const Json& json_object(const Json& j, std::string_view where) {
  if (!j.is_object()) json_fail(where, "expected an object, got " + json_type(j));
  return j;
}

// The member `key` of object `j`, or nullptr when absent or null (serde's
// Option / #[serde(default)]).
inline const Json* json_find(const Json& j, std::string_view key, std::string_view where) {
  json_object(j, where);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline const Json& json_required(const Json& j, std::string_view key, std::string_view where) {
  const Json* v = json_find(j, key, where);
  if (!v) json_fail(where, "missing field \"" + std::string(key) + "\"");
  return *v;
}

inline std::string json_path(std::string_view where, std::string_view key) {
  return std::string(where) + "." + std::string(key);
}

inline std::string json_as_string(const Json& v, std::string_view where) {
  if (!v.is_string()) json_fail(where, "expected a string, got " + json_type(v));
  return v.get<std::string>();
}

inline bool json_as_bool(const Json& v, std::string_view where) {
  if (!v.is_boolean()) json_fail(where, "expected a boolean, got " + json_type(v));
  return v.get<bool>();
}

inline double json_as_double(const Json& v, std::string_view where) {
  if (!v.is_number()) json_fail(where, "expected a number, got " + json_type(v));
  return v.get<double>();
}

// An integer in [lo, hi] (a float, a negative for an unsigned field, or an
// out-of-range value is an error).
inline int64_t json_as_int(const Json& v, std::string_view where,
                           int64_t lo = std::numeric_limits<int64_t>::min(),
                           int64_t hi = std::numeric_limits<int64_t>::max()) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      json_fail(where, "integer " + std::to_string(u) + " out of range");
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    json_fail(where, "expected an integer, got " + json_type(v));
  }
  if (x < lo || x > hi)
    json_fail(where, "integer " + std::to_string(x) + " outside [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  return x;
}

inline const Json& json_as_array(const Json& v, std::string_view where) {
  if (!v.is_array()) json_fail(where, "expected an array, got " + json_type(v));
  return v;
}

// Optional fields with serde-style defaults.
inline std::string json_string_or(const Json& j, std::string_view key, std::string_view where,
                                  std::string def) {
  const Json* v = json_find(j, key, where);
  return v ? json_as_string(*v, json_path(where, key)) : def;
}
inline bool json_bool_or(const Json& j, std::string_view key, std::string_view where, bool def) {
  const Json* v = json_find(j, key, where);
  return v ? json_as_bool(*v, json_path(where, key)) : def;
}
inline std::string json_string(const Json& j, std::string_view key, std::string_view where) {
  return json_as_string(json_required(j, key, where), json_path(where, key));
}
inline bool json_bool(const Json& j, std::string_view key, std::string_view where) {
  return json_as_bool(json_required(j, key, where), json_path(where, key));
}

// The "type" tag of a stage object.
inline std::string json_type_tag(const Json& j, std::string_view where) {
  return json_string(j, "type", where);
}

}  // namespace kiln::data::tok
