// The normalizers of HF `tokenizers` (tokenizer.json "normalizer") that the general BPE pipeline runs on
// each segment of text between added tokens, in the order of their Sequence:
//   NFC, NFD, NFKC, NFKD   Unicode normalization forms (utf8proc);
//   Lowercase              Rust's char::to_lowercase of every character (full mappings: 'İ' -> "i̇"; no
//                          final-sigma rule, as the library works character by character);
//   Strip(left, right)     drops White_Space characters (Rust's char::is_whitespace) at either end;
//   Replace(pattern, content)  every non-overlapping match of a String (literal) or a Regex (PCRE2 in
//                          place of the library's Oniguruma: the same for the usual classes and
//                          quantifiers; an empty match replaces nothing) by `content`;
//   Prepend(prepend)       prepends the string to a non-empty segment.
//
// Thread-safety: immutable after Create(); Apply may run concurrently.
#ifndef SCORED_ENGINE_TOKENIZER_NORMALIZER_H_
#define SCORED_ENGINE_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/regex_splitter.h"

namespace scored {
namespace tokenizer_internal {

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  bool strip_left = true;   // kStrip
  bool strip_right = true;  // kStrip
  std::string pattern;      // kReplace: the literal, or the regex when pattern_is_regex
  bool pattern_is_regex = false;
  std::string content;  // kReplace: the replacement; kPrepend: the prefix
};

class Normalizer {
 public:
  // INVALID_ARGUMENT if a Replace regex does not compile or a literal pattern is empty.
  static absl::StatusOr<std::unique_ptr<Normalizer>> Create(std::vector<NormalizerStep> steps);

  // Writes the normalized `text` (valid UTF-8) to *out. INVALID_ARGUMENT / INTERNAL from utf8proc or PCRE2.
  absl::Status Apply(std::string_view text, std::string* out) const;

 private:
  Normalizer() = default;
  absl::Status ApplyStep(size_t index, std::string* text) const;

  std::vector<NormalizerStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] the kReplace regex, or null
};

// Unicode normalization of valid UTF-8: NFD (compose false, compat false), NFC, NFKD, NFKC.
absl::StatusOr<std::string> NormalizeUnicode(std::string_view text, bool compose, bool compat);

// Rust's char::to_lowercase over every character of valid UTF-8.
std::string LowercaseUtf8(std::string_view text);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_NORMALIZER_H_
