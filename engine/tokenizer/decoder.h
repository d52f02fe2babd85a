// The decoders of HF `tokenizers` (tokenizer.json "decoder") that turn the token strings of ids back into
// text, as the library's decode_chain: every step maps the list of token strings to a new list, in the order
// of their Sequence, and the last list is joined. Without a decoder the library joins the tokens with ' '.
//   ByteLevel              the tokens' bytes (GPT-2 byte-level characters back to bytes), joined into one
//                          token. The loader stores a byte-level vocabulary as those bytes already, so here
//                          the tokens come in as bytes and this step joins them; it must be the first step.
//   ByteFallback           each run of <0xNN> tokens (two hex digits, either case, as Rust's
//                          u8::from_str_radix reads them) as its bytes, one token;
//   Fuse                   every token joined into one;
//   Replace(pattern, content)  every match (String: literal; Regex: PCRE2) inside each token by `content`;
//   Strip(content, start, stop)  up to `start` leading and `stop` trailing `content` characters off each
//                          token;
//   Metaspace(replacement, prepend_scheme)  each `replacement` character as ' ', dropped from the first token
//                          unless prepend_scheme is "never";
//   BPEDecoder(suffix)     each `suffix` as ' ', as "" in the last token;
//   WordPiece(prefix, cleanup)  a token after the first loses its leading `prefix`, or else gets ' ' before
//                          it; with cleanup each token has " ." -> ".", " ?" -> "?", " !" -> "!", " ," ->
//                          ",", " ' " -> "'", " n't" -> "n't", " 'm" -> "'m", " do not" -> " don't", " 's" ->
//                          "'s", " 've" -> "'ve", " 're" -> "'re".
// Where the ids cut a UTF-8 character (ByteLevel, ByteFallback), the bytes are kept as they are (the library
// writes U+FFFD for each such byte); a Regex Replace leaves such a token unchanged.
//
// Thread-safety: immutable after Create(); Decode and TokenText may run concurrently.
#ifndef SCORED_ENGINE_TOKENIZER_DECODER_H_
#define SCORED_ENGINE_TOKENIZER_DECODER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/regex_splitter.h"

namespace scored {
namespace tokenizer_internal {

struct DecoderStep {
  enum class Kind { kByteLevel, kByteFallback, kFuse, kReplace, kStrip, kMetaspace, kBpe, kWordPiece };
  Kind kind = Kind::kFuse;
  std::string pattern;  // kReplace: the literal, or the regex when pattern_is_regex
  bool pattern_is_regex = false;
  // kReplace: the replacement; kStrip: the character stripped; kMetaspace: the replacement character;
  // kBpe: the suffix; kWordPiece: the prefix.
  std::string content;
  size_t strip_start = 0;  // kStrip
  size_t strip_stop = 0;   // kStrip
  bool prepend = true;     // kMetaspace: prepend_scheme is not "never" (the first token's drop)
  bool cleanup = true;     // kWordPiece
};

// The decoder of the byte-level formats without a tokenizer.json (vocab.json + merges.txt, tiktoken).
inline std::vector<DecoderStep> ByteLevelDecoderSteps() {
  DecoderStep step;
  step.kind = DecoderStep::Kind::kByteLevel;
  return {step};
}

class Decoder {
 public:
  // `has_decoder` false: no decoder (`steps` must be empty), the tokens joined with ' '. INVALID_ARGUMENT if
  // a Replace regex does not compile, a literal pattern or a Strip / Metaspace character is empty, or
  // ByteLevel is not the first step.
  static absl::StatusOr<std::unique_ptr<Decoder>> Create(std::vector<DecoderStep> steps, bool has_decoder);

  // The text of `tokens` (the token strings of the ids in order, byte-level ones as bytes). INTERNAL from
  // PCRE2.
  absl::StatusOr<std::string> Decode(const std::vector<std::string_view>& tokens) const;
  // The text `token` adds in the middle of a text (neither first nor last; a Strip after the tokens were
  // joined cuts only the ends of the whole text and is left out), for per-token byte counts.
  absl::StatusOr<std::string> TokenText(std::string_view token) const;

 private:
  Decoder() = default;
  // Step `s` (one that works token by token) on one token, the first and / or the last of the list.
  absl::Status ApplyToToken(size_t s, bool first, bool last, std::string* token) const;

  std::vector<DecoderStep> steps_;
  std::vector<std::unique_ptr<RegexSplitter>> regexes_;  // [steps] the kReplace regex, or null
  bool has_decoder_ = true;
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_DECODER_H_
