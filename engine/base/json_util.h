// Exception-free JSON helpers shared by the model and tokenizer loaders (internal to engine/).
//
// Library code never throws, so every parse goes through ParseObject / ParseJson / ReadJsonFile, which
// return a Status instead, and every typed read goes through the Get* helpers, which check the type first.
// Errors are INVALID_ARGUMENT naming the source (usually a file path) and the field; a missing file is
// NOT_FOUND. All functions are pure (no shared state) and safe to call from any thread.
#ifndef SCORED_ENGINE_BASE_JSON_UTIL_H_
#define SCORED_ENGINE_BASE_JSON_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace json_util {

using Json = nlohmann::json;

// Parses `text`; INVALID_ARGUMENT "<source>: malformed JSON" when malformed and
// "<source>: JSON is not an object" when the top-level value is not an object.
absl::StatusOr<Json> ParseObject(absl::string_view text, absl::string_view source);

// Parses any JSON value; INVALID_ARGUMENT "<source>: invalid JSON: <parser message>" when malformed (the
// parser message names the byte position).
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source);

// Reads and parses the file at `path` with ParseJson. NOT_FOUND "<path>: file not found" when it is not a
// regular file; INTERNAL when it cannot be read.
absl::StatusOr<Json> ReadJsonFile(const std::string& path);

// The member `key` of object `obj`, or nullptr when `obj` is not an object or the member is absent or null.
// The pointer aliases `obj`.
const Json* Find(const Json& obj, absl::string_view key);

// A JSON number that holds an exact integer in int64 range (integral floats such as 2048.0 are accepted
// below 9e15, where doubles still hold every integer).
std::optional<int64_t> AsInt(const Json& v);

// INVALID_ARGUMENT "<source>: field '<key>' must be <want>, got <got as JSON>".
absl::Status TypeError(absl::string_view source, absl::string_view key, absl::string_view want,
                       const Json& got);

// Typed reads of member `key` of `obj`. Absent or null: `def` when given, else INVALID_ARGUMENT
// "missing required field"; present with another type: TypeError.
absl::StatusOr<int64_t> GetInt(const Json& obj, absl::string_view key, absl::string_view source,
                               std::optional<int64_t> def = std::nullopt);
absl::StatusOr<double> GetDouble(const Json& obj, absl::string_view key, absl::string_view source,
                                 std::optional<double> def = std::nullopt);
absl::StatusOr<bool> GetBool(const Json& obj, absl::string_view key, absl::string_view source,
                             std::optional<bool> def = std::nullopt);
absl::StatusOr<std::string> GetString(const Json& obj, absl::string_view key, absl::string_view source,
                                      std::optional<std::string> def = std::nullopt);

}  // namespace json_util
}  // namespace scored

#endif  // SCORED_ENGINE_BASE_JSON_UTIL_H_
