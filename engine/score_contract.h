// The Score contract's request checks (proto/scored/v1/scorer.proto error list, DESIGN.md §3): one function,
// one wording, used by the server before it queues a request and by both backends before they run one.
//
// Error codes and messages (each names the limit, position or id involved):
//   INVALID_ARGUMENT  fewer than 2 tokens; score_from >= n; top_k outside [0, kMaxTopK] (1024) or above the
//                     smallest vocabulary shard of a tensor-parallel engine or the vocabulary; want_reference
//                     without a reference model (ScoreLimits::has_reference false: the message says so and
//                     names --reference_model DIR); a token id < 0 or >= vocab_size (position and id named);
//                     num_candidates outside [0, kMaxCandidates] (1024), candidate_ids not num_scored *
//                     num_candidates ids, or more than kMaxCandidateIds (4,194,304: the message names the
//                     limit); a candidate id < 0 or >= vocab_size (the scored position, its candidate index
//                     and the id named)
//   OUT_OF_RANGE      n > max_seq_len or n > max_batch_tokens
// Checks run in that order: the first failing one is reported. ScoreAll() collapses Score()'s per-sequence
// statuses for all-or-nothing callers.
// Thread-safety: stateless.
#ifndef SCORED_ENGINE_SCORE_CONTRACT_H_
#define SCORED_ENGINE_SCORE_CONTRACT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/base/score_options.h"  // kMaxTopK, kMaxCandidates, kMaxCandidateIds
#include "engine/engine.h"

namespace scored {

struct ScoreLimits {
  int64_t max_seq_len = 0;       // longest sequence accepted (> 0)
  int64_t max_batch_tokens = 0;  // tokens of one engine batch (> 0)
  int64_t vocab_size = 0;        // valid ids are [0, vocab_size)
  // Vocab-parallel top-k (tp > 1) takes top_k from every rank's vocabulary shard: top_k may not exceed the
  // rows of the smallest shard. 0: no such limit (one rank).
  int64_t smallest_vocab_shard = 0;
  // Whether the engine holds a reference model (ModelInfo::reference): want_reference needs one.
  bool has_reference = false;
};

// OK when `request` may be scored under `limits`; otherwise the contract's error (see above).
// request.score_from is checked as given (values < 1 act as 1 and always pass).
absl::Status ValidateScoreRequest(const ScoreRequest& request, const ScoreLimits& limits);

// Rows of the smallest of `tp` vocabulary shards of a vocab_size vocabulary (the last rank's: shards are
// ceil(vocab_size / tp) rows, the last one what is left), for ScoreLimits::smallest_vocab_shard.
int64_t SmallestVocabShard(int64_t vocab_size, int tp);

// All results of engine.Score(batch), or the first failed sequence's status, for callers that treat a batch
// as all-or-nothing (tests, benchmarks); INTERNAL if the engine returned a wrong number of results.
absl::StatusOr<std::vector<ScoreResult>> ScoreAll(Engine& engine, absl::Span<const ScoreRequest> batch);

}  // namespace scored

#endif  // SCORED_ENGINE_SCORE_CONTRACT_H_
