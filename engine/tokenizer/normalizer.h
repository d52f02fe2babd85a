// The normalizers of HF `tokenizers` (tokenizer.json "normalizer") that the general BPE pipeline runs on
// each segment of text between added tokens, in the order of their Sequence:
//   NFC, NFD, NFKC, NFKD   Unicode normalization forms (utf8proc);
//   Lowercase              Rust's char::to_lowercase of every character (full mappings: 'İ' -> "i̇"; no
//                          final-sigma rule, as the library works character by character);
//   Strip(left, right)     drops White_Space characters (Rust's char::is_whitespace) at either end;
//   Replace(pattern, content)  every non-overlapping match of a String (literal) or a Regex (PCRE2 in
//                          place of the library's Oniguruma: the same for the usual classes and
//                          quantifiers; an empty match replaces nothing) by `content`;
//   Prepend(prepend)       prepends the string to a non-empty segment;
//   StripAccents           drops the combining marks (the general categories Mn, Mc, Me);
//   Nmt                    drops U+0001..0008, 000B, 000E..001F, 007F, 008F, 009F and writes ' ' for U+0009,
//                          000A, 000C, 000D, 1680, 200B..200F, 2028, 2029, 2581, FEFF, FFFD (SentencePiece's
//                          nmt rules, as the library has them);
//   BertNormalizer(clean_text, handle_chinese_chars, strip_accents, lowercase)  in this order: drops U+0000,
//                          U+FFFD and the characters of the categories Cc, Cf, Cn, Co, Cs except '\t', '\n',
//                          '\r', and writes ' ' for every whitespace character; puts ' ' on both sides of
//                          each CJK Unified Ideograph (the blocks 4E00..9FFF, 3400..4DBF, 20000..2A6DF,
//                          2A700..2B73F, 2B740..2B81F, 2B920..2CEAF, F900..FAFF, 2F800..2FA1F); NFD then
//                          drops the Mn marks (strip_accents null: as lowercase); Lowercase.
// Character categories come from the system utf8proc, the library's from older tables (BertNormalizer's
// Unicode 9): characters assigned since may be classed differently (a newer emoji is Cn, dropped, there).
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
  enum class Kind {
    kNfc,
    kNfd,
    kNfkc,
    kNfkd,
    kLowercase,
    kStrip,
    kReplace,
    kPrepend,
    kStripAccents,
    kNmt,
    kBert
  };
  Kind kind = Kind::kNfc;
  bool strip_left = true;            // kStrip
  bool strip_right = true;           // kStrip
  bool clean_text = true;            // kBert
  bool handle_chinese_chars = true;  // kBert
  bool strip_accents = true;         // kBert (null in the JSON: as lowercase)
  bool lowercase = true;             // kBert
  std::string pattern;               // kReplace: the literal, or the regex when pattern_is_regex
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

// Every non-overlapping match in *text of `regex` (when not null; *text valid UTF-8) or else of the literal
// `pattern` (not empty) replaced by `content`, as the library's Replace. INTERNAL from PCRE2.
absl::Status ReplaceMatches(const RegexSplitter* regex, const std::string& pattern,
                            const std::string& content, std::string* text);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_NORMALIZER_H_
