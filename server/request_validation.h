// Checks a ScoreRequest against the model's limits with the fixed error mapping of the contract
// (proto/scored/v1/scorer.proto, DESIGN.md §3), and converts between proto and engine types.
//
// Error codes and messages (each names the limit, position or id involved):
//   INVALID_ARGUMENT  neither `tokens` nor `text` set (both cannot be expressed: they share a oneof,
//                     and on the wire the last one wins); fewer than 2 tokens; score_from >= n;
//                     top_k outside [0, 64]; a token id < 0 or >= vocab_size (position and id named)
//   OUT_OF_RANGE      n > max_seq_len or n > max_batch_tokens
//   FAILED_PRECONDITION  `text` given but the model folder has no tokenizer
// Thread-safety: stateless functions.
#ifndef SCORED_SERVER_REQUEST_VALIDATION_H_
#define SCORED_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "scored/v1/scorer.pb.h"

namespace scored {

inline constexpr int32_t kMaxTopK = 64;

struct ScoreLimits {
  int64_t max_seq_len = 0;       // longest sequence accepted (> 0)
  int64_t max_batch_tokens = 0;  // tokens of one engine batch (> 0)
  int64_t vocab_size = 0;        // valid ids are [0, vocab_size)
};

// Validates an engine-level request (tokens already known).
absl::Status ValidateScoreRequest(const ScoreRequest& request, const ScoreLimits& limits);

// Proto -> validated engine request. `text` input is tokenized with `tokenizer` (may be null when the
// model has no tokenizer), prepending its BOS if add_bos (default: the tokenizer's default) and the
// tokenizer has one.
absl::StatusOr<ScoreRequest> ToEngineRequest(const v1::ScoreRequest& proto, const ScoreLimits& limits,
                                             const Tokenizer* tokenizer);

// Text -> ids with the BOS policy above (shared by Score and Tokenize).
absl::StatusOr<std::vector<int32_t>> TokenizeWithBos(const Tokenizer& tokenizer, const std::string& text,
                                                     bool has_add_bos, bool add_bos);

// Fills `response` (request_id, first_scored, arrays, sums) from an engine result; echoes the
// request's tokens when `echo_tokens` (the request gave text).
void FillScoreResponse(const ScoreRequest& request, const ScoreResult& result, bool echo_tokens,
                       uint64_t request_id, v1::ScoreResponse* response);

}  // namespace scored

#endif  // SCORED_SERVER_REQUEST_VALIDATION_H_
