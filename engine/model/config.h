// config.json of a supported causal LM (the families of family.h: LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM,
// Gemma3ForConditionalGeneration (its text_config), MixtralForCausalLM, Qwen2MoeForCausalLM,
// Qwen3MoeForCausalLM, the Qwen3.5 / Qwen3-Next classes, Glm4MoeForCausalLM, MiniMaxM2ForCausalLM,
// DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM and the wrappers of family.cc, GptOssForCausalLM), plus the
// raw quantization_config (parsed by compressed_tensors.h). What differs between families is read from their
// FamilyTraits and lands in the flags below (attention_bias, qk_norm, sliding_window / layer_window,
// rotary_dim, tie_word_embeddings, the Gemma block's fields, the mixture-of-experts fields), which PlanModel
// (layer_plan.h) turns into the layer plan: outside engine/model code reads the plan and this struct's
// numbers, never the flags or `architecture` (scripts/check_layers.py).
//
// Anything unsupported (architecture, hidden_act other than silu (Gemma: gelu_pytorch_tanh), rope_scaling
// type other than llama3/linear/longrope or not allowed for the family, a partial_rotary_factor outside
// Phi-3, use_sliding_window on Qwen, ...) fails with INVALID_ARGUMENT naming the field and value.
#ifndef SCORED_ENGINE_MODEL_CONFIG_H_
#define SCORED_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/family.h"

namespace scored {

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                              // llama3, linear
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, longrope
  // longrope (Phi-3 "longrope" / "su"): inv_freq[i] = 1 / (factor_i * theta^(2i/rotary_dim)) with
  // factor_i = long_factor[i] for a sequence longer than original_max_position_embeddings, else
  // short_factor[i] (both [rotary_dim / 2]); cos and sin are multiplied by attention_factor (config.json's,
  // else sqrt(1 + ln(f) / ln(original)) with f = factor, or max_position_embeddings / original when factor
  // is absent; 1 when f <= 1). transformers picks the factors by the longest sequence of a BATCH; here each
  // sequence by its own length (a batch of one in transformers).
  std::vector<double> short_factor, long_factor;
  // longrope and yarn: what cos and sin are multiplied by (RopeAttentionScaling).
  double attention_factor = 1.0;
  // yarn (transformers' _compute_yarn_parameters): inv_freq blends theta^(-2i/d) (extrapolation) and
  // theta^(-2i/d) / factor (interpolation) by a linear ramp over the dimensions between the correction dims
  // of beta_fast and beta_slow rotations at original_max_position_embeddings, floored / ceiled when truncate.
  // factor absent or null: max_position_embeddings / original. attention_factor absent: get_mscale(factor,
  // mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero, else get_mscale(factor), with
  // get_mscale(s, m) = 0.1 m ln(s) + 1 (1 when s <= 1). A family's own softmax-scale use of mscale
  // (DeepSeek's attention) is the family's, not this table's.
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;  // 0: absent
  bool truncate = true;
  // proportional (Gemma 4's full layers, transformers' _compute_proportional_rope_parameters): over the whole
  // head (rotary_dim = the layer's head_dim), inv_freq[i] = 1 / theta^(fp32(2i) / head_dim) for
  // i < int(partial_rotary_factor * head_dim // 2), 0 for the rest (those pairs (i, i + head_dim / 2) stay as
  // they are), all divided by factor (default 1).
  double proportion = 1.0;
};

// The MLP's gate activation: SwiGLU (silu), GeGLU with tanh GELU (Gemma's gelu_pytorch_tanh), or gpt-oss's
// clamped SwiGLU (GptOssExperts._apply_gate, in fp32): g = min(gate, 7), u = clamp(up, -7, 7),
// out = (u + 1) * g * sigmoid(1.702 * g).
enum class MlpActivation { kSilu, kGeluTanh, kClampedSwiGlu };

