// What a Score request may ask for per scored position beyond logprob and greedy (DESIGN.md §3): plain
// values shared by the Score contract (engine/score_contract.h), the packed batch
// (engine/cuda/forward_batch.h) and the GPU kernels that compute them (engine/kernels/logprob.h, as
// kernels::LogprobOptions).
#ifndef SCORED_ENGINE_BASE_SCORE_OPTIONS_H_
#define SCORED_ENGINE_BASE_SCORE_OPTIONS_H_

#include <cstdint>

namespace scored {

// Most (id, logprob) pairs a request may ask for per scored position. 1024 lets scored-ppl --save_reference
// store a reference model's top-1024 (client/ppl/reference_file.h: ~2.5 GB for WikiText-2's ~300k scored
// positions); a GPU engine reserves [max_batch_tokens, kMaxTopK] ids and logprobs for them.
inline constexpr int32_t kMaxTopK = 1024;

// Candidate ids (ScoreRequest::candidate_ids): the most ids a request may name per scored position, and in
// all. A stored reference's KL divergence gathers Q's logprobs at R's top-K ids, so the per-position bound is
// kMaxTopK's; the total keeps a request's ids and its response's logprobs to 16 MiB each (2,048 positions of
// 2,048 ids, 4,096 of 1,024).
inline constexpr int32_t kMaxCandidates = kMaxTopK;
inline constexpr int64_t kMaxCandidateIds = int64_t{1} << 22;

struct RowStatsOptions {
  int32_t top_k = 0;          // 0..kMaxTopK: the top_k (id, logprob) pairs, descending, ties by lower id
  bool want_rank = false;     // 1 + the number of ids with a strictly larger logit
  bool want_entropy = false;  // entropy of the predicted distribution, nats
  // The comparison with the reference model (ScoreRequest::want_reference,
  // engine/kernels/baseline_compare.h)
  bool want_reference = false;
  // 0..kMaxCandidates: the logprobs of this many given ids per row (ScoreRequest::candidate_ids; a row's id
  // -1 gives NaN, for rows of a batch whose request named fewer)
  int32_t num_candidates = 0;
  bool want_min_logprob = false;  // the smallest logprob over the vocabulary
};

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_SCORE_OPTIONS_H_
