// The model family table (engine/model/family.h): every family parses real config.json files, and its
// traits flow into ModelConfig's flags, checked generically for every entry of the table (a new family is
// covered by these tests as soon as it has an entry and a real config below).
//
// Real configs: ../shared/data/models-configs (Llama, Qwen2, as published on the Hugging Face Hub) and
// tests/fixtures (a Qwen3 config written by transformers). Mistral and Qwen3 have no released config in
// the data folder, so the fields of mistralai/Mistral-7B-v0.1's and Qwen/Qwen3-0.6B's config.json are
// inlined here (values as published; bookkeeping fields such as transformers_version left out). The same for
// the mixture-of-experts families: mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen1.5-MoE-A2.7B and
// Qwen/Qwen3-30B-A3B, next to the tiny fixtures transformers 5.17 and llm-compressor 0.14 wrote
// (tests/fixtures/*-moe-*; transformers 5.17 saves Qwen3-MoE's expert count as num_local_experts).
// Phi-3: microsoft/Phi-3.5-mini-instruct's config.json (longrope over 48 rotary pairs; its factor lists as
// published, checked against a public copy) and microsoft/phi-4's (no scaling, no window), inlined, plus
// the tiny tests/fixtures/phi3-w4a16-g32 transformers 5.17 wrote (partial rotary, rope_parameters).
// Gemma: google/gemma-2-9b's config.json and google/gemma-3-1b-it's (both as published, quoted in public
// copies), and the tiny gemma2 / gemma3 fixtures (transformers 5's layer_types and per-layer-type
// rope_parameters). DeepSeek-V3: deepseek-ai/DeepSeek-V3's config.json (inlined) and the tiny DeepSeek-V3 /
// GLM-4.7-Flash fixtures (multi-head latent attention).
#include "engine/model/family.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/config.h"
#include "engine/model/layer_plan.h"
#include "engine/model/shard_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kConfigs = std::string(SCORED_DATA_DIR) + "/models-configs";
const std::string kFixtures = SCORED_FIXTURES_DIR;

constexpr char kMistral7BV01[] = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 32000
})";

constexpr char kQwen3_0_6B[] = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr char kMixtral8x7BV01[] = R"({
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 32000
})";

constexpr char kQwen15MoeA27B[] = R"({
  "architectures": ["Qwen2MoeForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "decoder_sparse_step": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 8192,
  "max_window_layers": 21,
  "model_type": "qwen2_moe",
  "moe_intermediate_size": 1408,
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts": 60,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 24,
  "num_key_value_heads": 16,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 5632,
  "sliding_window": 32768,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr char kQwen3_30B_A3B[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 48,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 768,
  "norm_topk_prob": true,
  "num_attention_heads": 32,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 48,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// One real config and what it must parse to.
constexpr char kPhi35MiniInstruct[] = R"({
  "architectures": ["Phi3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "embd_pdrop": 0.0,
  "eos_token_id": 32000,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "pad_token_id": 32000,
  "resid_pdrop": 0.0,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
      1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863,
      3.2300000190734863, 4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789,
      12.199999809265137, 17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578,
      30.840002059936523, 32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
      50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992,
      60.1400032043457, 62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457,
      63.1400032043457, 63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125,
      64.02999877929688, 64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
      64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062],
    "short_factor": [1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842,
      1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979,
      1.0999999046325684, 1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662,
      1.2899998426437378, 1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
      1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745,
      2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
      2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533,
      2.729999542236328, 2.749999523162842, 2.8399994373321533],
    "type": "longrope"
  },
  "rope_theta": 10000.0,
  "sliding_window": 262144,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 32064
})";

constexpr char kPhi4[] = R"({
  "architectures": ["Phi3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 100257,
  "embd_pdrop": 0.0,
  "eos_token_id": 100257,
  "hidden_act": "silu",
  "hidden_size": 5120,
  "initializer_range": 0.02,
  "intermediate_size": 17920,
  "max_position_embeddings": 16384,
  "model_type": "phi3",
  "num_attention_heads": 40,
  "num_hidden_layers": 40,
  "num_key_value_heads": 10,
  "original_max_position_embeddings": 16384,
  "pad_token_id": 100257,
  "resid_pdrop": 0.0,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 250000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 100352
})";

constexpr char kGemma2_9B[] = R"({
  "architectures": ["Gemma2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": 1,
  "final_logit_softcapping": 30.0,
  "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "gemma2",
  "num_attention_heads": 16,
  "num_hidden_layers": 42,
  "num_key_value_heads": 8,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "sliding_window_size": 4096,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 256000
})";

constexpr char kGemma3_1B[] = R"({
  "architectures": ["Gemma3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": null,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": [1, 106],
  "final_logit_softcapping": null,
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "initializer_range": 0.02,
  "intermediate_size": 6912,
  "max_position_embeddings": 32768,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_hidden_layers": 26,
  "num_key_value_heads": 1,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": 512,
  "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 262144
})";

// google/gemma-3-27b-it: a vision-language checkpoint whose text_config leaves most fields to
// Gemma3TextConfig's defaults (vocab_size 262208, rope_theta 1e6, rope_local_base_freq 1e4, ...).
constexpr char kGemma3_27B_It[] = R"({
  "architectures": ["Gemma3ForConditionalGeneration"],
  "boi_token_index": 255999,
  "eoi_token_index": 256000,
  "eos_token_id": [1, 106],
  "image_token_index": 262144,
  "initializer_range": 0.02,
  "mm_tokens_per_image": 256,
  "model_type": "gemma3",
  "text_config": {
    "head_dim": 128,
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "model_type": "gemma3_text",
    "num_attention_heads": 32,
    "num_hidden_layers": 62,
    "num_key_value_heads": 16,
    "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024
  },
  "torch_dtype": "bfloat16",
  "vision_config": {
    "hidden_size": 1152,
    "image_size": 896,
    "intermediate_size": 4304,
    "model_type": "siglip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "patch_size": 14,
    "vision_use_head": false
  }
})";

// A GLM-4.5-Air-shaped config as the hub writes it (transformers 4.54's Glm4MoeConfig fields: q/k/v bias,
// no q/k norm, 0.5 partial rotary, 128 experts of 1408 top 8, one shared expert, the first layer dense, the
// MTP layer counted in num_nextn_predict_layers).
const char kGlm45Air[] = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": true,
  "attention_dropout": 0.0, "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5, "initializer_range": 0.02,
  "intermediate_size": 10944, "max_position_embeddings": 131072, "moe_intermediate_size": 1408,
  "norm_topk_prob": true, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
  "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
  "num_hidden_layers": 46, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_cache": true, "use_qk_norm": false, "vocab_size": 151552
})";

// deepseek-ai/DeepSeek-V3's config.json as published (its remote-code bookkeeping fields such as auto_map
// left out; the native FP8 quantization_config kept, which the config parse only stores).
const char kDeepseekV3[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "attention_bias": false,
  "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
  "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
  "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
})";

// A MiniMax-M2-shaped config as the hub's main branch writes it (the remote code's fields: rotary_dim 64 of
// head_dim 128, use_qk_norm / qk_norm_type, scoring_func, use_routing_bias, shared_intermediate_size 0).
const char kMiniMaxM2[] = R"({
  "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 1536, "max_position_embeddings": 196608,
  "num_attention_heads": 48, "num_experts_per_tok": 8, "num_hidden_layers": 62, "num_key_value_heads": 8,
  "num_local_experts": 256, "num_mtp_modules": 3, "qk_norm_type": "per_layer", "rms_norm_eps": 1e-06,
  "rope_theta": 5000000, "rotary_dim": 64, "scoring_func": "sigmoid", "shared_intermediate_size": 0,
  "sliding_window": null, "tie_word_embeddings": false, "use_mtp": true, "use_qk_norm": true,
  "use_routing_bias": true, "vocab_size": 200064, "attn_type_list": [1, 1, 1, 1]
})";

// openai/gpt-oss-20b's config.json as published (its original MXFP4 experts: quant_method mxfp4).
const char kGptOss20B[] = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
  "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
  "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
  "output_router_logits": false, "pad_token_id": 199999,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
    "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
    "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
  "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088
})";

struct RealConfig {
  std::string name;
  std::string dir;   // a folder holding config.json, or "" when `text` is given
  std::string text;  // inline config.json
  std::string architecture;
  bool tie_word_embeddings;
  int64_t sliding_window;
  RopeType rope_type;
  // Mixture-of-experts: 0 experts for dense families.
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;
  int64_t shared_expert_intermediate = 0;
  bool norm_topk_prob = false;
  int64_t dense_layer = -1;  // a layer mlp_only_layers makes dense
};

// A Qwen3.6-35B-A3B-shaped vision-language MoE config as the hub writes it (text_config; its vision_config
// cut to what the parse ignores), with the fields the family reads.
const char kQwen36MoeVlm[] = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
  "image_token_id": 248056, "tie_word_embeddings": false,
  "text_config": {
    "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320, "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-06, "hidden_act": "silu", "attention_bias": false, "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "num_experts": 256, "num_experts_per_tok": 8,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"model_type": "qwen3_5_moe", "depth": 27, "hidden_size": 1152}
})";

