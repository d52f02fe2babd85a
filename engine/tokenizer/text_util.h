// Small text helpers shared by the tokenizer implementations (internal; not a public API).
#ifndef SCORED_ENGINE_TOKENIZER_TEXT_UTIL_H_
#define SCORED_ENGINE_TOKENIZER_TEXT_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace tokenizer_internal {

// SentencePiece's word-boundary marker U+2581 '▁' (UTF-8), the metaspace that stands for ' '.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// Appends `piece` with every '▁' as ' ' (how SentencePiece-style pipelines decode a piece).
void AppendMetaspaceText(std::string_view piece, std::string* out);

// Whole file as bytes. NOT_FOUND naming `path` if it does not exist, INTERNAL on a read error.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
bool FileExists(const std::string& path);

// OK if `text` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF); else INVALID_ARGUMENT
// naming the byte offset of the first bad sequence.
absl::Status ValidateUtf8(std::string_view text);

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
inline int Utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at text[pos] (valid UTF-8 assumed); sets *len to its byte length.
uint32_t DecodeUtf8At(std::string_view text, size_t pos, int* len);
void AppendUtf8(uint32_t code_point, std::string* out);

// GPT-2 byte-level alphabet: every byte maps to one printable code point (printable Latin-1 bytes
// map to themselves, the others to U+0100 + n in byte order).
uint32_t ByteToUnicode(uint8_t byte);
// Inverse over a whole token string: false if some character is not in the alphabet.
bool ByteLevelToBytes(std::string_view token, std::string* bytes);

// Applies EncodeLimits inside an Encode call: Word() after each word's ids were appended, Poll() after a
// whole-text pass. Not thread-safe (one per call).
class EncodeGuard {
 public:
  // max_bytes_per_token: the most bytes of a word one id can stand for (the longest vocabulary entry, at
  // least a 4-byte character); 0 when no such bound holds (e.g. fused unknown-token runs).
  EncodeGuard(const EncodeLimits& limits, size_t max_bytes_per_token)
      : limits_(limits), max_bytes_per_token_(max_bytes_per_token) {}
  // Before a word of `word_bytes` is encoded: OUT_OF_RANGE when it cannot fit, i.e. when even at
  // max_bytes_per_token bytes an id it would pass max_tokens (a long word is then never encoded).
  absl::Status BeforeWord(size_t num_ids, size_t word_bytes) const {
    if (limits_.max_tokens < 0 || max_bytes_per_token_ == 0) return absl::OkStatus();
    const size_t fewest = (word_bytes + max_bytes_per_token_ - 1) / max_bytes_per_token_;
    if (static_cast<int64_t>(num_ids + fewest) > limits_.max_tokens) return TooMany(num_ids);
    return absl::OkStatus();
  }
  // OUT_OF_RANGE once num_ids > max_tokens; every kPollWords calls, Poll().
  absl::Status Word(size_t num_ids) {
    if (limits_.max_tokens >= 0 && static_cast<int64_t>(num_ids) > limits_.max_tokens) {
      return TooMany(num_ids);
    }
    if (limits_.stop && ++words_since_poll_ >= EncodeLimits::kPollWords) return Poll(num_ids);
    return absl::OkStatus();
  }
  // CANCELLED if limits.stop returns true.
  absl::Status Poll(size_t num_ids) {
    words_since_poll_ = 0;
    if (limits_.stop && limits_.stop()) return Stopped(num_ids);
    return absl::OkStatus();
  }
  // The CANCELLED status of a stop (e.g. found inside a long word).
  absl::Status Stopped(size_t num_ids) const;
  // For the scratch of a word encoder (BpeModel, SentencePieceBpe): null when nothing can stop.
  const std::function<bool()>* stop() const { return limits_.stop ? &limits_.stop : nullptr; }

 private:
  absl::Status TooMany(size_t num_ids) const;

  const EncodeLimits& limits_;
  const size_t max_bytes_per_token_;
  int words_since_poll_ = 0;
};

// Canonical composition (NFC) via utf8proc. `text` must be valid UTF-8.
absl::StatusOr<std::string> NormalizeNfc(std::string_view text);

// Character classes of the HF `tokenizers` library (Rust), by code point:
// Rust's char::is_whitespace (the White_Space property).
bool IsUnicodeWhitespace(uint32_t cp);
// Rust's char::is_numeric (the general categories Nd, Nl, No).
bool IsUnicodeNumeric(uint32_t cp);
// The Punctuation pre-tokenizer's is_punc: ASCII punctuation (incl. $+<=>^`|~) or the categories P*.
bool IsUnicodePunctuation(uint32_t cp);
// \w of Rust's regex crate (the Whitespace pre-tokenizer's \w+|[^\w\s]+): Alphabetic, M*, Nd, Pc,
// Join_Control. Alphabetic is taken as L*, Nl and the non-mark Other_Alphabetic letters (circled and squared
// Latin letters); utf8proc has no Alphabetic property.
bool IsRegexWordChar(uint32_t cp);

// The HF `tokenizers` Digits pre-tokenizer (behavior Isolated): `text` (valid UTF-8) cut around its numeric
// characters (Rust's char::is_numeric: the Unicode categories Nd, Nl, No), each one a piece of its own when
// `individual`, else each run of them one piece; the pieces between them are kept whole. Appends to
// `pieces`; their concatenation is `text`.
void SplitDigits(std::string_view text, bool individual, std::vector<std::string_view>* pieces);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_TEXT_UTIL_H_
