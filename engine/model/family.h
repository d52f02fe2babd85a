// Model families: what makes Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma, Qwen3.5 and the mixture-of-experts
// Mixtral, Qwen2-MoE, Qwen3-MoE, GLM-4.5, MiniMax-M2, DeepSeek-V3, GLM-4.7-Flash and gpt-oss checkpoints
// differ, as ONE table (family.cc, kFamilies) instead of architecture-string tests spread over the code.
//
// Who reads it:
//   - ParseModelConfig (config.cc) finds the family of config.json's `architectures`, checks `model_type`,
//     and turns the traits plus the config's own fields into ModelConfig's flags (attention_bias, qk_norm,
//     sliding_window, tie_word_embeddings, max_position_embeddings default, allowed rope_scaling types).
//   - PlanModel (layer_plan.h) turns those flags into the layer plan, which code past engine/model reads.
//   - The weight loader (weights_loader.cc) takes the tensor names of `names` and loads the optional tensors
//     the plan asks for (q/k/v bias, q_norm/k_norm, sandwich norms, experts; lm_head unless tied), and opens
//     the `checkpoint` files.
//   - The shard plan (shard_plan.cc) refuses tensor parallelism for a family whose blocks its Megatron
//     layout does not describe (`tensor_parallel`).
//   - The fingerprint (fingerprint.cc) hashes the family's `checkpoint` files.
//   - Both backends (engine/reference/reference_engine.cc, engine/cuda/upload_model.cc and forward/) decide
//     what a layer computes from the layer plan only, never from the architecture string or the flags.
// Adding a family: engine/README.md, "Adding a model family".
//
// Thread-safety: the table is immutable static data; every function here is thread-safe.
#ifndef SCORED_ENGINE_MODEL_FAMILY_H_
#define SCORED_ENGINE_MODEL_FAMILY_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace scored {

// RoPE frequency scaling (config.json rope_scaling / rope_parameters type).
enum class RopeType { kDefault, kLlama3, kLinear, kLongrope, kYarn, kProportional };

// Bit set of RopeType values (bit 1 << int(type)).
using RopeTypeSet = uint32_t;
constexpr RopeTypeSet RopeTypeBit(RopeType t) { return RopeTypeSet{1} << static_cast<int>(t); }
// What transformers' Llama-style rotary embeddings accept (ROPE_INIT_FUNCTIONS; "dynamic" is not exact per
// sequence and stays out). longrope is Phi-3's alone here.
constexpr RopeTypeSet kAllRopeTypes = RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLinear) |
                                      RopeTypeBit(RopeType::kLlama3) | RopeTypeBit(RopeType::kYarn);

// Where attention biases live in the family and what config.json's `attention_bias` means.
enum class AttentionBiasPolicy {
  // `attention_bias` (default false) puts a bias on q, k, v AND o_proj (transformers' LlamaAttention and the
  // attentions built like it: Llama, Qwen3, Qwen3-MoE, Gemma 2 / 3).
  kAllFourField,
  // The family's attention linears have no bias (bias=False in its modeling file); `attention_bias: true`
  // is rejected rather than ignored, since such a checkpoint's bias tensors would be silently unused
  // (Mistral, Mixtral, Phi-3).
  kNoneOrRejected,
  // q/k/v always carry a bias, o_proj never; `attention_bias` is ignored (Qwen2).
  kQkvAlways,
  // q/k/v carry a bias iff config.json's `qkv_bias` (default true), o_proj never; `attention_bias` is
  // ignored (Qwen2-MoE).
  kQkvBiasField,
  // q/k/v carry a bias iff `attention_bias` (default false), o_proj never (GLM-4.5: Glm4MoeAttention's
  // o_proj is bias=False whatever the field says).
  kQkvField,
};

// Where the family normalizes q and k (RMSNorm with a weight, before RoPE).
enum class QkNormPolicy {
  kNone,
  // Per head over head_dim, always (Qwen3, Qwen3-MoE, Gemma 3, Qwen3.5).
  kPerHead,
  // Per head over head_dim iff config.json's `use_qk_norm` (default false) (GLM-4.5: Glm4MoeAttention).
  kPerHeadField,
  // Over the WHOLE q projection (num_heads * head_dim wide) and the whole k projection (num_kv_heads *
  // head_dim), before the head reshape, always (MiniMax-M2: MiniMaxM2Attention.forward, q_norm(q_proj(x))).
  // The published config.json's remote-code fields must agree when present: use_qk_norm true, qk_norm_type
  // "per_layer".
  kWholeProjection,
};