std::vector<RealConfig> RealConfigs() {
  return {
      {"llama-2-7b-hf", kConfigs + "/llama-2-7b-hf", "", "LlamaForCausalLM", false, 0, RopeType::kDefault},
      {"llama-3.2-1b-instruct", kConfigs + "/llama-3.2-1b-instruct", "", "LlamaForCausalLM", true, 0,
       RopeType::kLlama3},
      {"tinyllama-1.1b-chat", kConfigs + "/tinyllama-1.1b-chat-v1.0", "", "LlamaForCausalLM", false, 0,
       RopeType::kDefault},
      {"qwen2.5-0.5b-instruct", kConfigs + "/qwen2.5-0.5b-instruct", "", "Qwen2ForCausalLM", true, 0,
       RopeType::kDefault},
      {"qwen3 fixture", kFixtures + "/qwen3-w4a16-g128", "", "Qwen3ForCausalLM", false, 0,
       RopeType::kDefault},
      {"Qwen3-0.6B", "", kQwen3_0_6B, "Qwen3ForCausalLM", true, 0, RopeType::kDefault},
      {"qwen35 fixture", kFixtures + "/qwen35-bf16", "", "Qwen3_5ForCausalLM", false, 0, RopeType::kDefault},
      {"qwen35 vlm fixture", kFixtures + "/qwen35-vlm-bf16", "", "Qwen3_5ForConditionalGeneration", false, 0,
       RopeType::kDefault},
      {"qwen35 moe fixture", kFixtures + "/qwen35-moe-trained-bf16", "", "Qwen3_5MoeForCausalLM", false, 0,
       RopeType::kDefault, 8, 2, 32, 32, true},
      {"qwen3-next fixture", kFixtures + "/qwen3-next-trained-bf16", "", "Qwen3NextForCausalLM", false, 0,
       RopeType::kDefault, 8, 2, 32, 32, true, /*dense_layer=*/1},
      {"qwen35 moe vlm", "", kQwen36MoeVlm, "Qwen3_5MoeForConditionalGeneration", false, 0,
       RopeType::kDefault, 256, 8, 512, 512, true},
      {"Mistral-7B-v0.1", "", kMistral7BV01, "MistralForCausalLM", false, 4096, RopeType::kDefault},
      {"Mixtral-8x7B-v0.1", "", kMixtral8x7BV01, "MixtralForCausalLM", false, 0, RopeType::kDefault, 8, 2,
       14336, 0, true},
      {"Qwen1.5-MoE-A2.7B", "", kQwen15MoeA27B, "Qwen2MoeForCausalLM", false, 0, RopeType::kDefault, 60, 4,
       1408, 5632, false},
      {"Qwen3-30B-A3B", "", kQwen3_30B_A3B, "Qwen3MoeForCausalLM", false, 0, RopeType::kDefault, 128, 8, 768,
       0, true},
      {"mixtral fixture", kFixtures + "/mixtral-moe-w4a16-g32", "", "MixtralForCausalLM", true, 0,
       RopeType::kDefault, 4, 2, 32, 0, true},
      {"qwen2-moe fixture", kFixtures + "/qwen2-moe-bf16", "", "Qwen2MoeForCausalLM", true, 0,
       RopeType::kDefault, 4, 2, 32, 64, false},
      {"qwen3-moe fixture", kFixtures + "/qwen3-moe-bf16", "", "Qwen3MoeForCausalLM", true, 0,
       RopeType::kDefault, 4, 2, 32, 0, true, /*dense_layer=*/1},
      {"Phi-3.5-mini-instruct", "", kPhi35MiniInstruct, "Phi3ForCausalLM", false, 0, RopeType::kLongrope},
      {"phi-4", "", kPhi4, "Phi3ForCausalLM", false, 0, RopeType::kDefault},
      {"phi3 fixture", kFixtures + "/phi3-w4a16-g32", "", "Phi3ForCausalLM", false, 0, RopeType::kLongrope},
      {"gemma-2-9b", "", kGemma2_9B, "Gemma2ForCausalLM", true, 0, RopeType::kDefault},
      {"gemma2 fixture", kFixtures + "/gemma2-w4a16-g32", "", "Gemma2ForCausalLM", true, 0,
       RopeType::kDefault},
      {"gemma-3-1b-it", "", kGemma3_1B, "Gemma3ForCausalLM", true, 0, RopeType::kDefault},
      {"gemma3 fixture", kFixtures + "/gemma3-w4a16-g32", "", "Gemma3ForCausalLM", true, 0,
       RopeType::kLinear},
      {"gemma3-vlm fixture", kFixtures + "/gemma3-vlm-w4a16-g32", "", "Gemma3ForConditionalGeneration", true,
       0, RopeType::kLinear},
      {"gemma-3-27b-it", "", kGemma3_27B_It, "Gemma3ForConditionalGeneration", true, 0, RopeType::kLinear},
      {"GLM-4.5-Air", "", kGlm45Air, "Glm4MoeForCausalLM", false, 0, RopeType::kDefault, 128, 8, 1408, 1408,
       true,
       /*dense_layer=*/0},
      {"MiniMax-M2", "", kMiniMaxM2, "MiniMaxM2ForCausalLM", false, 0, RopeType::kDefault, 256, 8, 1536, 0,
       true},
      {"glm4-moe fixture", kFixtures + "/glm4-moe-trained-bf16", "", "Glm4MoeForCausalLM", false, 0,
       RopeType::kDefault, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"minimax-m2 fixture", kFixtures + "/minimax-m2-moe-trained-bf16", "", "MiniMaxM2ForCausalLM", false, 0,
       RopeType::kDefault, 4, 2, 32, 0, true},
      {"deepseek-v3 fixture", kFixtures + "/deepseek-v3-moe-trained-bf16", "", "DeepseekV3ForCausalLM", false,
       0, RopeType::kYarn, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"glm4-moe-lite fixture", kFixtures + "/glm4-moe-lite-trained-bf16", "", "Glm4MoeLiteForCausalLM",
       false, 0, RopeType::kDefault, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"deepseek-v32 fixture", kFixtures + "/deepseek-v32-moe-trained-bf16", "", "DeepseekV32ForCausalLM",
       false, 0, RopeType::kYarn, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"glm-moe-dsa fixture", kFixtures + "/glm-moe-dsa-trained-bf16", "", "GlmMoeDsaForCausalLM", false, 0,
       RopeType::kDefault, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"kimi-k25 fixture", kFixtures + "/kimi-k25-deepseek-v3-trained-bf16", "",
       "Kimi_K25ForConditionalGeneration", false, 0, RopeType::kYarn, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"mistral3 fixture", kFixtures + "/mistral3-deepseek-v3-trained-bf16", "",
       "Mistral3ForConditionalGeneration", false, 0, RopeType::kYarn, 8, 2, 32, 32, true, /*dense_layer=*/0},
      {"gemma4 fixture", kFixtures + "/gemma4-trained-bf16", "", "Gemma4ForCausalLM", true, 0,
       RopeType::kProportional},
      {"gemma4-vlm fixture", kFixtures + "/gemma4-vlm-trained-bf16", "", "Gemma4ForConditionalGeneration",
       true, 0, RopeType::kProportional},
      {"gemma4-moe fixture", kFixtures + "/gemma4-moe-trained-bf16", "", "Gemma4ForCausalLM", true, 0,
       RopeType::kProportional, 4, 2, 32, 0, true},
      {"gemma4 w4a16 fixture", kFixtures + "/gemma4-trained-w4a16-g32", "", "Gemma4ForCausalLM", true, 0,
       RopeType::kProportional},
      {"gpt-oss-20b", "", kGptOss20B, "GptOssForCausalLM", false, 0, RopeType::kYarn, 32, 4, 2880, 0, true},
      {"gpt-oss fixture", kFixtures + "/gpt-oss-trained-bf16", "", "GptOssForCausalLM", false, 0,
       RopeType::kYarn, 4, 2, 64, 0, true},
      {"gpt-oss mxfp4 fixture", kFixtures + "/gpt-oss-trained-mxfp4", "", "GptOssForCausalLM", false, 0,
       RopeType::kYarn, 4, 2, 64, 0, true},
  };
}

absl::StatusOr<ModelConfig> Parse(const RealConfig& rc) {
  if (!rc.dir.empty()) return LoadModelConfig(rc.dir);
  return ParseModelConfig(rc.text, rc.name);
}

TEST(FamilyTable, EntriesAreUniqueAndFindable) {
  std::set<std::string> architectures, model_types;
  int n = 0;
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f, ++n) {
    EXPECT_TRUE(architectures.insert(f->architecture).second) << f->architecture;
    EXPECT_TRUE(model_types.insert(f->model_type).second) << f->model_type;
    EXPECT_EQ(FindFamily(f->architecture), f);
    EXPECT_THAT(SupportedArchitectures(), HasSubstr(f->architecture));
    EXPECT_GT(f->default_max_position_embeddings, 0) << f->architecture;
    EXPECT_NE(f->rope_scalings & RopeTypeBit(RopeType::kDefault), 0u) << f->architecture;
  }
  // Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, Phi-3, Gemma 2, Gemma 3 (x2), Qwen3.5 (x2),
  // Qwen3.5-MoE (x2), Qwen3-Next, GLM-4.5, MiniMax-M2, DeepSeek-V3, GLM-4.7-Flash, DeepSeek-V3.2, GLM-5,
  // Kimi K2.5, Mistral Large 3, gpt-oss, Gemma 4 (x2)
  EXPECT_EQ(n, 27);
  EXPECT_EQ(FindFamily("GemmaForCausalLM"), nullptr);
  EXPECT_EQ(FindFamily(""), nullptr);
}

