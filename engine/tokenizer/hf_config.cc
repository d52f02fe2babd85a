#include "engine/tokenizer/hf_config.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

using nlohmann::json;

// A special-token field: string, {"content": string}, or null/absent (nullopt).
absl::StatusOr<std::optional<std::string>> TokenField(const json& j, const char* key,
                                                      const std::string& path) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    const auto c = it->find("content");
    if (c != it->end() && c->is_string()) return std::optional<std::string>(c->get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": '", key, "' must be a string or an object with a string 'content'"));
}

}  // namespace

absl::StatusOr<AddedToken> ParseAddedToken(const json& j, const std::string& path) {
  AddedToken t;
  const auto content = j.find("content");
  if (!j.is_object() || content == j.end() || !content->is_string() || content->get<std::string>().empty()) {
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
  t.normalized = flag("normalized", !t.special);
  return t;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

absl::StatusOr<HfTokenizerConfig> ReadHfTokenizerConfig(const std::string& dir) {
  HfTokenizerConfig config;
  const std::string config_path = JoinPath(dir, "tokenizer_config.json");
  if (FileExists(config_path)) {
    SCORED_ASSIGN_OR_RETURN(const json j, ReadJsonFile(config_path));
    config.files_read.push_back(config_path);
    if (!j.is_object()) return absl::InvalidArgumentError(config_path + ": not a JSON object");
    if (const auto it = j.find("add_bos_token"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return absl::InvalidArgumentError(config_path + ": 'add_bos_token' must be a boolean");
      }
      config.add_bos_token = it->get<bool>();
    }
    SCORED_ASSIGN_OR_RETURN(config.bos_token, TokenField(j, "bos_token", config_path));
    SCORED_ASSIGN_OR_RETURN(config.eos_token, TokenField(j, "eos_token", config_path));
    if (const auto it = j.find("tokenizer_class"); it != j.end() && it->is_string()) {
      config.tokenizer_class = it->get<std::string>();
    }
    if (const auto it = j.find("added_tokens_decoder"); it != j.end() && !it->is_null()) {
      if (!it->is_object()) {
        return absl::InvalidArgumentError(config_path + ": 'added_tokens_decoder' must be an object");
      }
      for (const auto& [key, value] : it->items()) {
        char* end = nullptr;
        const long id = std::strtol(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || id < 0 || !value.is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat(config_path, ": added_tokens_decoder entry '", key, "' is malformed"));
        }
        SCORED_ASSIGN_OR_RETURN(AddedToken t, ParseAddedToken(value, config_path));
        t.id = static_cast<int32_t>(id);
        config.added_tokens.push_back(std::move(t));
      }
    }
  }
  const std::string map_path = JoinPath(dir, "special_tokens_map.json");
  std::vector<std::string> additional_special;
  if (FileExists(map_path)) {
    SCORED_ASSIGN_OR_RETURN(const json j, ReadJsonFile(map_path));
    config.files_read.push_back(map_path);
    if (!j.is_object()) return absl::InvalidArgumentError(map_path + ": not a JSON object");
    SCORED_ASSIGN_OR_RETURN(const std::optional<std::string> bos, TokenField(j, "bos_token", map_path));
    SCORED_ASSIGN_OR_RETURN(const std::optional<std::string> eos, TokenField(j, "eos_token", map_path));
    if (!config.bos_token) config.bos_token = bos;
    if (!config.eos_token) config.eos_token = eos;
    if (const auto it = j.find("additional_special_tokens"); it != j.end() && it->is_array()) {
      for (const auto& v : *it) {
        if (v.is_string()) additional_special.push_back(v.get<std::string>());
        if (v.is_object() && v.contains("content") && v["content"].is_string()) {
          additional_special.push_back(v["content"].get<std::string>());
        }
      }
    }
  }
  const std::string added_path = JoinPath(dir, "added_tokens.json");
  if (FileExists(added_path)) {
    SCORED_ASSIGN_OR_RETURN(const json j, ReadJsonFile(added_path));
    config.files_read.push_back(added_path);
    if (!j.is_object()) return absl::InvalidArgumentError(added_path + ": not a JSON object");
    for (const auto& item : j.items()) {
      const std::string content = item.key();
      const json& value = item.value();
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || content.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(added_path, ": entry '", content, "' must map to a non-negative id"));
      }
      const int32_t id = static_cast<int32_t>(value.get<int64_t>());
      const bool listed = std::any_of(config.added_tokens.begin(), config.added_tokens.end(),
                                      [id](const AddedToken& t) { return t.id == id; });
      if (listed) continue;
      AddedToken t;
      t.id = id;
      t.content = content;
      t.special = std::find(additional_special.begin(), additional_special.end(), content) !=
                      additional_special.end() ||
                  content == config.bos_token || content == config.eos_token;
      config.added_tokens.push_back(std::move(t));
    }
  }
  return config;
}

}  // namespace tokenizer_internal
}  // namespace scored