// Whether config.json's partial_rotary_factor (top level, else in rope_parameters) is read, and what it is
// when absent. rotary_dim = int(head_dim * factor) (transformers' default RoPE).
struct PartialRotaryTraits {
  bool enabled;           // false: a factor other than 1 is refused
  double default_factor;  // the config class's default, when config.json gives none
  // MiniMax-M2's published config.json carries the remote code's `rotary_dim` (64 of head_dim 128) and no
  // partial_rotary_factor; transformers 5.17 reads only partial_rotary_factor (and the hub's converted
  // config has it). Read rotary_dim when no factor is given; both given must agree.
  bool rotary_dim_field;
};
inline constexpr PartialRotaryTraits kNoPartialRotary = {false, 1.0, false};

// How config.json describes sliding-window attention in the family.
enum class SlidingWindowPolicy {
  // `sliding_window` (positive, absent or null) applies to every layer. A window >= max_position_embeddings
  // is no window; a smaller one caps the engines' context (ModelConfig::sliding_window) (Mistral, Llama).
  kWindowField,
  // `use_sliding_window: true` turns a window on; that is rejected (no sliding-window attention is
  // implemented) and `sliding_window` is then ignored (Qwen2, Qwen3).
  kUseSlidingWindowFlag,
  // `sliding_window` (positive, absent or null) masks every layer as transformers' sliding-window causal
  // mask does (ModelConfig::layer_window; Phi-3). No context cap.
  kWindowFieldMasked,
  // Per-layer `layer_types` ("sliding_attention" / "full_attention"; absent: every `sliding_pattern`-th layer
  // full, the others sliding, Gemma 3's `sliding_window_pattern` overriding the family's) and the window
  // `sliding_window` of the sliding layers, masked as transformers does (ModelConfig::layer_window; Gemma).
  kLayerTypes,
};

// The Gemma 2 / Gemma 3 decoder block (FamilyTraits::gemma): RMSNorm with (1 + weight) everywhere, embeddings
// times sqrt(hidden_size), GeGLU with tanh GELU, norms before and after attention and MLP, scores scaled by
// query_pre_attn_scalar^-0.5, optional attention-logit and final-logit soft-capping.
struct GemmaTraits {
  bool enabled;
  int64_t sliding_pattern;       // kLayerTypes default: layer i full iff (i + 1) % sliding_pattern == 0
  double attn_softcap_default;   // attn_logit_softcapping when absent (0: none)
  double final_softcap_default;  // final_logit_softcapping when absent (0: none)
  // RoPE per layer type (Gemma 3): sliding layers rotate with rope_local_base_freq (default scaling), full
  // layers with rope_theta and the scaling; transformers 5's rope_parameters {"full_attention": {...},
  // "sliding_attention": {...}} also accepted.
  bool local_rope;
  // Gemma 4's block (transformers 5.17 models/gemma4, Gemma4TextDecoderLayer / Gemma4TextAttention) instead
  // of Gemma 2 / 3's: norms multiply by w (not 1 + w); the score scale is 1.0 (no query_pre_attn_scalar, no
  // attention soft-cap); q and k normalized per head with their weights and v per head without one; full
  // layers with their own head_dim and kv heads (per_layer_config, or global_head_dim /
  // num_global_key_value_heads) and, under attention_k_eq_v, no v_proj (v = k_proj's raw output, then its
  // norm); "proportional" RoPE on the full layers (config.h RopeScaling); every layer's output times its
  // stored layer_scalar. Per-layer embeddings, KV sharing and the MoE block are refused naming their fields.
  bool gemma4;
};
inline constexpr GemmaTraits kNotGemma = {false, 0, 0.0, 0.0, false, false};