struct ModelConfig {
  // The family's traits (family.h, static storage). Set by ParseModelConfig; nullptr only in configs built
  // by hand (tests), which readers treat as the Llama layout.
  const FamilyTraits* family = nullptr;
  std::string architecture;  // "LlamaForCausalLM", ...
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;    // num_hidden_layers
  int64_t num_heads = 0;     // num_attention_heads
  int64_t num_kv_heads = 0;  // num_key_value_heads (defaults to num_heads)
  int64_t head_dim = 0;      // explicit head_dim, else hidden_size / num_heads
  // RoPE rotates the first rotary_dim elements of each head, the rest pass through: head_dim, or
  // int(head_dim * partial_rotary_factor) (FamilyTraits::partial_rotary: Phi-3). Even, > 0.
  int64_t rotary_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // RoPE on pairs (2i, 2i + 1) (config.json's rope_interleave, default true: read by the latent-attention
  // families, DeepSeek-V3 and GLM-4.7-Flash; false for the others).
  bool rope_interleave = false;
  bool tie_word_embeddings = false;  // lm_head is embed_tokens (the family's default when absent)
  bool attention_bias = false;  // q/k/v bias (AttentionBiasPolicy: Qwen2 always, Llama when the field says)
  bool o_proj_bias = false;     // o_proj bias (AttentionBiasPolicy::kAllFourField and the field true)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (FamilyTraits::qk_norm: Qwen3)
  // RMSNorm of the whole q projection [num_heads * head_dim] and k projection [num_kv_heads * head_dim]
  // before the head reshape (QkNormPolicy::kWholeProjection: MiniMax-M2); never with qk_norm.
  bool qk_norm_whole = false;
  int64_t bos_token_id = -1;  // -1 when absent
  int64_t eos_token_id = -1;  // first id when a list
  std::string torch_dtype;    // "float32", "bfloat16", "float16" ("dtype" in newer files); "float32"
                              // when absent (the transformers default)
  // SlidingWindowPolicy::kWindowField (Mistral): attention sees only the last sliding_window positions. 0 =
  // none (also when the config's window is >= max_position_embeddings). Engines must cap their max context at
  // it when > 0, since no sliding-window attention is implemented; positions up to the window are then exact.
  int64_t sliding_window = 0;
  // SlidingWindowPolicy::kWindowFieldMasked (Phi-3): per layer, 0 = full causal attention, w > 0 = query t
  // sees keys j with t - w < j <= t (transformers' sliding-window mask). Empty for the other policies.
  // An engine that does not implement it must refuse the model.
  std::vector<int64_t> layer_window;
  int64_t LayerWindow(int64_t layer) const {
    return layer_window.empty() ? 0 : layer_window[static_cast<size_t>(layer)];
  }
  // Mixture-of-experts (FamilyTraits::moe, MoePolicy). num_experts == 0: a dense model, every layer one
  // SwiGLU MLP of intermediate_size. Otherwise each layer l with sparse_layers[l] replaces its MLP by:
  //   p = softmax(fp32 router logits) over num_experts; the num_experts_per_tok largest (exact ties: the
  //   lower expert id first); their weights p / sum(p of the top k) when norm_topk_prob, else p; y = sum over
  //   the top k (in ascending expert id) of weight * SwiGLU_e(x), summed in fp32
  //   (+ sigmoid(shared_expert_gate . x) * SharedSwiGLU(x) when shared_expert_intermediate_size > 0; with
  //   shared_expert_gated false, + SharedSwiGLU(x) unscaled).
  // Under sigmoid_router (DeepSeek-V3's router: transformers 5.17 DeepseekV3TopkRouter.forward,
  // Glm4MoeTopkRouter.forward, MiniMaxM2TopKRouter.forward) the routing is instead:
  //   s = sigmoid(fp32 logits); c = s + e_score_correction_bias (fp32, the choice only; 0 without
  //   router_correction_bias); the experts in router_num_groups consecutive groups, a group's score the sum
  //   of its two largest c; the router_topk_groups best groups kept (exact ties: the lower group id), the
  //   experts of the others never chosen (transformers 5.17 masks their c with -inf); the top k of c among
  //   the kept (exact ties: the lower id); weights = their UNBIASED s, / (sum + router_renorm_epsilon) when
  //   norm_topk_prob, then times routed_scaling_factor (fp32).
  // Layers with sparse_layers[l] false are dense MLPs of intermediate_size.
  int64_t num_experts = 0;                      // num_local_experts (Mixtral) / num_experts (Qwen)
  int64_t num_experts_per_tok = 0;              // top k, 1..num_experts
  int64_t moe_intermediate_size = 0;            // each expert's (Mixtral: intermediate_size)
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert; 0 = none
  bool norm_topk_prob = false;                  // renormalize the top k (Mixtral: always true)
  bool shared_expert_gated = true;      // false: the shared expert is added unscaled (kSigmoidGroupLimited)
  bool sigmoid_router = false;          // DeepSeek-V3's router (above), else the softmax one
  bool router_correction_bias = false;  // sigmoid_router: e_score_correction_bias [num_experts] is stored
  int64_t router_num_groups = 1;        // n_group: divides num_experts
  int64_t router_topk_groups = 1;       // topk_group, 1..router_num_groups
  float router_renorm_epsilon = 0.0f;   // 1e-20 (DeepSeek-V3, GLM-4.5), 0 (MiniMax-M2: a plain sum)
  float routed_scaling_factor = 1.0f;   // fp32(routed_scaling_factor)
  // gpt-oss (MoePolicy::kGptOss): the router's logits carry its bias; its top k logits (exact ties: the
  // lower id) are softmaxed over those k (the same weights as norm_topk_prob's renormalized softmax, computed
  // as transformers does); every expert's gate / up / down carry a bias.
  bool router_topk_softmax = false;
  // Gemma 4's 26B-A4B (GemmaTraits::gemma4 with enable_moe_block): every layer's dense GLU and experts in
  // parallel (layer_plan.h ChannelMixerKind::kDenseAndExperts), the softmax router renormalized
  // (norm_topk_prob) reading the raw residual through its weightless norm and stored scale, its weights times
  // the stored per_expert_scale; GeGLU experts of moe_intermediate_size.
  bool parallel_dense_experts = false;
  bool gemma4_router = false;
  bool router_bias = false;
  bool expert_bias = false;
  std::vector<bool> sparse_layers;  // [num_layers] when num_experts > 0, else empty
  bool moe() const { return num_experts > 0; }
  bool IsSparseLayer(int64_t layer) const { return moe() && sparse_layers[static_cast<size_t>(layer)]; }
  // Gemma 2 / Gemma 3 (FamilyTraits::gemma; semantics in family.h GemmaTraits). Defaults: the Llama block.
  bool gemma_norm = false;       // every RMSNorm (final, layers, q/k) multiplies by fp32(1 + weight)
  bool sandwich_norms = false;   // post_attention_layernorm on the attention output; pre/post feedforward
  float embedding_scale = 0.0f;  // > 0: embeddings times it in fp32: fp32(sqrt(hidden_size))
  // > 0: the score scale (Gemma: query_pre_attn_scalar^-0.5; latent attention: qk_head_dim^-0.5, times
  // YaRN's mscale(factor, mscale_all_dim)^2 where family.h LatentAttentionTraits says); 0: 1/sqrt(head_dim).
  double attention_scale = 0.0;
  float attn_logit_softcap = 0.0f;   // > 0: scores = tanh(scores / cap) * cap
  float final_logit_softcap = 0.0f;  // > 0: logits = tanh(logits / cap) * cap
  MlpActivation mlp_activation = MlpActivation::kSilu;
  // RoPE of the layers with layer_local_rope[l] (Gemma 3's sliding layers): local_rope_theta and
  // local_rope_scaling instead of rope_theta / rope_scaling. Empty: every layer the global one.
  double local_rope_theta = 10000.0;
  RopeScaling local_rope_scaling;
  std::vector<bool> layer_local_rope;
  bool LocalRope(int64_t layer) const {
    return !layer_local_rope.empty() && layer_local_rope[static_cast<size_t>(layer)];
  }
  // Qwen3.5's hybrid layers (FamilyTraits::linear_attention; semantics in family.h LinearAttentionTraits).
  // linear_attention_layers[l]: layer l's token mixer is a Gated DeltaNet (layer_types "linear_attention"),
  // else gated full attention; empty for the other families.
  std::vector<bool> linear_attention_layers;
  bool LinearAttentionLayer(int64_t layer) const {
    return !linear_attention_layers.empty() && linear_attention_layers[static_cast<size_t>(layer)];
  }
  int64_t linear_num_key_heads = 0;    // the DeltaNet's q / k heads
  int64_t linear_num_value_heads = 0;  // its v heads (a multiple: each k head serves consecutive v heads)
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;  // the causal depthwise conv1d's kernel
  // The full-attention layers' q_proj holds 2 * head_dim rows per head, [q_h | gate_h], and the attention
  // output is multiplied by sigmoid(gate) before o_proj (Qwen3_5Attention).
  bool attention_output_gate = false;
  // DeepSeek-V3's multi-head latent attention on every layer (FamilyTraits::latent_attention; semantics in
  // family.h LatentAttentionTraits). head_dim is then qk_rope_head_dim (= rotary_dim) and num_kv_heads
  // num_heads; the score scale is attention_scale.
  bool latent_attention = false;
  int64_t q_lora_rank = 0;  // 0: config.json's q_lora_rank absent or null (q_proj instead of q_a / q_b)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // DeepSeek Sparse Attention (LatentAttentionTraits::indexer: DeepSeek-V3.2, GLM-5): config.json's
  // index_topk; windows of up to index_topk + 1 ids are served (ServedContextLength), where the indexer keeps
  // every key. 0: no indexer.
  int64_t index_topk = 0;
  // FamilyTraits::attention_sinks (gpt-oss): every attention layer's softmax takes its head's learned sink
  // logit as one more column, then drops it (family.h).
  bool attention_sinks = false;
  // Gemma 4 (GemmaTraits::gemma4): v RMSNorm per head without a weight; full layers (layer_window 0) with
  // head_dim full_head_dim and num_kv_heads full_kv_heads (0: head_dim / num_kv_heads) and, under
  // attention_k_eq_v, no v_proj (v = k_proj(x) before k's norm and RoPE); every layer's output times its
  // layer_scalar tensor.
  bool value_norm = false;
  bool attention_k_eq_v = false;
  bool layer_scalar = false;
  int64_t full_head_dim = 0;
  int64_t full_kv_heads = 0;
  int64_t LayerHeadDim(int64_t layer) const {
    return full_head_dim > 0 && LayerWindow(layer) == 0 ? full_head_dim : head_dim;
  }
  int64_t LayerKvHeads(int64_t layer) const {
    return full_kv_heads > 0 && LayerWindow(layer) == 0 ? full_kv_heads : num_kv_heads;
  }
  bool has_quantization_config = false;
  std::string quantization_config_json;  // raw JSON text of quantization_config ("" when absent);
                                         // older files name it "compression_config"
};

