// Native SentencePiece BPE (no libsentencepiece): the model of a parsed `.model` file
// (sentencepiece_proto.h), its normalizer and its encode/decode, matching the library's results.
//
// Normalize (identity rules only; a precompiled_charsmap or rule TSV, e.g. nmt_nfkc, is
// UNIMPLEMENTED): user-defined pieces pass whole; with remove_extra_whitespaces leading and
// trailing spaces are dropped and runs of spaces become one; add_dummy_prefix prepends a space to
// non-empty text; escape_whitespaces writes every space as '▁' (U+2581).
// EncodeNormalized: the normalized text is split into characters (a user-defined piece matched
// whole, longest first, and never merged); then, repeatedly, the adjacent pair whose concatenation
// is a NORMAL / USER_DEFINED / UNUSED piece with the HIGHEST score is merged, the leftmost on ties
// (a heap, O(n log n)). Remaining symbols map to their piece ids; an UNUSED piece is split back
// into the two symbols it was last merged from; a symbol without a piece is the unknown piece, or
// with byte_fallback its UTF-8 bytes as <0xNN> pieces.
// Decode: as the library per run of ids: control pieces render as "", the unknown piece as
// trainer_spec.unk_surface, byte pieces as their raw bytes, '▁' as ' '; the leading '▁' of the
// first piece is dropped (add_dummy_prefix or remove_extra_whitespaces), and with
// remove_extra_whitespaces that of every following piece until some text has been output
// (["▁", "▁x"] decodes to " x" for Llama-2, to "x" for tok512, as the library does). Unlike the
// library, byte pieces that do not form valid UTF-8 are returned as they are (no U+FFFD), per
// Tokenizer::Decode.
//
// Thread-safety: immutable after Create(); EncodeNormalized may run concurrently with a per-call
// Scratch.
#ifndef SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_BPE_H_
#define SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_BPE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/sentencepiece_proto.h"

namespace scored {
namespace tokenizer_internal {

class SentencePieceBpe {
 public:
  struct Scratch {
    struct Symbol {
      int32_t begin;  // byte offset in the word
      int32_t len;    // bytes; 0 once merged into its left neighbour
      int32_t prev;
      int32_t next;
      bool freeze;  // a user-defined piece: never merged
    };
    struct Pair {
      float score;
      int32_t left;
      int32_t right;
      int32_t size;  // bytes of the merged piece
    };
    std::vector<Symbol> symbols;
    std::vector<Pair> heap;
    // UNUSED piece id -> {left begin, left len, right begin, right len} of its last merge.
    absl::flat_hash_map<int32_t, std::array<int32_t, 4>> unused_splits;
    // Polled every kPollMerges merges of one word (a long word is most of an encoding's work); when it
    // returns true the word is abandoned: nothing is appended and `stopped` is set. Null: never.
    const std::function<bool()>* stop = nullptr;
    bool stopped = false;
    static constexpr int kPollMerges = 1 << 14;
  };

  // Validates the model: BPE model_type (UNIGRAM/WORD/CHAR: UNIMPLEMENTED), identity normalizer
  // and denormalizer (else UNIMPLEMENTED naming it), no treat_whitespace_as_suffix
  // (UNIMPLEMENTED); INVALID_ARGUMENT for no pieces, an empty piece, an unknown piece type, a NaN
  // score, a duplicate piece, not exactly one UNKNOWN piece, a BYTE piece without byte_fallback or
  // not named <0xNN>.
  static absl::StatusOr<SentencePieceBpe> Create(SentencePieceProto proto);

  // Appends the normalized form of `text` (valid UTF-8) to *out.
  void Normalize(std::string_view text, std::string* out) const;
  // Appends the ids of a normalized text (or of a word of it, see words_split_exact()).
  void EncodeNormalized(std::string_view normalized, Scratch* scratch, std::vector<int32_t>* ids) const;
  // Appends the decoded text of ids (all in range; control ids render as "").
  void DecodeRun(absl::Span<const int32_t> ids, std::string* out) const;

  // True when no piece holds the space symbol right after another character: then no merge
  // crosses the start of a run of space symbols, and a normalized text may be cut there into
  // words encoded separately (with a cache) without changing the result.
  bool words_split_exact() const { return words_split_exact_; }
  std::string_view space_symbol() const { return space_; }

  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id].piece; }
  int32_t type(int32_t id) const { return pieces_[id].type; }
  // The library's PieceToId: control/unknown/byte pieces first, then the others; unk_id if absent.
  int32_t PieceToId(std::string_view piece) const;
  int32_t unk_id() const { return unk_id_; }
  // bos/eos: the trainer spec's bos/eos piece when it is a CONTROL piece, else -1.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }

 private:
  static int32_t Find(const absl::flat_hash_map<std::string, int32_t>& map, std::string_view s);
  size_t MatchUserDefined(std::string_view text, size_t pos) const;  // bytes, 0 if none
  void MaybePush(std::string_view word, int32_t left, int32_t right, Scratch* scratch) const;
  void Emit(std::string_view word, int32_t begin, int32_t len, const Scratch& scratch,
            std::vector<int32_t>* ids) const;

  std::vector<SentencePieceProto::Piece> pieces_;
  SentencePieceProto::Normalizer normalizer_;
  bool byte_fallback_ = false;
  std::string unk_surface_;
  std::string space_;                                       // "▁" when escape_whitespaces, else " "
  absl::flat_hash_map<std::string, int32_t> normal_ids_;    // NORMAL, USER_DEFINED, UNUSED
  absl::flat_hash_map<std::string, int32_t> reserved_ids_;  // CONTROL, UNKNOWN, BYTE
  std::vector<std::vector<int32_t>> user_by_first_byte_;    // [256] user-defined ids, longest first
  std::array<int32_t, 256> byte_ids_{};                     // <0xNN> ids (unk_id when absent)
  bool has_user_defined_ = false;
  bool has_unused_ = false;
  bool words_split_exact_ = false;
  int32_t unk_id_ = -1;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_BPE_H_
