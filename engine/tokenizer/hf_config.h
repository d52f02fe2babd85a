// Reading the HF side files of a tokenizer folder (internal):
//   tokenizer_config.json: add_bos_token, bos_token, eos_token, tokenizer_class, added_tokens_decoder
//   special_tokens_map.json: bos_token, eos_token, additional_special_tokens (fills what the first
//     file leaves unset, as transformers does)
//   added_tokens.json: {content: id} (added tokens that added_tokens_decoder does not list)
// A token may be given as a string or as an object with "content". Absent files are not errors.
#ifndef SCORED_ENGINE_TOKENIZER_HF_CONFIG_H_
#define SCORED_ENGINE_TOKENIZER_HF_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/json_util.h"
#include "engine/tokenizer/bpe_tokenizer.h"

namespace scored {
namespace tokenizer_internal {

struct HfTokenizerConfig {
  std::optional<bool> add_bos_token;
  std::optional<std::string> bos_token;  // content; nullopt when absent or null
  std::optional<std::string> eos_token;
  std::string tokenizer_class;
  std::vector<AddedToken> added_tokens;  // added_tokens_decoder, then added_tokens.json extras
  std::vector<std::string> files_read;   // paths, in the order read (for the fingerprint)
};

// INVALID_ARGUMENT naming the file on malformed JSON or wrong field types.
absl::StatusOr<HfTokenizerConfig> ReadHfTokenizerConfig(const std::string& dir);

std::string JoinPath(const std::string& dir, const std::string& name);

// An HF added-token object {content, special, lstrip, rstrip, ...} (tokenizer.json "added_tokens",
// tokenizer_config.json "added_tokens_decoder"); id left at -1. INVALID_ARGUMENT naming `path` when
// "content" is not a non-empty string; flags of another type keep their defaults.
absl::StatusOr<AddedToken> ParseAddedToken(const json_util::Json& j, const std::string& path);

// The shared JSON file reader, for the unqualified calls of this namespace.
using json_util::ReadJsonFile;

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_HF_CONFIG_H_
