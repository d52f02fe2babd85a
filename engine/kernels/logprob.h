// The scoring tail: per-token log-softmax statistics from fp32 logits (DESIGN.md §3, §4).
//
// ScoreLogits, for each token t (row x = logits[t, 0:vocab_size], target y = targets[t]):
//   m = max_i x[i];  S = sum_i exp(x[i] - m);  lse = m + log(S)
//   logprob[t]  = double(x[y]) - lse                       (double)
//   greedy[t]   = (argmax_i x[i] == y), argmax ties -> lowest id
//   rank[t]     = 1 + #{i : x[i] > x[y]}                   (if want_rank)
//   entropy[t]  = log(S) - sum_i exp(x[i] - m) (x[i] - m) / S   (nats, if want_entropy)
//   top_k       = the top_k ids by descending logit, ties by lower id, with their x[i] - lse (if top_k > 0)
//   candidate_logprobs[t, c] = float(double(x[id]) - lse), id = candidate_ids[t, c] (if num_candidates > 0;
//                 the top-k's rounding, so a candidate also in the top-k gets bitwise its top-k value; an id
//                 outside [0, vocab_size), e.g. the -1 of a padding row, gives NaN)
//   min_logprob[t] = float(double(min_i x[i]) - lse)      (if want_min_logprob)
// exp in fp32 (expf), every sum accumulated in double: per thread in a fixed stride order, then a block
// tree of fixed shape. One block per token and a fixed block size, so a token's results are bitwise the
// same whatever the batch around it. No floating-point atomics; top-k uses integer shared-memory counts
// (radix select), which are order-independent.
// Shapes: logits [num_tokens, ld] fp32 (ld >= vocab_size, elements), targets [num_tokens] int32 in
// [0, vocab_size); outputs as in LogprobOutputs. Not in place (outputs never alias logits).
// Limits: top_k in [0, kMaxTopK] (1024) and <= vocab_size; num_candidates in [0, kMaxCandidates];
// vocab_size < 2^31.
// Errors: INVALID_ARGUMENT (shapes, options, a required output missing), INTERNAL (launch).
// A target outside [0, vocab_size) gives logprob NaN and greedy 0 (callers validate ids first).
#ifndef SCORED_ENGINE_KERNELS_LOGPROB_H_
#define SCORED_ENGINE_KERNELS_LOGPROB_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/base/score_options.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

using ::scored::kMaxCandidates;
using ::scored::kMaxTopK;
using LogprobOptions = ::scored::RowStatsOptions;

// Device output arrays. logprob and greedy are required; the others are required when asked for.
// candidate_ids is the one input here: the ids whose logprobs candidate_logprobs receives.
struct LogprobOutputs {
  double* logprob = nullptr;               // [num_tokens]
  uint8_t* greedy = nullptr;               // [num_tokens] 0/1
  int32_t* rank = nullptr;                 // [num_tokens]
  float* entropy = nullptr;                // [num_tokens]
  int32_t* top_k_ids = nullptr;            // [num_tokens, top_k]
  float* top_k_logprobs = nullptr;         // [num_tokens, top_k]
  const int32_t* candidate_ids = nullptr;  // [num_tokens, num_candidates] (input)
  float* candidate_logprobs = nullptr;     // [num_tokens, num_candidates]
  float* min_logprob = nullptr;            // [num_tokens]
};

absl::Status ScoreLogits(const float* logits,  // [num_tokens, ld]
                         int64_t ld,
                         const int32_t* targets,  // [num_tokens]
                         int64_t num_tokens, int64_t vocab_size, const LogprobOptions& options,
                         const LogprobOutputs& outputs, cudaStream_t stream);

// Partial statistics of one vocabulary shard [vocab_offset, vocab_offset + shard_size) of a token's logits,
// for a vocab-parallel lm_head: ranks combine them (3 numbers and an id per token) instead of the logits.
struct LogitPartialStats {
  float max;               // max over the shard
  int32_t argmax;          // global id of the max (ties -> lowest id)
  double sum_exp;          // sum over the shard of exp(x - max), double accumulation as in ScoreLogits
  double sum_exp_shifted;  // sum over the shard of exp(x - max) (x - max), double (the entropy term T_r)
  float target_logit;      // x[target] when the target is in this shard, else 0
  int32_t has_target;      // 1 when the target is in this shard
  float min;               // min over the shard (the min_logprob term)
};

// stats[t] for every token; targets are GLOBAL ids. Same reduction order as ScoreLogits.
absl::Status ComputeLogitPartialStats(const float* logits,  // [num_tokens, ld], this shard's columns
                                      int64_t ld,
                                      const int32_t* targets,  // [num_tokens], global ids
                                      int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                                      LogitPartialStats* stats,  // [num_tokens]
                                      cudaStream_t stream,
                                      bool want_min = false);  // also stats[t].min (else 0)

