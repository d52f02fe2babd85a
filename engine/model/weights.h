// Model weights as stored on disk: config, tensors (mmapped safetensors, zero-copy) and, per linear
// layer, the compressed-tensors format its tensors are in. Decoding to real values is exact
// (DESIGN.md §6): DequantizeRows() gives bit for bit what compressed-tensors' own decompression gives.
//
// Ownership: ModelWeights owns the mmaps (and the dense weights it decompressed from 2:4 sparse storage);
// every TensorView and LinearWeight points into them and lives as long as the ModelWeights. Thread-safety:
// immutable after Load(); all const methods are thread-safe.
#ifndef SCORED_ENGINE_MODEL_WEIGHTS_H_
#define SCORED_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/base/stored_weight.h"
#include "engine/model/config.h"
#include "engine/model/layer_plan.h"
#include "engine/model/safetensors.h"

namespace scored {

// Which linear of a decoder layer (or the lm_head) a weight is: names the tensor, for the shard plan
// (ShardPlan::ForLinear) and every walk over a layer's linears (ForEachLinear).
enum class LinearRole {
  kQ,
  kK,
  kV,
  kO,
  kGate,
  kUp,
  kDown,
  kLmHead,
  // Mixture-of-experts layers (weights.h MoeWeights): every expert, the shared expert, and the two gates.
  kRouter,
  kExpertGate,
  kExpertUp,
  kExpertDown,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,
  // Gated DeltaNet layers (LayerWeights::delta_net): in_proj_qkv (Qwen3-Next: in_proj_qkvz), in_proj_z,
  // in_proj_b (in_proj_ba), in_proj_a, out_proj.
  kDeltaQkv,
  kDeltaZ,
  kDeltaB,
  kDeltaA,
  kDeltaOut,
  // Multi-head latent attention layers (LayerWeights::latent): q_a_proj, q_b_proj, kv_a_proj_with_mqa,
  // kv_b_proj; their q_proj (without q_lora_rank) and o_proj are kQ and kO.
  kLatentQA,
  kLatentQB,
  kLatentKvA,
  kLatentKvB,
};

// One linear layer's stored tensors and format (engine/base/stored_weight.h) plus their exact decoding.
// One online transform of a linear (transform_config, engine/model/transform_config.h) with its stored
// matrix: x -> fp32((double(x) . T) / sqrt(n)) (T^T when inverse) on the input before the product, or on the
// output after it, per block of n = matrix rows elements (head_dim blocks, or the whole row).
struct LinearTransform {
  bool output = false;  // false: the input
  bool inverse = false;
  TensorView matrix;  // F64 or F32 [n, n], n divides the row's width
};

struct LinearWeight : StoredLinear {
  std::vector<LinearTransform> transforms;  // inputs first, then outputs: the order they apply in
  // Decodes rows [row_begin, row_end) of W into out[(row - row_begin) * in_features + k], fp32.
  // Values are exactly compressed-tensors' decompression (DESIGN.md §6): for pack/naive/float-quantized
  // the product (q - zp) * scale, which is exact in fp32 (= its decompression with float32 parameters;
  // rounding it RNE to the scale's dtype bf16/fp16 gives exactly its decompression in that dtype); for
  // nvfp4 the product rounded to bf16 (compressed-tensors always decompresses NVFP4 to bf16); for mxfp4
  // E2M1 x 2^(e - 127), exact in fp32 and in the bf16 it decompresses to. Dense weights (also those
  // decompressed from sparse-24-bitmask at load) are widened exactly. OUT_OF_RANGE for a bad row range.
  // Thread-safe.
  absl::Status DequantizeRows(int64_t row_begin, int64_t row_end, float* out) const;

