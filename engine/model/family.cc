// The model family table (contract: family.h).
#include "engine/model/family.h"

#include <iterator>

namespace scored {
namespace {

// Qwen2-MoE / Qwen3-MoE expert tensors (transformers' save_pretrained and llm-compressor write one module per
// expert).
constexpr MoeTensorNames kQwenMoeNames = {
    /*router=*/"mlp.gate",
    /*experts=*/"mlp.experts.",
    /*expert_gate=*/"gate_proj",
    /*expert_up=*/"up_proj",
    /*expert_down=*/"down_proj",
    /*expert_gate_alt=*/nullptr,
    /*expert_up_alt=*/nullptr,
    /*expert_down_alt=*/nullptr,
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/"mlp.shared_expert.",
    /*shared_expert_gate=*/"mlp.shared_expert_gate",
    /*correction_bias=*/nullptr,
    /*router_scale=*/nullptr,
    /*per_expert_scale=*/nullptr,
    /*experts_pre_norm=*/nullptr,
    /*dense_post_norm=*/nullptr,
    /*experts_post_norm=*/nullptr,
};

// Mixtral's original layout (w1 = gate, w3 = up, w2 = down), which transformers 5 still saves; quantized by
// llm-compressor 0.14 its experts are named gate_proj / up_proj / down_proj under the same prefix.
constexpr MoeTensorNames kMixtralNames = {
    /*router=*/"block_sparse_moe.gate",
    /*experts=*/"block_sparse_moe.experts.",
    /*expert_gate=*/"w1",
    /*expert_up=*/"w3",
    /*expert_down=*/"w2",
    /*expert_gate_alt=*/"gate_proj",
    /*expert_up_alt=*/"up_proj",
    /*expert_down_alt=*/"down_proj",
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/nullptr,
    /*shared_expert_gate=*/nullptr,
    /*correction_bias=*/nullptr,
    /*router_scale=*/nullptr,
    /*per_expert_scale=*/nullptr,
    /*experts_pre_norm=*/nullptr,
    /*dense_post_norm=*/nullptr,
    /*experts_post_norm=*/nullptr,
};

// transformers' Gemma2Config / Gemma3TextConfig defaults of the shape fields.
constexpr char kGemma2Defaults[] =
    R"({"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6})";
constexpr char kGemma3TextDefaults[] =
    R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6})";

// Gemma4TextConfig's defaults (transformers 5.17 configuration_gemma4.py): hidden_size_per_layer_input 256 is
// its default (per-layer embeddings, refused), so a file without the field is an E2B / E4B-style model; the
// RoPE of each layer type when config.json gives no rope_parameters.
constexpr char kGemma4TextDefaults[] =
    R"({"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
        "sliding_window": 512, "hidden_size_per_layer_input": 256,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                               "rope_theta": 1000000.0}}})";

// Qwen3_5TextConfig's defaults for what published files may leave out (its partial_rotary_factor default,
// 0.25, is ParseLinearAttention's: the field may sit in rope_parameters).
constexpr char kQwen35TextDefaults[] =
    R"({"vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32})";

// Qwen3_5MoeTextConfig's defaults. It has no intermediate_size: every layer is sparse, so the dense MLP width
// ParseModelConfig reads is never used (1 here).
constexpr char kQwen35MoeTextDefaults[] =
    R"({"vocab_size": 248320, "hidden_size": 2048, "intermediate_size": 1, "num_hidden_layers": 40,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "rms_norm_eps": 1e-6,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256})";

// Qwen3.5's multi-token-prediction layers (`mtp.*`) are not part of the scored forward; the vision-language
// checkpoints' vision tower neither.
constexpr TextOnlyTraits kQwen35TextOnly = {false, nullptr, {"mtp.", nullptr}, false, {nullptr}};
constexpr TextOnlyTraits kQwen35VlmTextOnly = {
    true, nullptr, {"model.visual.", "mtp.", nullptr}, false, {nullptr}};

// Phi3Config reads partial_rotary_factor (default 1); Qwen3_5TextConfig's default is 0.25 (the field may sit
// in rope_parameters).
constexpr PartialRotaryTraits kPhi3PartialRotary = {true, 1.0, false};
constexpr PartialRotaryTraits kQwen35PartialRotary = {true, 0.25, false};

