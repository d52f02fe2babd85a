// The model's weights resident on one GPU (DESIGN.md §4).
//
// Dense weights (F32/F16/BF16) live in the compute dtype (bf16 in bf16 mode: a bf16 checkpoint is copied
// as is, F32/F16 are rounded to nearest even once at load; fp32 mode widens everything to fp32), q|k|v
// stacked into one [q_dim + 2 kv_dim, hidden] matrix and gate|up into one [2 intermediate, hidden] matrix
// so each group is one GEMM. Quantized weights stay quantized: their stored tensors are uploaded byte
// for byte, and DeviceLinear::Materialize() expands a group into the shared scratch (compute dtype) just
// before its GEMM with the dequant kernels. Values are exactly the checkpoint's (dequantized) values rounded
// once to the compute dtype.
//
// W8A8 per-token FP8 (FP8_DYNAMIC: E4M3 weights with a tensor or per-channel scale) in bf16 mode, where
// cuBLASLt runs outer-vector-scaled FP8 GEMMs (GemmRunner::Fp8Supported) and both dimensions are multiples
// of 16: the group stays resident in FP8 instead, its parts' E4M3 bytes stacked into one [out, in] matrix
// and their scales widened (exactly) to one fp32 [out] vector, and runs as a real FP8 GEMM. W8A8 INT8 with
// symmetric channel (or tensor) weights and symmetric per-token activations likewise stays resident in int8
// for an int8 tensor-core GEMM (kernels/int8_gemm.h) in bf16 mode on devices that run it. fp32 mode
// (the fidelity mode), FP8_BLOCK (block weight scales, per-group activations), W4AFP8 / W4A8, static
// activation scales and W8A16 keep the dequantize-to-scratch path above. Norm weights, q/k/v biases and the
// RoPE table are fp32 (what the kernels take). Tensor parallelism: UploadModel with a ShardPlan uploads one
// rank's shard (engine/model/shard_plan.h): q|k|v and gate|up of the rank's heads / intermediate slice, o and
// down of its input columns, embedding and lm_head rows [vocab_begin, vocab_end). It cuts the shards layer by
// layer and frees each layer's host copies (row-parallel slices) once uploaded, so the host peak is one
// layer's copies. Every tensor's mmapped pages leave the process's RSS once it is on the GPU
// (TensorStore::ReleaseResidentPages). Ownership: a DeviceModel owns every device buffer it points to and
// keeps no host pointer. Thread-safety: immutable after Upload().
//
// The upload by job: device_linear.{h,cc} (one linear: DeviceLinear, DeviceModelLoader::Build),
// moe_upload.{h,cc} (a sparse layer's block and its grouped-GEMM tables), rotation_tables.{h,cc}
// (transform_config's rotations), upload_model.cc (UploadModel: the model walk, page release, the byte
// counts); device_weights.cc holds the walks over a resident layer.
#ifndef SCORED_ENGINE_CUDA_DEVICE_WEIGHTS_H_
#define SCORED_ENGINE_CUDA_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_linear.h"
#include "engine/engine.h"
#include "engine/kernels/grouped_gemm.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"

