// tokenizer.json's "normalizer" and "pre_tokenizer" objects as the steps of the general BPE pipeline
// (normalizer.h, pre_tokenizer.h). A type (or a field value) the pipeline does not implement is
// UNIMPLEMENTED, naming `path`, the object kind and its JSON.
#ifndef SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_
#define SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace scored {
namespace tokenizer_internal {

// UNIMPLEMENTED "<path>: unsupported <what>: <the JSON, 200 characters at most>".
absl::Status UnsupportedJson(const std::string& path, const std::string& what, const nlohmann::json& j);

// Appends the steps of `j` (null: none): Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace (String or
// Regex pattern), Prepend.
absl::Status ParseNormalizerSteps(const nlohmann::json& j, const std::string& path,
                                  std::vector<NormalizerStep>* steps);

// Appends the steps of `j` (null: none): Sequence, Split, Punctuation, Digits, Whitespace, WhitespaceSplit,
// CharDelimiterSplit, BertPreTokenizer, ByteLevel (once). Metaspace and the others are UNIMPLEMENTED.
absl::Status ParsePreTokenizerSteps(const nlohmann::json& j, const std::string& path,
                                    std::vector<PreTokenizerStep>* steps);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_PIPELINE_JSON_H_
