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
};

// transformers' Gemma2Config / Gemma3TextConfig defaults of the shape fields.
constexpr char kGemma2Defaults[] =
    R"({"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6})";
constexpr char kGemma3TextDefaults[] =
    R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6})";

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
constexpr TextOnlyTraits kQwen35TextOnly = {false, nullptr, {"mtp.", nullptr}};
constexpr TextOnlyTraits kQwen35VlmTextOnly = {true, nullptr, {"model.visual.", "mtp.", nullptr}};

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
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"MistralForCausalLM",
        /*model_type=*/"mistral",
        /*default_max_position_embeddings=*/4096 * 32,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"Qwen2ForCausalLM",
        /*model_type=*/"qwen2",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kQkvAlways,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"Qwen3ForCausalLM",
        /*model_type=*/"qwen3",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"MixtralForCausalLM",
        /*model_type=*/"mixtral",
        /*default_max_position_embeddings=*/4096 * 32,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,  // experts split like the dense MLP (shard_plan.h)
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kMixtral, /*shared_expert=*/false, kMixtralNames},
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"Qwen2MoeForCausalLM",
        /*model_type=*/"qwen2_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kQkvBiasField,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        /*architecture=*/"Qwen3MoeForCausalLM",
        /*model_type=*/"qwen3_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/false,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/false, kQwenMoeNames},
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        // Phi-3, Phi-3.5, Phi-4: fused qkv_proj / gate_up_proj, partial rotary, longrope, a masked sliding
        // window. No tensor parallelism yet (the fused modules are split at load, but no engine that shards
        // runs the family).
        /*architecture=*/"Phi3ForCausalLM",
        /*model_type=*/"phi3",
        /*default_max_position_embeddings=*/4096,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/false,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLongrope),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowFieldMasked,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/nullptr,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kPhi3TensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        // Gemma 2: soft-capping (50 / 30 by default), sliding window on alternating layers (0, 2, ...).
        /*architecture=*/"Gemma2ForCausalLM",
        /*model_type=*/"gemma2",
        /*default_max_position_embeddings=*/8192,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/false,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/false,
        /*gemma=*/
        {true, /*sliding_pattern=*/2, /*attn_softcap_default=*/50.0, /*final_softcap_default=*/30.0,
         /*local_rope=*/false},
        /*config_defaults=*/kGemma2Defaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kGemmaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        // Gemma 3 text: q/k norm, 5 sliding : 1 full layers by default, local and global RoPE, no
        // soft-capping by default.
        /*architecture=*/"Gemma3ForCausalLM",
        /*model_type=*/"gemma3_text",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLinear) |
            RopeTypeBit(RopeType::kLlama3),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/false,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true},
        /*config_defaults=*/kGemma3TextDefaults,
        /*text_only=*/kNotTextOnly,
        /*tensor_parallel=*/true,
        /*names=*/kGemmaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        // Gemma 3 4B-27B releases: Gemma 3 text inside a vision-language checkpoint; only the language model
        // is read (the vision tower is ignored; ModelSummary::notes says so).
        /*architecture=*/"Gemma3ForConditionalGeneration",
        /*model_type=*/"gemma3",
        /*default_max_position_embeddings=*/131072,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault) | RopeTypeBit(RopeType::kLinear) |
            RopeTypeBit(RopeType::kLlama3),
        /*tie_word_embeddings_default=*/true,
        /*sliding_window=*/SlidingWindowPolicy::kLayerTypes,
        /*partial_rotary=*/false,
        /*gemma=*/
        {true, /*sliding_pattern=*/6, /*attn_softcap_default=*/0.0, /*final_softcap_default=*/0.0,
         /*local_rope=*/true},
        /*config_defaults=*/kGemma3TextDefaults,
        /*text_only=*/
        {true,
         &kGemma3VlmV4TensorNames,
         {"model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.",
          nullptr}},
        /*tensor_parallel=*/true,
        /*names=*/kGemma3VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kNoLinearAttention,
    },
    {
        // Qwen3.5 / Qwen3.6 text (Qwen3_5ForCausalLM: three Gated DeltaNet layers to one gated full
        // attention, LinearAttentionTraits), on both backends.
        /*architecture=*/"Qwen3_5ForCausalLM",
        /*model_type=*/"qwen3_5_text",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35TextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kQwen35LinearAttention,
    },
    {
        // The published Qwen3.5 / 3.6 dense checkpoints: the language model of the vision-language class
        // (text_config; model.language_model.*), the vision tower and the MTP layers not read.
        /*architecture=*/"Qwen3_5ForConditionalGeneration",
        /*model_type=*/"qwen3_5",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35TextDefaults,
        /*text_only=*/kQwen35VlmTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kQwen35VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/kNoMoe,
        /*linear_attention=*/kQwen35LinearAttention,
    },
    {
        // Qwen3.5 / 3.6 MoE text (Qwen3_5MoeForCausalLM): the same layers, every MLP a mixture of experts
        // with a gated shared expert (MoePolicy::kQwen35Moe).
        /*architecture=*/"Qwen3_5MoeForCausalLM",
        /*model_type=*/"qwen3_5_moe_text",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35MoeTextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwen35Moe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen35LinearAttention,
    },
    {
        // The published Qwen3.5 / 3.6 MoE checkpoints (Qwen3.6-35B-A3B, ...): the language model of the
        // vision-language class, as Qwen3_5ForConditionalGeneration.
        /*architecture=*/"Qwen3_5MoeForConditionalGeneration",
        /*model_type=*/"qwen3_5_moe",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen35MoeTextDefaults,
        /*text_only=*/kQwen35VlmTextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kQwen35VlmTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwen35Moe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen35LinearAttention,
    },
    {
        // Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's layers with the fused, per-k-head grouped DeltaNet
        // projections, and Qwen2-MoE's block (norm_topk_prob, decoder_sparse_step, mlp_only_layers).
        /*architecture=*/"Qwen3NextForCausalLM",
        /*model_type=*/"qwen3_next",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kAllFourField,
        /*qk_norm=*/true,
        /*rope_scalings=*/RopeTypeBit(RopeType::kDefault),
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*partial_rotary=*/true,
        /*gemma=*/kNotGemma,
        /*config_defaults=*/kQwen3NextDefaults,
        /*text_only=*/kQwen35TextOnly,
        /*tensor_parallel=*/false,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
        /*moe=*/{MoePolicy::kQwenMoe, /*shared_expert=*/true, kQwenMoeNames},
        /*linear_attention=*/kQwen3NextLinearAttention,
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