// What the MLP block of a layer is.
enum class MoePolicy {
  // One SwiGLU MLP of intermediate_size per layer (Llama, Mistral, Qwen2, Qwen3).
  kNone,
  // Every layer is a mixture of `num_local_experts` SwiGLU experts of intermediate_size; the top-k
  // probabilities are always renormalized (Mixtral).
  kMixtral,
  // `num_experts` experts of moe_intermediate_size, renormalized iff `norm_topk_prob`; layer l is sparse iff
  // l is not in `mlp_only_layers` and (l + 1) % decoder_sparse_step == 0, the others are SwiGLU MLPs of
  // intermediate_size (Qwen2-MoE, Qwen3-MoE). shared_expert adds Qwen2-MoE's shared expert (a SwiGLU MLP of
  // shared_expert_intermediate_size) scaled by sigmoid(shared_expert_gate(x)).
  kQwenMoe,
  // Qwen3.5 / 3.6 MoE (Qwen3_5MoeSparseMoeBlock): every layer a mixture of `num_experts` experts of
  // moe_intermediate_size, the top k always renormalized (Qwen3_5MoeTopKRouter has no norm_topk_prob), plus
  // the gated shared expert.
  kQwen35Moe,
  // DeepSeek-V3's router family (transformers 5.17 deepseek_v3 DeepseekV3MoE / DeepseekV3TopkRouter.forward,
  // glm4_moe Glm4MoeMoE / Glm4MoeTopkRouter.forward: the same code): `n_routed_experts` experts of
  // moe_intermediate_size on the layers l >= `first_k_dense_replace` (or where `mlp_layer_types` says
  // "sparse"), the others SwiGLU MLPs of intermediate_size; the sigmoid router with e_score_correction_bias,
  // `n_group` groups of which `topk_group` are kept, `norm_topk_prob`, `routed_scaling_factor`
  // (ModelConfig's semantics); plus `n_shared_experts` UNGATED shared experts, one SwiGLU MLP of n_shared *
  // moe_intermediate_size added to the routed sum (GLM-4.5 / 4.6 / 4.7, DeepSeek-V3's MoE).
  kSigmoidGroupLimited,
  // MiniMax-M2 (minimax_m2 MiniMaxM2SparseMoeBlock / MiniMaxM2TopKRouter.forward): every layer a mixture of
  // `num_local_experts` experts of intermediate_size (Mixtral's experts), the sigmoid router with
  // e_score_correction_bias, no groups, always renormalized (a plain sum, no epsilon), no scaling, no shared
  // expert.
  kMiniMaxM2,
  // gpt-oss (gpt_oss GptOssMLP / GptOssTopKRouter.forward / GptOssExperts): every layer a mixture of
  // `num_local_experts` experts of intermediate_size; the router a linear WITH a bias, its top k logits
  // (exact ties: the lower id) softmaxed over those k; each expert's gate, up and down carry a bias and its
  // GLU is the clamped one of MlpActivation::kClampedSwiGlu (config.h). Stored fused, transposed and
  // interleaved (gate_up_proj [E, H, 2I]: gate = columns 0::2, up = 1::2) or as MXFP4 blocks
  // (gpt_oss_experts.h).
  kGptOss,
  // Gemma 4 26B-A4B (gemma4 Gemma4TextRouter / Gemma4TextExperts; parsed with the rest of GemmaTraits::gemma4
  // when enable_moe_block): `num_experts` GeGLU experts of moe_intermediate_size, fused gate_up_proj
  // [E, 2I, H] / down_proj [E, H, I] at the layer level ("experts."), beside the dense MLP.
  kGemma4,
};

