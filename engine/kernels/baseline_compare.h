// A model Q against its reference R on the GPU (issue 17): per token, from the fp32 logits of both models
// over the same vocabulary, R's log-probability of the target, KL(P_R || P_Q) over the full vocabulary in
// nats, whether the target is R's argmax, and whether Q's and R's argmaxes agree (each argmax: lowest id on
// ties). The CPU oracle is ref::CompareWithBaseline (engine/reference/ops.h).
//
// One fused pass over each row pair, in tiles of the vocabulary (kCompareTile columns): per tile the block
// takes the tile's maxima of both rows, rescales its running sums when a maximum grows (one block-uniform
// branch: every thread holds sums relative to the same running maxima), then adds, per column i,
//   e_R = expf(l_R(i) - m_R)  to s_R;   expf(l_Q(i) - m_Q)  to s_Q;   e_R * (l_R(i) - l_Q(i))  to t
// (fp32 exp, every sum and the difference in double; per thread in ascending column order, then a block
// tree of fixed shape: a token's result is bitwise the same whatever the batch around it). Nothing of the
// vocabulary is materialized beyond the two logits rows the lm_heads wrote.
// A shard's partial (m_R, s_R, t, m_Q, s_Q, argmaxes, R's target logit: BaselinePartialStats) is what a
// tensor-parallel rank contributes; CombineBaselinePartials rescales the shards' sums to the global maxima
// (M_X = max over shards, S_X = sum_r s_X,r exp(m_X,r - M_X), T = sum_r t_r exp(m_R,r - M_R), in shard
// order, double) and finishes each row in double:
//   kld = T / S_R - (M_R - M_Q) - log(S_R / S_Q)       (clamped at 0: the true value is >= 0)
//   ref_logprob = l_R(target) - (M_R + log S_R)
// so no two log-normalizers near 20 are subtracted in fp32. Q == R bitwise gives t = 0, equal maxima and
// equal sums, so kld is exactly 0.0 for every token.
// Errors: INVALID_ARGUMENT (shapes, null pointers), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_BASELINE_COMPARE_H_
#define SCORED_ENGINE_KERNELS_BASELINE_COMPARE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

// Vocabulary columns per tile of the fused pass (512 threads x 4).
inline constexpr int64_t kCompareTile = 2048;

// One vocabulary shard's statistics of one token, both models.
struct BaselinePartialStats {
  float max_r;           // max over the shard of R's logits
  int32_t argmax_r;      // its global id (ties -> lowest)
  float max_q;           // the same for Q
  int32_t argmax_q;      //
  double sum_r;          // sum over the shard of exp(l_R - max_r)
  double sum_q;          // sum over the shard of exp(l_Q - max_q)
  double cross;          // sum over the shard of exp(l_R - max_r) (l_R - l_Q)
  float target_logit_r;  // l_R(target) when the target is in this shard, else 0
  int32_t has_target;    // 1 when the target is in this shard
};

// Per-token outputs (device arrays, [num_tokens] each).
struct BaselineOutputs {
  double* ref_logprob = nullptr;
  double* kld = nullptr;
  uint8_t* ref_greedy = nullptr;  // 0/1
  uint8_t* same_top = nullptr;    // 0/1
};

// stats[t] for every token from this shard's columns [vocab_offset, vocab_offset + shard_size) of both
// models' logits; targets are GLOBAL ids.
absl::Status ComputeBaselinePartials(const float* ref_logits,  // [num_tokens, ref_ld] R's, this shard
                                     int64_t ref_ld,
                                     const float* logits,  // [num_tokens, ld] Q's, this shard
                                     int64_t ld,
                                     const int32_t* targets,  // [num_tokens], global ids
                                     int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                                     BaselinePartialStats* stats,  // [num_tokens]
                                     cudaStream_t stream);

// Combines the shards' stats (shard r's at stats[r * num_tokens + t], shards in ascending vocab_offset
// order) into the outputs. One shard: the row's own statistics, finished in double.
absl::Status CombineBaselinePartials(const BaselinePartialStats* stats,  // [num_shards, num_tokens]
                                     int64_t num_shards, int64_t num_tokens,
                                     const int32_t* targets,  // [num_tokens], global ids
                                     const BaselineOutputs& outputs, cudaStream_t stream);

// One GPU: ComputeBaselinePartials over the whole vocabulary, then CombineBaselinePartials of the one
// shard. stats: [num_tokens] workspace.
absl::Status CompareWithBaseline(const float* ref_logits, int64_t ref_ld, const float* logits, int64_t ld,
                                 const int32_t* targets, int64_t num_tokens, int64_t vocab_size,
                                 BaselinePartialStats* stats, const BaselineOutputs& outputs,
                                 cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_BASELINE_COMPARE_H_
