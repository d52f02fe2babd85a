// What every block of the GPU forward pass reads and writes (transformer.cc runs the blocks;
// attention_block.h, mlp_block.h, moe_block.h, lm_head.h are the blocks): the model's dimensions, the named
// activations (rows in packed order), the stream, the tensor-parallel rank, the row chunks, the weights'
// stream, the row-parallel sums, the linear runner, the stage clock and the residual stream. One per pass;
// borrows everything it points to. Thread-safety: none (one engine thread).
//
// Row chunks (tp > 1, RowChunks): whole sequences each, so every op of a decoder layer runs chunk by chunk
// and chunk c's sum over ranks (after o_proj, after down_proj; RowReducer) overlaps the next chunks' compute.
// One chunk at tp 1. A row's result is the same whatever the chunking: GEMM algorithms are pinned per weight
// shape (gemm.h), norms and element-wise ops are per row, attention is per sequence, and a row's sum over
// two ranks is one fp32 add (at tp > 2 NCCL's reduction order may depend on the message size).
// Each linear's weight comes from the WeightStream between its Acquire (before its first chunk) and Release
// (after its last chunk's GEMM; ChunkLease).
// Two roles: the scored model's pass (kModel: the lm_head, the per-row statistics and, with `reference`,
// the comparison), and the reference model's pass (kReference: up to the final norm, written to
// acts->ref_normed, with R's RoPE table), which runs first in the same activations.
#ifndef SCORED_ENGINE_CUDA_FORWARD_CONTEXT_H_
#define SCORED_ENGINE_CUDA_FORWARD_CONTEXT_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/forward/linear.h"
#include "engine/cuda/forward/residual.h"
#include "engine/cuda/forward_batch.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/row_chunks.h"
#include "engine/cuda/row_reduce.h"
#include "engine/cuda/stage_times.h"
#include "engine/cuda/tp_context.h"
#include "engine/cuda/weight_stream.h"
#include "engine/kernels/rms_norm_fp8.h"
#include "engine/kernels/swiglu_fp8.h"
#include "engine/model/config.h"
#include "engine/model/layer_plan.h"

namespace scored::cuda {

enum class PassRole { kModel, kBaseline };

// Whether a tensor-parallel forward may run in row chunks: not where a row-parallel W8A8 linear all-reduces
// its input's per-token amax on the forward's stream (NCCL work would then be pending on two streams at once;
// those linears also need every rank's columns before their GEMM).
// Nor in the Gemma block (its row-parallel outputs are summed in proj before their norms, one all-reduce on
// the forward's stream), nor in a model with a sparse layer (it routes the whole batch at once).
bool Chunkable(const ModelPlan& plan, const DeviceModel& model);

// Every layer's norms sandwich its branches (the Gemma block; PlanModel plans all layers alike).
bool Sandwiched(const ModelPlan& plan);

// The forward pass's state for activation type T (kernels::bf16_t or float).
template <typename T>
struct ForwardContext {
  static constexpr bool kFp32 = std::is_same_v<T, float>;

  // reference: kModel with a reference model loaded, else null.
  ForwardContext(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                 const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                 const TensorParallelContext* tp, PassRole role, const BaselineModel* reference);
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  int num_chunks() const { return static_cast<int>(chunks.size()); }
  // A row-parallel sum to await: at tp 1 there is none.
  RowSum Summed(RowSum sum) const { return tp != nullptr ? sum : RowSum::kNone; }
  // A norm's output: normed, or for an FP8-fed linear act_fp8 / fp8_scale_norm.
  NormOutput<T> NormInto(bool to_fp8) const {
    NormOutput<T> out;
    out.to_fp8 = to_fp8;
    out.normed = normed;
    out.fp8 = act_fp8;
    out.fp8_scale = fp8_scale_norm;
    return out;
  }

  const ModelConfig& config;
  const DeviceModel& model;
  GemmRunner& gemm;
  const ForwardBatch& batch;
  Activations* const acts;
  const cudaStream_t stream;
  const TensorParallelContext* const tp;
  const PassRole role;
  const BaselineModel* const reference;
  const ModelPlan plan;  // PlanModel(config): the blocks read the model's structure here, not config's flags
  const bool sandwich;   // Sandwiched(plan)
  // kModel with a reference model: R's final soft-cap (its plan's final_logit_softcap), else 0.
  const float ref_final_logit_softcap;

  const int64_t n = batch.num_tokens;
  const int64_t hidden = config.hidden_size;
  const int64_t num_heads = config.num_heads, num_kv_heads = config.num_kv_heads;
  const int64_t head_dim = config.head_dim;
  const int64_t rotary_dim = config.rotary_dim > 0 ? config.rotary_dim : config.head_dim;
  const int64_t q_dim = num_heads * head_dim, kv_dim = num_kv_heads * head_dim;
  // An attention row of qkv: q | k | v, then the output gate where the model has one
  // (AttentionPlan::output_gate: the upload orders q_proj's [q_h | gate_h] rows so).
  const bool output_gate = plan.any_output_gate();
  const int64_t qkv_dim = q_dim + 2 * kv_dim + (output_gate ? q_dim : 0);
  const int64_t inter = config.intermediate_size, vocab = config.vocab_size;
  const float eps = static_cast<float>(config.rms_norm_eps);
  const GemmTypes types = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToBf16;
  // o_proj / down_proj outputs join the fp32 residual stream in the GEMM's epilogue (residual += x . W^T,
  // fp32, never rounded to bf16). Tensor parallelism: rank 0 adds its partial product to the residual, the
  // other ranks write theirs over it, and the sum over ranks of the residual rows is the full result.
  const GemmTypes to_fp32 = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToFp32;
  const bool add_to_residual;  // tp == nullptr or this rank is rank 0
  // The fused norm + FP8 and SwiGLU + FP8 kernels: not in the Gemma block (its norms add a pending delta;
  // GeGLU).
  const bool norm_fp8_ok = kernels::RmsNormQuantFp8Supports(hidden) && !sandwich;
  // (and a SwiGLU layer: mlp_block.cc)
  const bool swiglu_fp8_ok = inter % 8 == 0 && inter <= kernels::kSwiGluQuantFp8MaxInter;