// Every family of the table has at least one real config here, and each parses to its family.
TEST(FamilyTable, EveryFamilyParsesItsRealConfigs) {
  std::set<std::string> covered;
  for (const RealConfig& rc : RealConfigs()) {
    SCOPED_TRACE(rc.name);
    absl::StatusOr<ModelConfig> c = Parse(rc);
    ASSERT_TRUE(c.ok()) << c.status();
    const FamilyTraits* family = FindFamily(rc.architecture);
    ASSERT_NE(family, nullptr);
    EXPECT_EQ(c->family, family);
    EXPECT_EQ(c->architecture, rc.architecture);
    EXPECT_EQ(c->model_type, family->model_type);
    // Traits -> flags (GLM-4.5's per-head q/k norm as its use_qk_norm says: FamilyTraits.Glm4Moe).
    if (family->qk_norm != QkNormPolicy::kPerHeadField) {
      EXPECT_EQ(c->qk_norm, family->qk_norm == QkNormPolicy::kPerHead);
    }
    EXPECT_EQ(c->qk_norm_whole, family->qk_norm == QkNormPolicy::kWholeProjection);
    // Every real config here but GLM's and gpt-oss's has attention_bias false (or none): q/k/v biases only
    // where the family always has them (Qwen2, Qwen2-MoE's qkv_bias default), never an o_proj bias. GLM-4.5's
    // have it true (q/k/v only), gpt-oss's too (all four).
    const bool gpt_oss = family->moe.policy == MoePolicy::kGptOss;
    EXPECT_EQ(c->attention_bias, family->attention_bias == AttentionBiasPolicy::kQkvAlways ||
                                     family->attention_bias == AttentionBiasPolicy::kQkvBiasField ||
                                     family->attention_bias == AttentionBiasPolicy::kQkvField || gpt_oss);
    EXPECT_EQ(c->o_proj_bias, gpt_oss);
    EXPECT_EQ(c->attention_sinks, gpt_oss);
    EXPECT_EQ(c->tie_word_embeddings, rc.tie_word_embeddings);
    EXPECT_EQ(c->num_experts, rc.num_experts);
    // Gemma 4: experts only where enable_moe_block says (the 26B-A4B), the 31B dense.
    if (family->moe.policy != MoePolicy::kGemma4) {
      EXPECT_EQ(c->moe(), family->moe.policy != MoePolicy::kNone);
    }
    EXPECT_EQ(c->num_experts_per_tok, rc.top_k);
    EXPECT_EQ(c->moe_intermediate_size, rc.expert_intermediate);
    EXPECT_EQ(c->shared_expert_intermediate_size, rc.shared_expert_intermediate);
    EXPECT_EQ(c->norm_topk_prob, rc.norm_topk_prob);
    if (c->moe()) {
      ASSERT_EQ(static_cast<int64_t>(c->sparse_layers.size()), c->num_layers);
      for (int64_t l = 0; l < c->num_layers; ++l) EXPECT_EQ(c->IsSparseLayer(l), l != rc.dense_layer) << l;
    }
    EXPECT_EQ(c->sliding_window, rc.sliding_window);
    EXPECT_EQ(c->rope_scaling.type, rc.rope_type);
    if (family->sliding_window == SlidingWindowPolicy::kUseSlidingWindowFlag) {
      EXPECT_EQ(c->sliding_window, 0);
    }
    covered.insert(c->architecture);
  }
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    EXPECT_EQ(covered.count(f->architecture), 1u) << f->architecture << " has no real config in this test";
  }
}

// The smallest config of a family: only the required shape fields, so every default is the family's.
// Mixture-of-experts families also get the expert fields they require.
std::string MinimalConfig(const FamilyTraits& f, const std::string& extra = "") {
  std::string moe;
  if (f.moe.policy == MoePolicy::kMixtral) moe = R"(, "num_local_experts": 4, "num_experts_per_tok": 2)";
  if (f.moe.policy == MoePolicy::kQwenMoe) {
    moe = R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32)";
    if (f.moe.shared_expert) moe += R"(, "shared_expert_intermediate_size": 48)";
  }
  // GLM-4.5 and MiniMax-M2: their config classes' num_key_value_heads default (8) does not divide 4 heads.
  if (f.moe.policy == MoePolicy::kSigmoidGroupLimited) {
    moe = R"(, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "num_key_value_heads": 2)";
  }
  // Gemma 4: Gemma4TextConfig's hidden_size_per_layer_input default (256) is the E2B / E4B per-layer
  // embeddings, which are refused.
  if (f.gemma.gemma4) moe = R"(, "hidden_size_per_layer_input": 0)";
  if (f.moe.policy == MoePolicy::kGptOss) {
    moe = R"(, "num_local_experts": 4, "num_experts_per_tok": 2, "num_key_value_heads": 2)";
  }
  if (f.moe.policy == MoePolicy::kMiniMaxM2) {
    moe = R"(, "num_local_experts": 4, "num_experts_per_tok": 2, "num_key_value_heads": 2)";
  }
  // DeepSeek-V3 / GLM-4.7-Flash: the latent attention's required dimensions (as many kv heads as heads), and
  // groups that split 4 experts (DeepseekV3Config's default n_group 8 does not).
  if (f.latent_attention.enabled) {
    moe = R"(, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "num_key_value_heads": 4, "n_group": 1, "topk_group": 1, "kv_lora_rank": 16, "q_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16)";
  }
  const std::string fields = absl::StrCat(R"("hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100)",
                                          moe);
  const std::string more = extra.empty() ? "" : absl::StrCat(", ", extra);
  if (f.text_only.enabled) {  // the language model's fields live in text_config; `extra` at the top level
    // A wrapper of several language models (Mistral3ForConditionalGeneration): the one scored reads.
    const std::string type =
        f.text_only.text_model_types[0] == nullptr
            ? ""
            : absl::StrCat(R"("model_type": ")", f.text_only.text_model_types[0], R"(", )");
    return absl::StrCat(R"({"architectures": [")", f.architecture, R"("], "text_config": {)", type, fields,
                        "}", more, "}");
  }
  return absl::StrCat(R"({"architectures": [")", f.architecture, R"("], )", fields, more, "}");
}

TEST(FamilyTraits, DefaultsFlowIntoModelConfig) {
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    SCOPED_TRACE(f->architecture);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->family, f);
    EXPECT_EQ(c->model_type, f->model_type);  // model_type defaults to the family's
    EXPECT_EQ(c->max_position_embeddings, f->default_max_position_embeddings);
    EXPECT_EQ(c->tie_word_embeddings, f->tie_word_embeddings_default);
    EXPECT_EQ(c->qk_norm, f->qk_norm == QkNormPolicy::kPerHead);  // GLM's use_qk_norm defaults to false
    EXPECT_EQ(c->qk_norm_whole, f->qk_norm == QkNormPolicy::kWholeProjection);
    // GptOssConfig's attention_bias defaults to true (q, k, v and o_proj).
    const bool gpt_oss = f->moe.policy == MoePolicy::kGptOss;
    EXPECT_EQ(c->attention_bias, f->attention_bias == AttentionBiasPolicy::kQkvAlways ||
                                     f->attention_bias == AttentionBiasPolicy::kQkvBiasField || gpt_oss);
    EXPECT_EQ(c->o_proj_bias, gpt_oss);
    EXPECT_EQ(c->attention_sinks, gpt_oss);
    EXPECT_EQ(c->sliding_window, 0);
    // Qwen2 / Qwen3-MoE: false unless the config says; Mixtral and Qwen3.5-MoE always renormalize;
    // Qwen3-Next's config class defaults to true.
    EXPECT_EQ(c->norm_topk_prob, f->moe.policy == MoePolicy::kMixtral ||
                                     f->moe.policy == MoePolicy::kQwen35Moe ||
                                     f->moe.policy == MoePolicy::kSigmoidGroupLimited ||
                                     f->moe.policy == MoePolicy::kMiniMaxM2 || gpt_oss ||
                                     std::string(f->architecture) == "Qwen3NextForCausalLM");
    // A model_type of another family is refused.
    const std::string other = std::string(f->model_type) == "llama" ? "qwen2" : "llama";
    EXPECT_THAT(ParseModelConfig(MinimalConfig(*f, absl::StrCat(R"("model_type": ")", other, R"(")")), "mem")
                    .status()
                    .message(),
                HasSubstr("does not match architecture"));
  }
}

TEST(FamilyTraits, AttentionBiasPolicy) {
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    SCOPED_TRACE(f->architecture);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f, R"("attention_bias": true)"), "mem");
    if (f->attention_bias == AttentionBiasPolicy::kAllFourField) {  // q, k, v and o_proj, as the field says
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_TRUE(c->attention_bias);
      EXPECT_TRUE(c->o_proj_bias);
      c = ParseModelConfig(MinimalConfig(*f, R"("attention_bias": false)"), "mem");
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_FALSE(c->attention_bias);
      EXPECT_FALSE(c->o_proj_bias);
    } else if (f->attention_bias == AttentionBiasPolicy::kQkvField) {  // q, k and v as the field says
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_TRUE(c->attention_bias);
      EXPECT_FALSE(c->o_proj_bias);
      c = ParseModelConfig(MinimalConfig(*f, R"("attention_bias": false)"), "mem");
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_FALSE(c->attention_bias);
    } else if (f->attention_bias != AttentionBiasPolicy::kNoneOrRejected) {
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_TRUE(c->attention_bias);
      EXPECT_FALSE(c->o_proj_bias);  // never on o_proj (Qwen2, Qwen2-MoE)
      c = ParseModelConfig(MinimalConfig(*f, R"("attention_bias": false)"), "mem");
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_TRUE(c->attention_bias);  // ignored: the family always has q/k/v bias
    } else {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(c.status().message(), HasSubstr("have no bias in transformers"));
    }
  }
}

