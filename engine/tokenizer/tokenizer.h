// Tokenizers of the supported models, loaded from a model (or tokenizer) folder:
//   - SentencePiece `tokenizer.model` (protobuf; native BPE, no libsentencepiece) (Llama-2, Mistral,
//     stories260K)
//   - HF `tokenizer.json` BPE: byte-level (GPT-2, Llama-3, Qwen2 incl. NFC, Phi-4's cl100k split) and
//     metaspace (Llama-2 style; Gemma 2 / 3: no dummy prefix, byte fallback)
//   - `vocab.json` + `merges.txt` byte-level BPE (GPT-2, Qwen2)
//   - tiktoken `tokenizer.model` (base64 token + rank per line; Llama-3, with its pattern and specials)
// Special tokens and BOS/EOS come from tokenizer_config.json / special_tokens_map.json where present.
//
// Per format (all checked against ids from the reference Python libraries, tests/engine/tokenizer):
//   - SentencePiece: the library's default encode; literal "<s>" text is NOT a special token.
//     Defaults BOS 1 / EOS 2 (the model's own ids), add BOS.
//   - tokenizer.json: added_tokens (and tokenizer_config.json's added_tokens_decoder) are matched
//     first, leftmost-longest on the raw text (lstrip/rstrip honoured for ASCII whitespace;
//     `normalized` and `single_word` are not used). Normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip,
//     Replace (String or Regex), Prepend, StripAccents, Nmt, BertNormalizer, Sequence (normalizer.h);
//     pre-tokenizers ByteLevel, Split (String or Regex, every behavior, invert), Punctuation, Digits,
//     Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, FixedLength, Sequence, and Metaspace
//     in the metaspace forms (pre_tokenizer.h); BPE options byte_fallback, fuse_unk, ignore_merges,
//     unk_token, continuing_subword_prefix, end_of_word_suffix; decoders ByteLevel (first, for a byte-level
//     vocabulary only), ByteFallback, Fuse, Replace, Strip, Metaspace, BPEDecoder, WordPiece, Sequence, or
//     none (tokens joined with ' ') (decoder.h); post-processors TemplateProcessing, ByteLevel, Sequence.
//     Anything else (Precompiled and the ByteLevel normalizer, UnicodeScripts, Metaspace after another
//     pre-tokenizer, CTC, BertProcessing / RobertaProcessing, dropout, a `normalized` added token under a
//     normalizer): UNIMPLEMENTED naming the field and its JSON. add BOS: tokenizer_config add_bos_token, else
//     whether post_processor's template starts with a special token. EOS without a config: "</s>" (metaspace)
//     / "<|endoftext|>" (byte-level). Gemma 2 / 3 and Phi-4: the real vocabularies are not available offline;
//     their pipelines are reproduced from the published files on small trained vocabularies
//     (tests/fixtures/tokenizers, with its README's sources) and checked on the HF tokenizers library's ids.
//   - vocab.json + merges.txt: byte-level. Rule: tokenizer_config.json tokenizer_class starting
//     with "Qwen2" selects Qwen2's split pattern + NFC; otherwise GPT-2's pattern. <|endoftext|>
//     is a special token (and BOS/EOS for GPT-2, EOS for Qwen2) unless the config says otherwise.
//   - tiktoken: Llama-3 split pattern; the 256 Llama-3 special tokens at ids n_ranks.. (or the
//     config's added_tokens_decoder where present); BOS <|begin_of_text|>, EOS <|end_of_text|>,
//     add BOS by default.
//
// Thread-safety: immutable after Load(); Encode/Decode are thread-safe.
#ifndef SCORED_ENGINE_TOKENIZER_TOKENIZER_H_
#define SCORED_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scored {

