// A text longer than a server tokenizes at once (its --max_text_bytes) tokenized in pieces, with the ids and
// byte lengths one tokenization of the whole text gives.
//
// Pieces of at most `piece_bytes` overlap by `overlap_bytes` (both cut at UTF-8 boundaries). A piece's
// tokens near its own ends may differ from the whole text's (a word cut in two, SentencePiece's dummy-prefix
// space at a piece's start, whitespace its normalizer drops at an end), but away from them they agree, as
// tokenizers are local. The pieces are joined inside the overlap, at a token of the later piece whose
// 2 x `agree_tokens` neighbourhood (ids and byte lengths) occurs exactly once among the earlier piece's
// tokens there, searched from the middle of the overlap outwards; repetitive text whose neighbourhoods all
// recur or never match is refused, FAILED_PRECONDITION naming --tokenizer DIR and the server's
// --max_text_bytes, rather than joined by a guess. A text of at most piece_bytes is one call, as before.
// (tests/client/piecewise_tokenize_test.cc: WikiText-2 test in 96 KiB pieces equals one tokenization for
// SentencePiece with and without whitespace normalization, byte-level BPE and tiktoken.)
#ifndef SCORED_CLIENT_PPL_PIECEWISE_TOKENIZE_H_
#define SCORED_CLIENT_PPL_PIECEWISE_TOKENIZE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/ppl/windows.h"

namespace scored {
namespace ppl {

struct PieceOptions {
  int64_t piece_bytes = int64_t{4} << 20;     // the server's --max_text_bytes
  int64_t overlap_bytes = int64_t{64} << 10;  // at most piece_bytes / 4
  int agree_tokens = 16;
};

// `tokenize` tokenizes one piece (no BOS) with byte lengths.
using PieceTokenizer = std::function<absl::StatusOr<TokenStream>(absl::string_view piece)>;

absl::StatusOr<TokenStream> TokenizeInPieces(absl::string_view text, const PieceOptions& options,
                                             const PieceTokenizer& tokenize);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_PIECEWISE_TOKENIZE_H_