TEST(FamilyTraits, SlidingWindowPolicy) {
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    SCOPED_TRACE(f->architecture);
    const std::string window = R"("max_position_embeddings": 4096, "sliding_window": 1024)";
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f, window), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<ModelConfig> on =
        ParseModelConfig(MinimalConfig(*f, window + R"(, "use_sliding_window": true)"), "mem");
    if (f->sliding_window == SlidingWindowPolicy::kWindowField) {
      EXPECT_EQ(c->sliding_window, 1024);
    } else if (f->sliding_window == SlidingWindowPolicy::kLayerTypes) {
      EXPECT_EQ(c->sliding_window, 0);
      // Layer 0 sliding; layer 1 full for Gemma 2 and gpt-oss (its config default sliding_window_pattern 2),
      // sliding for Gemma 3.
      // Gemma 4 forces the last layer to full attention, as Gemma4TextConfig does.
      const bool alternating =
          f->gemma.sliding_pattern == 2 || f->moe.policy == MoePolicy::kGptOss || f->gemma.gemma4;
      ASSERT_EQ(c->layer_window.size(), 2u);
      EXPECT_EQ(c->layer_window[0], 1024);
      EXPECT_EQ(c->layer_window[1], alternating ? 0 : 1024);
    } else if (f->sliding_window == SlidingWindowPolicy::kWindowFieldMasked) {
      EXPECT_EQ(c->sliding_window, 0);  // no context cap: every layer is masked instead
      EXPECT_EQ(c->layer_window, std::vector<int64_t>(2, 1024));
      EXPECT_EQ(c->LayerWindow(1), 1024);
    } else {
      EXPECT_EQ(c->sliding_window, 0);  // without use_sliding_window the field means nothing
      EXPECT_THAT(on.status().message(), HasSubstr("use_sliding_window"));
    }
  }
}

TEST(FamilyTraits, RopeScalingsAllowedByTheFamily) {
  const std::string linear = R"("rope_scaling": {"type": "linear", "factor": 2.0})";
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    SCOPED_TRACE(f->architecture);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f, linear), "mem");
    if ((f->rope_scalings & RopeTypeBit(RopeType::kLinear)) != 0) {
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
    } else {
      EXPECT_THAT(c.status().message(), HasSubstr("not supported for"));
    }
  }
}

// The shard plan accepts every family of the table that declares tensor_parallel.
TEST(FamilyTraits, ShardPlanReadsTensorParallel) {
  for (const FamilyTraits* f = AllFamilies().begin; f != AllFamilies().end; ++f) {
    SCOPED_TRACE(f->architecture);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<ShardPlan> plan = ShardPlan::Create(*c, 2, 1);
    if (f->tensor_parallel) {
      EXPECT_TRUE(plan.ok()) << plan.status();
    } else {
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented);
    }
  }
  // A family that is not tensor-parallel is refused for tp > 1, accepted for tp 1.
  absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*AllFamilies().begin), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  FamilyTraits not_tp = *c->family;
  not_tp.tensor_parallel = false;
  c->family = &not_tp;
  EXPECT_EQ(ShardPlan::Create(*c, 2, 0).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(ShardPlan::Create(*c, 1, 0).ok());
}

// Qwen2-MoE: q/k/v bias iff qkv_bias (default true); attention_bias means nothing there.
TEST(FamilyTraits, QkvBiasField) {
  const FamilyTraits* f = FindFamily("Qwen2MoeForCausalLM");
  ASSERT_NE(f, nullptr);
  absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f, R"("qkv_bias": false)"), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->attention_bias);
  EXPECT_THAT(ParseModelConfig(MinimalConfig(*f, R"("qkv_bias": 3)"), "mem").status().message(),
              HasSubstr("qkv_bias"));
}

// Phi-3's real configs: longrope's defaults as transformers' _compute_longrope_parameters derives them,
// partial rotary, the masked window.
TEST(Phi3Config, RealConfigsParseToTransformersValues) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kPhi35MiniInstruct, "phi-3.5");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rotary_dim, 96);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);  // 131072 / 4096
  EXPECT_NEAR(c->rope_scaling.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-15);
  EXPECT_NEAR(c->rope_scaling.attention_factor, 1.1902380714238083, 1e-15);
  ASSERT_EQ(c->rope_scaling.long_factor.size(), 48u);
  EXPECT_DOUBLE_EQ(c->rope_scaling.long_factor[47], 64.83999633789062);
  EXPECT_DOUBLE_EQ(c->rope_scaling.short_factor[0], 1.0);
  EXPECT_EQ(c->layer_window, std::vector<int64_t>(32, 262144));

  c = ParseModelConfig(kPhi4, "phi-4");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 128);
  EXPECT_TRUE(c->layer_window.empty());  // "sliding_window": null

  c = LoadModelConfig(kFixtures + "/phi3-w4a16-g32");  // transformers 5's rope_parameters form
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rotary_dim, 12);  // int(16 * 0.75)
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 16);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);  // 128 / 16
  EXPECT_EQ(c->rope_scaling.short_factor.size(), 6u);
  EXPECT_EQ(c->layer_window, std::vector<int64_t>(2, 48));
}

// What is not implemented fails at load naming the field and the value.
TEST(Phi3Config, UnsupportedFieldsAreNamed) {
  const FamilyTraits* phi3 = FindFamily("Phi3ForCausalLM");
  const FamilyTraits* llama = FindFamily("LlamaForCausalLM");
  ASSERT_NE(phi3, nullptr);
  ASSERT_NE(llama, nullptr);
  auto message = [](const std::string& text) {
    return std::string(ParseModelConfig(text, "mem").status().message());
  };
  EXPECT_THAT(message(MinimalConfig(*phi3, R"("rope_scaling": {"type": "yarn", "factor": 4.0})")),
              HasSubstr("rope scaling type 'yarn' is not supported for Phi3ForCausalLM"));
  EXPECT_THAT(message(MinimalConfig(*phi3, R"("rope_scaling": {"type": "linear", "factor": 4.0})")),
              HasSubstr("rope scaling type 'linear' is not supported for Phi3ForCausalLM"));
  EXPECT_THAT(message(MinimalConfig(*llama, R"("partial_rotary_factor": 0.5)")),
              HasSubstr("unsupported partial_rotary_factor 0.5 for LlamaForCausalLM"));
  EXPECT_THAT(message(MinimalConfig(*phi3, R"("partial_rotary_factor": 0.1)")),  // 16 * 0.1 -> 1
              HasSubstr("partial_rotary_factor"));
  EXPECT_THAT(message(MinimalConfig(*phi3, R"("rope_scaling": {"type": "longrope", "short_factor": [1, 2],
      "long_factor": [1, 2]})")),
              HasSubstr("'short_factor' has 2 entries, expected rotary_dim / 2 = 8"));
  EXPECT_THAT(
      message(MinimalConfig(*phi3, R"("rope_scaling": {"type": "longrope", "short_factor": [1, 2]})")),
      HasSubstr("long_factor"));
  EXPECT_THAT(message(MinimalConfig(*llama, R"("rope_scaling": {"type": "longrope", "short_factor": [1],
      "long_factor": [1]})")),
              HasSubstr("not supported for LlamaForCausalLM"));
}

// Phi-3: the other scaling types transformers knows, in both config forms, and factor lists or a partial
// rotary factor that do not fit the rotary dimensions (MinimalConfig: head_dim 16).
TEST(Phi3Config, UnimplementedRopeFailsNamingFieldAndValue) {
  const FamilyTraits* phi3 = FindFamily("Phi3ForCausalLM");
  ASSERT_NE(phi3, nullptr);
  auto message = [&](const std::string& extra) {
    return std::string(ParseModelConfig(MinimalConfig(*phi3, extra), "mem").status().message());
  };
  for (const char* type : {"dynamic", "ntk"}) {
    SCOPED_TRACE(type);
    EXPECT_THAT(message(absl::StrCat(R"("rope_scaling": {"rope_type": ")", type, R"(", "factor": 4.0})")),
                HasSubstr(absl::StrCat("unsupported rope_scaling type '", type, "'")));
    EXPECT_THAT(message(absl::StrCat(R"("rope_parameters": {"rope_type": ")", type,
                                     R"(", "factor": 4.0, "rope_theta": 10000.0})")),
                HasSubstr(absl::StrCat("unsupported rope_parameters type '", type, "'")));
  }
  // yarn parses (rope_freq_test) but is not Phi-3's: refused by the family, naming it.
  EXPECT_THAT(message(R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0})"),
              HasSubstr("rope scaling type 'yarn' is not supported for Phi3ForCausalLM"));
  EXPECT_THAT(message(R"("rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1, 1, 1, 1, 1],
      "long_factor": [1, 2, 3]})"),
              HasSubstr("'long_factor' has 3 entries, expected rotary_dim / 2 = 8"));
  // partial_rotary_factor 0.75 -> 12 rotary dimensions: 8 factors are the wrong length.
  EXPECT_THAT(message(R"("partial_rotary_factor": 0.75, "rope_scaling": {"type": "longrope",
      "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1]})"),
              HasSubstr("'short_factor' has 8 entries, expected rotary_dim / 2 = 6"));
  // int(16 * 0.5625) = 9: odd.
  EXPECT_THAT(message(R"("partial_rotary_factor": 0.5625)"),
              HasSubstr("'partial_rotary_factor' = 0.5625 gives 9 rotary dimensions of head_dim 16"));
  EXPECT_THAT(message(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
      "partial_rotary_factor": 0.5625})"),
              HasSubstr("'rope_parameters.partial_rotary_factor' = 0.5625 gives 9 rotary dimensions"));
  EXPECT_THAT(message(R"("partial_rotary_factor": 1.5)"), HasSubstr("'partial_rotary_factor' = 1.5"));
  // Gemma 3's per-layer-type form is not Phi-3's.
  EXPECT_THAT(
      message(R"("rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}})"),
      HasSubstr("rope_parameters per layer type ('full_attention') is not supported for Phi3ForCausalLM"));
  // What is implemented parses (the same shapes with fitting values).
  absl::StatusOr<ModelConfig> c = ParseModelConfig(
      MinimalConfig(*phi3, R"("partial_rotary_factor": 0.75, "rope_scaling": {"type": "longrope",
      "short_factor": [1, 1, 1, 1, 1, 1], "long_factor": [1, 2, 3, 4, 5, 6]})"),
      "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rotary_dim, 12);
}

