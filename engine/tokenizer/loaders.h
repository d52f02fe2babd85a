// The per-format loaders behind Tokenizer::Load (internal). Each takes the folder and returns a
// Tokenizer or a status naming the file and the problem.
#ifndef SCORED_ENGINE_TOKENIZER_LOADERS_H_
#define SCORED_ENGINE_TOKENIZER_LOADERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace tokenizer_internal {

// tokenizer.json with model.type BPE (byte-level or metaspace).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& dir);
// vocab.json + merges.txt (byte-level; Qwen2 pattern + NFC when tokenizer_config.json's
// tokenizer_class starts with "Qwen2", else the GPT-2 pattern).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadVocabMerges(const std::string& dir);
// tokenizer.model in tiktoken format (Llama-3 pattern and special-token layout).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTiktoken(const std::string& dir);
// tokenizer.model as a SentencePiece ModelProto.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& dir);

// True if the bytes look like a tiktoken file (first line "<base64> <rank>").
bool LooksLikeTiktoken(const std::string& bytes);

// Hex SHA-256 of the concatenated bytes of `paths`, in the given order (= `cat paths... |
// sha256sum`). Order used by the loaders: the model file(s) first (tokenizer.json |
// tokenizer.model | vocab.json then merges.txt), then those of tokenizer_config.json,
// special_tokens_map.json, added_tokens.json that are present.
absl::StatusOr<std::string> FingerprintFiles(const std::vector<std::string>& paths);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_LOADERS_H_
