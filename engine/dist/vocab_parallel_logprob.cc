// Vocab-parallel log-softmax: partial stats, all-gather, combine (see the header).
#include "engine/dist/vocab_parallel_logprob.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace scored::dist {

int64_t VocabParallelWorkspaceBytes(int num_ranks, int64_t num_tokens) {
  return static_cast<int64_t>(num_ranks) * num_tokens *
         static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
}

absl::Status VocabParallelLogprob(NcclCommunicator& comm, const float* logits, int64_t ld, int64_t shard_size,
                                  int64_t vocab_offset, const int32_t* targets, int64_t num_tokens,
                                  kernels::LogitPartialStats* workspace, double* logprob, uint8_t* greedy,
                                  CUstream_st* stream) {
  kernels::LogprobOutputs outputs;
  outputs.logprob = logprob;
  outputs.greedy = greedy;
  return VocabParallelScore(comm, logits, ld, shard_size, vocab_offset, targets, num_tokens,
                            kernels::LogprobOptions(), workspace, /*target_logit=*/nullptr,
                            /*topk_ids=*/nullptr,
                            /*topk_values=*/nullptr, outputs, stream);
}

absl::Status VocabParallelScore(NcclCommunicator& comm, const float* logits, int64_t ld, int64_t shard_size,
                                int64_t vocab_offset, const int32_t* targets, int64_t num_tokens,
                                const kernels::LogprobOptions& options, kernels::LogitPartialStats* workspace,
                                float* target_logit, int32_t* topk_ids, float* topk_values,
                                const kernels::LogprobOutputs& outputs, CUstream_st* stream) {
  if (options.top_k > 0 && (topk_ids == nullptr || topk_values == nullptr || outputs.top_k_ids == nullptr ||
                            outputs.top_k_logprobs == nullptr)) {
    return absl::InvalidArgumentError("vocab-parallel score: top-k workspace or output missing");
  }
  if (num_tokens < 0 || shard_size <= 0 || ld < shard_size || vocab_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab-parallel score: tokens ", num_tokens, ", shard ",
                                                   shard_size, ", ld ", ld, ", offset ", vocab_offset));
  }
  if ((options.want_rank && (outputs.rank == nullptr || target_logit == nullptr)) ||
      (options.want_entropy && outputs.entropy == nullptr) ||
      (options.want_min_logprob && outputs.min_logprob == nullptr) ||
      (options.num_candidates > 0 &&
       (outputs.candidate_ids == nullptr || outputs.candidate_logprobs == nullptr))) {
    return absl::InvalidArgumentError("vocab-parallel score: a requested output is missing");
  }
  if (num_tokens == 0) return absl::OkStatus();
  kernels::LogitPartialStats* mine =
      workspace + static_cast<int64_t>(comm.rank()) * num_tokens;  // [num_tokens]
  SCORED_RETURN_IF_ERROR(kernels::ComputeLogitPartialStats(
      logits, ld, targets, num_tokens, shard_size, vocab_offset, mine, stream, options.want_min_logprob));
  const int64_t bytes = num_tokens * static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
  SCORED_RETURN_IF_ERROR(comm.AllGatherBytes(mine, workspace, bytes, stream));
  SCORED_RETURN_IF_ERROR(kernels::CombineLogitPartialStats(
      workspace, comm.num_ranks(), num_tokens, targets, outputs.logprob, outputs.greedy, stream,
      options.want_entropy ? outputs.entropy : nullptr, options.want_rank ? target_logit : nullptr,
      options.want_min_logprob ? outputs.min_logprob : nullptr));
  if (options.num_candidates > 0) {
    const int64_t c = options.num_candidates;
    SCORED_RETURN_IF_ERROR(kernels::ShardCandidateLogits(logits, ld, num_tokens, shard_size, vocab_offset,
                                                         outputs.candidate_ids, options.num_candidates,
                                                         outputs.candidate_logprobs, stream));
    SCORED_RETURN_IF_ERROR(comm.AllReduceSum(outputs.candidate_logprobs, outputs.candidate_logprobs,
                                             num_tokens * c, ReduceDType::kF32, stream));
    // The ids were checked against the vocabulary (engine/score_contract.h): only padding rows' -1 is out of
    // range here, and the global vocabulary size is not needed to find it.
    SCORED_RETURN_IF_ERROR(kernels::FinishCandidateLogprobs(
        workspace, comm.num_ranks(), num_tokens, std::numeric_limits<int32_t>::max(), outputs.candidate_ids,
        options.num_candidates, outputs.candidate_logprobs, stream));
  }
  if (options.want_rank) {
    SCORED_RETURN_IF_ERROR(kernels::CountLogitsAbove(logits, ld, num_tokens, shard_size, target_logit,
                                                     comm.rank() == 0 ? 1 : 0, outputs.rank, stream));
    SCORED_RETURN_IF_ERROR(
        comm.AllReduceSum(outputs.rank, outputs.rank, num_tokens, ReduceDType::kI32, stream));
  }
  if (options.top_k > 0) {
    const int64_t k = options.top_k;
    const int64_t mine_at = static_cast<int64_t>(comm.rank()) * num_tokens * k;
    SCORED_RETURN_IF_ERROR(kernels::ShardTopK(logits, ld, num_tokens, shard_size, vocab_offset, options.top_k,
                                              topk_ids + mine_at, topk_values + mine_at, k, stream));
    SCORED_RETURN_IF_ERROR(comm.AllGatherBytes(topk_ids + mine_at, topk_ids, num_tokens * k * 4, stream));
    SCORED_RETURN_IF_ERROR(
        comm.AllGatherBytes(topk_values + mine_at, topk_values, num_tokens * k * 4, stream));
    SCORED_RETURN_IF_ERROR(kernels::MergeShardTopK(topk_ids, topk_values, k, workspace, comm.num_ranks(),
                                                   num_tokens, options.top_k, outputs.top_k_ids,
                                                   outputs.top_k_logprobs, stream));
  }
  return absl::OkStatus();
}

absl::Status VocabParallelCompare(NcclCommunicator& comm, const float* ref_logits, int64_t ref_ld,
                                  const float* logits, int64_t ld, int64_t shard_size, int64_t vocab_offset,
                                  const int32_t* targets, int64_t num_tokens,
                                  kernels::BaselinePartialStats* workspace,
                                  const kernels::BaselineOutputs& outputs, CUstream_st* stream) {
  if (num_tokens == 0) return absl::OkStatus();
  kernels::BaselinePartialStats* mine = workspace + static_cast<int64_t>(comm.rank()) * num_tokens;
  SCORED_RETURN_IF_ERROR(kernels::ComputeBaselinePartials(ref_logits, ref_ld, logits, ld, targets, num_tokens,
                                                          shard_size, vocab_offset, mine, stream));
  const int64_t bytes = num_tokens * static_cast<int64_t>(sizeof(kernels::BaselinePartialStats));
  SCORED_RETURN_IF_ERROR(comm.AllGatherBytes(mine, workspace, bytes, stream));
  return kernels::CombineBaselinePartials(workspace, comm.num_ranks(), num_tokens, targets, outputs, stream);
}

}  // namespace scored::dist