// Per-layer tensor names of a mixture-of-experts block, relative to layer_prefix + "<layer index>.".
// Modules are names without ".weight", as in TensorNames.
struct MoeTensorNames {
  const char* router;  // module, [num_experts, hidden_size]: "mlp.gate"
  // Experts stored one module per expert: experts + "<e>." + expert_gate / expert_up / expert_down.
  const char* experts;      // "mlp.experts."
  const char* expert_gate;  // [moe_intermediate, hidden]: "gate_proj" (Mixtral "w1")
  const char* expert_up;    // [moe_intermediate, hidden]: "up_proj" (Mixtral "w3")
  const char* expert_down;  // [hidden, moe_intermediate]: "down_proj" (Mixtral "w2")
  // Other per-expert module names the family's checkpoints use, or nullptr: llm-compressor 0.14 writes a
  // quantized Mixtral's experts as "block_sparse_moe.experts.<e>.gate_proj" / "up_proj" / "down_proj".
  const char* expert_gate_alt;
  const char* expert_up_alt;
  const char* expert_down_alt;
  // Experts stored fused (transformers 5's in-memory layout, dense only): experts + fused_gate_up is one
  // tensor [num_experts, 2 * moe_intermediate, hidden] (gate rows, then up rows, per expert), experts +
  // fused_down one tensor [num_experts, hidden, moe_intermediate].
  const char* fused_gate_up;  // "gate_up_proj"
  const char* fused_down;     // "down_proj"
  // shared_expert families only.
  const char* shared_expert;  // prefix of its gate_proj / up_proj / down_proj: "mlp.shared_expert."
  // module, [1, hidden_size]: "mlp.shared_expert_gate"; nullptr where the shared experts are ungated
  // (kSigmoidGroupLimited: "mlp.shared_experts.").
  const char* shared_expert_gate;
  // The sigmoid routers' e_score_correction_bias tensor, [num_experts], or nullptr: "mlp.gate.
  // e_score_correction_bias" (DeepSeek-V3, GLM-4.5), "block_sparse_moe.e_score_correction_bias" (MiniMax-M2).
  const char* correction_bias;
  // Gemma 4 (ExpertsPlan::router_input_norm / per_expert_scale, ChannelMixerKind::kDenseAndExperts), else
  // nullptr: the router's input scale [hidden] ("router.scale") and per-expert weight scale [num_experts]
  // ("router.per_expert_scale"); the parallel block's norms [hidden] before the experts
  // ("pre_feedforward_layernorm_2.weight") and after the dense MLP / the experts
  // ("post_feedforward_layernorm_1.weight", "post_feedforward_layernorm_2.weight").
  const char* router_scale;
  const char* per_expert_scale;
  const char* experts_pre_norm;
  const char* dense_post_norm;
  const char* experts_post_norm;
};

struct MoeTraits {
  MoePolicy policy;
  bool shared_expert;  // kQwenMoe (gated), kSigmoidGroupLimited (ungated, n_shared_experts wide)
  MoeTensorNames names;
};

inline constexpr MoeTraits kNoMoe = {MoePolicy::kNone, false, {}};

// The safetensors files a checkpoint folder holds: one file, or shards listed by an index's weight_map.
struct CheckpointFiles {
  const char* single_file;  // "model.safetensors"
  const char* index_file;   // "model.safetensors.index.json"
};
inline constexpr CheckpointFiles kHfSafetensorsCheckpoint = {"model.safetensors",
                                                             "model.safetensors.index.json"};

// Tensor names of the checkpoint. Per-layer names are relative to layer_prefix + "<layer index>.".
// Linear modules are names without ".weight" (their tensors are module + ".weight", ".weight_scale", ...).
struct TensorNames {
  const char* embed_tokens;              // [vocab_size, hidden_size]
  const char* final_norm;                // [hidden_size]
  const char* lm_head;                   // module; absent when tied
  const char* layer_prefix;              // "model.layers."
  const char* input_layernorm;           // [hidden_size]
  const char* post_attention_layernorm;  // [hidden_size]
  const char* q_norm;                    // [head_dim], qk_norm families only
  const char* k_norm;                    // [head_dim], qk_norm families only
  const char* q_proj;
  const char* k_proj;
  const char* v_proj;
  const char* o_proj;
  const char* gate_proj;
  const char* up_proj;
  const char* down_proj;
  // Fused checkpoint modules, or nullptr: qkv_proj is [q rows; k rows; v rows] (replacing q/k/v_proj),
  // gate_up_proj [gate rows; up rows] (replacing gate/up_proj); the loader splits them into the separate
  // LinearWeights by rows (Phi-3).
  const char* qkv_proj;
  const char* gate_up_proj;
  // Gemma's norms around the MLP ([hidden_size]); nullptr in other families. In Gemma families
  // post_attention_layernorm normalizes the attention OUTPUT (before the residual add).
  const char* pre_feedforward_layernorm;
  const char* post_feedforward_layernorm;
};

// The HF Llama layout, shared by Llama, Mistral, Qwen2 and Qwen3.
inline constexpr TensorNames kLlamaTensorNames = {
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head",
    "model.layers.",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    /*qkv_proj=*/nullptr,
    /*gate_up_proj=*/nullptr,
    /*pre_feedforward_layernorm=*/nullptr,
    /*post_feedforward_layernorm=*/nullptr,
};