// Gemma 3: RoPE per layer type (transformers 5's rope_parameters) and the older fields. Unknown types in
// either part, types the family does not implement, and forms transformers would read differently fail at
// load naming the field and the value.
TEST(GemmaConfig, UnimplementedRopeFailsNamingFieldAndValue) {
  const FamilyTraits* g3 = FindFamily("Gemma3ForCausalLM");
  const FamilyTraits* g2 = FindFamily("Gemma2ForCausalLM");
  ASSERT_NE(g3, nullptr);
  ASSERT_NE(g2, nullptr);
  auto message = [](const FamilyTraits& f, const std::string& extra) {
    return std::string(ParseModelConfig(MinimalConfig(f, extra), "mem").status().message());
  };
  auto per_layer = [](const std::string& full, const std::string& sliding) {
    return absl::StrCat(R"("rope_parameters": {"full_attention": )", full, R"(, "sliding_attention": )",
                        sliding, "}");
  };
  const std::string plain = R"({"rope_type": "default", "rope_theta": 10000.0})";
  for (const char* type : {"dynamic", "ntk"}) {
    SCOPED_TRACE(type);
    const std::string bad =
        absl::StrCat(R"({"rope_type": ")", type, R"(", "factor": 8.0, "rope_theta": 1e6})");
    EXPECT_THAT(message(*g3, per_layer(bad, plain)),
                HasSubstr(absl::StrCat("unsupported rope_parameters.full_attention type '", type, "'")));
    EXPECT_THAT(message(*g3, per_layer(plain, bad)),
                HasSubstr(absl::StrCat("unsupported rope_parameters.sliding_attention type '", type, "'")));
    EXPECT_THAT(
        message(*g3, absl::StrCat(R"("rope_scaling": {"rope_type": ")", type, R"(", "factor": 8.0})")),
        HasSubstr(absl::StrCat("unsupported rope_scaling type '", type, "'")));
  }
  // yarn parses but is not Gemma's: refused by the family, naming the layer type.
  const std::string yarn = R"({"rope_type": "yarn", "factor": 8.0, "rope_theta": 1e6})";
  EXPECT_THAT(message(*g3, per_layer(yarn, plain)),
              HasSubstr("rope scaling type 'yarn' (full_attention) is not supported for Gemma3ForCausalLM"));
  EXPECT_THAT(
      message(*g3, per_layer(plain, R"({"rope_type": "longrope", "rope_theta": 1e4,
      "short_factor": [1, 1], "long_factor": [1, 1]})")),
      HasSubstr("rope scaling type 'longrope' (sliding_attention) is not supported for Gemma3ForCausalLM"));
  EXPECT_THAT(message(*g3, R"("rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6})"),
              HasSubstr("unsupported rope_parameters key 'factor' for Gemma3ForCausalLM"));
  EXPECT_THAT(
      message(*g3, per_layer(plain, plain) + R"(, "rope_scaling": {"rope_type": "linear", "factor": 8})"),
      HasSubstr("both rope_parameters and rope_scaling"));
  EXPECT_THAT(message(*g3, R"("partial_rotary_factor": 0.5)"),
              HasSubstr("unsupported partial_rotary_factor 0.5 for Gemma3ForCausalLM"));
  EXPECT_THAT(
      message(*g3, per_layer(R"({"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5})",
                             plain)),
      HasSubstr("unsupported rope_parameters.partial_rotary_factor 0.5 for Gemma3ForCausalLM"));
  EXPECT_THAT(message(*g2, R"("rope_scaling": {"rope_type": "linear", "factor": 2.0})"),
              HasSubstr("rope scaling type 'linear' is not supported for Gemma2ForCausalLM"));
  EXPECT_THAT(message(*g2, R"("rope_scaling": {"rope_type": "yarn", "factor": 2.0})"),
              HasSubstr("rope scaling type 'yarn' is not supported for Gemma2ForCausalLM"));

  // As transformers: a part absent from rope_parameters is the default type, and its theta (like a part's
  // absent rope_theta) the older field's value or its default.
  absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*g3, R"("rope_local_base_freq": 20000.0,
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}})"),
                                                   "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->local_rope_theta, 20000.0);
  EXPECT_EQ(c->local_rope_scaling.type, RopeType::kDefault);
}

// Gemma's real configs: the block's constants as transformers derives them.
TEST(GemmaConfig, RealConfigsParseToTransformersValues) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kGemma2_9B, "gemma-2-9b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->gemma_norm);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->mlp_activation, MlpActivation::kGeluTanh);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->embedding_scale, static_cast<float>(std::sqrt(3584.0)));
  EXPECT_DOUBLE_EQ(c->attention_scale, 1.0 / 16.0);
  EXPECT_EQ(c->attn_logit_softcap, 50.0f);
  EXPECT_EQ(c->final_logit_softcap, 30.0f);
  ASSERT_EQ(c->layer_window.size(), 42u);
  EXPECT_EQ(c->layer_window[0], 4096);  // even layers slide (transformers: (i + 1) % 2 != 0)
  EXPECT_EQ(c->layer_window[1], 0);
  EXPECT_TRUE(c->layer_local_rope.empty());

  c = ParseModelConfig(kGemma3_1B, "gemma-3-1b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);  // null
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
  EXPECT_TRUE(c->qk_norm);
  ASSERT_EQ(c->layer_window.size(), 26u);
  for (int64_t l = 0; l < 26; ++l) {
    const bool full = (l + 1) % 6 == 0;
    EXPECT_EQ(c->layer_window[l], full ? 0 : 512) << l;
    EXPECT_EQ(c->LocalRope(l), !full) << l;
  }
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->local_rope_theta, 1e4);

  c = LoadModelConfig(kFixtures + "/gemma3-w4a16-g32");  // rope_parameters per layer type
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->local_rope_theta, 1e4);
  EXPECT_EQ(c->local_rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(c->layer_window, (std::vector<int64_t>{8, 8, 0}));
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(20.0, -0.5));

  // Unsupported values are named.
  const FamilyTraits* g2 = FindFamily("Gemma2ForCausalLM");
  ASSERT_NE(g2, nullptr);
  EXPECT_THAT(
      ParseModelConfig(MinimalConfig(*g2, R"("hidden_activation": "gelu")"), "mem").status().message(),
      HasSubstr("unsupported hidden_activation 'gelu'"));
  EXPECT_THAT(
      ParseModelConfig(MinimalConfig(*g2, R"("layer_types": ["full_attention", "chunked_attention"])"), "mem")
          .status()
          .message(),
      HasSubstr("layer_types[1]"));
  c = ParseModelConfig(MinimalConfig(*g2, R"("attn_logit_softcapping": null)"), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);  // explicit null: no cap (not the default 50)
  EXPECT_EQ(c->final_logit_softcap, 30.0f);
}

// Gemma3ForConditionalGeneration: the text_config is the model, with Gemma3TextConfig's defaults; the
// top level's model_type names the family.
TEST(GemmaConfig, ConditionalGenerationReadsTextConfig) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kGemma3_27B_It, "gemma-3-27b-it");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "gemma3");
  EXPECT_EQ(c->hidden_size, 5376);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->vocab_size, 262208);  // Gemma3TextConfig's default
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->local_rope_theta, 1e4);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(168.0, -0.5));
  EXPECT_EQ(c->eos_token_id, 1);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  ASSERT_EQ(c->layer_window.size(), 62u);
  EXPECT_EQ(c->layer_window[5], 0);
  EXPECT_EQ(c->layer_window[6], 1024);
  EXPECT_THAT(
      ParseModelConfig(R"({"architectures": ["Gemma3ForConditionalGeneration"]})", "mem").status().message(),
      HasSubstr("text_config"));
}

// Which layers are sparse: decoder_sparse_step and mlp_only_layers, as transformers' Qwen MoE decoder layers
// decide it.
TEST(MoeConfig, SparseLayersFollowStepAndMlpOnlyLayers) {
  const FamilyTraits* f = FindFamily("Qwen3MoeForCausalLM");
  ASSERT_NE(f, nullptr);
  absl::StatusOr<ModelConfig> c = ParseModelConfig(
      MinimalConfig(*f, R"("num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3])"),
      "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<bool> expected = {false, true, false, false, false, true};
  EXPECT_EQ(c->sparse_layers, expected);
  EXPECT_FALSE(c->IsSparseLayer(0));
  EXPECT_TRUE(c->IsSparseLayer(5));
  // Dense families have no sparse layer.
  c = ParseModelConfig(MinimalConfig(*FindFamily("Qwen3ForCausalLM")), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->moe());
  EXPECT_FALSE(c->IsSparseLayer(0));
}