constexpr LinearAttentionTraits kQwen35LinearAttention = {
    true,
    "linear_attn.in_proj_qkv",
    "linear_attn.in_proj_z",
    "linear_attn.in_proj_b",
    "linear_attn.in_proj_a",
    "linear_attn.out_proj",
    "linear_attn.conv1d.weight",
    "linear_attn.A_log",
    "linear_attn.dt_bias",
    "linear_attn.norm.weight",
    /*in_proj_qkvz=*/nullptr,
    /*in_proj_ba=*/nullptr,
};

constexpr LinearAttentionTraits kQwen3NextLinearAttention = {
    true,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    "linear_attn.out_proj",
    "linear_attn.conv1d.weight",
    "linear_attn.A_log",
    "linear_attn.dt_bias",
    "linear_attn.norm.weight",
    "linear_attn.in_proj_qkvz",
    "linear_attn.in_proj_ba",
};

// DeepSeek-V3's router family as GLM-4.5 stores it (transformers 5.17's save_pretrained and llm-compressor
// write one module per expert; the shared experts are one ungated MLP, "shared_experts" in the plural).
constexpr MoeTensorNames kDeepseekV3MoeNames = {
    /*router=*/"mlp.gate",
    /*experts=*/"mlp.experts.",
    /*expert_gate=*/"gate_proj",
    /*expert_up=*/"up_proj",
    /*expert_down=*/"down_proj",
    /*expert_gate_alt=*/nullptr,
    /*expert_up_alt=*/nullptr,
    /*expert_down_alt=*/nullptr,
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/"mlp.shared_experts.",
    /*shared_expert_gate=*/nullptr,
    /*correction_bias=*/"mlp.gate.e_score_correction_bias",
    /*router_scale=*/nullptr,
    /*per_expert_scale=*/nullptr,
    /*experts_pre_norm=*/nullptr,
    /*dense_post_norm=*/nullptr,
    /*experts_post_norm=*/nullptr,
};

// MiniMax-M2: Mixtral's names (w1 / w3 / w2, or gate_proj / up_proj / down_proj as llm-compressor writes
// them), the correction bias a buffer of the sparse block (transformers 5.17's conversion_mapping renames it
// to mlp.e_score_correction_bias in memory and back on save).
constexpr MoeTensorNames kMiniMaxM2MoeNames = {
    /*router=*/"block_sparse_moe.gate",
    /*experts=*/"block_sparse_moe.experts.",
    /*expert_gate=*/"w1",
    /*expert_up=*/"w3",
    /*expert_down=*/"w2",
    /*expert_gate_alt=*/"gate_proj",
    /*expert_up_alt=*/"up_proj",
    /*expert_down_alt=*/"down_proj",
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/nullptr,
    /*shared_expert_gate=*/nullptr,
    /*correction_bias=*/"block_sparse_moe.e_score_correction_bias",
    /*router_scale=*/nullptr,
    /*per_expert_scale=*/nullptr,
    /*experts_pre_norm=*/nullptr,
    /*dense_post_norm=*/nullptr,
    /*experts_post_norm=*/nullptr,
};

// Glm4MoeConfig's defaults (transformers 5.17 configuration_glm4_moe.py; its partial_rotary_factor default,
// 0.5, is kGlm4MoePartialRotary). Not the expert count (n_routed_experts, 128), which config.json may give as
// its alias num_local_experts: a default here would contradict it.
constexpr char kGlm4MoeDefaults[] =
    R"({"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
        "num_attention_heads": 96, "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "moe_intermediate_size": 1408,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "routed_scaling_factor": 1.0,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": true})";
constexpr PartialRotaryTraits kGlm4MoePartialRotary = {true, 0.5, false};

// MiniMaxM2Config's defaults (configuration_minimax_m2.py): head_dim 128 whatever hidden_size / heads is. Not
// the expert count (num_local_experts, 256; alias num_experts).
constexpr char kMiniMaxM2Defaults[] =
    R"({"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
        "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
        "num_experts_per_tok": 8})";
constexpr PartialRotaryTraits kMiniMaxM2PartialRotary = {true, 1.0, true};

