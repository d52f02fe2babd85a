// The BPE merge engine shared by the HF tokenizer.json, vocab.json + merges.txt and tiktoken formats.
//
// Two alphabets:
//   kBytes: tokens are raw byte strings; a word starts as one symbol per byte (byte-level BPE after
//           the GPT-2 byte->unicode mapping has been undone at load, and tiktoken).
//   kChars: tokens are UTF-8 strings (metaspace BPE, '▁' = U+2581 for a space); a word starts as one
//           symbol per code point; a code point without a token becomes its <0xNN> byte tokens
//           (byte_fallback) or the unknown token (consecutive unknowns fused when fuse_unk).
// A byte-level symbol without a token is the unknown token too where there is one, else dropped.
// HF's continuing_subword_prefix / end_of_word_suffix: a word's symbols after the first start as prefix +
// symbol, its last as symbol + suffix (a one-symbol word: symbol + suffix), each looked up whole (byte
// fallback then covers the bytes of the affixed symbol, as the library does); a merge (a, b) makes a + b
// without b's prefix. Merging: repeatedly apply the applicable merge of lowest rank, the leftmost one on ties
// (the order of HF tokenizers' BPE and of tiktoken), using a heap over candidate pairs, O(n log n) per word.
// ignore_merges: a word that is itself a token is emitted as that token (tiktoken, Llama-3 tokenizer.json).
//
// Thread-safety: immutable after creation; EncodeWord may run concurrently with a per-call Scratch.
#ifndef SCORED_ENGINE_TOKENIZER_BPE_MODEL_H_
#define SCORED_ENGINE_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace scored {
namespace tokenizer_internal {

class BpeModel {
 public:
  enum class Alphabet { kBytes, kChars };
  // kBytes: the most bytes of the 256 a vocabulary may lack a token for (each dropped where it occurs).
  static constexpr int kMaxMissingBytes = 64;

  struct Options {
    Alphabet alphabet = Alphabet::kBytes;
    bool byte_fallback = false;  // kChars only
    bool fuse_unk = false;       // kChars only
    bool ignore_merges = false;
    int32_t unk_id = -1;                    // -1: none
    std::string continuing_subword_prefix;  // empty: none (kBytes: as bytes)
    std::string end_of_word_suffix;         // empty: none (kBytes: as bytes)
  };

  // Per-call working memory (keeps EncodeWord allocation-free and thread-safe).
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev;
      int32_t next;
    };
    struct Candidate {
      int32_t rank;
      int32_t pos;
      int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    // Polled every kPollMerges merges of one word (a long word is most of an encoding's work); when it
    // returns true the word is abandoned: nothing is appended and `stopped` is set. Null: never.
    const std::function<bool()>* stop = nullptr;
    bool stopped = false;
    static constexpr int kPollMerges = 1 << 14;
  };

  // `tokens[id]` is the token of id (empty for an id the vocabulary skips). `merges` are pairs of
  // token strings in rank order; the merged token a+b (b without the continuing_subword_prefix, which it must
  // be at least as long as) must be in the vocabulary. A later duplicate
  // of a pair replaces the earlier one (as HF tokenizers does). Errors: INVALID_ARGUMENT naming the
  // merge index or the missing token.
  static absl::StatusOr<BpeModel> CreateFromMerges(
      std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
      const Options& options);
  // tiktoken: tokens[rank] are byte strings; two adjacent symbols may merge when their concatenation
  // is a token, with that token's rank (kBytes, ignore_merges as given).
  static absl::StatusOr<BpeModel> CreateFromRanks(std::vector<std::string> tokens, const Options& options);

  // Appends the ids of one pre-tokenized word. False (with *bad_char set to the code point) only
  // in kChars mode when a character has no token, no byte fallback and there is no unknown token.
  bool EncodeWord(std::string_view word, Scratch* scratch, std::vector<int32_t>* ids,
                  uint32_t* bad_char) const;

  int32_t TokenId(std::string_view token) const;  // -1 if absent
  const std::string& token(int32_t id) const { return tokens_[id]; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const Options& options() const { return options_; }
  // kChars with byte_fallback: the byte value of a <0xNN> token, else -1.
  int ByteOfToken(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  absl::Status Init();
  void PushCandidate(int32_t pos, Scratch* scratch) const;
  static void AddSymbol(int32_t id, Scratch* scratch);
  // A piece without a token: its <0xNN> byte tokens (kChars with byte_fallback, every byte having one), else
  // the unknown token (not again right after one when fuse_unk); false when neither exists.
  bool AddFallbackOrUnknown(std::string_view piece, bool* last_unk, Scratch* scratch) const;
  // EncodeWord's initial symbols under a continuing_subword_prefix / end_of_word_suffix. False as EncodeWord.
  bool AddAffixedSymbols(std::string_view word, Scratch* scratch, uint32_t* bad_char) const;

  Options options_;
  std::vector<std::string> tokens_;
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};              // kBytes: single-byte tokens; kChars: <0xNN>
  absl::flat_hash_map<uint32_t, int32_t> char_ids_;  // kChars: single-code-point tokens
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_BPE_MODEL_H_