  // Bytes of every stored tensor of this weight (values, scales, zero points, g_idx; not bias).
  int64_t StoredBytes() const;
  // out_features * in_features.
  int64_t NumElements() const { return out_features * in_features; }
};

// One SwiGLU expert of a mixture-of-experts layer: y = down(silu(gate(x)) * up(x)).
struct ExpertWeights {
  LinearWeight gate_proj, up_proj;  // [moe_intermediate_size, hidden_size]
  LinearWeight down_proj;           // [hidden_size, moe_intermediate_size]
};

// The mixture-of-experts block of a sparse layer (ModelConfig::IsSparseLayer; semantics in config.h).
//
// Contract for a consumer (the CPU reference; a GPU upload): every expert is an ordinary LinearWeight, in
// whatever compressed-tensors format the checkpoint gave it (the targets / ignore logic resolved it by its
// module name, e.g. "model.layers.0.mlp.experts.3.gate_proj"), experts[e] being expert id e. Two storage
// layouts are recognised by name (family.h MoeTensorNames), both ending here in the same form:
//   - one module per expert (`<experts>.<e>.gate_proj.weight[_packed]`, Mixtral `w1`/`w3`/`w2`): what
//     transformers' save_pretrained and llm-compressor write; any format.
//   - fused tensors `<experts>.gate_up_proj` [E, 2I, H] and `<experts>.down_proj` [E, H, I] (transformers 5's
//     in-memory layout), dense F32/F16/BF16 only: each expert's gate_proj / up_proj / down_proj is then a
//     kDense view (rows [0, I) and [I, 2I) of slice e, and slice e) into those tensors, `fused` true.
// Any other layout fails at load naming a tensor. The router is always kDense (F32/F16/BF16 [E, H]): a
// router stored quantized is refused at load, because the routing must come from fp32 logits of the
// stored weights. shared_expert_gate may be in any format (llm-compressor's recipes leave it dense).
// Values: DequantizeRows of an expert is the exact fp32 decode like any linear's; the CPU oracle then rounds
// a QUANTIZED expert's values to its scale dtype (BF16 / F16; reference_engine.cc, Decode's
// round_to_scale_dtype), which is what transformers 5.17 computes with. A GPU fp32 mode must do the same
// to match the oracle; a bf16 mode gets it from its own rounding.
// gpt-oss (MoePolicy::kGptOss): its fused, transposed and interleaved dense tensors become transposed
// kDense copies per expert (gpt_oss_experts.h), its MXFP4 blocks kMxfp4PackQuantized views
// (gpt_oss_mxfp4.h); ExpertsPlan::expert_bias puts its biases on every expert's three linears.
// ExpertsPlan::correction_bias (DeepSeek-V3's router): e_score_correction_bias is never quantized either
// (F32 / F16 / BF16, finite; refused naming the tensor otherwise).
struct MoeWeights {
  LinearWeight router;         // [num_experts, hidden_size], kDense; bias [E] iff ExpertsPlan::router_bias
  TensorView correction_bias;  // [num_experts] (ExpertsPlan::correction_bias), else data == nullptr
  // ExpertsPlan::router_input_norm / per_expert_scale (Gemma 4), else data == nullptr: F32 / F16 / BF16.
  TensorView router_scale;             // [hidden_size]
  TensorView per_expert_scale;         // [num_experts]
  std::vector<ExpertWeights> experts;  // [num_experts]
  bool fused = false;                  // experts are views into the fused tensors
  // ExpertsPlan::shared_expert() only (Qwen2-MoE, DeepSeek-V3), else empty (module "", no tensors):
  ExpertWeights shared_expert;  // [shared_expert_intermediate_size, hidden_size], ...
  // ExpertsPlan::shared_expert_gated only (Qwen2-MoE), else empty:
  LinearWeight shared_expert_gate;  // [1, hidden_size]
};

// A Gated DeltaNet layer's tensors (family.h LinearAttentionTraits, shapes from DeltaNetPlan).
struct DeltaNetWeights {
  // Qwen3.5: four projections. Qwen3-Next (fused): in_proj_qkvz / in_proj_ba instead, rows grouped per k head
  // (family.h LinearAttentionTraits), the other four empty (module "", no tensors).
  bool fused = false;
  LinearWeight in_proj_qkv;   // [conv_dim, hidden]
  LinearWeight in_proj_z;     // [value_dim, hidden]
  LinearWeight in_proj_b;     // [num_v_heads, hidden]
  LinearWeight in_proj_a;     // [num_v_heads, hidden]
  LinearWeight in_proj_qkvz;  // fused: [conv_dim + value_dim, hidden]
  LinearWeight in_proj_ba;    // fused: [2 num_v_heads, hidden]
  LinearWeight out_proj;      // [hidden, value_dim]
  // Never quantized (a checkpoint storing them otherwise is refused, naming the tensor): F32 / F16 / BF16.
  TensorView conv1d;   // [conv_dim, 1, conv_kernel]
  TensorView a_log;    // [num_v_heads]
  TensorView dt_bias;  // [num_v_heads]
  TensorView norm;     // [v_head_dim], the gated output norm's (plain) weight
};

// A multi-head latent attention layer's own tensors (family.h LatentAttentionTraits, shapes from
// LatentAttentionPlan); its q_proj (without q_lora_rank) and o_proj are LayerWeights'. Linears in any
// compressed-tensors format; the two norms F32 / F16 / BF16. Biases as LatentAttentionPlan::a_bias says.
struct LatentAttentionWeights {
  LinearWeight q_a_proj;      // [q_lora_rank, hidden]; empty (module "", no tensors) without q_lora_rank
  TensorView q_a_layernorm;   // [q_lora_rank]; data == nullptr without q_lora_rank
  LinearWeight q_b_proj;      // [num_heads * qk_head_dim, q_lora_rank]; empty without q_lora_rank
  LinearWeight kv_a_proj;     // [kv_lora_rank + qk_rope_head_dim, hidden] (kv_a_proj_with_mqa)
  TensorView kv_a_layernorm;  // [kv_lora_rank]
  LinearWeight kv_b_proj;     // [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
};

struct LayerWeights {
  TensorView input_layernorm;           // [hidden_size]
  TensorView post_attention_layernorm;  // [hidden_size]; Gemma: on the attention output
  // config.sandwich_norms (Gemma) only: before and after the MLP, [hidden_size]; else data == nullptr.
  TensorView pre_feedforward_layernorm, post_feedforward_layernorm;
  // ChannelMixerKind::kDenseAndExperts (Gemma 4's MoE layers) only, [hidden_size]: before the experts and
  // after the dense MLP / the experts (family.h MoeTensorNames); else data == nullptr.
  TensorView experts_pre_norm, dense_post_norm, experts_post_norm;
  TensorView q_norm, k_norm;  // config.qk_norm only: [head_dim]; else data == nullptr
  // Attention layers: [num_heads*head_dim | num_kv_heads*head_dim, hidden] (q_proj 2 num_heads*head_dim rows
  // under AttentionPlan::output_gate); Gated DeltaNet layers: empty (module "", no tensors), `delta_net`
  // instead.
  LinearWeight q_proj, k_proj, v_proj, o_proj;
  // AttentionPlan::sinks only (gpt-oss): each head's learned sink logit, F32 / F16 / BF16 [num_heads]; else
  // data == nullptr.
  TensorView sinks;
  // AttentionPlan::k_eq_v (Gemma 4's full layers): no v_proj is stored (v_proj empty: module "", no tensors),
  // v is k_proj's output.
  bool k_eq_v = false;
  // LayerPlan::layer_scalar (Gemma 4): F32 / F16 / BF16 [1], the layer output's factor; else data == nullptr.
  TensorView layer_scalar;
  bool linear_attention = false;  // LayerPlan::delta_net_mixer
  DeltaNetWeights delta_net;      // linear_attention layers only
  // LayerPlan::latent_attention_mixer: `latent`, q_proj only without q_lora_rank ([num_heads * qk_head_dim,
  // hidden]), o_proj [hidden, num_heads * v_head_dim]; k_proj / v_proj empty.
  bool latent_attention = false;
  LatentAttentionWeights latent;
  // Dense layers only ([intermediate, hidden], [hidden, intermediate]); in sparse layers empty (module "",
  // no tensors) and `moe` holds the block instead.
  LinearWeight gate_proj, up_proj, down_proj;
  bool sparse = false;  // ModelConfig::IsSparseLayer
  // A sparse layer that also has the dense MLP (gate_proj / up_proj / down_proj above) in parallel with its
  // experts (ChannelMixerKind::kDenseAndExperts: Gemma 4).
  bool parallel_dense = false;
  MoeWeights moe;  // sparse layers only
  // kv_cache_fp8 checkpoints only (else data == nullptr): self_attn.k_scale / v_scale, F32/BF16/F16 [1],
  // finite and > 0 (checked at load).
  TensorView k_scale, v_scale;
};

// Every linear of layer L present, with its role, in this fixed order: q, k, v, o (a Gated DeltaNet layer:
// in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj instead; a latent attention layer: q_a, q_b (or q),
// kv_a, kv_b, o); then a dense layer's
// gate, up, down, or a sparse layer's router, every expert's gate, up, down (expert 0 first) and, with a
// shared expert, its gate, up, down and (gated: Qwen2-MoE) the shared-expert gate. The one enumeration of a
// layer's linears: the loader's checks, the summary, the shard check and the oracle's decode walk it.
// `fn(const LinearWeight&, LinearRole)`.
template <typename Fn>
void ForEachLinear(const LayerWeights& L, Fn&& fn) {
  if (L.linear_attention && L.delta_net.fused) {
    fn(L.delta_net.in_proj_qkvz, LinearRole::kDeltaQkv);
    fn(L.delta_net.in_proj_ba, LinearRole::kDeltaB);
    fn(L.delta_net.out_proj, LinearRole::kDeltaOut);
  } else if (L.linear_attention) {
    fn(L.delta_net.in_proj_qkv, LinearRole::kDeltaQkv);
    fn(L.delta_net.in_proj_z, LinearRole::kDeltaZ);
    fn(L.delta_net.in_proj_b, LinearRole::kDeltaB);
    fn(L.delta_net.in_proj_a, LinearRole::kDeltaA);
    fn(L.delta_net.out_proj, LinearRole::kDeltaOut);
  } else if (L.latent_attention) {
    if (L.latent.q_a_proj.module.empty()) {
      fn(L.q_proj, LinearRole::kQ);
    } else {
      fn(L.latent.q_a_proj, LinearRole::kLatentQA);
      fn(L.latent.q_b_proj, LinearRole::kLatentQB);
    }
    fn(L.latent.kv_a_proj, LinearRole::kLatentKvA);
    fn(L.latent.kv_b_proj, LinearRole::kLatentKvB);
    fn(L.o_proj, LinearRole::kO);
  } else {
    fn(L.q_proj, LinearRole::kQ);
    fn(L.k_proj, LinearRole::kK);
    if (!L.k_eq_v) fn(L.v_proj, LinearRole::kV);
    fn(L.o_proj, LinearRole::kO);
  }
  if (!L.sparse || L.parallel_dense) {
    fn(L.gate_proj, LinearRole::kGate);
    fn(L.up_proj, LinearRole::kUp);
    fn(L.down_proj, LinearRole::kDown);
  }
  if (!L.sparse) return;
  fn(L.moe.router, LinearRole::kRouter);
  for (const ExpertWeights& e : L.moe.experts) {
    fn(e.gate_proj, LinearRole::kExpertGate);
    fn(e.up_proj, LinearRole::kExpertUp);
    fn(e.down_proj, LinearRole::kExpertDown);
  }
  if (L.moe.shared_expert.gate_proj.module.empty()) return;
  fn(L.moe.shared_expert.gate_proj, LinearRole::kSharedGate);
  fn(L.moe.shared_expert.up_proj, LinearRole::kSharedUp);
  fn(L.moe.shared_expert.down_proj, LinearRole::kSharedDown);
  if (L.moe.shared_expert_gate.module.empty()) return;  // ungated shared experts (DeepSeek-V3)
  fn(L.moe.shared_expert_gate, LinearRole::kSharedExpertGate);
}

// Routers and the shared-expert gate: kept dense by every MoE recipe, so not counted in the format.
inline bool IsGateRole(LinearRole r) {
  return r == LinearRole::kRouter || r == LinearRole::kSharedExpertGate;
}

struct ModelSummary {
  int64_t num_parameters = 0;  // logical (unpacked) count, embeddings and norms included
  int64_t decoder_linear_params = 0;
  double bits_per_weight_decoder = 0.0;  // 8 * stored bytes of decoder linears / decoder_linear_params
  double bits_per_weight_head = 0.0;     // same for lm_head (tied: the embedding's)
  int64_t resident_bytes = 0;            // all stored tensor bytes the engine keeps
  // Every decoder linear counts (experts included) but routers and shared-expert gates, which are kept
  // dense by every MoE recipe: counted in num_parameters and resident_bytes, not in the format.
  std::string format;            // short name, e.g. "w4a16-g128-sym", "nvfp4a16", "fp8-w8a8", "dense-f32"
  std::string notes;             // e.g. "W4A4 checkpoint run weight-only (NVFP4A16)"
  std::string ToString() const;  // multi-line human summary for the startup log
};

class ModelWeights {
 public:
  // Loads config.json and the safetensors file(s) of `model_dir` (single file or sharded index), resolves
  // every module's format. Errors name the file and tensor (missing, wrong shape/dtype, truncated; a NaN or
  // infinity in a quantization scale, an nvfp4 global scale (or one that is 0), a norm weight or a bias,
  // with its index; an mxfp4 E8M0 scale of 255; a sparse-24-bitmask weight whose shape / compressed /
  // bitmask disagree), or the unsupported config/quantization feature. sparse-24-bitmask weights are
  // decompressed here, into buffers this object owns. Dense and quantized weight values are
  // not scanned for NaN (a pass over the whole checkpoint).
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir);