// gpt-oss's experts (transformers 5.17 GptOssMLP: `mlp.router` with a bias, `mlp.experts` fused, transposed
// and interleaved: gate_up_proj [E, H, 2I] with gate_up_proj_bias [E, 2I], down_proj [E, I, H] with
// down_proj_bias [E, H]; or their MXFP4 blocks: gpt_oss_experts.h).
constexpr MoeTensorNames kGptOssMoeNames = {
    /*router=*/"mlp.router",
    /*experts=*/"mlp.experts.",
    /*expert_gate=*/nullptr,
    /*expert_up=*/nullptr,
    /*expert_down=*/nullptr,
    /*expert_gate_alt=*/nullptr,
    /*expert_up_alt=*/nullptr,
    /*expert_down_alt=*/nullptr,
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/nullptr,
    /*shared_expert_gate=*/nullptr,
    /*correction_bias=*/nullptr,
    /*router_scale=*/nullptr,
    /*per_expert_scale=*/nullptr,
    /*experts_pre_norm=*/nullptr,
    /*dense_post_norm=*/nullptr,
    /*experts_post_norm=*/nullptr,
};

// Gemma 4 26B-A4B's experts and router, at the layer level (transformers 5.17 Gemma4TextDecoderLayer:
// `router`, `experts` fused; per-expert modules "experts.<e>.gate_proj" ... where a toolkit writes them).
constexpr MoeTensorNames kGemma4MoeNames = {
    /*router=*/"router.proj",
    /*experts=*/"experts.",
    /*expert_gate=*/"gate_proj",
    /*expert_up=*/"up_proj",
    /*expert_down=*/"down_proj",
    /*expert_gate_alt=*/nullptr,
    /*expert_up_alt=*/nullptr,
    /*expert_down_alt=*/nullptr,
    /*fused_gate_up=*/"gate_up_proj",
    /*fused_down=*/"down_proj",
    /*shared_expert=*/nullptr,
    /*shared_expert_gate=*/nullptr,
    /*correction_bias=*/nullptr,
    /*router_scale=*/"router.scale",
    /*per_expert_scale=*/"router.per_expert_scale",
    /*experts_pre_norm=*/"pre_feedforward_layernorm_2.weight",
    /*dense_post_norm=*/"post_feedforward_layernorm_1.weight",
    /*experts_post_norm=*/"post_feedforward_layernorm_2.weight",
};

// GptOssConfig's defaults (transformers 5.17 configuration_gpt_oss.py): layer_types alternate sliding (even
// layers) and full (sliding_window_pattern 2), a window of 128, rope_theta 150000 (default_theta) and, when
// config.json gives no RoPE at all, its YaRN (ParseModelConfig adds rope_scaling only where neither
// rope_scaling nor rope_parameters is given); attention_bias true (q, k, v and o_proj).
constexpr char kGptOssDefaults[] =
    R"({"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-5,
        "num_local_experts": 128, "num_experts_per_tok": 4, "attention_bias": true,
        "sliding_window_pattern": 2, "sliding_window": 128, "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": false, "original_max_position_embeddings": 4096}})";

// The multi-token-prediction layers stored past the last decoder layer are not part of the scored forward.
constexpr TextOnlyTraits kMtpLayersPastTheLast = {false, nullptr, {nullptr}, true, {nullptr}};

// DeepSeek-V3's multi-head latent attention as transformers 5.17 saves it (family.h LatentAttentionTraits).
constexpr LatentAttentionTraits kDeepseekV3LatentAttention = {
    true,
    /*q_a_proj=*/"self_attn.q_a_proj",
    /*q_a_layernorm=*/"self_attn.q_a_layernorm.weight",
    /*q_b_proj=*/"self_attn.q_b_proj",
    /*kv_a_proj=*/"self_attn.kv_a_proj_with_mqa",
    /*kv_a_layernorm=*/"self_attn.kv_a_layernorm.weight",
    /*kv_b_proj=*/"self_attn.kv_b_proj",
    /*indexer=*/nullptr,
};

// DeepSeek-V3.2 and GLM-5: the same attention with DeepSeek Sparse Attention's indexer beside it (not read:
// LatentAttentionTraits::indexer).
constexpr LatentAttentionTraits kDsaLatentAttention = {
    true,
    /*q_a_proj=*/"self_attn.q_a_proj",
    /*q_a_layernorm=*/"self_attn.q_a_layernorm.weight",
    /*q_b_proj=*/"self_attn.q_b_proj",
    /*kv_a_proj=*/"self_attn.kv_a_proj_with_mqa",
    /*kv_a_layernorm=*/"self_attn.kv_a_layernorm.weight",
    /*kv_b_proj=*/"self_attn.kv_b_proj",
    /*indexer=*/"self_attn.indexer.",
};