// Bounds of one Tokenizer::Encode call, for callers that must not spend unbounded work on a text (a server
// tokenizing clients' text). The default bounds nothing; with or without bounds the ids are bit-identical
// when no bound is hit.
//
// Encoding is checked between words: the independent pieces the format encodes one by one (the split of
// SentencePiece and metaspace at the start of each run of '▁', the pre-tokenizer's pieces, the segments
// between added tokens). A single word is encoded whole, so one check interval costs at most the longest
// word (the whole text for a format that cannot be cut into words, e.g. a SentencePiece model whose pieces
// span spaces; a caller bounds that by the text's size).
struct EncodeLimits {
  // More than this many ids: the call stops with OUT_OF_RANGE ("more than N tokens") as soon as the ids
  // produced so far pass it (they are a prefix of the full result, so the full text has more), or before
  // a word whose length alone says it cannot fit (an id stands for at most the longest vocabulary entry;
  // not applied where fused unknown-token runs void that bound). < 0: none.
  int64_t max_tokens = -1;
  // Polled before encoding and then every kPollWords words (and after each whole-text pass such as
  // normalization); returning true stops the call with CANCELLED. Empty: never. Runs on the encoding
  // thread and must be cheap (an atomic load, a clock read).
  std::function<bool()> stop;
  static constexpr int kPollWords = 256;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Picks the format from the files present in `dir` (tokenizer.json, then tokenizer.model —
  // SentencePiece or tiktoken by content —, then vocab.json + merges.txt). NOT_FOUND if none.
  // A tokenizer.json that is UNIMPLEMENTED here (e.g. a Unigram model) falls back to a
  // tokenizer.model in the same folder, with a warning logged.
  // Errors name the file and the problem: NOT_FOUND (missing folder/file), INVALID_ARGUMENT
  // (malformed file), UNIMPLEMENTED (a valid file using a feature this implementation lacks).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);

  // Which file(s) of a folder to load, for folders holding several formats (e.g. Llama-2's
  // tokenizer.json next to its tokenizer.model, which differ on literal "<s>" text).
  enum class Format {
    kAuto,             // as Load(dir)
    kHfTokenizerJson,  // tokenizer.json
    kSentencePiece,    // tokenizer.model (SentencePiece ModelProto)
    kTiktoken,         // tokenizer.model (tiktoken "base64 rank" lines)
    kVocabMerges,      // vocab.json + merges.txt
  };
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir, Format format);

  // Encodes text without adding BOS/EOS (special-token strings in the text are matched as specials
  // where the format does so by default, e.g. "<|endoftext|>" for tiktoken/HF added tokens).
  // INVALID_ARGUMENT (naming the byte offset) if `text` is not valid UTF-8; SentencePiece also
  // for a text over 512 MiB.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const { return Encode(text, {}); }
  // The same under `limits`: additionally OUT_OF_RANGE once the ids pass limits.max_tokens, CANCELLED
  // once limits.stop returns true (both messages say how many ids were produced by then).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      const EncodeLimits& limits) const = 0;
  // Decodes ids to text (special tokens included as their text). INVALID_ARGUMENT for an id out of
  // range (naming its position). Bytes are returned as decoded, even where the ids cut a UTF-8
  // character. Metaspace/SentencePiece drop the dummy-prefix space at the start.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;
  // UTF-8 byte length of one token's contribution to decoded text (metaspace -> ' ', byte tokens -> 1; for
  // tokenizer.json the token's text as the decoder writes it in the middle of a text), used for
  // bits-per-byte. 0 for special/control tokens.
  virtual int64_t TokenByteLength(int32_t id) const = 0;

  virtual int64_t vocab_size() const = 0;  // ids are in [0, vocab_size)
  virtual int32_t bos_id() const = 0;      // -1 if none
  virtual int32_t eos_id() const = 0;      // -1 if none
  // Whether "tokenize with BOS" prepends BOS by default (tokenizer_config add_bos_token, or the
  // Llama-3 convention of a begin_of_text token; SentencePiece default true).
  virtual bool add_bos_by_default() const = 0;
  virtual std::string kind()
      const = 0;  // "sentencepiece", "hf-bpe-bytelevel", "hf-bpe-metaspace", "tiktoken"
  // Hex SHA-256 (64 lowercase chars) of the concatenated bytes of the tokenizer's files, i.e.
  // `cat FILES | sha256sum`, in this order: the model file(s) (tokenizer.json | tokenizer.model |
  // vocab.json merges.txt), then whichever of tokenizer_config.json, special_tokens_map.json,
  // added_tokens.json are present. A folder with only tokenizer.model gives that file's sha256.
  virtual std::string fingerprint() const = 0;
};

}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_TOKENIZER_H_
