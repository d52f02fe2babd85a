// The end of the scored model's pass on the forward's context (context.h): lm_head over the lm_head rows
// in chunks of Activations::logits_rows (fp32 logits, Gemma 2's final soft-cap), the per-row statistics
// (kernels/logprob.h; tp: dist::VocabParallelScore across ranks) and, with a reference model and
// batch.options.want_reference, R's logits of the same rows and the comparison (kernels/baseline_compare.h;
// tp: dist::VocabParallelCompare).
#ifndef SCORED_ENGINE_CUDA_FORWARD_LM_HEAD_H_
#define SCORED_ENGINE_CUDA_FORWARD_LM_HEAD_H_

#include "absl/status/status.h"
#include "engine/cuda/forward/context.h"

namespace scored::cuda {

// Reads normed (and acts->ref_normed for the comparison); writes acts->logprob, greedy, rank, entropy,
// top-k (and ref_logprob, kld, ref_greedy, same_top) of every lm_head row.
template <typename T>
absl::Status LmHead(ForwardContext<T>& ctx);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_LM_HEAD_H_
