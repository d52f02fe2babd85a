// The Tokenizer for every BPE format (HF tokenizer.json, vocab.json + merges.txt, tiktoken): a
// pipeline configured by the loaders (bpe_loaders.cc):
//   1. added tokens are matched first, leftmost-longest, on the raw text (HF AddedVocabulary);
//   2. each remaining segment is normalized (NFC when configured; metaspace: '▁' prepended and
//      ' ' -> '▁'),
//   3. split into words (regex for byte-level, optional '▁'-split for metaspace; none for the
//      Llama-2 legacy normalizer form),
//   4. each word goes through BpeModel (byte-level words are cached for the duration of one call).
// Decode runs the token strings of the ids (added tokens as their content, byte-level tokens as their bytes)
// through the decoder (decoder.h), as HF's decode does; the byte-level formats have the ByteLevel decoder.
// Decoded bytes are returned as they are, even where a token sequence cuts a UTF-8 character (no U+FFFD
// substitution).
//
// Thread-safety: immutable after construction; Encode/Decode may run concurrently.
#ifndef SCORED_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
#define SCORED_ENGINE_TOKENIZER_BPE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/regex_splitter.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace tokenizer_internal {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;      // special tokens count 0 bytes in TokenByteLength
  bool lstrip = false;      // the match swallows whitespace on its left
  bool rstrip = false;      // ... and on its right
  bool normalized = false;  // HF: matched in the normalized text (the library's default: not special)
};

struct BpeTokenizerSpec {
  std::string kind;  // "hf-bpe-bytelevel", "hf-bpe-metaspace", "tiktoken"
  std::vector<AddedToken> added_tokens;
  bool nfc = false;
  // Byte-level: the split regexes, applied in order (each to every piece of the one before, as a Sequence of
  // Split(Isolated) pre-tokenizers and a ByteLevel(use_regex) one does; none = no split), and HF ByteLevel
  // add_prefix_space.
  std::vector<std::string> split_patterns;
  bool add_prefix_space = false;
  // Byte-level: a Digits pre-tokenizer before the ByteLevel one (SmolLM2's tokenizer.json): the text is cut
  // around numeric characters first (SplitDigits), then each piece takes the prefix space and the regex.
  enum class Digits { kNone, kRuns, kIndividual };
  Digits digits = Digits::kNone;
  // Metaspace: prepend '▁' to a segment (to every segment, or only to the one at offset 0), replace
  // ' ' by '▁', optionally split before every '▁'; the decoder strips one leading space.
  bool metaspace_prepend = false;
  bool metaspace_prepend_first_only = false;
  bool metaspace_split = false;
  bool metaspace_prepend_unless_present = false;  // Metaspace pre-tokenizer: not if it starts with '▁'
  // The general pipeline (tokenizer.json's other normalizer / pre-tokenizer types, normalizer.h and
  // pre_tokenizer.h): when set, each segment goes through `normalizer`, then `pre_tokenizer` (none: the
  // segment is one word), and each piece to the model, in place of the fields above from nfc to
  // metaspace_prepend_unless_present.
  bool general_pipeline = false;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  // The decoder's steps (decoder.h); has_decoder false: none, the tokens joined with ' '.
  std::vector<DecoderStep> decoder = ByteLevelDecoderSteps();
  bool has_decoder = true;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  std::string fingerprint;
};

class BpeTokenizer : public Tokenizer {
 public:
  // INVALID_ARGUMENT if an added token's id is negative or its content empty, a split or Replace pattern
  // does not compile, or the decoder is malformed (decoder.h).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(BpeModel model, BpeTokenizerSpec spec);

  using Tokenizer::Encode;
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeLimits& limits) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int64_t TokenByteLength(int32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return spec_.bos_id; }
  int32_t eos_id() const override { return spec_.eos_id; }
  bool add_bos_by_default() const override { return spec_.add_bos; }
  std::string kind() const override { return spec_.kind; }
  std::string fingerprint() const override { return spec_.fingerprint; }

 private:
  BpeTokenizer(BpeModel model, BpeTokenizerSpec spec) : model_(std::move(model)), spec_(std::move(spec)) {}
  struct EncodeState;  // working memory and limits of one Encode call
  absl::Status EncodeSegmentInto(std::string_view segment, bool at_start, EncodeState* state,
                                 std::vector<int32_t>* ids) const;
  // A byte-level pre-token: HF ByteLevel's prefix space, the split regex, then each piece as a cached word.
  absl::Status EncodeByteLevelInto(std::string_view text, EncodeState* state,
                                   std::vector<int32_t>* ids) const;
  // A segment through the general pipeline (spec_.general_pipeline).
  absl::Status EncodeGeneralInto(std::string_view segment, EncodeState* state,
                                 std::vector<int32_t>* ids) const;
  absl::Status EncodeWordInto(std::string_view word, EncodeState* state, std::vector<int32_t>* ids) const;
  // EncodeWordInto through the per-call word cache.
  absl::Status EncodeCachedWordInto(std::string_view word, EncodeState* state,
                                    std::vector<int32_t>* ids) const;
  // Length of the added token matching text at `pos` (longest), or 0; sets *index.
  size_t MatchAddedAt(std::string_view text, size_t pos, size_t* index) const;

  BpeModel model_;
  BpeTokenizerSpec spec_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // one per spec_.split_patterns
  std::unique_ptr<Normalizer> normalizer_;                 // spec_.general_pipeline
  std::unique_ptr<PreTokenizer> pre_tokenizer_;            // spec_.general_pipeline
  std::unique_ptr<Decoder> decoder_;
  int64_t vocab_size_ = 0;
  // Metaspace without a pre-tokenizer: the whole segment is one BPE word. When no token has a '▁'
  // right after a non-'▁' character (true of Llama-2's vocabulary), no merge can cross the start
  // of a '▁' run, so the segment may be cut there into words without changing the result; the
  // short words then hit the word cache (measured ~x10 on wiki.test.raw, see tests/bench/tokenizer). Not
  // with a subword prefix or suffix, which would mark the cuts.
  bool metaspace_words_exact_ = false;
  // EncodeGuard::BeforeWord: the longest token (at least a 4-byte character); 0 with fused unknown runs.
  size_t max_bytes_per_token_ = 0;
  std::vector<int32_t> added_of_id_;  // [vocab_size] index into spec_.added_tokens, or -1
  std::vector<std::string>
      added_text_;  // [added_tokens] the decoder's input (byte-level: the bytes, if all map)
  std::vector<int64_t> byte_length_;                      // [vocab_size] TokenByteLength
  std::vector<std::vector<size_t>> added_by_first_byte_;  // [256] added tokens, longest first
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