// Kimi K2.5 / K2.6 (Kimi_K25ForConditionalGeneration) and Mistral Large 3 (Mistral3ForConditionalGeneration):
// DeepSeek-V3's language model inside a vision-language checkpoint, as transformers 5 saves it
// (model.language_model.*, lm_head) or as the originals do (language_model.model.*, language_model.lm_head;
// transformers' conversion_mapping renames them at load); the vision tower, its projector and the MTP layers
// past the last are not read. Kimi's text_config says kimi_k2 or deepseek_v3 (Kimi_K25Config reads both as
// deepseek_v3); Mistral3's may name other language models (Mistral Small 3's mistral), refused here.
constexpr TextOnlyTraits kKimiK25TextOnly = {
    true,
    &kGemma3VlmV4TensorNames,
    {"model.vision_tower.", "model.mm_projector.", "vision_tower.", "mm_projector.", nullptr},
    true,
    {"deepseek_v3", "kimi_k2", nullptr}};
constexpr TextOnlyTraits kMistral3DeepseekTextOnly = {true,
                                                      &kGemma3VlmV4TensorNames,
                                                      {"model.vision_tower.", "model.multi_modal_projector.",
                                                       "vision_tower.", "multi_modal_projector.", nullptr},
                                                      true,
                                                      {"deepseek_v3", nullptr}};

// DeepseekV3Config's defaults (transformers 5.17 configuration_deepseek_v3.py) of the shape and router
// fields. Not the expert count (n_routed_experts, 256; alias num_local_experts), and not the attention's
// latent dimensions (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim): a config
// without them is refused naming the field (config.cc ParseLatentAttention).
constexpr char kDeepseekV3Defaults[] =
    R"({"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "rms_norm_eps": 1e-6, "moe_intermediate_size": 2048,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "routed_scaling_factor": 2.5, "n_group": 8,
        "topk_group": 4, "first_k_dense_replace": 3, "norm_topk_prob": true})";

// Glm4MoeLiteConfig's defaults (configuration_glm4_moe_lite.py). It has no first_k_dense_replace: its
// mlp_layer_types defaults to one dense layer, then sparse ones, which first_k_dense_replace 1 says (a
// mlp_layer_types list in the config must agree with it).
constexpr char kGlm4MoeLiteDefaults[] =
    R"({"vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240, "num_hidden_layers": 47,
        "num_attention_heads": 20, "rms_norm_eps": 1e-5, "moe_intermediate_size": 1536,
        "num_experts_per_tok": 4, "n_shared_experts": 1, "routed_scaling_factor": 1.8, "n_group": 1,
        "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": true})";

// DeepseekV32Config's defaults (transformers 5.17 configuration_deepseek_v32.py, which inherits
// Glm4MoeLiteConfig's fields with DeepSeek-V3's values) and GlmMoeDsaConfig's (configuration_glm_moe_dsa.py,
// inheriting DeepseekV32Config's): the shape, router and indexer fields, not the expert count nor the latent
// dimensions (refused naming the field when missing, as for DeepSeek-V3).
constexpr char kDeepseekV32Defaults[] =
    R"({"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "num_attention_heads": 128, "rms_norm_eps": 1e-6, "moe_intermediate_size": 2048,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "routed_scaling_factor": 2.5, "n_group": 8,
        "topk_group": 4, "first_k_dense_replace": 3, "norm_topk_prob": true, "index_topk": 2048})";
constexpr char kGlmMoeDsaDefaults[] =
    R"({"vocab_size": 154880, "hidden_size": 6144, "intermediate_size": 12288, "num_hidden_layers": 78,
        "num_attention_heads": 64, "rms_norm_eps": 1e-5, "moe_intermediate_size": 2048,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "routed_scaling_factor": 2.5, "n_group": 1,
        "topk_group": 1, "first_k_dense_replace": 3, "norm_topk_prob": true, "index_topk": 2048})";

// Qwen3NextConfig's defaults (norm_topk_prob true, unlike Qwen2 / Qwen3-MoE's false).
constexpr char kQwen3NextDefaults[] =
    R"({"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "rms_norm_eps": 1e-6,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "num_experts_per_tok": 10, "num_experts": 512,
        "norm_topk_prob": true})";

