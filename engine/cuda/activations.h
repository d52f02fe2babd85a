// The device memory a forward runs in (Activations), allocated once for max_tokens (the engine's
// max_batch_tokens) so that a valid batch never allocates, and the estimate of its size that start-up
// checks against free memory.
//
// One table (activations.cc, ActivationTable) lists every buffer with its size (bytes per token, per row of
// the logits chunk, fixed) and the models it exists for; AllocateActivations allocates its rows and the
// estimates sum them, so the two cannot disagree.
// With a reference model R (--reference_model), R's forward runs in the same buffers before Q's (they are
// sized for the larger of the two models in every dimension); what must outlive it has its own buffers:
// R's final normed rows, its RoPE table, its logits chunk, the comparison's statistics and results.
// Thread-safety: none (one engine thread).
#ifndef SCORED_ENGINE_CUDA_ACTIVATIONS_H_
#define SCORED_ENGINE_CUDA_ACTIVATIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/stage_times.h"
#include "engine/cuda/weight_stream.h"
#include "engine/model/config.h"

namespace scored::cuda {

// lm_head rows per GEMM: the fp32 logits chunk is [kLmHeadChunkTokens, vocab_size] (1 GiB at a 128k
// vocabulary; with a reference model, whose logits need a chunk of their own, both chunks have half as many
// rows) vocabulary); cuBLASLt runs the 128256 x 4096 lm_head at ~706 TFLOP/s with 2048 rows (GPU.md).
constexpr int64_t kLmHeadChunkTokens = 2048;

// The reference model R of an engine started with --reference_model, on one rank (tp > 1: its shard and
// LocalConfig), as the forward and the activation table see it.
struct BaselineModel {
  const ModelConfig* config = nullptr;
  const DeviceModel* model = nullptr;
};

// Reusable device memory of one forward; `act` is bf16 in bf16 mode, fp32 in fp32 mode.
struct Activations {
  int64_t max_tokens = 0;
  int64_t logits_rows = 0;  // rows of the logits chunk(s): logits_rows, halved with R
  DeviceBuffer residual;    // [max_tokens, hidden_size] fp32, the residual stream
  DeviceBuffer normed;      // [max_tokens, hidden_size] act: RMSNorm output, GEMM input
  // [max_tokens, q_dim + 2 kv_dim (+ q_dim: the output gate, AttentionPlan::output_gate)] act; a Gated
  // DeltaNet layer's q|k|v|z|b|a input projections (DeltaNetPlan: conv_dim + value_dim + 2 num_v_heads) too
  DeviceBuffer qkv;
  DeviceBuffer
      attn;  // [max_tokens, max(q_dim, value_dim)] act: attention output (DeltaNet: the gated norm's)
  // Gated DeltaNet layers only (else empty), fp32: the conv output [max_tokens, conv_dim], beta and g
  // [max_tokens, num_v_heads], the delta rule's output [max_tokens, value_dim].
  DeviceBuffer delta_conv, delta_beta, delta_g, delta_out;
  // Multi-head latent attention layers only (else empty), act (latent_attention_block.h): the normed q_a
  // [max_tokens, q_lora_rank] and latent c [max_tokens, kv_lora_rank], q [max_tokens, num_heads *
  // qk_head_dim] (with q_lora_rank), kv_b's output [max_tokens, num_heads * (qk_nope + v_head_dim)] (then
  // the heads' outputs, o_proj's input), the packed q|k|v [max_tokens, 3 num_heads packed_head_dim].
  DeviceBuffer latent_q_a, latent_c, latent_q, latent_kv, latent_packed;
  DeviceBuffer proj;     // [max_tokens, hidden_size] fp32: a W8A8 o_proj / down_proj FP8 GEMM's output before
                         // AddFp8Scaled joins it to the residual (others add in the GEMM's epilogue)
  DeviceBuffer gate_up;  // [max_tokens, 2 intermediate_size] act
  DeviceBuffer mlp;      // [max_tokens, intermediate_size] act: swiglu output
  // Quantized models only: two [max_scratch_elements] compute-dtype buffers for dequantized weights, used in
  // turn by the forward's WeightStream (weight_stream.h): a linear is expanded into one on `dequant_stream`
  // while the GEMMs of the one before read the other on the forward's stream (weight_ready[i]: buffer i
  // holds its linear; weight_free[i]: buffer i's last GEMM is done).
  DeviceBuffer scratch;   // [max_scratch_elements] compute dtype
  DeviceBuffer scratch2;  // [max_scratch_elements] compute dtype
  CudaStream dequant_stream;
  CudaEvent weight_ready[2];
  CudaEvent weight_free[2];
  // The four above as a WeightStream borrows them.
  WeightScratch weight_scratch() const;
  // Models with fp8_resident() linears only (W8A8 run as real FP8 GEMMs): a linear's input quantized per
  // token, the GEMM's x and x_scale.
  DeviceBuffer act_fp8;    // [max_tokens, max_fp8_in_features] FP8 E4M3 (or int8 for an INT8 GEMM)
  DeviceBuffer act_scale;  // [2, max_tokens] fp32: row 0 qkv / o / gate_up inputs, row 1 down_proj's
  // Mixture-of-experts models only (a layer plan with experts), else empty. E = num_experts, k =
  // num_experts_per_tok; gate_up / mlp above hold the largest of the dense, expert and shared-expert
  // intermediate sizes.
  DeviceBuffer router_logits;  // [max_tokens, RouterColumns] fp32: the router's logits (+ the shared gate's)
  DeviceBuffer moe_ids;        // [max_tokens, k] int32: each token's experts, descending probability
  DeviceBuffer moe_weights;    // [max_tokens, k] fp32: their combine weights
  DeviceBuffer moe_slots;      // [max_tokens * k] int32: slots t * k + j grouped by expert
  DeviceBuffer moe_counts;     // [E] int32: slots per expert
  DeviceBuffer moe_group_workspace;  // MoeGroupByExpert's per-chunk counts (kernels/moe_dispatch.h)
  DeviceBuffer moe_x;                // [max_tokens, hidden_size] act: one expert's gathered input rows
  DeviceBuffer moe_y;                // [max_tokens, hidden_size] compute dtype: one expert's output rows
  DeviceBuffer moe_acc;              // [max_tokens, hidden_size] fp32: the weighted sum of the experts so far
  DeviceBuffer moe_shared;           // [max_tokens, hidden_size] fp32: the shared expert's output (Qwen2-MoE)
  // Models with a layer whose experts run as grouped GEMMs (DeviceMoe::grouped, bf16 mode) only: every slot's
  // row at once, grouped by expert (moe_slots' order).
  DeviceBuffer moe_offsets;          // [E + 1] int32: each expert's first grouped row
  DeviceBuffer moe_slot_rows;        // [max_tokens * k] int32: each slot's grouped row
  DeviceBuffer moe_grouped_in;       // [max_tokens * k, max(hidden, moe_inter)] bf16: the gathered input
                                     // rows, then (gate|up has read them) the SwiGLU output
  DeviceBuffer moe_grouped_gate_up;  // [max_tokens * k, 2 moe_inter] bf16
  DeviceBuffer moe_grouped_out;      // [max_tokens * k, hidden_size] bf16: every expert's output rows
  // Where a layer's grouped GEMMs run GroupedGemmSm90 (GroupedExperts::path): its workspace
  // (GroupedGemmSm90WorkspaceBytes(E): the per-expert argument arrays and CUTLASS's tensor maps; the layer's
  // GEMMs reuse it one after another on the forward's stream), and for kSm90Dequant the 4-bit experts of one
  // GEMM dequantized: [E, 2 moe_inter, hidden] bf16 (the larger of gate|up's and down's [E, n, k]).
  DeviceBuffer moe_grouped_workspace;
  DeviceBuffer moe_grouped_stacked;
  DeviceBuffer logits;  // [logits_rows, vocab_size] fp32
  // Batch inputs and per-row results, indexed by packed row.
  DeviceBuffer tokens;     // [max_tokens] int32
  DeviceBuffer positions;  // [max_tokens] int32
  DeviceBuffer
      rope_table;  // [max_tokens, rotary_dim / 2, 2] fp32: RoPE (cos, sin) of positions [0, max_tokens)
  DeviceBuffer rope_table_long;   // longrope: the same for sequences beyond original_max_position_embeddings
  DeviceBuffer rope_table_local;  // ModelPlan::local_rope: the local layers' (Gemma 3)
  DeviceBuffer cu_seqlens;        // [max_tokens + 1] int32
  DeviceBuffer targets;    // [max_tokens] int32: the next token of the row's sequence (0 at its last row)
  DeviceBuffer logprob;    // [max_tokens] double
  DeviceBuffer greedy;     // [max_tokens] uint8
  DeviceBuffer rank;       // [max_tokens] int32
  DeviceBuffer entropy;    // [max_tokens] float
  DeviceBuffer top_k_ids;  // [max_tokens, kMaxTopK] int32
  DeviceBuffer top_k_logprobs;      // [max_tokens, kMaxTopK] float
  DeviceBuffer candidate_ids;       // [max_tokens, kMaxCandidates] int32: ids whose logprobs are gathered
  DeviceBuffer candidate_logprobs;  // [max_tokens, kMaxCandidates] float
  DeviceBuffer min_logprob;         // [max_tokens] float
  // Tensor parallelism only (tp_size > 1), else empty:
  DeviceBuffer tp_stats;         // [tp_size, logits_rows] kernels::LogitPartialStats
  DeviceBuffer tp_target_logit;  // [logits_rows] fp32
  DeviceBuffer act_amax;  // [max_tokens, 2] fp32: W8A8 per-token amax (FP8: [max_tokens]) or (hi, -lo) (INT8)
                          // of a row-parallel input
  DeviceBuffer tp_topk_ids;     // [tp_size, logits_rows, kMaxTopK] int32
  DeviceBuffer tp_topk_values;  // [tp_size, logits_rows, kMaxTopK] fp32
  // With a reference model only, else empty (act and the logits' vocabulary columns: R's):
  DeviceBuffer ref_normed;            // [max_tokens, hidden_size of R] act: R's final-norm output
  DeviceBuffer ref_rope_table;        // [max_tokens, rotary_dim of R / 2, 2] fp32: R's RoPE (cos, sin)
  DeviceBuffer ref_rope_table_long;   // R's rope_table_long
  DeviceBuffer ref_rope_table_local;  // R's rope_table_local
  DeviceBuffer ref_logits;            // [logits_rows, vocab_size] fp32: R's logits chunk
  DeviceBuffer ref_stats;             // [tp_size, logits_rows] kernels::BaselinePartialStats
  DeviceBuffer ref_logprob;           // [max_tokens] double
  DeviceBuffer kld;                   // [max_tokens] double
  DeviceBuffer ref_greedy;            // [max_tokens] uint8
  DeviceBuffer same_top;              // [max_tokens] uint8
  // Row-chunk pipelining (tp_size > 1 only): every op of a layer runs per chunk of whole sequences on the
  // forward's stream; chunk c's sum over ranks (all-reduce or peer copy) runs on comm_stream after
  // chunk_ready[c] while the next chunks compute, and chunk c's next norm starts after chunk_reduced[c] (or
  // the peer copies' events). The forward's stream waits for comm_stream before Forward returns.
  // tp_row_chunks: 0 = auto (kTpAutoChunks from kTpAutoMinTokens tokens), 1 = off, c > 1 = at most c chunks
  // whatever the batch size (tests). Set by the engine (EngineOptions::tp_row_chunks, --tp_row_chunks).
  int tp_row_chunks = 0;
  // tp 1: o_proj / down_proj sum their input columns in two halves (SumsInHalves). Set by the engine
  // (EngineOptions::row_parallel_halves, --row_parallel_halves).
  bool row_parallel_halves = true;
  CudaStream comm_stream;              // highest priority: NCCL blocks take SMs first as a GEMM chunk drains
  std::vector<CudaEvent> chunk_ready;  // [kMaxTpRowChunks]
  std::vector<CudaEvent> chunk_reduced;  // [kMaxTpRowChunks]
  CudaEvent comm_done;
  // Profiling only (scored_bench --stages): where set, the forward records its stages' times here
  // (stage_times.h). Not owned; the engine leaves it unset.
  StageTimes* stage_times = nullptr;
};

// Columns of Activations::router_logits: the experts', the shared expert's gate (Qwen2-MoE), rounded up to 4.
int64_t RouterColumns(const ModelConfig& config);

// Device bytes of the Activations buffers every model has, per token of max_tokens (for "what fits"
// messages). FixedActivationBytes is the rest at max_tokens: the logits chunk, the dequantized-weight
// scratch, and the buffers only models with FP8 GEMMs or tensor parallelism have. Their sum at max_tokens is
// what AllocateActivations allocates, but for cu_seqlens' one entry past max_tokens (4 bytes, left out as it
// always was). With tensor parallelism `config` is the rank's LocalConfig (engine/model/shard_plan.h) and
// tp_size the number of ranks. `reference`: the reference model's buffers too (null: none); its `model` may
// be null before it is uploaded (the estimate then assumes R needs no more weight scratch than `model`).
int64_t ActivationBytesPerToken(const ModelConfig& config, ComputeDtype dtype,
                                const BaselineModel* reference = nullptr);
int64_t FixedActivationBytes(const ModelConfig& config, const DeviceModel& model, int64_t max_tokens,
                             int tp_size = 1, const BaselineModel* reference = nullptr);

// Allocates every buffer of the table for `model` (its dtype and scratch / FP8 sizes) and tp_size, creates
// the streams and events, and fills the RoPE tables (synchronizing the default stream).
// RESOURCE_EXHAUSTED (naming the buffer) when the device cannot hold them.
absl::StatusOr<Activations> AllocateActivations(const ModelConfig& config, const DeviceModel& model,
                                                int64_t max_tokens, int tp_size = 1,
                                                const BaselineModel* reference = nullptr);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_ACTIVATIONS_H_