  // The activations (acts's buffers), rows in packed order.
  float* const residual = acts->residual.as<float>();  // [n, hidden]
  T* const normed = acts->normed.as<T>();              // [n, hidden]
  T* const qkv = acts->qkv.as<T>();                    // [n, qkv_dim]: q | k | v of each token
  T* const q = qkv;                                    //   [n, num_heads, head_dim], row stride qkv_dim
  T* const k = qkv + q_dim;                            //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* const v = qkv + q_dim + kv_dim;                   //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* const attn_gate = qkv + q_dim + 2 * kv_dim;  //   [n, num_heads, head_dim] (output_gate), stride qkv_dim
  T* const attn = acts->attn.as<T>();             // [n, q_dim]
  // Gated DeltaNet layers (delta_net_block.h): the shape, and the fp32 buffers of activations.h.
  const DeltaNetPlan delta_net = plan.delta_net_shape();
  float* const delta_conv = acts->delta_conv.as<float>();  // [n, conv_dim]
  float* const delta_beta = acts->delta_beta.as<float>();  // [n, num_v_heads]
  float* const delta_g = acts->delta_g.as<float>();        // [n, num_v_heads]
  float* const delta_out = acts->delta_out.as<float>();    // [n, value_dim]
  // Multi-head latent attention layers (latent_attention_block.h): the shape, and activations.h's buffers.
  const LatentAttentionPlan latent = plan.latent_shape();
  T* const latent_q_a = acts->latent_q_a.as<T>();            // [n, q_lora_rank]
  T* const latent_c = acts->latent_c.as<T>();                // [n, kv_lora_rank]
  T* const latent_q = acts->latent_q.as<T>();                // [n, num_heads * qk_head_dim]
  T* const latent_kv = acts->latent_kv.as<T>();              // [n, num_heads * (qk_nope + v_head_dim)]
  T* const latent_packed = acts->latent_packed.as<T>();      // [n, 3 num_heads packed_head_dim]
  float* const proj = acts->proj.as<float>();                // [n, hidden]: a W8A8 o / down GEMM's own output
  T* const gate_up = acts->gate_up.as<T>();                  // [n, 2 inter]: gate | up of each token
  T* const mlp = acts->mlp.as<T>();                          // [n, inter]
  float* const logits = acts->logits.as<float>();            // [logits_rows, vocab] (tp: the rank's shard)
  const int32_t* const tokens = acts->tokens.as<int32_t>();  // [n]
  const int32_t* const positions = acts->positions.as<int32_t>();    // [n]
  const int32_t* const cu_seqlens = acts->cu_seqlens.as<int32_t>();  // [num_seqs + 1]
  const int32_t* const targets = acts->targets.as<int32_t>();        // [n]
  // [max_tokens, rotary_dim / 2, 2] each: the pass's model's RoPE tables (activations.h)
  const bool ref_pass = role == PassRole::kBaseline;
  const float* const rope_table = (ref_pass ? acts->ref_rope_table : acts->rope_table).as<float>();
  const float* const rope_long = (ref_pass ? acts->ref_rope_table_long : acts->rope_table_long).as<float>();
  const float* const rope_local =
      (ref_pass ? acts->ref_rope_table_local : acts->rope_table_local).as<float>();
  float* const act_amax = acts->act_amax.as<float>();         // [n, 2] (tp only)
  uint8_t* const act_fp8 = acts->act_fp8.as<uint8_t>();       // [n, in] W8A8: a real FP8 GEMM's input
  float* const fp8_scale_norm = acts->act_scale.as<float>();  // [n]: its per-token scales (qkv, o, gate_up)
  float* const fp8_scale_mlp = fp8_scale_norm + acts->max_tokens;  // [n]: those of down_proj's input

  const std::vector<RowChunk> chunks;
  WeightStream weights;
  RowReducer sums;
  LinearRunner<T> linears;
  StageClock clock;
  ResidualStream<T> residual_stream;
};

// A linear's weight over a block's row chunks: acquired from the WeightStream before the first chunk,
// released after the last chunk's GEMM (ReleaseAfter). Moves only; nothing happens on destruction (a failed
// forward drops the stream's state).
class ChunkLease {
 public:
  static absl::StatusOr<ChunkLease> Acquire(WeightStream& weights, const DeviceLinear& linear,
                                            int num_chunks);
  const WeightStream::Lease& operator*() const { return lease_; }
  // After chunk c's last use: Release when c is the last chunk.
  absl::Status ReleaseAfter(int c) {
    return c == num_chunks_ - 1 ? weights_->Release(lease_) : absl::OkStatus();
  }

 private:
  ChunkLease(WeightStream* weights, const WeightStream::Lease& lease, int num_chunks)
      : weights_(weights), lease_(lease), num_chunks_(num_chunks) {}
  WeightStream* weights_;
  WeightStream::Lease lease_;
  int num_chunks_;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_FORWARD_CONTEXT_H_