namespace scored::cuda {

// A sparse layer's experts as the grouped expert GEMMs (kernels/grouped_gemm.h) read them: device tables of
// every expert's weight, built once at load. Enabled only in bf16 mode where every expert's gate|up and down
// are resident dense bf16 (all of them) or 4-bit pack-quantized with one format (all of them: group 32 / 64 /
// 128 or channel, F32 / F16 / BF16 scales, symmetric or int32 zero points; no g_idx), with no activation
// quantization and no rotations, in shapes GroupedGemmSupports takes (multiples of 8; int4: k of 32).
// Otherwise (fp32 mode, NVFP4 / FP8 / INT8 experts, mixed formats) `enabled` is false and the forward runs
// the experts one by one. Where enabled, the forward's WeightStream skips the experts (LinearsInOrder(layer,
// true)): nothing is expanded into the scratch for them.
//
// `path` picks the kernels, once at load, from UploadOptions::moe_gemm (EngineOptions::moe_gemm, `scored
// --moe_gemm`):
//   mma           GroupedGemm / GroupedGemmInt4 (mma.sync, any sm_80+ device) for every layer;
//   sm90          dense bf16 experts on GroupedGemmSm90 where the device offers it
//                 (GroupedGemmSm90Supported: an sm_90 device, a 90a build), 4-bit ones on GroupedGemmInt4;
//   sm90_dequant  (default) as sm90, and 4-bit experts dequantized into Activations::moe_grouped_stacked (one
//                 DequantizeGroupedInt4 per GEMM) then GroupedGemmSm90Stacked: measured 1.64x sm90 on the
//                 Qwen3-30B-A3B shape and 2.8x on Mixtral-8x7B's at 8 x 2048 (H200, tests/bench/RESULTS.md).
//                 (Decoding a layer's experts on a side stream beside its attention block measured no faster:
//                 both are bound by the whole device, 304.7 vs 303.6 ms a forward, RESULTS.md.)
// Elsewhere (no sm_90a) every path falls back to kMma. UploadOptions::moe_sm90_schedule
// (`--moe_sm90_schedule` cooperative (default) | cooperative2x1 | pingpong) picks GroupedGemmSm90's schedule
// (sm90_schedule). A value outside either enum fails the load (INVALID_ARGUMENT naming the flag).
enum class GroupedGemmPath {
  kMma,         // GroupedGemm / GroupedGemmInt4
  kSm90,        // GroupedGemmSm90 over the dense tables
  kSm90Dequant  // 4-bit: DequantizeGroupedInt4 into a stacked bf16 scratch, then GroupedGemmSm90Stacked
};

struct GroupedExperts {
  bool enabled = false;
  bool int4 = false;  // 4-bit pack-quantized (else dense bf16)
  GroupedGemmPath path = GroupedGemmPath::kMma;
  kernels::GroupedGemmSm90Schedule sm90_schedule = kernels::GroupedGemmSm90Schedule::kCooperative;
  DeviceBuffer gate_up;  // [num_experts] const bf16_t* ([2 inter, hidden] each), or GroupedInt4Expert (int4)
  DeviceBuffer down;     // [num_experts] const bf16_t* ([hidden, inter] each), or GroupedInt4Expert (int4)
  kernels::GroupedInt4Format gate_up_format;  // int4 only
  kernels::GroupedInt4Format down_format;     // int4 only
};

// A sparse layer's mixture-of-experts block (ModelConfig::IsSparseLayer; semantics in engine/model/config.h),
// every linear as the dense MLP's are (any format). The router's GEMM writes fp32 logits (every mode);
// Qwen2-MoE's shared_expert_gate is stacked under it as row num_experts, so that one GEMM gives the routing
// logits and the gate's (DeepSeek-V3's shared experts are ungated: no row). The sigmoid router's
// e_score_correction_bias is an fp32 buffer. In fp32 mode a quantized expert is expanded and then rounded to
// bf16 values (DeviceLinear::round_to_bf16): the CPU oracle's (and transformers') reading of quantized
// experts.
struct DeviceMoe {
  DeviceLinear router;                // [num_experts (+ 1: the shared expert's gate), hidden_size]
  DeviceBuffer correction_bias;       // [num_experts] fp32 (ExpertsPlan::correction_bias), else empty
  std::vector<DeviceLinear> gate_up;  // [num_experts] each [2 moe_intermediate_size, hidden_size]
  std::vector<DeviceLinear> down;     // [num_experts] each [hidden_size, moe_intermediate_size]
  bool shared = false;                // a shared expert (then the two below): Qwen2-MoE's, DeepSeek-V3's
  bool shared_gated = false;          // shared: scaled by sigmoid of the router's column num_experts
  DeviceLinear shared_gate_up;        // [2 shared_expert_intermediate_size, hidden_size]
  DeviceLinear shared_down;           // [hidden_size, shared_expert_intermediate_size]
  GroupedExperts grouped;             // the experts as one grouped GEMM's tables, where enabled
};

// A Gated DeltaNet layer's small tensors, fp32 (its input projections are DeviceLayer::qkv, fused q|k|v, z,
// b, a rows, and out_proj is DeviceLayer::o).
struct DeviceDeltaNet {
  DeviceBuffer conv1d;   // [conv_dim, kernel]
  DeviceBuffer neg_a;    // [num_v_heads]: -exp(A_log), computed in fp32 as the CPU oracle does
  DeviceBuffer dt_bias;  // [num_v_heads]
  DeviceBuffer norm;     // [v_head_dim]: the gated output norm's (plain) weight
};

// A multi-head latent attention layer's own weights (LayerPlan::latent_attention_mixer; its first GEMM, q_a
// (or q_proj) stacked on kv_a_proj_with_mqa, is DeviceLayer::qkv, with their biases in qkv_bias, and o_proj
// is DeviceLayer::o).
struct DeviceLatentAttention {
  bool q_lora = false;     // q_lora_rank > 0: q = q_b(RMSNorm(q_a(x))), else qkv's q_proj rows are q
  DeviceLinear q_b;        // [num_heads * qk_head_dim, q_lora_rank]; empty without q_lora_rank
  DeviceLinear kv_b;       // [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  DeviceBuffer q_a_norm;   // [q_lora_rank] fp32; empty without q_lora_rank
  DeviceBuffer kv_a_norm;  // [kv_lora_rank] fp32
};

struct DeviceLayer {
  DeviceBuffer input_norm;  // [hidden_size] fp32
  DeviceBuffer post_norm;   // [hidden_size] fp32 (Gemma: post_attention_layernorm, on the attention output)
  // Gemma (ModelConfig::sandwich_norms): pre_feedforward_layernorm (the MLP's input norm) and
  // post_feedforward_layernorm (on the MLP output), [hidden_size] fp32; else empty. Every Gemma norm weight
  // here is stored as fp32(1 + weight) (ModelConfig::gemma_norm).
  // [head_dim] fp32 (Qwen3), [num_heads * head_dim] / [num_kv_heads * head_dim]
  // (AttentionPlan::qk_norm_whole: MiniMax-M2), else empty
  DeviceBuffer q_norm;
  DeviceBuffer k_norm;
  DeviceBuffer pre_ff_norm;   // see post_norm
  DeviceBuffer post_ff_norm;  // see post_norm
  DeviceBuffer qkv_bias;      // [q_dim + 2 kv_dim] fp32 (Qwen2 / attention_bias), else empty
  DeviceBuffer o_bias;        // [hidden_size] fp32 (AttentionPlan::o_bias; tp: rank 0's alone), else empty
  // [q_dim + 2 kv_dim (+ q_dim: the output gate's rows, AttentionPlan::output_gate), hidden_size]; a Gated
  // DeltaNet layer: its input projections [conv_dim + value_dim + 2 num_v_heads, hidden_size]
  DeviceLinear qkv;
  bool delta_net_mixer = false;  // LayerPlan::delta_net_mixer: qkv / o are the DeltaNet's, delta_net below
  DeviceDeltaNet delta_net;
  // LayerPlan::latent_attention_mixer: qkv is [q_a (or q_proj) | kv_a] [q_lora_rank (or num_heads *
  // qk_head_dim) + kv_lora_rank + qk_rope_head_dim, hidden_size], o is o_proj, latent below
  bool latent_mixer = false;
  DeviceLatentAttention latent;
  DeviceLinear o;        // [hidden_size, q_dim] (a Gated DeltaNet layer: out_proj [hidden, value_dim])
  DeviceLinear gate_up;  // [2 intermediate_size, hidden_size]; a sparse layer: empty
  DeviceLinear down;     // [hidden_size, intermediate_size]; a sparse layer: empty
  bool sparse = false;   // ModelConfig::IsSparseLayer: `moe` instead of gate_up / down
  DeviceMoe moe;
  // FP8 KV cache (the checkpoint's kv_cache_scheme, applied): K after RoPE and V quantize-dequantized
  // with these (kernels/static_act_quant.h); 0 = off.
  float k_scale = 0.0f, v_scale = 0.0f;
};

// Which GEMM of a decoder layer a DeviceLinear is (DeviceLayer, DeviceMoe).
enum class DeviceLinearRole {
  kQkv,           // DeviceLayer::qkv (column-parallel under tp)
  kO,             // DeviceLayer::o (row-parallel)
  kGateUp,        // a dense layer's DeviceLayer::gate_up (column-parallel)
  kDown,          // a dense layer's DeviceLayer::down (row-parallel)
  kRouter,        // a sparse layer's DeviceMoe::router (replicated; fp32 logits)
  kExpertGateUp,  // DeviceMoe::gate_up[e]
  kExpertDown,    // DeviceMoe::down[e]
  kSharedGateUp,  // DeviceMoe::shared_gate_up (Qwen2-MoE's shared expert)
  kSharedDown,    // DeviceMoe::shared_down
  kLatentQB,      // DeviceLatentAttention::q_b (latent attention with q_lora_rank)
  kLatentKvB,     // DeviceLatentAttention::kv_b
};

// A routed expert's linear (kExpertGateUp / kExpertDown): run from DeviceMoe::grouped's tables where those
// are enabled, not one linear at a time.
inline bool IsRoutedExpert(DeviceLinearRole role) {
  return role == DeviceLinearRole::kExpertGateUp || role == DeviceLinearRole::kExpertDown;
}

// The one enumeration of a device layer's linears: calls fn(linear, role) for every linear of `layer` in the
// order the forward uses them: q|k|v (a latent attention layer: then its q_b where it has one, kv_b), o, then
// a dense layer's gate|up, down, or a sparse layer's router, each expert's gate|up and down in ascending
// expert id (the e-th kExpertGateUp and kExpertDown are expert e's), then its shared expert's gate|up and
// down (Qwen2-MoE; last, as its input rotation, if any, runs in place on the input the experts gather from).
// A sparse layer's empty gate_up / down and a dense layer's empty DeviceMoe are not visited. `fn` returns
// void, or absl::Status: then the walk stops at the first error and ForEachLinear returns it (OK when every
// call was). The second overload is the mutable twin (fn(DeviceLinear&, DeviceLinearRole)).
template <typename Fn>
auto ForEachLinear(const DeviceLayer& layer, Fn&& fn);
template <typename Fn>
auto ForEachLinear(DeviceLayer& layer, Fn&& fn);

// Every linear of `layer` in ForEachLinear's order. (WeightStream streams them in this order.)
// skip_grouped_experts: leave out the experts of a layer whose moe.grouped is enabled (the forward runs them
// from the grouped tables, not one linear at a time).
std::vector<const DeviceLinear*> LinearsInOrder(const DeviceLayer& layer, bool skip_grouped_experts = false);

// How UploadModel uploads: EngineOptions' upload settings (UploadOptionsFor).
struct UploadOptions {
  bool kv_cache_quant = true;                // apply a kv_cache_scheme the checkpoint has
  MoeGemm moe_gemm = MoeGemm::kSm90Dequant;  // GroupedExperts::path (above)
  MoeSm90Schedule moe_sm90_schedule = MoeSm90Schedule::kCooperative;  // GroupedExperts::sm90_schedule
};
UploadOptions UploadOptionsFor(const EngineOptions& options);

// The names of the choices as the `scored` flags spell them ("sm90_dequant", "cooperative").
const char* MoeGemmName(MoeGemm choice);
const char* MoeSm90ScheduleName(MoeSm90Schedule choice);

struct DeviceModel {
  ComputeDtype dtype = ComputeDtype::kBf16;
  UploadOptions options;  // what it was uploaded with
  DeviceBuffer embed;     // [vocab_size, hidden_size] compute dtype; a shard: [vocab_end - vocab_begin, ...]
  DeviceBuffer final_norm;     // [hidden_size] fp32
  DeviceBuffer rope_inv_freq;  // [rotary_dim / 2] fp32, RopeInvFreq (engine/model/rope_freq.h)
  // longrope only: the frequencies of sequences longer than original_max_position_embeddings
  // (RopeInvFreqForLength); else empty.
  DeviceBuffer rope_inv_freq_long;
  // ModelConfig::layer_local_rope only (Gemma 3's sliding layers): local_rope_theta / local_rope_scaling's
  // frequencies; else empty.
  DeviceBuffer rope_inv_freq_local;
  float rope_scaling = 1.0f;  // RopeAttentionScaling: what cos and sin are multiplied by
  DeviceLinear lm_head;       // [vocab_size, hidden_size]; tied: a view of `embed`; a shard: its rows
  std::vector<DeviceLayer> layers;
  // The factor tables (signs, core) of every distinct transform_config matrix the linears' rotations use.
  std::vector<DeviceBuffer> rotation_tables;
  int64_t max_scratch_elements = 0;  // largest out*in of a linear that uses_scratch() (0 when none does)
  int64_t max_fp8_in_features = 0;   // largest in_features of an fp8_ or int8_resident() linear (0: none)
  int64_t resident_bytes = 0;        // device bytes of all the above
};

// Uploads every weight of `weights` for compute dtype `dtype`. Errors name the tensor; RESOURCE_EXHAUSTED
// when the weights do not fit (naming what was being uploaded).
// `plan` nullptr: the whole model; else rank plan->tp_rank's shard. Errors as ShardLinear's (naming the
// module and the split) for a checkpoint that cannot be cut.
// `options`: UploadOptions (INVALID_ARGUMENT naming the flag for a value outside its enum).
absl::StatusOr<std::unique_ptr<DeviceModel>> UploadModel(const ModelWeights& weights, ComputeDtype dtype,
                                                         const ShardPlan* plan, const UploadOptions& options);
// The same with UploadOptions' defaults but `kv_cache_quant` (EngineOptions::kv_cache_quant).
absl::StatusOr<std::unique_ptr<DeviceModel>> UploadModel(const ModelWeights& weights, ComputeDtype dtype,
                                                         const ShardPlan* plan = nullptr,
                                                         bool kv_cache_quant = true);

// Which mixture-of-experts path `model`'s sparse layers run (DeviceMoe::grouped: how many layers run their
// experts as grouped GEMMs, on which kernels, with which UploadOptions), for the load log and
// ModelInfo::format_notes; empty for a model without sparse layers.
std::string GroupedExpertsNote(const DeviceModel& model);

// About the device bytes UploadModel(weights, dtype, plan of one of tp_size ranks) will take, from the
// checkpoint's tensors without reading them: dense weights at the compute dtype's width, quantized ones as
// stored (an FP8-resident W8A8 group keeps its E4M3 bytes), the embedding and lm_head rows split over the
// ranks, everything else divided evenly. For "does it fit" checks before an upload (the upload itself still
// fails cleanly with RESOURCE_EXHAUSTED when the estimate was short).
int64_t EstimateDeviceBytes(const ModelWeights& weights, ComputeDtype dtype, int tp_size = 1);

namespace device_layer_internal {

// ForEachLinear's walk over a const or mutable layer; `visit` returns false to stop it (then so does this).
template <typename Layer, typename Visit>
bool WalkLinears(Layer& layer, Visit&& visit) {
  if (!visit(layer.qkv, DeviceLinearRole::kQkv)) return false;
  if (layer.latent_mixer) {
    if (layer.latent.q_lora && !visit(layer.latent.q_b, DeviceLinearRole::kLatentQB)) {
      return false;
    }
    if (!visit(layer.latent.kv_b, DeviceLinearRole::kLatentKvB)) return false;
  }
  if (!visit(layer.o, DeviceLinearRole::kO)) return false;
  if (!layer.sparse) {
    return visit(layer.gate_up, DeviceLinearRole::kGateUp) && visit(layer.down, DeviceLinearRole::kDown);
  }
  if (!visit(layer.moe.router, DeviceLinearRole::kRouter)) return false;
  for (size_t e = 0; e < layer.moe.gate_up.size(); ++e) {
    if (!visit(layer.moe.gate_up[e], DeviceLinearRole::kExpertGateUp) ||
        !visit(layer.moe.down[e], DeviceLinearRole::kExpertDown)) {
      return false;
    }
  }
  if (!layer.moe.shared) return true;
  return visit(layer.moe.shared_gate_up, DeviceLinearRole::kSharedGateUp) &&
         visit(layer.moe.shared_down, DeviceLinearRole::kSharedDown);
}

template <typename Layer, typename Fn>
auto ForEachLinearOf(Layer& layer, Fn& fn) {
  using Result = std::invoke_result_t<Fn&, decltype((layer.qkv)), DeviceLinearRole>;
  if constexpr (std::is_void_v<Result>) {
    WalkLinears(layer, [&fn](auto& linear, DeviceLinearRole role) {
      fn(linear, role);
      return true;
    });
  } else {
    static_assert(std::is_same_v<Result, absl::Status>, "ForEachLinear: fn returns void or absl::Status");
    absl::Status status;
    WalkLinears(layer, [&fn, &status](auto& linear, DeviceLinearRole role) {
      status = fn(linear, role);
      return status.ok();
    });
    return status;
  }
}

}  // namespace device_layer_internal

template <typename Fn>
auto ForEachLinear(const DeviceLayer& layer, Fn&& fn) {
  return device_layer_internal::ForEachLinearOf(layer, fn);
}

template <typename Fn>
auto ForEachLinear(DeviceLayer& layer, Fn&& fn) {
  return device_layer_internal::ForEachLinearOf(layer, fn);
}

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_DEVICE_WEIGHTS_H_
