// The GPU forward pass (transformer.cc): per layer the attention block and the MLP block, then the lm_head
// and the per-row statistics, in the device memory of activations.h. The blocks are in forward/ over one
// context (forward/context.h): attention_block, mlp_block (dense GLU), moe_block, lm_head (and the
// comparison with a reference model), the residual stream's pre-norm and sandwich forms (residual.h) and
// how a linear runs (linear.h: SumsInHalves, the per-linear plan). Their parts: the quantized weights'
// streaming (weight_stream.h), the sum of row-parallel partial products over ranks (row_reduce.h), the GEMMs
// (gemm.h). Thread-safety: none (one engine thread).
#ifndef SCORED_ENGINE_CUDA_TRANSFORMER_H_
#define SCORED_ENGINE_CUDA_TRANSFORMER_H_

#include "absl/status/status.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward_batch.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/tp_context.h"
#include "engine/kernels/logprob.h"
#include "engine/model/config.h"

namespace scored::cuda {

// Runs the model on the packed batch and writes, for every row r inside lm_head_rows, acts->logprob[r],
// greedy[r] (and rank / entropy / top-k per `options`) for predicting targets[r] from rows <= r of its
// sequence. Asynchronous on `stream`; the caller synchronizes and copies the per-row results back.
// tp == nullptr: one GPU, `config` the model's. Otherwise `config` is the rank's LocalConfig, `model` its
// shard; o_proj / down_proj add their partial products into the residual on rank 0 and write them over it on
// the other ranks, and an all-reduce of the residual rows sums them (or, with tp->peer, each rank adds the
// peer's copied rows to its own in the next norm),
// the embedding lookup of the rank's rows is all-reduced, and the log-softmax combines per-token partial
// statistics across ranks (dist::VocabParallelScore): every rank ends with the same per-row results.
// With `reference` (the rank's reference model R) and batch.options.want_reference: R's forward runs first,
// in the same activations, up to its final norm (acts->ref_normed); then this model's, and for every
// lm_head row both lm_heads and the comparison (kernels/baseline_compare.h; tp: dist::VocabParallelCompare)
// into acts->ref_logprob, kld, ref_greedy, same_top. The model's own results are bitwise those of a batch
// without want_reference.
absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp = nullptr, const BaselineModel* reference = nullptr);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_TRANSFORMER_H_
