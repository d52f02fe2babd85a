// What a Score request may ask for per scored position beyond logprob and greedy (DESIGN.md §3): plain
// values shared by the Score contract (engine/score_contract.h), the packed batch
// (engine/cuda/forward_batch.h) and the GPU kernels that compute them (engine/kernels/logprob.h, as
// kernels::LogprobOptions).
#ifndef SCORED_ENGINE_BASE_SCORE_OPTIONS_H_
#define SCORED_ENGINE_BASE_SCORE_OPTIONS_H_

#include <cstdint>

namespace scored {

// Most (id, logprob) pairs a request may ask for per scored position.
inline constexpr int32_t kMaxTopK = 64;

struct RowStatsOptions {
  int32_t top_k = 0;          // 0..kMaxTopK: the top_k (id, logprob) pairs, descending, ties by lower id
  bool want_rank = false;     // 1 + the number of ids with a strictly larger logit
  bool want_entropy = false;  // entropy of the predicted distribution, nats
  // The comparison with the reference model (ScoreRequest::want_reference,
  // engine/kernels/baseline_compare.h)
  bool want_reference = false;
};

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_SCORE_OPTIONS_H_
