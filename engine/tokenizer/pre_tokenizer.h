// The pre-tokenizers of HF `tokenizers` (tokenizer.json "pre_tokenizer") that the general BPE pipeline runs,
// in the order of their Sequence, each on every piece the one before left (as PreTokenizedString::split):
//   Split(pattern, behavior, invert)  pattern a String (literal) or a Regex (PCRE2 in place of Oniguruma);
//   Punctuation(behavior)     each punctuation character (IsUnicodePunctuation) a match;
//   Digits(individual_digits) each numeric character a match, Isolated when individual, else Contiguous;
//   Whitespace                the runs of \w+ and of [^\w\s]+ kept, whitespace removed;
//   WhitespaceSplit           split on whitespace (removed);
//   FixedLength(length)       pieces of `length` characters (the last one shorter);
//   ByteLevel(add_prefix_space, use_regex)  ' ' before a piece that does not start with one, GPT-2's
//                             regex (Isolated), then every byte as its GPT-2 byte-level character: later
//                             steps see those characters, as in the library.
// The behaviors (SplitDelimiterBehavior), over the matches and the text between them:
//   Removed: matches dropped; Isolated: matches are pieces of their own; MergedWithPrevious / MergedWithNext:
//   a match is joined to the piece before / after it; Contiguous: adjacent matches form one piece. `invert`
//   swaps matches and the text between them. Empty pieces are dropped.
//
// Thread-safety: immutable after Create(); Split may run concurrently.
#ifndef SCORED_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define SCORED_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/regex_splitter.h"

namespace scored {
namespace tokenizer_internal {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kPunctuation, kDigits, kWhitespace, kWhitespaceSplit, kFixedLength, kByteLevel };
  Kind kind = Kind::kSplit;
  SplitBehavior behavior = SplitBehavior::kIsolated;  // kSplit, kPunctuation
  bool invert = false;                                // kSplit
  std::string pattern;  // kSplit: the literal, or the regex when pattern_is_regex
  bool pattern_is_regex = false;
  bool individual_digits = false;  // kDigits
  bool add_prefix_space = false;   // kByteLevel
  bool use_regex = true;           // kByteLevel
  size_t length = 5;               // kFixedLength: characters per piece (> 0)
};

class PreTokenizer {
 public:
  // INVALID_ARGUMENT if a regex does not compile or a literal pattern is empty.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::vector<PreTokenizerStep> steps);

  // Replaces *pieces with the pieces of `text` (valid UTF-8): the words the model encodes, as bytes (a
  // byte-level piece back as the bytes its characters stand for). INTERNAL from PCRE2.
  absl::Status Split(std::string_view text, std::vector<std::string>* pieces) const;

  bool byte_level() const { return byte_level_; }

 private:
  PreTokenizer() = default;
  // Appends the pieces of `piece` under step `index`.
  absl::Status SplitPiece(size_t index, const std::string& piece, std::vector<std::string>* out) const;

  std::vector<PreTokenizerStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] kSplit regex / kByteLevel GPT-2, or null
  bool byte_level_ = false;
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
