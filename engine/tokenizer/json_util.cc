#include "engine/tokenizer/json_util.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {

absl::StatusOr<nlohmann::json> ParseJson(const std::string& bytes, const std::string& path) {
  try {
    return nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON: ", e.what()));
  }
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  SCORED_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path));
  return ParseJson(bytes, path);
}

absl::StatusOr<AddedToken> ParseAddedToken(const nlohmann::json& j, const std::string& path) {
  AddedToken t;
  const auto content = j.find("content");
  if (!j.is_object() || content == j.end() || !content->is_string() ||
      content->get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an added token needs a non-empty string 'content'"));
  }
  t.content = content->get<std::string>();
  auto flag = [&j](const char* key, bool fallback) {
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  t.special = flag("special", true);
  t.lstrip = flag("lstrip", false);
  t.rstrip = flag("rstrip", false);
  return t;
}

}  // namespace tokenizer_internal
}  // namespace scored
