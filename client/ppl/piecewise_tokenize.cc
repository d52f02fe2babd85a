#include "client/ppl/piecewise_tokenize.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scored {
namespace ppl {
namespace {

// The largest offset <= pos that does not fall inside a UTF-8 sequence.
int64_t Utf8Floor(absl::string_view text, int64_t pos) {
  while (pos > 0 && pos < static_cast<int64_t>(text.size()) &&
         (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
    --pos;
  }
  return pos;
}

std::string Advice(int64_t text_bytes, int64_t piece_bytes) {
  return absl::StrCat(
      "; tokenize locally with --tokenizer DIR (the model's tokenizer files), or start the server "
      "with --max_text_bytes of at least ",
      text_bytes, " (this text is tokenized through the server in pieces of its --max_text_bytes ",
      piece_bytes, ")");
}

// One piece's tokens and the text offset where each starts.
struct Piece {
  int64_t begin = 0, end = 0;
  TokenStream tokens;
  std::vector<int64_t> starts;
  int64_t size() const { return static_cast<int64_t>(tokens.ids.size()); }
};

absl::StatusOr<Piece> TokenizePiece(absl::string_view text, int64_t begin, int64_t end,
                                    const PieceTokenizer& tokenize) {
  Piece p;
  p.begin = begin;
  p.end = end;
  absl::StatusOr<TokenStream> tokens = tokenize(text.substr(begin, end - begin));
  if (!tokens.ok()) {
    return absl::Status(tokens.status().code(), absl::StrCat("tokenizing bytes [", begin, ", ", end, ") of ",
                                                             text.size(), ": ", tokens.status().message()));
  }
  p.tokens = *std::move(tokens);
  if (p.tokens.byte_lengths.size() != p.tokens.ids.size()) {
    return absl::InternalError("a piece's tokenization came without byte lengths");
  }
  // Approximate text offsets (a tokenizer's byte lengths can differ from the text's: a dummy-prefix space,
  // whitespace a normalizer removed): they only narrow the search; pieces are joined by their tokens.
  int64_t offset = begin;
  p.starts.reserve(p.tokens.ids.size());
  for (const int32_t n : p.tokens.byte_lengths) {
    p.starts.push_back(offset);
    offset += n;
  }
  return p;
}

// Whether a's tokens [i - k, i + k) and b's [j - k, j + k) are alike in id and byte length.
bool Agree(const Piece& a, int64_t i, const Piece& b, int64_t j, int k) {
  if (i < k || j < k || i + k > a.size() || j + k > b.size()) return false;
  for (int64_t m = -k; m < k; ++m) {
    const size_t x = static_cast<size_t>(i + m), y = static_cast<size_t>(j + m);
    if (a.tokens.ids[x] != b.tokens.ids[y] || a.tokens.byte_lengths[x] != b.tokens.byte_lengths[y])
      return false;
  }
  return true;
}

// Where `next` takes over from `current`: {index in current, index in next}. A token of next inside the
// overlap, nearest its middle first, whose 2k-token neighbourhood occurs exactly once among current's tokens
// of the overlap; a neighbourhood found twice (repetitive text) or not at all is passed over.
absl::StatusOr<std::pair<int64_t, int64_t>> Join(const Piece& current, const Piece& next,
                                                 absl::string_view text, const PieceOptions& options) {
  const int k = options.agree_tokens;
  const int64_t middle = (next.begin + current.end) / 2;
  std::vector<int64_t> candidates;
  for (int64_t j = k; j + k <= next.size(); ++j) {
    const int64_t s = next.starts[static_cast<size_t>(j)];
    if (s >= current.end) break;
    if (s > next.begin) candidates.push_back(j);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t x, int64_t y) {
    return std::llabs(next.starts[static_cast<size_t>(x)] - middle) <
           std::llabs(next.starts[static_cast<size_t>(y)] - middle);
  });
  // current's tokens of the overlap, with a margin for offsets that drifted.
  const int64_t margin = (current.end - next.begin) / 2;
  const int64_t lo = std::lower_bound(current.starts.begin(), current.starts.end(), next.begin - margin) -
                     current.starts.begin();
  for (const int64_t j : candidates) {
    int64_t found = -1, matches = 0;
    for (int64_t i = std::max<int64_t>(lo, k); i + k <= current.size() && matches < 2; ++i) {
      if (current.tokens.ids[static_cast<size_t>(i)] == next.tokens.ids[static_cast<size_t>(j)] &&
          Agree(current, i, next, j, k)) {
        found = i;
        ++matches;
      }
    }
    if (matches == 1) return std::make_pair(found, j);
  }
  return absl::FailedPreconditionError(absl::StrCat("no place in bytes [", next.begin, ", ", current.end,
                                                    ") where two pieces' tokenizations agree",
                                                    Advice(text.size(), options.piece_bytes)));
}

void Append(const Piece& p, int64_t from, int64_t to, TokenStream* out) {
  out->ids.insert(out->ids.end(), p.tokens.ids.begin() + from, p.tokens.ids.begin() + to);
  out->byte_lengths.insert(out->byte_lengths.end(), p.tokens.byte_lengths.begin() + from,
                           p.tokens.byte_lengths.begin() + to);
}

}  // namespace

absl::StatusOr<TokenStream> TokenizeInPieces(absl::string_view text, const PieceOptions& options,
                                             const PieceTokenizer& tokenize) {
  const int64_t n = static_cast<int64_t>(text.size());
  if (n <= options.piece_bytes) return tokenize(text);
  if (options.overlap_bytes < 1 || options.overlap_bytes * 4 > options.piece_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("overlap of ", options.overlap_bytes,
                                                   " bytes for pieces of ", options.piece_bytes,
                                                   ": must be 1 .. a quarter of a piece"));
  }
  TokenStream out;
  int64_t end = Utf8Floor(text, options.piece_bytes);
  absl::StatusOr<Piece> current = TokenizePiece(text, 0, end, tokenize);
  if (!current.ok()) return current.status();
  int64_t from = 0;
  while (current->end < n) {
    const int64_t begin = Utf8Floor(text, current->end - options.overlap_bytes);
    end = Utf8Floor(text, std::min(n, begin + options.piece_bytes));
    absl::StatusOr<Piece> next = TokenizePiece(text, begin, end, tokenize);
    if (!next.ok()) return next.status();
    absl::StatusOr<std::pair<int64_t, int64_t>> join = Join(*current, *next, text, options);
    if (!join.ok()) return join.status();
    Append(*current, from, join->first, &out);
    from = join->second;
    current = std::move(next);
  }
  Append(*current, from, current->size(), &out);
  return out;
}

}  // namespace ppl
}  // namespace scored
