// Evaluation windows of scored-ppl: how a token stream is cut into Score requests for each perplexity
// method of DESIGN.md §5. Pure functions (no gRPC, no tokenizer): they take token ids and return windows.
//
// A Window is one Score request: `tokens` are sent, positions j in [score_from, tokens.size()) are scored
// (log P(tokens[j] | tokens[<j])). score_from >= 1 always (a window's first position is never predicted).
// `byte_lengths` runs parallel to `tokens` (UTF-8 bytes each token contributes to decoded text, 0 for
// specials) so that bits-per-byte counts a token's bytes every time it is scored; it is empty when the
// caller gave no byte lengths.
//
// Notation below: ids = the token stream given, N = ids.size(), ctx / stride / max_windows from
// MethodParams (max_windows 0 = no limit; the first max_windows windows are kept).
//
// Thread-safety: all functions are pure and thread-safe.
#ifndef SCORED_CLIENT_PPL_WINDOWS_H_
#define SCORED_CLIENT_PPL_WINDOWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace scored {
namespace ppl {

enum class Method { kExl3, kGptq, kHf, kLlamaCpp, kRolling, kChunks };

// "exl3", "gptq", "hf", "llamacpp", "rolling", "chunks".
std::string MethodName(Method method);
// INVALID_ARGUMENT naming the accepted values for anything else.
absl::StatusOr<Method> ParseMethod(absl::string_view name);
// Whether the method uses a stride (exl3, hf).
bool MethodHasStride(Method method);
// DESIGN.md §5 defaults: exl3 ctx 2048 stride 512; llamacpp ctx 512; gptq, hf, rolling, chunks ctx 2048;
// hf stride 512 (the transformers guide's stride).
int64_t DefaultCtx(Method method);
int64_t DefaultStride(Method method);  // 0 for methods without a stride

struct MethodParams {
  Method method = Method::kExl3;
  int64_t ctx = 2048;       // tokens per window, BOS included (rolling: tokens the model reads, see below)
  int64_t stride = 0;       // exl3, hf only
  int64_t max_windows = 0;  // 0 = all windows
};

// INVALID_ARGUMENT if ctx / stride / max_windows are out of range for the method (ctx >= 2; llamacpp
// ctx >= 4 and even; exl3/hf stride >= 1; max_windows >= 0).
absl::Status ValidateParams(const MethodParams& params);

struct Window {
  std::vector<int32_t> tokens;        // [n] ids sent to Score
  std::vector<int32_t> byte_lengths;  // [n] or empty
  int32_t score_from = 1;             // first scored position, in [1, n)
  int64_t num_scored() const { return static_cast<int64_t>(tokens.size()) - score_from; }
};

// A token stream with optional per-token byte lengths (byte_lengths empty or the same size as ids).
struct TokenStream {
  std::vector<int32_t> ids;
  std::vector<int32_t> byte_lengths;
};

// exl3 (ExLlamaV3 compare_q). `stream` is tokenized with BOS. Windows ids[a, a+ctx) for
// a in range(0, N - ctx, stride); every position after the first scored (overlaps scored again).
std::vector<Window> Exl3Windows(const TokenStream& stream, const MethodParams& params);

// gptq. `stream` is tokenized with BOS. N / ctx disjoint windows ids[i*ctx, (i+1)*ctx) (remainder
// dropped); every position after the first scored.
std::vector<Window> GptqWindows(const TokenStream& stream, const MethodParams& params);

// hf (transformers perplexity guide). `stream` is tokenized with BOS. For begin in range(0, N, stride):
// end = min(begin + ctx, N); window ids[begin, end) scoring its last (end - prev_end) positions (all but
// the first for the first window; never the window's first position); stops after end == N.
std::vector<Window> HfWindows(const TokenStream& stream, const MethodParams& params);

// llamacpp (llama-perplexity). `stream` is the whole text tokenized with BOS. N / ctx disjoint chunks
// ids[c*ctx, (c+1)*ctx); if replace_first_with_bos, each chunk's first id becomes bos_id (byte length 0);
// positions ctx/2 + 1 .. ctx - 1 scored (ctx/2 - 1 per chunk).
std::vector<Window> LlamaCppWindows(const TokenStream& stream, const MethodParams& params,
                                    bool replace_first_with_bos, int32_t bos_id);

// rolling (lm-eval loglikelihood_rolling, get_rolling_token_windows with max_seq_len = ctx and
// context_len = 1) for ONE document. `doc` has no BOS; prefix_id is BOS, or EOS without a BOS.
// First window [prefix] + ids[0, L) with L = min(ctx, N), scoring positions 1..L (every document token
// of it; the model reads ctx tokens [prefix] + ids[0, L-1), so the request holds L + 1 <= ctx + 1 ids).
// Each later window predicts the next min(ctx, N - predicted) tokens ending at window_end and holds
// ids[window_end - ctx - 1, window_end), scoring only the new tokens. Every document token is scored
// exactly once. max_windows is NOT applied here (it counts across documents; see BuildRollingWindows).
// An empty document gives no window.
std::vector<Window> RollingWindows(const TokenStream& doc, int64_t ctx, int32_t prefix_id);

// rolling over many documents, in order, keeping the first max_windows windows overall.
std::vector<Window> BuildRollingWindows(const std::vector<TokenStream>& docs, const MethodParams& params,
                                        int32_t prefix_id);

// chunks (llama2.c-style). `stream` is the whole text tokenized without BOS; consecutive chunks of
// ctx - 1 ids (the last may be shorter); each window [prefix] + chunk with every chunk id scored.
std::vector<Window> ChunksWindows(const TokenStream& stream, const MethodParams& params, int32_t prefix_id);

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_WINDOWS_H_
