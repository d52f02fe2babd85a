// One packed batch as the forward pass reads it: plain host structs, no CUDA (engine/cuda/batch_pack.h
// builds them on the CPU, engine/dist/batch_wire.h sends them to follower processes, transformer.h runs
// them).
#ifndef SCORED_ENGINE_CUDA_FORWARD_BATCH_H_
#define SCORED_ENGINE_CUDA_FORWARD_BATCH_H_

#include <cstdint>
#include <vector>

#include "engine/base/score_options.h"

namespace scored::cuda {

// A half-open range of packed rows whose next-token logits are needed.
struct RowSpan {
  int64_t begin = 0;
  int64_t end = 0;
};

// One packed batch: the device input arrays of `acts` hold it (tokens, positions, cu_seqlens, targets).
struct ForwardBatch {
  int64_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t max_seqlen = 0;
  std::vector<int32_t>
      cu_seqlens;  // [num_seqs + 1]: the host copy of acts->cu_seqlens (rows of sequence s
                   // are [cu_seqlens[s], cu_seqlens[s + 1])); row chunks cut between sequences
  std::vector<RowSpan> lm_head_rows;  // ascending, disjoint; logits are computed for these rows only
  RowStatsOptions options;            // applied to every scored row
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_BATCH_H_
