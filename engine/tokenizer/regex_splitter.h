// Pre-tokenizer split by a regular expression (PCRE2, UTF + UCP, JIT when available), with HF
// tokenizers' "Isolated" behaviour: every match is a piece, and text between matches (none for the
// GPT-2 / Llama-3 / Qwen2 patterns, which match everything) is a piece of its own.
//
// Thread-safety: immutable after Create(); Split may run concurrently.
#ifndef SCORED_ENGINE_TOKENIZER_REGEX_SPLITTER_H_
#define SCORED_ENGINE_TOKENIZER_REGEX_SPLITTER_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace scored {
namespace tokenizer_internal {

// The pre-tokenizer patterns of the supported models.
// GPT-2 (also HF ByteLevel with use_regex true).
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3 (tiktoken pat_str of the reference implementation).
inline constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 (single digits).
inline constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class RegexSplitter {
 public:
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // INVALID_ARGUMENT with PCRE2's message and offset if the pattern does not compile.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);

  // Appends the pieces of `text` (valid UTF-8) in order; their concatenation is `text`.
  // INTERNAL if PCRE2 fails (e.g. match limit), with its message.
  absl::Status Split(std::string_view text, std::vector<std::string_view>* pieces) const;
  // Appends the [start, end) byte offsets of the non-empty matches of `text` (valid UTF-8), leftmost first,
  // not overlapping (an empty match is stepped over by one character). INTERNAL as Split.
  absl::Status FindMatches(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  RegexSplitter() = default;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so that pcre2.h stays out of this header
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_REGEX_SPLITTER_H_
