// JSON helpers for the tokenizer loaders (internal). nlohmann::json throws on parse errors; these
// helpers catch and return a Status so that nothing escapes the library.
#ifndef SCORED_ENGINE_TOKENIZER_JSON_UTIL_H_
#define SCORED_ENGINE_TOKENIZER_JSON_UTIL_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/bpe_tokenizer.h"

namespace scored {
namespace tokenizer_internal {

// NOT_FOUND if absent; INVALID_ARGUMENT "<path>: invalid JSON: <parser message>".
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);
absl::StatusOr<nlohmann::json> ParseJson(const std::string& bytes, const std::string& path);

// An HF added-token object {content, special, lstrip, rstrip, ...}; id left at -1.
absl::StatusOr<AddedToken> ParseAddedToken(const nlohmann::json& j, const std::string& path);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_JSON_UTIL_H_
