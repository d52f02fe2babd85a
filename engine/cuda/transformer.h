// The GPU forward pass (transformer.cc): per layer the attention block and the MLP block, then the lm_head
// and the per-row statistics, in the device memory of activations.h. Its parts: the quantized weights'
// streaming (weight_stream.h), the sum of row-parallel partial products over ranks (row_reduce.h), the GEMMs
// (gemm.h). Thread-safety: none (one engine thread).
#ifndef SCORED_ENGINE_CUDA_TRANSFORMER_H_
#define SCORED_ENGINE_CUDA_TRANSFORMER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward_batch.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/row_chunks.h"
#include "engine/kernels/logprob.h"
#include "engine/model/config.h"

namespace scored::dist {
class NcclCommunicator;
}  // namespace scored::dist

namespace scored::cuda {

class PeerLink;

// Row-parallel sums at tp 1. The one-GPU forward computes o_proj and down_proj over the two halves of their
// input columns, [0, in/2) then [in/2, in), each GEMM adding into the fp32 residual in its epilogue:
// residual = (residual + x_a . W_a^T) + x_b . W_b^T. That is bitwise what tp 2 computes: rank 0 adds x_a .
// W_a^T to the residual, rank 1 writes x_b . W_b^T, and a two-rank fp32 all-reduce is one (commutative) add;
// the column-parallel GEMMs of a shard give bitwise tp 1's columns (cuBLASLt without split-K sums each output
// over k in the same order whatever the algorithm; gemm_test checks a shard planned on its own). So a model
// scores bitwise the same on one GPU and on two (the vocab-parallel log-softmax aside: its per-token
// statistics combine in another order, ~1e-7 relative). Linears that run FP8 GEMMs or fake-quantize their
// input (W8A8) keep one GEMM, as does an input width whose half is not 16-byte aligned. Cost: each half
// re-reads and re-writes the residual rows in the epilogue (tests/bench/RESULTS.md).
// Activations::row_parallel_halves turns it off.
bool SumsInHalves(const DeviceLinear& linear, ComputeDtype dtype);

// One rank of a tensor-parallel forward (engine/model/shard_plan.h has the layout). Every rank runs
// Forward on the same batch at the same time: the collectives of `comm` pair up in order.
struct TensorParallelContext {
  dist::NcclCommunicator* comm = nullptr;  // this rank's; its stream is the forward's stream
  int64_t vocab_size = 0;                  // the full vocabulary (config.vocab_size is the padded shard)
  int64_t vocab_begin = 0;                 // first embedding / lm_head row of this rank
  int64_t vocab_rows = 0;                  // rows of this rank: [vocab_begin, vocab_begin + vocab_rows)
  // tp 2 in one process: the row-parallel partial products are summed by peer copies (peer_link.h) instead
  // of NCCL all-reduces (bitwise the same sums); null otherwise. Its ranks are the communicator's.
  PeerLink* peer = nullptr;
};

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
// lm_head row both lm_heads and the comparison (kernels/reference_compare.h; tp: dist::VocabParallelCompare)
// into acts->ref_logprob, kld, ref_greedy, same_top. The model's own results are bitwise those of a batch
// without want_reference.
absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp = nullptr, const ReferenceModel* reference = nullptr);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_TRANSFORMER_H_
