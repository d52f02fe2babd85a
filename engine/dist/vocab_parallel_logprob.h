// Vocab-parallel scoring tail (DESIGN.md §7): every rank holds the logits of its vocabulary shard only
// (lm_head rows [vocab_offset, vocab_offset + shard_size), engine/model/shard_plan.h); the ranks exchange
// per-token partial statistics (kernels::LogitPartialStats: max, argmax, sum-exp, entropy term, target
// logit, min; 40 bytes per token per rank) instead of the logits, and every rank combines them in the same
// (rank) order, so all ranks get bitwise the same log-probs and greedy flags, equal to a one-GPU
// ComputeLogitPartialStats + CombineLogitPartialStats over the same shards.
//
// Per rank, on its own thread and stream (a collective: every rank calls it with the same num_tokens):
//   1. ComputeLogitPartialStats(this shard) -> stats[rank]      (kernel)
//   2. all-gather stats [num_ranks, num_tokens]                   (NCCL, in place)
//   3. CombineLogitPartialStats -> logprob, greedy               (kernel)
// Enqueued only: the caller synchronizes (NcclCommunicator::Synchronize) before reading the outputs.
// Errors: INVALID_ARGUMENT for shapes; the communicator's sticky status; INTERNAL for a kernel launch.
#ifndef SCORED_ENGINE_DIST_VOCAB_PARALLEL_LOGPROB_H_
#define SCORED_ENGINE_DIST_VOCAB_PARALLEL_LOGPROB_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/baseline_compare.h"
#include "engine/kernels/logprob.h"

namespace scored::dist {

// Device bytes of the stats workspace for num_tokens tokens on `num_ranks` ranks.
int64_t VocabParallelWorkspaceBytes(int num_ranks, int64_t num_tokens);

// logprob and greedy only: VocabParallelScore with no optional outputs.
absl::Status VocabParallelLogprob(NcclCommunicator& comm,
                                  const float* logits,  // [num_tokens, ld] this rank's shard, fp32
                                  int64_t ld, int64_t shard_size, int64_t vocab_offset,
                                  const int32_t* targets,  // [num_tokens] global ids
                                  int64_t num_tokens,
                                  kernels::LogitPartialStats* workspace,  // [num_ranks, num_tokens]
                                  double* logprob,                        // [num_tokens]
                                  uint8_t* greedy,                        // [num_tokens] 0/1
                                  CUstream_st* stream);

// The same tail with the optional per-token outputs of kernels::ScoreLogits (logprob.h):
//   entropy (options.want_entropy): from each shard's T_r in the gathered stats, no extra communication;
//   rank (options.want_rank): every rank counts its logits > the combined target logit
//     (kernels::CountLogitsAbove, rank 0 adds the 1), then an int32 sum all-reduce, in place in outputs.rank;
//   top-k (options.top_k > 0): every rank's top_k (global id, logit) pairs (kernels::ShardTopK), two
//     all-gathers, and kernels::MergeShardTopK (the same total order as ScoreLogits: logit desc, id asc).
//     Needs top_k <= every rank's shard size (the caller checks it for all ranks alike).
//   min_logprob (options.want_min_logprob): every shard's min in the gathered stats, no extra communication;
//   candidate logprobs (options.num_candidates > 0): every rank writes the logits of the candidates its shard
//     holds and +0 for the others (kernels::ShardCandidateLogits) into outputs.candidate_logprobs, a float
//     sum all-reduce in place (exactly the holder's logit: the other terms are +0), then
//     kernels::FinishCandidateLogprobs subtracts the combined lse.
// Workspaces: target_logit [num_tokens] fp32 (want_rank); topk_ids / topk_values
// [num_ranks, num_tokens, top_k] (top_k > 0). outputs: as ScoreLogits'; candidate_ids: global ids.
absl::Status VocabParallelScore(NcclCommunicator& comm,
                                const float* logits,  // [num_tokens, ld] this rank's shard, fp32
                                int64_t ld, int64_t shard_size, int64_t vocab_offset,
                                const int32_t* targets,  // [num_tokens] global ids
                                int64_t num_tokens, const kernels::LogprobOptions& options,
                                kernels::LogitPartialStats* workspace,  // [num_ranks, num_tokens]
                                float* target_logit,                    // [num_tokens]
                                int32_t* topk_ids,                      // [num_ranks, num_tokens, top_k]
                                float* topk_values,                     // [num_ranks, num_tokens, top_k]
                                const kernels::LogprobOutputs& outputs, CUstream_st* stream);

// The comparison with a reference model R (kernels/baseline_compare.h) when both lm_heads are vocab-parallel
// with the same shards: every rank reduces its columns of both models' logits to per-token partials (48 bytes
// per token), all-gathers them and combines them in rank order, so every rank gets bitwise the same results,
// equal to a one-GPU ComputeBaselinePartials + CombineBaselinePartials over the same shards. A collective
// (every rank calls it with the same num_tokens); enqueued only.
absl::Status VocabParallelCompare(NcclCommunicator& comm,
                                  const float* ref_logits,  // [num_tokens, ref_ld] R's, this rank's shard
                                  int64_t ref_ld,
                                  const float* logits,  // [num_tokens, ld] Q's, this rank's shard
                                  int64_t ld, int64_t shard_size, int64_t vocab_offset,
                                  const int32_t* targets,  // [num_tokens] global ids
                                  int64_t num_tokens,
                                  kernels::BaselinePartialStats* workspace,  // [num_ranks, num_tokens]
                                  const kernels::BaselineOutputs& outputs, CUstream_st* stream);

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_VOCAB_PARALLEL_LOGPROB_H_