// Gemma 2 / Gemma 3 (text): the Llama names plus the norms around the MLP.
inline constexpr TensorNames kGemmaTensorNames = {
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head",
    "model.layers.",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    /*qkv_proj=*/nullptr,
    /*gate_up_proj=*/nullptr,
    /*pre_feedforward_layernorm=*/"pre_feedforward_layernorm.weight",
    /*post_feedforward_layernorm=*/"post_feedforward_layernorm.weight",
};

// Gemma3ForConditionalGeneration's language model as transformers 5 saves it ("model.language_model.*")
// and as transformers 4 did ("language_model.model.*").
inline constexpr TensorNames kGemma3VlmTensorNames = {
    "model.language_model.embed_tokens.weight",
    "model.language_model.norm.weight",
    "lm_head",
    "model.language_model.layers.",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    /*qkv_proj=*/nullptr,
    /*gate_up_proj=*/nullptr,
    /*pre_feedforward_layernorm=*/"pre_feedforward_layernorm.weight",
    /*post_feedforward_layernorm=*/"post_feedforward_layernorm.weight",
};
// Qwen3.5's vision-language checkpoints (Qwen3_5ForConditionalGeneration,
// Qwen3_5MoeForConditionalGeneration): the language model under model.language_model., named as in Gemma 3's
// (whose pre / post feed-forward norm names only sandwich-norm layers read).
inline constexpr TensorNames kQwen35VlmTensorNames = kGemma3VlmTensorNames;
inline constexpr TensorNames kGemma3VlmV4TensorNames = {
    "language_model.model.embed_tokens.weight",
    "language_model.model.norm.weight",
    "language_model.lm_head",
    "language_model.model.layers.",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    /*qkv_proj=*/nullptr,
    /*gate_up_proj=*/nullptr,
    /*pre_feedforward_layernorm=*/"pre_feedforward_layernorm.weight",
    /*post_feedforward_layernorm=*/"post_feedforward_layernorm.weight",
};

// Phi-3's layout: the Llama names with fused q/k/v and gate/up modules.
inline constexpr TensorNames kPhi3TensorNames = {
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head",
    "model.layers.",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    /*qkv_proj=*/"self_attn.qkv_proj",
    /*gate_up_proj=*/"mlp.gate_up_proj",
    /*pre_feedforward_layernorm=*/nullptr,
    /*post_feedforward_layernorm=*/nullptr,
};

// A multimodal checkpoint scored through its language model only (Gemma3ForConditionalGeneration): the
// config's `text_config` describes the model (the top level's other fields, e.g. quantization_config and
// torch_dtype, apply too), the other towers' tensors are not read.
struct TextOnlyTraits {
  bool enabled;
  // The other saved layout's names (transformers 4: "language_model.model.*"), used when the checkpoint
  // holds its embedding and not `names`' one; nullptr: none.
  const TensorNames* alt_names;
  // Prefixes of the tensors left unread (the vision tower and projector, in both layouts); nullptr-ended.
  const char* ignored_prefixes[5];
  // The layers stored past the last decoder layer, names.layer_prefix + "<l>." with l >= num_hidden_layers,
  // are the multi-token-prediction layers and are left unread (GLM-4.5's model.layers.92, DeepSeek-V3's
  // model.layers.61: transformers' _keys_to_ignore_on_load_unexpected).
  bool layers_past_the_last;
  // The model_types text_config may name, nullptr-ended; {nullptr}: any. A wrapper whose class takes several
  // language models reads only these (Mistral3ForConditionalGeneration: Mistral Large 3's deepseek_v3); a
  // text_config without a model_type, or with another, is refused naming it.
  const char* text_model_types[3];
};
inline constexpr TextOnlyTraits kNotTextOnly = {false, nullptr, {nullptr}, false, {nullptr}};

