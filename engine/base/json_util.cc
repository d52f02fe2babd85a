#include "engine/base/json_util.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace scored {
namespace json_util {
namespace {

absl::Status MissingField(absl::string_view source, absl::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": missing required field '", key, "'"));
}

}  // namespace

absl::StatusOr<Json> ParseObject(absl::string_view text, absl::string_view source) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": JSON is not an object"));
  return j;
}

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source) {
  // The exception-free parse only says "discarded"; the parser's own message (with the byte position) is
  // only in its exception, which is caught here so that nothing escapes.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", e.what()));
  }
}

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat(path, ": cannot open for reading"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read error"));
  return ParseJson(bytes, path);
}

const Json* Find(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> AsInt(const Json& v) {
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

absl::Status TypeError(absl::string_view source, absl::string_view key, absl::string_view want,
                       const Json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": field '", key, "' must be ", want, ", got ", got.dump()));
}

absl::StatusOr<int64_t> GetInt(const Json& obj, absl::string_view key, absl::string_view source,
                               std::optional<int64_t> def) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return MissingField(source, key);
  }
  std::optional<int64_t> i = AsInt(*v);
  if (!i.has_value()) return TypeError(source, key, "an integer", *v);
  return *i;
}

absl::StatusOr<double> GetDouble(const Json& obj, absl::string_view key, absl::string_view source,
                                 std::optional<double> def) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return MissingField(source, key);
  }
  if (!v->is_number()) return TypeError(source, key, "a number", *v);
  return v->get<double>();
}

absl::StatusOr<bool> GetBool(const Json& obj, absl::string_view key, absl::string_view source,
                             std::optional<bool> def) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return MissingField(source, key);
  }
  if (!v->is_boolean()) return TypeError(source, key, "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::string> GetString(const Json& obj, absl::string_view key, absl::string_view source,
                                      std::optional<std::string> def) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return MissingField(source, key);
  }
  if (!v->is_string()) return TypeError(source, key, "a string", *v);
  return v->get<std::string>();
}

}  // namespace json_util
}  // namespace scored
