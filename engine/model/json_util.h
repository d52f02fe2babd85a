// Internal helpers of engine/model: exception-free reads of nlohmann::json values.
//
// Library code never throws, so JSON is parsed with allow_exceptions = false and every typed read goes
// through these helpers, which check the type first. Errors are INVALID_ARGUMENT naming the source
// (usually a file path) and the field.
#ifndef SCORED_ENGINE_MODEL_JSON_UTIL_H_
#define SCORED_ENGINE_MODEL_JSON_UTIL_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace json_util {

using Json = nlohmann::json;

// Parses without exceptions; INVALID_ARGUMENT when malformed or not an object.
inline absl::StatusOr<Json> ParseObject(absl::string_view text, absl::string_view source) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": JSON is not an object"));
  return j;
}

// The member `key` of object `obj`, or nullptr when absent or null.
inline const Json* Find(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// A JSON number that holds an exact integer (integral floats such as 2048.0 are accepted).
inline std::optional<int64_t> AsInt(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

inline absl::Status TypeError(absl::string_view source, absl::string_view key, absl::string_view want,
                              const Json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": field '", key, "' must be ", want, ", got ", got.dump()));
}

// Required / optional typed reads. Optional ones return `def` when the key is absent or null.
inline absl::StatusOr<int64_t> GetInt(const Json& obj, absl::string_view key, absl::string_view source,
                                      std::optional<int64_t> def = std::nullopt) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing required field '", key, "'"));
  }
  std::optional<int64_t> i = AsInt(*v);
  if (!i.has_value()) return TypeError(source, key, "an integer", *v);
  return *i;
}

inline absl::StatusOr<double> GetDouble(const Json& obj, absl::string_view key, absl::string_view source,
                                        std::optional<double> def = std::nullopt) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing required field '", key, "'"));
  }
  if (!v->is_number()) return TypeError(source, key, "a number", *v);
  return v->get<double>();
}

inline absl::StatusOr<bool> GetBool(const Json& obj, absl::string_view key, absl::string_view source,
                                    std::optional<bool> def = std::nullopt) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing required field '", key, "'"));
  }
  if (!v->is_boolean()) return TypeError(source, key, "a boolean", *v);
  return v->get<bool>();
}

inline absl::StatusOr<std::string> GetString(const Json& obj, absl::string_view key,
                                             absl::string_view source,
                                             std::optional<std::string> def = std::nullopt) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing required field '", key, "'"));
  }
  if (!v->is_string()) return TypeError(source, key, "a string", *v);
  return v->get<std::string>();
}

}  // namespace json_util
}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_JSON_UTIL_H_