// Combines the shards' stats (shard r's stats at stats[r * num_tokens + t], shards in ascending
// vocab_offset order): M = max_r max_r; S = sum_r (in r order) sum_exp_r * exp(max_r - M) (double);
// logprob = double(target_logit) - (M + log S); argmax ties go to the lowest rank (= lowest id).
// Optional (nullptr: not written): entropy = log S - T / S with
// T = sum_r exp(max_r - M) (sum_exp_shifted_r + (max_r - M) sum_exp_r) (double, r order), rounded to float;
// target_logit = the target's logit (the threshold of CountLogitsAbove); min_logprob = float(double(min_r
// min_r) - lse), lse = M + log S.
absl::Status CombineLogitPartialStats(const LogitPartialStats* stats,  // [num_shards, num_tokens]
                                      int64_t num_shards, int64_t num_tokens,
                                      const int32_t* targets,  // [num_tokens], global ids
                                      double* logprob,         // [num_tokens]
                                      uint8_t* greedy,         // [num_tokens]
                                      cudaStream_t stream,
                                      float* entropy = nullptr,       // [num_tokens] or nullptr
                                      float* target_logit = nullptr,  // [num_tokens] or nullptr
                                      float* min_logprob = nullptr);  // [num_tokens] or nullptr

// Candidate logprobs of a vocab-parallel lm_head, in two steps around a float sum all-reduce over the ranks:
// ShardCandidateLogits writes values[t, c] = the raw logit of ids[t, c] when this shard holds that id, else
// +0.0 (so the ranks' sum is exactly the one holder's logit); FinishCandidateLogprobs, on the summed values
// in place, writes float(double(value) - lse[t]) with lse from the shards' stats combined as in
// CombineLogitPartialStats (bitwise the lse of MergeShardTopK: a candidate in the top-k gets bitwise its
// top-k logprob), NaN for an id outside [0, vocab_size). Limits: 1 <= num_candidates <= kMaxCandidates.
absl::Status ShardCandidateLogits(const float* logits,  // [num_tokens, ld], this shard's columns
                                  int64_t ld, int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                                  const int32_t* ids,  // [num_tokens, num_candidates], global ids
                                  int32_t num_candidates,
                                  float* values,  // [num_tokens, num_candidates]
                                  cudaStream_t stream);
absl::Status FinishCandidateLogprobs(const LogitPartialStats* stats,  // [num_shards, num_tokens]
                                     int64_t num_shards, int64_t num_tokens, int64_t vocab_size,
                                     const int32_t* ids,  // [num_tokens, num_candidates], global ids
                                     int32_t num_candidates,
                                     float* values,  // [num_tokens, num_candidates], in place
                                     cudaStream_t stream);

// Top-k of one vocabulary shard, for a vocab-parallel lm_head: ids[t, :] = the shard's top_k GLOBAL ids
// (vocab_offset + local index) by descending logit, ties by lower id, values[t, :] their raw fp32 logits.
// Same selection as ScoreLogits' top-k. Limits: 1 <= top_k <= min(kMaxTopK, shard_size).
absl::Status ShardTopK(const float* logits,  // [num_tokens, ld], this shard's columns
                       int64_t ld, int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                       int32_t top_k,
                       int32_t* ids,   // [num_tokens, ids_stride], first top_k used
                       float* values,  // [num_tokens, ids_stride], first top_k used
                       int64_t ids_stride, cudaStream_t stream);

// Merges the shards' top-k candidates into the global top-k: candidate (r, t, j) at
// ids[(r * num_tokens + t) * ids_stride + j], each shard's list sorted (every shard's ids are distinct, so
// (logit desc, id asc) is a total order: a candidate's place is its index in its list plus, per other
// shard, a binary search's count of the better ones); writes top_ids[t, :] and top_logprobs[t, :] =
// float(double(logit) - lse[t]) with lse[t] = M + log S from the shards' stats combined as in
// CombineLogitPartialStats (bitwise the same lse). Limits: 1 <= top_k <= kMaxTopK.
absl::Status MergeShardTopK(const int32_t* ids,   // [num_shards, num_tokens, ids_stride]
                            const float* values,  // [num_shards, num_tokens, ids_stride]
                            int64_t ids_stride,
                            const LogitPartialStats* stats,  // [num_shards, num_tokens]
                            int64_t num_shards, int64_t num_tokens, int32_t top_k,
                            int32_t* top_ids,     // [num_tokens, top_k]
                            float* top_logprobs,  // [num_tokens, top_k]
                            cudaStream_t stream);

// count[t] = base + #{i in [0, shard_size) : logits[t, i] > threshold[t]} (an exact integer count, so the
// ranks' counts sum, by an int32 all-reduce, to ScoreLogits' rank when one rank passes base 1, the others 0).
absl::Status CountLogitsAbove(const float* logits,  // [num_tokens, ld], this shard's columns
                              int64_t ld, int64_t num_tokens, int64_t shard_size,
                              const float* threshold,  // [num_tokens]
                              int32_t base,
                              int32_t* count,  // [num_tokens]
                              cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_LOGPROB_H_