// Qwen3.5's hybrid layers (transformers 5.17 models/qwen3_5/modeling_qwen3_5.py). layer_types
// ("linear_attention" / "full_attention"; absent: every full_attention_interval-th layer, default 4, is full)
// picks each layer's token mixer:
//  - Gated DeltaNet (Qwen3_5GatedDeltaNet): in_proj_qkv -> [q (k_heads * dk) | k | v (v_heads * dv)], a
//  causal
//    depthwise conv1d over those channels (kernel linear_conv_kernel_dim, left zero padding, no bias) then
//    SiLU; q, k L2-normalized per head (x * rsqrt(sum x^2 + 1e-6)), q times dk^-0.5; beta = sigmoid(in_proj_b
//    x); g = -exp(A_log) * softplus(in_proj_a x + dt_bias); per v head (k head h / (v_heads / k_heads)) the
//    state S [dk, dv] starts at 0 and for each token S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q;
//    then o = w * rmsnorm(o) * silu(in_proj_z x) per v head (Qwen3_5RMSNormGated: a plain weight), out_proj.
//  - gated full attention (Qwen3_5Attention): ModelConfig::attention_output_gate, q / k norms, partial RoPE.
// Every other RMSNorm multiplies by (1 + w) (Qwen3_5RMSNorm: ModelConfig::gemma_norm's arithmetic).
struct LinearAttentionTraits {
  bool enabled;
  // Per-layer module names of the DeltaNet layers, relative to layer_prefix + "<layer index>.".
  const char* in_proj_qkv;  // [2 k_heads dk + v_heads dv, hidden]
  const char* in_proj_z;    // [v_heads dv, hidden]
  const char* in_proj_b;    // [v_heads, hidden]
  const char* in_proj_a;    // [v_heads, hidden]
  const char* out_proj;     // [hidden, v_heads dv]
  const char* conv1d;       // tensor [2 k_heads dk + v_heads dv, 1, kernel]
  const char* a_log;        // tensor [v_heads]
  const char* dt_bias;      // tensor [v_heads]
  const char* norm;         // tensor [dv]
  // Qwen3-Next's fused projections instead of the four above (nullptr: none), their rows grouped per k head g
  // (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering), r = v_heads / k_heads:
  //   in_proj_qkvz [k_heads (2 dk + 2 r dv), hidden]: per g, q_g (dk), k_g (dk), v of its r v heads, z of
  //   them in_proj_ba   [k_heads 2 r, hidden]:             per g, b of its r v heads, a of them
  const char* in_proj_qkvz;
  const char* in_proj_ba;
};
inline constexpr LinearAttentionTraits kNoLinearAttention = {
    false, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};

// DeepSeek-V3's multi-head latent attention (transformers 5.17 models/deepseek_v3/modeling_deepseek_v3.py
// DeepseekV3Attention.forward; glm4_moe_lite's Glm4MoeLiteAttention is the same code), per token x:
//   q = q_b_proj(RMSNorm_qa(q_a_proj(x))), or q_proj(x) without q_lora_rank; per head [q_nope | q_rope]
//   (qk_nope_head_dim, qk_rope_head_dim)
//   kv_a_proj_with_mqa(x) = [c (kv_lora_rank) | k_rope (qk_rope_head_dim, ONE key shared by every head)]
//   kv_b_proj(RMSNorm_kva(c)) per head = [k_nope | v] (qk_nope_head_dim, v_head_dim)
//   RoPE on q_rope and k_rope (interleaved pairs (2i, 2i + 1) with rope_interleave, default true; else
//   rotate_half within the rope part), then per head q = [q_nope | q_rope], k = [k_nope | k_rope]
//   causal softmax attention with scale qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 when the
//   RoPE type is not default and rope_parameters' mscale_all_dim is non-zero (yarn_get_mscale: 0.1 m ln(f) +
//   1, 1 when f <= 1); the output [num_heads * v_head_dim] through o_proj.
// Biases: attention_bias puts one on q_a_proj (with q_lora_rank), kv_a_proj_with_mqa and o_proj; q_proj,
// q_b_proj and kv_b_proj never have one. The two latent RMSNorms use eps 1e-6 whatever rms_norm_eps says
// (DeepseekV3RMSNorm's default: the attention builds them without it). num_key_value_heads must equal
// num_attention_heads (every head has its own k_nope and v); head_dim is qk_rope_head_dim (the config
// classes set it so: the RoPE's width).
struct LatentAttentionTraits {
  bool enabled;
  // Per-layer names relative to layer_prefix + "<layer index>."; q_proj (no q_lora_rank) and o_proj are
  // TensorNames'.
  const char* q_a_proj;        // module [q_lora_rank, hidden]
  const char* q_a_layernorm;   // tensor [q_lora_rank]
  const char* q_b_proj;        // module [num_heads * (qk_nope_head_dim + qk_rope_head_dim), q_lora_rank]
  const char* kv_a_proj;       // module [kv_lora_rank + qk_rope_head_dim, hidden]: "kv_a_proj_with_mqa"
  const char* kv_a_layernorm;  // tensor [kv_lora_rank]
  const char* kv_b_proj;       // module [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  // DeepSeek Sparse Attention (DeepSeek-V3.2's DeepseekV32Indexer, GLM-5's GlmMoeDsaIndexer): the per-layer
  // indexer's prefix ("self_attn.indexer."), or nullptr. The indexer keeps min(index_topk, T) keys per query,
  // so a window of up to index_topk + 1 ids (the last only a target) is exactly the dense MLA above; its
  // tensors are not read, longer windows are refused naming index_topk (config.h ServedContextLength), the
  // RoPE pairs are interleaved whatever rope_interleave says (both attentions call
  // apply_rotary_pos_emb_interleave) and q_lora_rank is required (their forward always runs q_a_proj).
  const char* indexer;
};
inline constexpr LatentAttentionTraits kNoLatentAttention = {false,   nullptr, nullptr, nullptr,
                                                             nullptr, nullptr, nullptr, nullptr};

