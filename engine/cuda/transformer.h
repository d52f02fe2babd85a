// The GPU forward pass (one readable function, transformer.cc) and the activation memory it runs in.
//
// Activations are allocated once for max_tokens (the engine's max_batch_tokens) so a valid batch never
// allocates. Thread-safety: none (one engine thread).
#ifndef SCORED_ENGINE_CUDA_TRANSFORMER_H_
#define SCORED_ENGINE_CUDA_TRANSFORMER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// lm_head rows per GEMM: the fp32 logits chunk is [kLmHeadChunkTokens, vocab_size] (1 GiB at a 128k
// vocabulary); cuBLASLt runs the 128256 x 4096 lm_head at ~706 TFLOP/s with 2048 rows (GPU.md).
constexpr int64_t kLmHeadChunkTokens = 2048;

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

// Reusable device memory of one forward; `act` is bf16 in bf16 mode, fp32 in fp32 mode.
struct Activations {
  int64_t max_tokens = 0;
  DeviceBuffer residual;  // [max_tokens, hidden_size] fp32, the residual stream
  DeviceBuffer normed;    // [max_tokens, hidden_size] act: RMSNorm output, GEMM input
  DeviceBuffer qkv;       // [max_tokens, q_dim + 2 kv_dim] act
  DeviceBuffer attn;      // [max_tokens, q_dim] act
  DeviceBuffer proj;     // [max_tokens, hidden_size] fp32: a W8A8 o_proj / down_proj FP8 GEMM's output before
                         // AddFp8Scaled joins it to the residual (others add in the GEMM's epilogue)
  DeviceBuffer gate_up;  // [max_tokens, 2 intermediate_size] act
  DeviceBuffer mlp;      // [max_tokens, intermediate_size] act: swiglu output
  // Quantized models only: two [max_scratch_elements] compute-dtype buffers for dequantized weights, used in
  // turn. Linear k+1 is expanded into one on `dequant_stream` while linear k's GEMM reads the other on the
  // forward's stream (weight_ready[i]: buffer i holds its linear; weight_free[i]: buffer i's GEMM is done).
  DeviceBuffer scratch;   // [max_scratch_elements] compute dtype
  DeviceBuffer scratch2;  // [max_scratch_elements] compute dtype
  CudaStream dequant_stream;
  CudaEvent weight_ready[2];
  CudaEvent weight_free[2];
  // Models with fp8_resident() linears only (W8A8 run as real FP8 GEMMs): a linear's input quantized per
  // token, the GEMM's x and x_scale.
  DeviceBuffer act_fp8;    // [max_tokens, max_fp8_in_features] FP8 E4M3
  DeviceBuffer act_scale;  // [2, max_tokens] fp32: row 0 qkv / o / gate_up inputs, row 1 down_proj's
  DeviceBuffer logits;     // [min(max_tokens, kLmHeadChunkTokens), vocab_size] fp32
  // Batch inputs and per-row results, indexed by packed row.
  DeviceBuffer tokens;     // [max_tokens] int32
  DeviceBuffer positions;  // [max_tokens] int32
  DeviceBuffer
      rope_table;  // [max_tokens, head_dim / 2, 2] fp32: RoPE (cos, sin) of positions [0, max_tokens)
  DeviceBuffer cu_seqlens;  // [max_tokens + 1] int32
  DeviceBuffer targets;     // [max_tokens] int32: the next token of the row's sequence (0 at its last row)
  DeviceBuffer logprob;     // [max_tokens] double
  DeviceBuffer greedy;      // [max_tokens] uint8
  DeviceBuffer rank;        // [max_tokens] int32
  DeviceBuffer entropy;     // [max_tokens] float
  DeviceBuffer top_k_ids;   // [max_tokens, kMaxTopK] int32
  DeviceBuffer top_k_logprobs;  // [max_tokens, kMaxTopK] float
  // Tensor parallelism only (tp_size > 1), else empty:
  DeviceBuffer tp_stats;         // [tp_size, min(max_tokens, kLmHeadChunkTokens)] kernels::LogitPartialStats
  DeviceBuffer tp_target_logit;  // [min(max_tokens, kLmHeadChunkTokens)] fp32
  DeviceBuffer act_amax;         // [max_tokens] fp32: W8A8 per-token amax of a row-parallel input
  DeviceBuffer tp_topk_ids;      // [tp_size, min(max_tokens, kLmHeadChunkTokens), kMaxTopK] int32
  DeviceBuffer tp_topk_values;   // [tp_size, min(max_tokens, kLmHeadChunkTokens), kMaxTopK] fp32
  // Row-chunk pipelining (tp_size > 1 only): every op of a layer runs per chunk of whole sequences on the
  // forward's stream; chunk c's sum over ranks (all-reduce or peer copy) runs on comm_stream after
  // chunk_ready[c] while the next chunks compute, and chunk c's next norm starts after chunk_reduced[c] (or
  // the peer copies' events). The forward's stream waits for comm_stream before Forward returns.
  // tp_row_chunks: 0 = auto (kTpAutoChunks from kTpAutoMinTokens tokens), 1 = off, c > 1 = at most c chunks
  // whatever the batch size (tests). Set by the engine (env SCORED_TP_ROW_CHUNKS).
  int tp_row_chunks = 0;
  // tp 1: o_proj / down_proj sum their input columns in two halves (SumsInHalves). Set by the engine (env
  // SCORED_ROW_PARALLEL_HALVES=0 turns it off).
  bool row_parallel_halves = true;
  CudaStream comm_stream;              // highest priority: NCCL blocks take SMs first as a GEMM chunk drains
  std::vector<CudaEvent> chunk_ready;  // [kMaxTpRowChunks]
  std::vector<CudaEvent> chunk_reduced;  // [kMaxTpRowChunks]
  CudaEvent comm_done;
};

// Device bytes Activations takes per token of max_tokens (for "what fits" messages); the fixed part
// (logits chunk, scratch, tensor-parallel stats) is FixedActivationBytes. With tensor parallelism `config`
// is the rank's LocalConfig (engine/model/shard_plan.h) and tp_size the number of ranks.
int64_t ActivationBytesPerToken(const ModelConfig& config, ComputeDtype dtype);
int64_t FixedActivationBytes(const ModelConfig& config, const DeviceModel& model, int64_t max_tokens,
                             int tp_size = 1);

// RESOURCE_EXHAUSTED (naming the buffer) when the device cannot hold them.
absl::StatusOr<Activations> AllocateActivations(const ModelConfig& config, const DeviceModel& model,
                                                int64_t max_tokens, int tp_size = 1);

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
absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp = nullptr);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_TRANSFORMER_H_