TEST(MoeConfig, ErrorsNameTheField) {
  const FamilyTraits* qwen3 = FindFamily("Qwen3MoeForCausalLM");
  const FamilyTraits* qwen2 = FindFamily("Qwen2MoeForCausalLM");
  const FamilyTraits* mixtral = FindFamily("MixtralForCausalLM");
  ASSERT_TRUE(qwen3 != nullptr && qwen2 != nullptr && mixtral != nullptr);
  const struct {
    std::string config;
    std::string message;
  } cases[] = {
      {MinimalConfig(*qwen3, R"("num_experts_per_tok": 5)"),
       "field 'num_experts_per_tok' = 5 exceeds 'num_experts' = 4"},
      {MinimalConfig(*mixtral, R"("num_experts_per_tok": 9)"),
       "field 'num_experts_per_tok' = 9 exceeds 'num_local_experts' = 4"},
      {MinimalConfig(*qwen3, R"("num_experts": 0)"), "field 'num_experts' must be positive"},
      {MinimalConfig(*qwen3, R"("moe_intermediate_size": -1)"), "moe_intermediate_size"},
      {MinimalConfig(*qwen3, R"("mlp_only_layers": [2])"), "field 'mlp_only_layers' holds 2"},
      {MinimalConfig(*qwen3, R"("mlp_only_layers": 1)"), "mlp_only_layers"},
      {MinimalConfig(*qwen3, R"("decoder_sparse_step": 0)"), "decoder_sparse_step"},
      {MinimalConfig(*qwen3, R"("norm_topk_prob": "yes")"), "norm_topk_prob"},
      {MinimalConfig(*qwen2, R"("shared_expert_intermediate_size": 0)"), "shared_expert_intermediate_size"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(tc.config, "mem");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(tc.message));
  }
  // Required fields: a Mixtral config without num_local_experts, a Qwen one without moe_intermediate_size.
  EXPECT_THAT(ParseModelConfig(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "num_experts_per_tok": 2})",
                               "mem")
                  .status()
                  .message(),
              HasSubstr("num_local_experts"));
}

// GLM-4.5 (Glm4MoeConfig's fields, transformers 5.17): DeepSeek-V3's router (sigmoid + correction bias,
// groups, +1e-20 renormalization, routed scaling), one ungated shared expert per n_shared_experts, the first
// first_k_dense_replace layers dense; q/k/v bias as attention_bias says, per-head q/k norm as use_qk_norm
// says, 0.5 partial rotary by default.
TEST(FamilyTraits, Glm4MoeConfig) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kGlm45Air, "glm-4.5-air");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sigmoid_router);
  EXPECT_TRUE(c->router_correction_bias);
  EXPECT_EQ(c->router_num_groups, 1);
  EXPECT_EQ(c->router_topk_groups, 1);
  EXPECT_EQ(c->router_renorm_epsilon, 1e-20f);
  EXPECT_EQ(c->routed_scaling_factor, 1.0f);
  EXPECT_FALSE(c->shared_expert_gated);
  EXPECT_EQ(c->shared_expert_intermediate_size, 1408);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  const FamilyTraits* glm = FindFamily("Glm4MoeForCausalLM");
  ASSERT_NE(glm, nullptr);
  // GLM-4.5's own settings: three dense layers, q/k norm, 2.5x, two shared experts; DeepSeek-V3's groups.
  c = ParseModelConfig(MinimalConfig(*glm, R"("num_hidden_layers": 4, "first_k_dense_replace": 3,
      "use_qk_norm": true, "routed_scaling_factor": 2.5, "n_shared_experts": 2, "n_group": 2, "topk_group": 1,
      "partial_rotary_factor": 0.25)"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sparse_layers, std::vector<bool>({false, false, false, true}));
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->routed_scaling_factor, 2.5f);
  EXPECT_EQ(c->shared_expert_intermediate_size, 64);
  EXPECT_EQ(c->router_num_groups, 2);
  EXPECT_EQ(c->rotary_dim, 4);
  // mlp_layer_types, where a config has it, must agree with first_k_dense_replace.
  EXPECT_TRUE(ParseModelConfig(MinimalConfig(*glm, R"("mlp_layer_types": ["dense", "sparse"])"), "mem").ok());
  const struct {
    std::string config, message;
  } cases[] = {
      {MinimalConfig(*glm, R"("mlp_layer_types": ["sparse", "sparse"])"),
       "disagrees with first_k_dense_replace"},
      {MinimalConfig(*glm, R"("n_group": 3)"), "field 'n_group' = 3 does not split the 4 experts"},
      {MinimalConfig(*glm, R"("n_group": 4)"), "equal groups of at least 2"},
      {MinimalConfig(*glm, R"("n_group": 2, "topk_group": 3)"), "field 'topk_group' = 3 exceeds"},
      {MinimalConfig(*glm, R"("n_group": 2, "topk_group": 1, "num_experts_per_tok": 3)"),
       "exceeds the experts of the topk_group"},
      {MinimalConfig(*glm, R"("routed_scaling_factor": 0)"), "routed_scaling_factor"},
      {MinimalConfig(*glm, R"("num_local_experts": 8)"),
       "'n_routed_experts' (4) and 'num_local_experts' (8)"},
      {MinimalConfig(*glm, R"("scoring_func": "softmax")"), "unsupported scoring_func 'softmax'"},
      {MinimalConfig(*glm, R"("topk_method": "greedy")"), "unsupported topk_method 'greedy'"},
      {MinimalConfig(*glm, R"("first_k_dense_replace": -1)"), "first_k_dense_replace"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    EXPECT_THAT(ParseModelConfig(tc.config, "mem").status().message(), HasSubstr(tc.message));
  }
}

// MiniMax-M2 (MiniMaxM2Config, transformers 5.17): every layer sparse with Mixtral's experts of
// intermediate_size, the sigmoid router with the correction bias (no groups, a plain renormalization, no
// scaling), no shared expert; q/k norms over the whole projections; the remote code's rotary_dim read when no
// partial_rotary_factor is given.
// gpt-oss (GptOssConfig, transformers 5.17): the published config's sinks, windows, YaRN and router; its
// config class's YaRN when config.json describes no RoPE at all (but not under a rope_parameters of its own);
// the plan's blocks; the clamp and the original field names checked.
TEST(FamilyTraits, GptOssConfig) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kGptOss20B, "gpt-oss-20b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_sinks);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->o_proj_bias);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kYarn);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  for (int64_t l = 0; l < 24; ++l) EXPECT_EQ(c->LayerWindow(l), l % 2 == 0 ? 128 : 0) << l;
  EXPECT_TRUE(c->has_quantization_config);
  const ModelPlan plan = PlanModel(*c);
  for (const LayerPlan& layer : plan.layers) {
    EXPECT_TRUE(layer.attention.sinks);
    EXPECT_TRUE(layer.attention.qkv_bias);
    EXPECT_TRUE(layer.attention.o_bias);
    ASSERT_TRUE(layer.experts());
    EXPECT_EQ(layer.channel_mixer.activation, MlpActivation::kClampedSwiGlu);
    const ExpertsPlan& e = layer.channel_mixer.experts;
    EXPECT_EQ(e.router, RouterKind::kTopKSoftmax);
    EXPECT_TRUE(e.router_bias);
    EXPECT_TRUE(e.expert_bias);
    EXPECT_EQ(e.num_experts, 32);
    EXPECT_EQ(e.top_k, 4);
    EXPECT_EQ(e.expert_intermediate_size, 2880);
    EXPECT_FALSE(e.shared_expert());
  }
  const FamilyTraits* f = FindFamily("GptOssForCausalLM");
  ASSERT_NE(f, nullptr);
  c = ParseModelConfig(MinimalConfig(*f), "mem");  // no RoPE in the file: GptOssConfig's YaRN
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->LayerWindow(0), 128);
  c = ParseModelConfig(MinimalConfig(*f, R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e4})"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);  // the file's own RoPE, not the default YaRN
  EXPECT_EQ(c->rope_theta, 1e4);
  const struct {
    std::string config, message;
  } cases[] = {
      {MinimalConfig(*f, R"("swiglu_limit": 8.0)"), "unsupported swiglu_limit 8"},
      {MinimalConfig(*f, R"("experts_per_token": 3)"),
       "fields 'experts_per_token' (3) and 'num_experts_per_tok' (2) disagree"},
      {MinimalConfig(*f, R"("num_experts_per_tok": 5)"), "exceeds 'num_local_experts' = 4"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    EXPECT_THAT(ParseModelConfig(tc.config, "mem").status().message(), HasSubstr(tc.message));
  }
}