// One entry per supported architecture. The defaults are the transformers config classes' defaults.
constexpr FamilyTraits kFamilies[] = {
    {
        /*architecture=*/"LlamaForCausalLM",
        /*model_type=*/"llama",
        /*default_max_position_embeddings=*/2048,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"MistralForCausalLM",
        /*model_type=*/"mistral",
        /*default_max_position_embeddings=*/4096 * 32,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"Qwen2ForCausalLM",
        /*model_type=*/"qwen2",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kQkvAlways,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"Qwen3ForCausalLM",
        /*model_type=*/"qwen3",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"MixtralForCausalLM",
        /*model_type=*/"mixtral",
        /*default_max_position_embeddings=*/4096 * 32,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,  // experts split like the dense MLP (shard_plan.h)
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kMixtral, /*shared_expert=*/false, kMixtralNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"Qwen2MoeForCausalLM",
        /*model_type=*/"qwen2_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kQkvBiasField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        /*architecture=*/"Qwen3MoeForCausalLM",
        /*model_type=*/"qwen3_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/false, kQwenMoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Phi-3, Phi-3.5, Phi-4: fused qkv_proj / gate_up_proj, partial rotary, longrope, a masked sliding
        // window. No tensor parallelism yet (the fused modules are split at load, but no engine that shards
        // runs the family).
        /*architecture=*/"Phi3ForCausalLM",
        /*model_type=*/"phi3",
        /*default_max_position_embeddings=*/4096,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLongrope),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowFieldMasked,
        /*partial_rotary=*/kPhi3PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kPhi3TensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Gemma 2: soft-capping (50 / 30 by default), sliding window on alternating layers (0, 2, ...).
        /*architecture=*/"Gemma2ForCausalLM",
        /*model_type=*/"gemma2",
        /*default_max_position_embeddings=*/8192,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/
        {true, /*sliding_pattern=*/2, /*attn_softcap_default=*/50.0, /*final_softcap_default=*/30.0,
         /*local_rope=*/false, /*gemma4=*/false},
        /*config_defaults=*/kGemma2Defaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kGemmaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Gemma 3 text: q/k norm, 5 sliding : 1 full layers by default, local and global RoPE, no
        // soft-capping by default.
        /*architecture=*/"Gemma3ForCausalLM",
        /*model_type=*/"gemma3_text",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLinear) |
            RopeTypeBit(RopeType::kLlama3),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true, /*gemma4=*/false},
        /*config_defaults=*/kGemma3TextDefaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kGemmaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Gemma 3 4B-27B releases: Gemma 3 text inside a vision-language checkpoint; only the language model
        // is read (the vision tower is ignored; ModelSummary::notes says so).
        /*architecture=*/"Gemma3ForConditionalGeneration",
        /*model_type=*/"gemma3",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLinear) |
            RopeTypeBit(RopeType::kLlama3),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true, /*gemma4=*/false},
        /*config_defaults=*/kGemma3TextDefaults,
        /*text_only=*/
        {true,
         &kGemma3VlmV4TensorNames,
         {"model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.",
          nullptr},
         false,
         {nullptr}},
        /*tensor_parallel=*/true,
        /*names=*/kGemma3VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Gemma 4 text (Gemma4ForCausalLM, models/gemma4: the 31B's language model; GemmaTraits::gemma4):
        // sliding and full layers of their own head_dim / kv heads, plain-weight norms, q / k / v norms,
        // scale 1, proportional RoPE on the full layers, layer_scalar. CPU backend (the CUDA backend refuses
        // it at load).
        /*architecture=*/"Gemma4ForCausalLM",
        /*model_type=*/"gemma4_text",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kProportional),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true, /*gemma4=*/true},
        /*config_defaults=*/kGemma4TextDefaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kGemmaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kGemma4, /*shared_expert=*/false, kGemma4MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Gemma 4's vision-language (and audio) checkpoints (Gemma4ForConditionalGeneration): the Gemma 4
        // text model of text_config (gemma4_text) under model.language_model.*; the vision and audio towers
        // and their embedders are not read.
        /*architecture=*/"Gemma4ForConditionalGeneration",
        /*model_type=*/"gemma4",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kProportional),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true, /*gemma4=*/true},
        /*config_defaults=*/kGemma4TextDefaults,
        /*text_only=*/
        {true,
         nullptr,
         {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.", nullptr},
         false,
         {"gemma4_text", nullptr}},
        /*tensor_parallel=*/false,
        /*names=*/kGemma3VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kGemma4, /*shared_expert=*/false, kGemma4MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Qwen3.5 / Qwen3.6 text (Qwen3_5ForCausalLM: three Gated DeltaNet layers to one gated full
        // attention, LinearAttentionTraits), on both backends.
        /*architecture=*/"Qwen3_5ForCausalLM",
        /*model_type=*/"qwen3_5_text",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kQwen35PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35TextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kQwen35LinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // The published Qwen3.5 / 3.6 dense checkpoints: the language model of the vision-language class
        // (text_config; model.language_model.*), the vision tower and the MTP layers not read.
        /*architecture=*/"Qwen3_5ForConditionalGeneration",
        /*model_type=*/"qwen3_5",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kQwen35PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35TextDefaults,
        /*text_only=*/kQwen35VlmTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kQwen35VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kQwen35LinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Qwen3.5 / 3.6 MoE text (Qwen3_5MoeForCausalLM): the same layers, every MLP a mixture of experts
        // with a gated shared expert (MoePolicy::kQwen35Moe).
        /*architecture=*/"Qwen3_5MoeForCausalLM",
        /*model_type=*/"qwen3_5_moe_text",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kQwen35PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35MoeTextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwen35Moe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen35LinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // The published Qwen3.5 / 3.6 MoE checkpoints (Qwen3.6-35B-A3B, ...): the language model of the
        // vision-language class, as Qwen3_5ForConditionalGeneration.
        /*architecture=*/"Qwen3_5MoeForConditionalGeneration",
        /*model_type=*/"qwen3_5_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kQwen35PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35MoeTextDefaults,
        /*text_only=*/kQwen35VlmTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kQwen35VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwen35Moe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen35LinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's layers with the fused, per-k-head grouped DeltaNet
        // projections, and Qwen2-MoE's block (norm_topk_prob, decoder_sparse_step, mlp_only_layers).
        /*architecture=*/"Qwen3NextForCausalLM",
        /*model_type=*/"qwen3_next",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kPerHead,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kQwen35PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen3NextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen3NextLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (Glm4MoeForCausalLM, transformers 5.17 models/glm4_moe): Llama
        // attention with q/k/v bias (attention_bias), per-head q/k norm iff use_qk_norm, partial RoPE (0.5 by
        // default, rotate_half within the rotated part); DeepSeek-V3's MoE (MoePolicy::kSigmoidGroupLimited:
        // sigmoid router with the correction bias, ungated shared experts) after first_k_dense_replace dense
        // layers; the multi-token-prediction layer past the last is not read.
        /*architecture=*/"Glm4MoeForCausalLM",
        /*model_type=*/"glm4_moe",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kQkvField,
        /*qk_norm=*/QkNormPolicy::kPerHeadField,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kGlm4MoePartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kGlm4MoeDefaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // MiniMax-M2 / M2.1 / M2.5 / M2.7 (MiniMaxM2ForCausalLM, models/minimax_m2): attention without
        // biases, q/k RMSNorm over the whole projections (QkNormPolicy::kWholeProjection), partial RoPE;
        // every layer Mixtral-named experts under the sigmoid router with the correction bias
        // (MoePolicy::kMiniMaxM2).
        /*architecture=*/"MiniMaxM2ForCausalLM",
        /*model_type=*/"minimax_m2",
        /*default_max_position_embeddings=*/196608,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/QkNormPolicy::kWholeProjection,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kMiniMaxM2PartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kMiniMaxM2Defaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kMiniMaxM2, /*shared_expert=*/false, kMiniMaxM2MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // DeepSeek-V3 / R1 / V3.1 (DeepseekV3ForCausalLM, models/deepseek_v3; also the text model of the
        // releases that ship it as the whole checkpoint): multi-head latent attention (LatentAttentionTraits:
        // low-rank q with or without q_lora_rank, one shared rope key, interleaved RoPE pairs by default,
        // YaRN's mscale squared into the softmax scale) and DeepSeek-V3's MoE
        // (MoePolicy::kSigmoidGroupLimited) after first_k_dense_replace dense layers; the
        // multi-token-prediction layer past the last is not read. Both backends (CUDA:
        // cuda/forward/latent_attention_block.cc).
        /*architecture=*/"DeepseekV3ForCausalLM",
        /*model_type=*/"deepseek_v3",
        /*default_max_position_embeddings=*/4096,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,  // q_a / kv_a / o_proj (LatentAttentionTraits)
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kDeepseekV3Defaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDeepseekV3LatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // GLM-4.7-Flash (Glm4MoeLiteForCausalLM, models/glm4_moe_lite): DeepSeek-V3's attention (the same
        // LatentAttentionTraits) and GLM-4.5's MoE; dense layers where mlp_layer_types says (by default the
        // first), the multi-token-prediction layer past the last not read. Both backends.
        /*architecture=*/"Glm4MoeLiteForCausalLM",
        /*model_type=*/"glm4_moe_lite",
        /*default_max_position_embeddings=*/202752,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kGlm4MoeLiteDefaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDeepseekV3LatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // DeepSeek-V3.2 (DeepseekV32ForCausalLM, models/deepseek_v32): DeepSeek-V3 with DeepSeek Sparse
        // Attention's indexer (LatentAttentionTraits::indexer: windows up to index_topk + 1 ids are the dense
        // MLA, longer ones refused; the indexer not read).
        /*architecture=*/"DeepseekV32ForCausalLM",
        /*model_type=*/"deepseek_v32",
        /*default_max_position_embeddings=*/163840,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kDeepseekV32Defaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDsaLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // GLM-5 / 5.2 (GlmMoeDsaForCausalLM, models/glm_moe_dsa): DeepSeek-V3.2's layers, some indexers
        // shared across layers (indexer_types: none of them read, as for DeepSeek-V3.2).
        /*architecture=*/"GlmMoeDsaForCausalLM",
        /*model_type=*/"glm_moe_dsa",
        /*default_max_position_embeddings=*/202752,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kGlmMoeDsaDefaults,
        /*text_only=*/kMtpLayersPastTheLast,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDsaLatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Kimi K2.5 / K2.6 (Kimi_K25ForConditionalGeneration, models/kimi_k25): DeepSeek-V3's language model
        // (text_config kimi_k2 / deepseek_v3) beside a vision tower that is not read. (Kimi K2 / K2-Thinking
        // ship DeepseekV3ForCausalLM itself.)
        /*architecture=*/"Kimi_K25ForConditionalGeneration",
        /*model_type=*/"kimi_k25",
        /*default_max_position_embeddings=*/4096,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kDeepseekV3Defaults,
        /*text_only=*/kKimiK25TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kGemma3VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDeepseekV3LatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // Mistral Large 3 (Mistral3ForConditionalGeneration with a deepseek_v3 text_config, models/mistral3):
        // DeepSeek-V3's language model beside a vision tower that is not read; Mistral3's other language
        // models (Mistral Small 3's) are refused naming text_config's model_type.
        /*architecture=*/"Mistral3ForConditionalGeneration",
        /*model_type=*/"mistral3",
        /*default_max_position_embeddings=*/4096,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kDeepseekV3Defaults,
        /*text_only=*/kMistral3DeepseekTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kGemma3VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kSigmoidGroupLimited, /*shared_expert=*/true, kDeepseekV3MoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kDeepseekV3LatentAttention,
        /*attention_sinks=*/nullptr,
    },
    {
        // gpt-oss 20b / 120b (GptOssForCausalLM, models/gpt_oss): attention with q/k/v and o_proj biases and
        // a learned sink logit per head (FamilyTraits::attention_sinks), sliding (128) and full layers
        // alternating, YaRN without truncation; every layer gpt-oss's experts (MoePolicy::kGptOss). CPU
        // backend (the CUDA backend refuses the sinks at load).
        /*architecture=*/"GptOssForCausalLM",
        /*model_type=*/"gpt_oss",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/QkNormPolicy::kNone,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kYarn),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/kNoPartialRotary,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kGptOssDefaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kGptOss, /*shared_expert=*/false, kGptOssMoeNames},
        /*linear_attention=*/kNoLinearAttention,
        /*latent_attention=*/kNoLatentAttention,
        /*attention_sinks=*/"self_attn.sinks",
    },
};

}  // namespace

const FamilyTraits* FindFamily(std::string_view architecture) {
  for (const FamilyTraits& f : kFamilies) {
    if (architecture == f.architecture) return &f;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const FamilyTraits& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.architecture;
  }
  return out;
}

FamilyList AllFamilies() { return {std::begin(kFamilies), std::end(kFamilies)}; }

}  // namespace scored