  const ModelConfig& config() const { return config_; }
  // The structure of every layer (layer_plan.h), planned once from config() at load.
  const ModelPlan& plan() const { return plan_; }
  const TensorView& embed_tokens() const { return embed_tokens_; }  // [vocab_size, hidden_size]
  const TensorView& final_norm() const { return final_norm_; }      // [hidden_size]
  // lm_head; for tied embeddings a kDense LinearWeight over embed_tokens.
  const LinearWeight& lm_head() const { return lm_head_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const ModelSummary& summary() const { return summary_; }
  // The checkpoint's kv_cache_scheme is static per-tensor FP8 (CompressedTensorsConfig::kv_cache_fp8): every
  // layer has k_scale / v_scale.
  bool kv_cache_fp8() const { return kv_cache_fp8_; }
  // The format an engine reports: summary().format, plus "+kv-fp8" when the FP8 KV cache is applied or
  // "+kv-fp8-ignored" when the checkpoint has one and `kv_cache_quant` is false (EngineOptions).
  std::string EngineFormat(bool kv_cache_quant) const;
  const TensorStore& store() const { return *store_; }

 private:
  ModelWeights() = default;
  friend class ModelWeightsLoader;

  ModelConfig config_;
  ModelPlan plan_;
  std::unique_ptr<TensorStore> store_;
  // Tensors transcoded at load from other toolkits' layouts (toolkit_quant.h); views point into them.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> transcoded_;
  TensorView embed_tokens_;
  TensorView final_norm_;
  LinearWeight lm_head_;
  std::vector<LayerWeights> layers_;
  ModelSummary summary_;
  bool kv_cache_fp8_ = false;
  // Weights decompressed at load (sparse-24-bitmask): their TensorViews point here. A list, so that no
  // buffer ever moves.
  std::list<std::vector<uint8_t>> decompressed_;
};

// Converts an F32/F16/BF16 tensor to fp32 (exact widening). INVALID_ARGUMENT for other dtypes or
// when out_size != element count.
absl::Status TensorToFloat(const TensorView& t, float* out, int64_t out_size);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_WEIGHTS_H_
