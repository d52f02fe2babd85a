// Converts between proto and engine types with the fixed error mapping of the contract
// (proto/scored/v1/scorer.proto, DESIGN.md §3). Only the proto-level checks live here; the request itself is
// checked by the engine's ValidateScoreRequest (engine/score_contract.h: fewer than 2 tokens, score_from,
// top_k, ids, max_seq_len / max_batch_tokens), the same function both backends run.
//
// Error codes of the proto level:
//   INVALID_ARGUMENT  neither `tokens` nor `text` set (both cannot be expressed: they share a oneof,
//                     and on the wire the last one wins)
//   FAILED_PRECONDITION  `text` given but the model folder has no tokenizer
// Thread-safety: stateless functions.
#ifndef SCORED_SERVER_REQUEST_VALIDATION_H_
#define SCORED_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/score_contract.h"
#include "engine/tokenizer/tokenizer.h"
#include "scored/v1/scorer.pb.h"

namespace scored {

// Proto -> validated engine request (ValidateScoreRequest under `limits`). `text` input is tokenized with
// `tokenizer` (may be null when the model has no tokenizer), prepending its BOS if add_bos (default: the
// tokenizer's default) and the tokenizer has one.
absl::StatusOr<ScoreRequest> ToEngineRequest(const v1::ScoreRequest& proto, const ScoreLimits& limits,
                                             const Tokenizer* tokenizer);

// Text -> ids with the BOS policy above (shared by Score and Tokenize), under `limits`
// (Tokenizer::Encode; limits.max_tokens counts the BOS too).
absl::StatusOr<std::vector<int32_t>> TokenizeWithBos(const Tokenizer& tokenizer, const std::string& text,
                                                     bool has_add_bos, bool add_bos,
                                                     EncodeLimits limits = {});

// Fills `response` (request_id, first_scored, arrays, sums) from an engine result; echoes the
// request's tokens when `echo_tokens` (the request gave text).
void FillScoreResponse(const ScoreRequest& request, const ScoreResult& result, bool echo_tokens,
                       uint64_t request_id, v1::ScoreResponse* response);

}  // namespace scored

#endif  // SCORED_SERVER_REQUEST_VALIDATION_H_