struct FamilyTraits {
  const char* architecture;  // config.json "architectures"[0], e.g. "LlamaForCausalLM"
  const char* model_type;    // config.json "model_type" (also its default), e.g. "llama"
  // max_position_embeddings when config.json omits it: the transformers config class default.
  int64_t default_max_position_embeddings;
  AttentionBiasPolicy attention_bias;
  QkNormPolicy qk_norm;              // RMSNorm of q and k before RoPE (Qwen3: per head)
  RopeTypeSet rope_scalings;         // rope_scaling types config.json may ask for
  bool tie_word_embeddings_default;  // when config.json omits tie_word_embeddings
  SlidingWindowPolicy sliding_window;
  // Whether config.json's partial_rotary_factor is read (Phi-3, Qwen3.5, GLM-4.5, MiniMax-M2) and its
  // default; other families refuse a value other than 1.
  PartialRotaryTraits partial_rotary;
  GemmaTraits gemma;
  // Defaults of the transformers config class for fields ParseModelConfig otherwise requires or defaults
  // differently (JSON object text, merged under absent keys), or nullptr. Gemma's published configs leave
  // e.g. num_key_value_heads and head_dim to them.
  const char* config_defaults;
  TextOnlyTraits text_only;
  // Whether shard_plan.h's Megatron layout (column-parallel q/k/v/gate/up, row-parallel o/down, replicated
  // norms; every expert split like the MLP, routers replicated) describes every block of the family; false
  // refuses --tp > 1 with UNIMPLEMENTED.
  bool tensor_parallel;
  TensorNames names;
  CheckpointFiles checkpoint;
  MoeTraits moe;  // kNoMoe for dense families
  LinearAttentionTraits linear_attention;
  LatentAttentionTraits latent_attention;  // kNoLatentAttention: the token mixer is not MLA
  // Attention sinks (gpt-oss: GptOssAttention.sinks, eager_attention_forward): the per-layer tensor
  // [num_heads] relative to layer_prefix + "<layer index>.", or nullptr. Head h's softmax takes the learned
  // logit s_h as one more column (the max over the scores and s_h, the denominator with exp(s_h - max)),
  // which is then dropped: it takes probability mass and adds no value. Never quantized (F32 / F16 / BF16).
  const char* attention_sinks;
};

// The family whose `architecture` is `architecture`, or nullptr when unsupported.
const FamilyTraits* FindFamily(std::string_view architecture);

// "LlamaForCausalLM, MistralForCausalLM, ..." in table order, for error messages.
std::string SupportedArchitectures();

// Every family of the table, in table order.
struct FamilyList {
  const FamilyTraits* begin;
  const FamilyTraits* end;
};
FamilyList AllFamilies();

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_FAMILY_H_