// Gemma 4 (Gemma4TextConfig / Gemma4TextAttention, transformers 5.17): the fixture's saved config
// (per_layer_config for the full layers, proportional RoPE there), the plan's per-layer head shapes, and the
// refusals by field.
TEST(FamilyTraits, Gemma4Config) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kFixtures + "/gemma4-trained-bf16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->gemma_norm);  // x * w
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_TRUE(c->value_norm);
  EXPECT_TRUE(c->layer_scalar);
  EXPECT_TRUE(c->attention_k_eq_v);
  EXPECT_DOUBLE_EQ(c->attention_scale, 1.0);
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);
  EXPECT_EQ(c->final_logit_softcap, 30.0f);
  EXPECT_EQ(c->full_head_dim, 32);
  EXPECT_EQ(c->full_kv_heads, 1);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kProportional);
  EXPECT_EQ(c->rope_scaling.proportion, 0.25);
  EXPECT_EQ(c->local_rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->local_rope_theta, 1e4);
  const ModelPlan plan = PlanModel(*c);
  ASSERT_EQ(plan.layers.size(), 4u);
  for (int64_t l = 0; l < 4; ++l) {
    SCOPED_TRACE(l);
    const AttentionPlan& a = plan.layers[static_cast<size_t>(l)].attention;
    const bool full = l % 2 == 1;
    EXPECT_EQ(a.window, full ? 0 : 16);
    EXPECT_EQ(a.head_dim, full ? 32 : 16);
    EXPECT_EQ(a.rotary_dim, a.head_dim);
    EXPECT_EQ(a.num_kv_heads, full ? 1 : 2);
    EXPECT_EQ(a.k_eq_v, full);
    EXPECT_TRUE(a.v_norm && a.qk_norm);
    EXPECT_EQ(a.rope, full ? RopeTable::kGlobal : RopeTable::kLocal);
    EXPECT_TRUE(plan.layers[static_cast<size_t>(l)].layer_scalar);
  }
  const ModelConfig full = RopeTableConfig(*c, RopeTable::kGlobal);
  EXPECT_EQ(full.rotary_dim, 32);
  c = LoadModelConfig(kFixtures + "/gemma4-trained-w4a16-g32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->attention_k_eq_v);
  EXPECT_EQ(c->full_head_dim, 32);
  EXPECT_EQ(c->full_kv_heads, 0);  // the config's 2
  // 26B-A4B's block (enable_moe_block): every layer the dense GLU and the experts in parallel, the router on
  // the raw residual through its norm and scale, per-expert scales.
  c = LoadModelConfig(kFixtures + "/gemma4-moe-trained-bf16");
  ASSERT_TRUE(c.ok()) << c.status();
  for (const LayerPlan& layer : PlanModel(*c).layers) {
    EXPECT_EQ(layer.channel_mixer.kind, ChannelMixerKind::kDenseAndExperts);
    EXPECT_TRUE(layer.experts() && layer.dense_glu());
    EXPECT_EQ(layer.channel_mixer.activation, MlpActivation::kGeluTanh);
    const ExpertsPlan& e = layer.channel_mixer.experts;
    EXPECT_EQ(e.router, RouterKind::kSoftmaxTopK);
    EXPECT_TRUE(e.norm_topk_prob && e.router_input_norm && e.per_expert_scale);
    EXPECT_EQ(e.num_experts, 4);
    EXPECT_EQ(e.top_k, 2);
    EXPECT_EQ(e.expert_intermediate_size, 32);
    EXPECT_EQ(layer.channel_mixer.intermediate_size, 128);
  }
  const FamilyTraits* f = FindFamily("Gemma4ForCausalLM");
  ASSERT_NE(f, nullptr);
  // Without per_layer_config: global_head_dim (default 512) and, under attention_k_eq_v, the global kv heads;
  // the last layer is full whatever layer_types says.
  c = ParseModelConfig(MinimalConfig(*f, R"("attention_k_eq_v": true, "global_head_dim": 64,
      "num_global_key_value_heads": 2, "layer_types": ["sliding_attention", "sliding_attention"])"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->LayerWindow(1), 0);
  EXPECT_EQ(c->LayerHeadDim(1), 64);
  EXPECT_EQ(c->LayerKvHeads(1), 2);
  EXPECT_EQ(c->LayerHeadDim(0), 256);  // Gemma4TextConfig's head_dim default
  const struct {
    std::string config, message;
  } cases[] = {
      {R"({"architectures": ["Gemma4ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})",
       "unsupported hidden_size_per_layer_input 256"},
      {MinimalConfig(*f, R"("num_kv_shared_layers": 1)"), "unsupported num_kv_shared_layers 1"},
      {MinimalConfig(*f, R"("enable_moe_block": true)"), "missing required field 'num_experts'"},
      {MinimalConfig(*f, R"("enable_moe_block": true, "num_experts": 4, "top_k_experts": 5,
          "moe_intermediate_size": 8)"),
       "field 'top_k_experts' = 5 exceeds 'num_experts' = 4"},
      {MinimalConfig(*f, R"("use_bidirectional_attention": "all")"), "use_bidirectional_attention 'all'"},
      {MinimalConfig(*f, R"("per_layer_config": {"0": {"head_dim": 32}})"),
       "per_layer_config key '0' is not the index of a full_attention layer"},
      {MinimalConfig(*f, R"("per_layer_config": {"1": {"head_dim": 32, "sliding_window": 4}})"),
       "unsupported field 'sliding_window'"},
      {MinimalConfig(*f, R"("per_layer_config": {"1": 32})"), "must be an object"},
      {MinimalConfig(*f, R"("num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention",
          "sliding_attention", "full_attention"], "per_layer_config": {"1": {"head_dim": 32}})"),
       "per_layer_config lists 1 of the 2 full_attention layers"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    EXPECT_THAT(ParseModelConfig(tc.config, "mem").status().message(), HasSubstr(tc.message));
  }
}

TEST(FamilyTraits, MiniMaxM2Config) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kMiniMaxM2, "minimax-m2");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sigmoid_router);
  EXPECT_TRUE(c->router_correction_bias);
  EXPECT_EQ(c->router_renorm_epsilon, 0.0f);
  EXPECT_EQ(c->routed_scaling_factor, 1.0f);
  EXPECT_EQ(c->moe_intermediate_size, 1536);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->qk_norm_whole);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->sparse_layers, std::vector<bool>(62, true));
  const FamilyTraits* m2 = FindFamily("MiniMaxM2ForCausalLM");
  ASSERT_NE(m2, nullptr);
  c = ParseModelConfig(MinimalConfig(*m2, R"("rope_parameters": {"rope_type": "default",
      "rope_theta": 5000000, "partial_rotary_factor": 0.5})"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);  // MiniMaxM2Config's default, not hidden_size / heads
  EXPECT_EQ(c->rotary_dim, 64);
  const struct {
    std::string config, message;
  } cases[] = {
      {MinimalConfig(*m2, R"("rotary_dim": 32, "partial_rotary_factor": 0.5)"),
       "fields 'rotary_dim' (32) and 'partial_rotary_factor' (0.5, i.e. 64 of head_dim 128) disagree"},
      {MinimalConfig(*m2, R"("use_qk_norm": false)"), "unsupported use_qk_norm false"},
      {MinimalConfig(*m2, R"("qk_norm_type": "per_head")"), "qk_norm_type 'per_head'"},
      {MinimalConfig(*m2, R"("use_routing_bias": false)"), "unsupported use_routing_bias false"},
      {MinimalConfig(*m2, R"("shared_intermediate_size": 64)"), "shared_intermediate_size 64"},
      {MinimalConfig(*m2, R"("attn_type_list": [0, 1])"), "attn_type_list"},
      {MinimalConfig(*m2, R"("attention_bias": true)"), "have no bias in transformers"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    EXPECT_THAT(ParseModelConfig(tc.config, "mem").status().message(), HasSubstr(tc.message));
  }
}

// DeepSeek-V3 (DeepseekV3Config, transformers 5.17): multi-head latent attention with its published shape
// (head_dim becomes qk_rope_head_dim, the score scale qk_head_dim^-0.5 times YaRN's mscale(40, 1)^2, RoPE
// pairs interleaved by default), DeepSeek-V3's router after three dense layers.
TEST(FamilyTraits, DeepseekV3Config) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kDeepseekV3, "deepseek-v3");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->latent_attention);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->kv_lora_rank, 512);
  EXPECT_EQ(c->qk_nope_head_dim, 128);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->v_head_dim, 128);
  EXPECT_EQ(c->head_dim, 64);  // not hidden_size / heads (56)
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_TRUE(c->rope_interleave);  // DeepseekV3Config's default
  EXPECT_EQ(c->rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, 1.0);  // mscale / mscale_all_dim: cos and sin untouched
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(192.0, -0.5) * mscale * mscale);
  EXPECT_NEAR(c->attention_scale, 0.13523, 1e-5);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_EQ(c->num_experts, 256);
  EXPECT_EQ(c->router_num_groups, 8);
  EXPECT_EQ(c->router_topk_groups, 4);
  EXPECT_EQ(c->routed_scaling_factor, 2.5f);
  EXPECT_EQ(c->shared_expert_intermediate_size, 2048);
  std::vector<bool> sparse(61, true);
  sparse[0] = sparse[1] = sparse[2] = false;
  EXPECT_EQ(c->sparse_layers, sparse);
  EXPECT_EQ(c->max_position_embeddings, 163840);
  // The plan: every layer latent attention with the config's shape.
  const ModelPlan plan = PlanModel(*c);
  ASSERT_EQ(plan.layers.size(), 61u);
  EXPECT_EQ(plan.first_latent_attention(), 0);
  for (const LayerPlan& l : plan.layers) {
    EXPECT_TRUE(l.latent_attention_mixer());
    EXPECT_EQ(l.latent.num_heads, 128);
    EXPECT_EQ(l.latent.q_lora_rank, 1536);
    EXPECT_EQ(l.latent.kv_lora_rank, 512);
    EXPECT_EQ(l.latent.q_width(), 128 * 192);
    EXPECT_EQ(l.latent.kv_a_width(), 576);
    EXPECT_EQ(l.latent.kv_b_width(), 128 * 256);
    EXPECT_EQ(l.latent.o_width(), 128 * 128);
    EXPECT_TRUE(l.latent.rope_interleaved);
    EXPECT_FALSE(l.latent.a_bias);
    EXPECT_DOUBLE_EQ(l.latent.scale, c->attention_scale);
    EXPECT_DOUBLE_EQ(l.latent.norm_eps, 1e-6);
  }
  EXPECT_EQ(PlanModel(*ParseModelConfig(MinimalConfig(*FindFamily("LlamaForCausalLM")), "mem"))
                .first_latent_attention(),
            -1);
  // No tensor parallelism yet.
  EXPECT_EQ(ShardPlan::Create(*c, 2, 0).status().code(), absl::StatusCode::kUnimplemented);
}

// DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5; family.h LatentAttentionTraits::indexer): index_topk
// (default 2048) caps the served window at index_topk + 1 ids whatever --max_seq_len or
// --allow_long_context say, the RoPE pairs are interleaved whatever rope_interleave says, q_lora_rank is
// required; the fixtures (index_topk 256) serve 257 ids.
TEST(FamilyTraits, SparseAttentionCapsTheWindowAtIndexTopk) {
  for (const char* arch : {"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"}) {
    SCOPED_TRACE(arch);
    const FamilyTraits* f = FindFamily(arch);
    ASSERT_NE(f, nullptr);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(
        MinimalConfig(*f, R"("rope_interleave": false, "max_position_embeddings": 8192)"), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->index_topk, 2048);
    EXPECT_TRUE(c->rope_interleave);
    EXPECT_TRUE(PlanModel(*c).layers[0].latent.rope_interleaved);
    EXPECT_EQ(*ServedContextLength(*c, 0, false), 2049);
    EXPECT_EQ(*ServedContextLength(*c, 2049, false), 2049);
    EXPECT_EQ(*ServedContextLength(*c, 512, false), 512);
    for (bool allow_long : {false, true}) {
      const absl::StatusOr<int64_t> longer = ServedContextLength(*c, 2050, allow_long);
      ASSERT_FALSE(longer.ok());
      EXPECT_EQ(longer.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(longer.status().message(), HasSubstr("index_topk (2048)"));
      EXPECT_THAT(longer.status().message(), HasSubstr("up to 2049 ids"));
    }
    c = ParseModelConfig(MinimalConfig(*f, R"("index_topk": 64, "max_position_embeddings": 32)"), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*ServedContextLength(*c, 0, false), 32);  // the trained context, where it is shorter
    EXPECT_THAT(ParseModelConfig(MinimalConfig(*f, R"("q_lora_rank": null)"), "mem").status().message(),
                HasSubstr("'q_lora_rank' is required"));
  }
  // (GLM-5's fixture was trained to 256 positions: its context is the shorter.)
  for (const auto& [fixture, served] :
       {std::pair{"deepseek-v32-moe-trained-bf16", 257}, std::pair{"glm-moe-dsa-trained-bf16", 256}}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(std::string(SCORED_FIXTURES_DIR) + "/" + fixture);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->index_topk, 256) << fixture;
    EXPECT_EQ(*ServedContextLength(*c, 0, false), served) << fixture;
    EXPECT_FALSE(ServedContextLength(*c, 258, true).ok()) << fixture;
  }
  // DeepSeek-V3 has no indexer: its context is max_position_embeddings.
  absl::StatusOr<ModelConfig> v3 = ParseModelConfig(kDeepseekV3, "deepseek-v3");
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->index_topk, 0);
  EXPECT_EQ(*ServedContextLength(*v3, 0, false), 163840);
}

// The vision-language wrappers of DeepSeek-V3's language model: Kimi K2.5 (text_config kimi_k2 or
// deepseek_v3) and Mistral Large 3 (Mistral3ForConditionalGeneration with deepseek_v3 text); another
// language model inside Mistral3ForConditionalGeneration (Mistral Small 3's "mistral"), or none named, is
// refused naming the model_type.
TEST(FamilyTraits, DeepseekV3VisionLanguageWrappers) {
  const FamilyTraits* kimi = FindFamily("Kimi_K25ForConditionalGeneration");
  const FamilyTraits* mistral3 = FindFamily("Mistral3ForConditionalGeneration");
  ASSERT_NE(kimi, nullptr);
  ASSERT_NE(mistral3, nullptr);
  for (const FamilyTraits* f : {kimi, mistral3}) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(MinimalConfig(*f), "mem");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->latent_attention);
    EXPECT_EQ(c->model_type, f->model_type);
  }
  std::string deepseek = MinimalConfig(*kimi);
  ASSERT_NE(deepseek.find(R"("model_type": "deepseek_v3")"), std::string::npos);
  std::string kimi_k2 = deepseek;
  kimi_k2.replace(kimi_k2.find("deepseek_v3"), 11, "kimi_k2");
  EXPECT_TRUE(ParseModelConfig(kimi_k2, "mem").ok());
  std::string mistral = MinimalConfig(*mistral3);
  mistral.replace(mistral.find("deepseek_v3"), 11, "mistral");
  EXPECT_THAT(ParseModelConfig(mistral, "mem").status().message(),
              HasSubstr("Mistral3ForConditionalGeneration is supported with a text_config of model_type "
                        "deepseek_v3, not 'mistral'"));
  std::string none = MinimalConfig(*mistral3);
  none.erase(none.find(R"("model_type": "deepseek_v3", )"),
             std::string(R"("model_type": "deepseek_v3", )").size());
  EXPECT_THAT(ParseModelConfig(none, "mem").status().message(), HasSubstr("(none given)"));
}

// The latent attention's fields: q_lora_rank absent or null means q_proj, attention_bias the a / o biases,
// rope_interleave false, the scale without YaRN; what is missing or inconsistent is refused by name.
TEST(FamilyTraits, LatentAttentionFields) {
  const FamilyTraits* ds = FindFamily("DeepseekV3ForCausalLM");
  ASSERT_NE(ds, nullptr);
  absl::StatusOr<ModelConfig> c = ParseModelConfig(
      MinimalConfig(*ds, R"("q_lora_rank": null, "attention_bias": true, "rope_interleave": false)"), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_FALSE(c->rope_interleave);
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(24.0, -0.5));  // default RoPE: no mscale
  const LatentAttentionPlan plan = PlanModel(*c).layers[0].latent;
  EXPECT_EQ(plan.q_lora_rank, 0);
  EXPECT_TRUE(plan.a_bias);
  EXPECT_TRUE(plan.o_bias);
  EXPECT_FALSE(plan.rope_interleaved);
  // YaRN without mscale_all_dim: qk_head_dim^-0.5 alone (transformers multiplies only when it is non-zero).
  c = ParseModelConfig(MinimalConfig(*ds, R"("rope_scaling": {"type": "yarn", "factor": 4,
      "original_max_position_embeddings": 1024})"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(24.0, -0.5));
  c = ParseModelConfig(
      MinimalConfig(*ds, R"("rope_scaling": {"type": "yarn", "factor": 4, "mscale_all_dim": 0.707,
      "original_max_position_embeddings": 1024})"),
      "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  const double m = 0.1 * 0.707 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(c->attention_scale, std::pow(24.0, -0.5) * m * m);
  // GLM-4.7-Flash: the same attention, its own defaults, mlp_layer_types.
  const FamilyTraits* lite = FindFamily("Glm4MoeLiteForCausalLM");
  ASSERT_NE(lite, nullptr);
  c = ParseModelConfig(MinimalConfig(*lite, R"("num_hidden_layers": 3,
      "mlp_layer_types": ["dense", "sparse", "sparse"])"),
                       "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->latent_attention);
  EXPECT_EQ(c->sparse_layers, std::vector<bool>({false, true, true}));
  EXPECT_EQ(c->routed_scaling_factor, 1.8f);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  // A config without the latent dimensions, or with other ones than the attention needs.
  const std::string bare = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1)";
  const struct {
    std::string config, message;
  } cases[] = {
      {bare + "}",
       "missing required field 'kv_lora_rank' (DeepseekV3ForCausalLM's multi-head latent attention)"},
      {bare + R"(, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8})",
       "missing required field 'v_head_dim'"},
      {MinimalConfig(*ds, R"("qk_rope_head_dim": 7)"), "field 'qk_rope_head_dim' must be even"},
      {MinimalConfig(*ds, R"("q_lora_rank": 0)"), "field 'q_lora_rank' must be positive"},
      {MinimalConfig(*ds, R"("num_key_value_heads": 2)"),
       "num_key_value_heads (2) must equal num_attention_heads (4)"},
      {MinimalConfig(*ds, R"("rope_interleave": 1)"), "rope_interleave"},
      {MinimalConfig(*ds, R"("rope_scaling": {"type": "linear", "factor": 2})"), "not supported for"},
      {MinimalConfig(*lite, R"("mlp_layer_types": ["sparse", "sparse"])"),
       "disagrees with first_k_dense_replace"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.config);
    EXPECT_THAT(ParseModelConfig(tc.config, "mem").status().message(), HasSubstr(tc.message));
  }
}

}  // namespace
}  // namespace scored
