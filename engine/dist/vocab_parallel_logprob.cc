// Vocab-parallel log-softmax: partial stats, all-gather, combine (see the header).
#include "engine/dist/vocab_parallel_logprob.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace scored::dist {

int64_t VocabParallelWorkspaceBytes(int num_ranks, int64_t num_tokens) {
  return static_cast<int64_t>(num_ranks) * num_tokens * static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
}

absl::Status VocabParallelLogprob(NcclCommunicator& comm, const float* logits, int64_t ld, int64_t shard_size,
                                  int64_t vocab_offset, const int32_t* targets, int64_t num_tokens,
                                  kernels::LogitPartialStats* workspace, double* logprob, uint8_t* greedy,
                                  CUstream_st* stream) {
  if (num_tokens < 0 || shard_size <= 0 || ld < shard_size || vocab_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab-parallel logprob: tokens ", num_tokens, ", shard ",
                                                   shard_size, ", ld ", ld, ", offset ", vocab_offset));
  }
  if (num_tokens == 0) return absl::OkStatus();
  kernels::LogitPartialStats* mine = workspace + static_cast<int64_t>(comm.rank()) * num_tokens;  // [num_tokens]
  SCORED_RETURN_IF_ERROR(kernels::ComputeLogitPartialStats(logits, ld, targets, num_tokens, shard_size,
                                                           vocab_offset, mine, stream));
  const int64_t bytes = num_tokens * static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
  SCORED_RETURN_IF_ERROR(comm.AllGatherBytes(mine, workspace, bytes, stream));
  return kernels::CombineLogitPartialStats(workspace, comm.num_ranks(), num_tokens, targets, logprob, greedy,
                                           stream);
}

absl::Status VocabParallelScore(NcclCommunicator& comm, const float* logits, int64_t ld, int64_t shard_size,
                                int64_t vocab_offset, const int32_t* targets, int64_t num_tokens,
                                const kernels::LogprobOptions& options, kernels::LogitPartialStats* workspace,
                                float* target_logit, const kernels::LogprobOutputs& outputs,
                                CUstream_st* stream) {
  if (options.top_k > 0) {
    return absl::UnimplementedError(
        "top_k with --tp > 1 is not implemented (vocab-parallel top-k merge); use --tp 1 for top-k requests");
  }
  if (num_tokens < 0 || shard_size <= 0 || ld < shard_size || vocab_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab-parallel score: tokens ", num_tokens, ", shard ",
                                                   shard_size, ", ld ", ld, ", offset ", vocab_offset));
  }
  if ((options.want_rank && (outputs.rank == nullptr || target_logit == nullptr)) ||
      (options.want_entropy && outputs.entropy == nullptr)) {
    return absl::InvalidArgumentError("vocab-parallel score: a requested output is missing");
  }
  if (num_tokens == 0) return absl::OkStatus();
  kernels::LogitPartialStats* mine = workspace + static_cast<int64_t>(comm.rank()) * num_tokens;  // [num_tokens]
  SCORED_RETURN_IF_ERROR(kernels::ComputeLogitPartialStats(logits, ld, targets, num_tokens, shard_size,
                                                           vocab_offset, mine, stream));
  const int64_t bytes = num_tokens * static_cast<int64_t>(sizeof(kernels::LogitPartialStats));
  SCORED_RETURN_IF_ERROR(comm.AllGatherBytes(mine, workspace, bytes, stream));
  SCORED_RETURN_IF_ERROR(kernels::CombineLogitPartialStats(
      workspace, comm.num_ranks(), num_tokens, targets, outputs.logprob, outputs.greedy, stream,
      options.want_entropy ? outputs.entropy : nullptr, options.want_rank ? target_logit : nullptr));
  if (!options.want_rank) return absl::OkStatus();
  SCORED_RETURN_IF_ERROR(kernels::CountLogitsAbove(logits, ld, num_tokens, shard_size, target_logit,
                                                   comm.rank() == 0 ? 1 : 0, outputs.rank, stream));
  return comm.AllReduceSum(outputs.rank, outputs.rank, num_tokens, ReduceDType::kI32, stream);
}

}  // namespace scored::dist
