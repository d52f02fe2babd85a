// tokenizer.json's "normalizer", "pre_tokenizer" and "decoder" objects as the steps of the general BPE
// pipeline (normalizer.h, pre_tokenizer.h) and of the decoder (decoder.h). A type (or a field value) the
// pipeline does not implement is UNIMPLEMENTED, naming `path`, the object kind and its JSON.
#ifndef SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_
#define SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace scored {
namespace tokenizer_internal {

// UNIMPLEMENTED "<path>: unsupported <what>: <the JSON, 200 characters at most>".
absl::Status UnsupportedJson(const std::string& path, const std::string& what, const nlohmann::json& j);

// Appends the steps of `j` (null: none): Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace (String or
// Regex pattern), Prepend, StripAccents, Nmt, BertNormalizer. Precompiled, ByteLevel and the others are
// UNIMPLEMENTED.
absl::Status ParseNormalizerSteps(const nlohmann::json& j, const std::string& path,
                                  std::vector<NormalizerStep>* steps);

// Appends the steps of `j` (null: none): Sequence, Split, Punctuation, Digits, Whitespace, WhitespaceSplit,
// CharDelimiterSplit, BertPreTokenizer, FixedLength, ByteLevel (once). Metaspace, UnicodeScripts and the
// others are UNIMPLEMENTED.
absl::Status ParsePreTokenizerSteps(const nlohmann::json& j, const std::string& path,
                                    std::vector<PreTokenizerStep>* steps);

// Appends the steps of `j` (null: none, the caller's "no decoder"): Sequence, ByteLevel, ByteFallback, Fuse,
// Replace (String or Regex pattern), Strip, Metaspace, BPEDecoder, WordPiece. CTC and the others are
// UNIMPLEMENTED.
absl::Status ParseDecoderSteps(const nlohmann::json& j, const std::string& path,
                               std::vector<DecoderStep>* steps);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_