// source_name is used in error messages (usually the file path).
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source_name);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// A reference model (--reference_model) must index the same vocabulary as the model: KL divergence over the
// ids needs one id space. INVALID_ARGUMENT naming both sizes otherwise.
absl::Status CheckBaselineVocabulary(int64_t model_vocab_size, int64_t reference_vocab_size);

// The longest sequence an engine serves: max_seq_len (EngineOptions::max_seq_len, `--max_seq_len`), or 0 for
// the model's trained context, config.json's max_position_embeddings (which a rope_scaling config such as
// llama3's or longrope's already states at its scaled length). Up to max_position_embeddings + 1 is served:
// the last id of a sequence is only a target (no output is read at its position), so a sequence of
// max_position_embeddings + 1 ids predicts every token from trained positions, as transformers' model does
// with max_length = max_position_embeddings inputs. Longer is refused, INVALID_ARGUMENT naming --max_seq_len,
// max_position_embeddings, the RoPE scaling and --allow_long_context: positions past the trained context are
// extrapolation, and their log-probs measure nothing. With allow_long_context it is served as asked.
// DeepSeek Sparse Attention (config.index_topk > 0) caps it at index_topk + 1 ids whatever is asked: a
// longer window would need the indexer's top-k selection, which is not implemented (0 gives the smaller of
// the two; a longer max_seq_len is INVALID_ARGUMENT naming index_topk, allow_long_context or not).
absl::StatusOr<int64_t> ServedContextLength(const ModelConfig& config, int64_t max_seq_len,
                                            bool allow_long_context);

// "rope_theta 10000, no rope_scaling" / "rope_theta 500000, rope_scaling llama3 factor 8 (original 8192)":
// the model's RoPE, for errors and the start-up log.
std::string DescribeRope(const ModelConfig& config);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_CONFIG_H_
