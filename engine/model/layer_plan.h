// The model's structure as data: what each decoder layer computes, decided ONCE from ModelConfig (whose
// flags come from the family traits, family.h) by PlanModel. The loader (which tensors a layer has), the
// shard plan, both backends (the CPU oracle's forward and the CUDA upload, activations and blocks) read the
// plan, never the family flags of ModelConfig: a GPU-vs-oracle difference is then a difference of blocks,
// not of two readings of the same flags. scripts/check_layers.py keeps every file outside engine/model/ off
// those flags.
//
// A layer is a token mixer and a channel mixer, each inside a residual branch:
//   kPreNorm  (Llama):  x += mixer(norm(x));                        x += mlp(norm(x))
//   kSandwich (Gemma):  x += post_norm(mixer(norm(x)));             x += post_norm(mlp(norm(x)))
// Token mixers: full or sliding-window causal attention (AttentionPlan), the linear-recurrent Gated
// DeltaNet (DeltaNetPlan), or DeepSeek-V3's multi-head latent attention (LatentAttentionPlan); attention may
// carry sinks (gpt-oss) and per-layer head shapes (Gemma 4). Channel mixers: one dense GLU MLP, a routed
// mixture of experts (ExpertsPlan: router kind, top k, optional shared expert, gated or not), or both in
// parallel (Gemma 4's kDenseAndExperts).
//
// A new block kind: a value here (and what PlanModel sets it from), its tensors in the loader, one block
// per backend (engine/reference, engine/cuda/forward), and the oracle op (engine/README.md, "Adding a model
// family").
//
// Thread-safety: plain values; PlanModel is a pure function.
#ifndef SCORED_ENGINE_MODEL_LAYER_PLAN_H_
#define SCORED_ENGINE_MODEL_LAYER_PLAN_H_

#include <cstdint>
#include <vector>

#include "engine/model/config.h"

namespace scored {

// Where a layer's norms sit around its two residual branches (see above).
enum class NormPlacement { kPreNorm, kSandwich };

enum class TokenMixerKind {
  kAttention,      // softmax attention over the sequence so far (a window when AttentionPlan::window > 0)
  kGatedDeltaNet,  // Qwen3.5's linear-recurrent mixer (DeltaNetPlan; semantics in family.h)
  // DeepSeek-V3's multi-head latent attention (LatentAttentionPlan; semantics in family.h
  // LatentAttentionTraits). Both backends (CUDA: cuda/forward/latent_attention_block.cc).
  kLatentAttention,
};

// A Gated DeltaNet layer's shape (family.h LinearAttentionTraits has the computation).
struct DeltaNetPlan {
  int64_t num_k_heads = 0, num_v_heads = 0;  // v head j reads k head j / (num_v_heads / num_k_heads)
  int64_t k_head_dim = 0, v_head_dim = 0;
  int64_t conv_kernel = 0;  // the causal depthwise conv1d over q|k|v's channels
  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// A multi-head latent attention layer (family.h LatentAttentionTraits has the computation). RoPE: the global
// table (rotary_dim = qk_rope_head_dim).
struct LatentAttentionPlan {
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // > 0: q = q_b_proj(RMSNorm(q_a_proj(x))); 0: q = q_proj(x)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool a_bias = false;  // q_a_proj (q_lora_rank > 0) and kv_a_proj_with_mqa carry a bias
  bool o_bias = false;  // o_proj carries a bias
  // RoPE pairs (2i, 2i + 1) within the rope part (rope_interleave) instead of (i, i + qk_rope_head_dim / 2).
  bool rope_interleaved = true;
  double scale = 0.0;      // the score scale (ModelConfig::attention_scale), > 0
  double norm_eps = 1e-6;  // the q_a / kv_a RMSNorms' epsilon (not rms_norm_eps: family.h)
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t q_width() const { return num_heads * qk_head_dim(); }                       // q rows
  int64_t kv_a_width() const { return kv_lora_rank + qk_rope_head_dim; }              // kv_a rows
  int64_t kv_b_width() const { return num_heads * (qk_nope_head_dim + v_head_dim); }  // kv_b rows
  int64_t o_width() const { return num_heads * v_head_dim; }                          // o_proj's input
};

// Which RoPE frequency table a layer's attention rotates with.
enum class RopeTable {
  // rope_theta / rope_scaling. Under longrope (ModelPlan::longrope) two tables, the long one for sequences
  // longer than original_max_position_embeddings (RopeInvFreqForLength), chosen per sequence.
  kGlobal,
  // local_rope_theta / local_rope_scaling (Gemma 3's sliding layers).
  kLocal,
};

struct AttentionPlan {
  // The layer's head shape: ModelConfig's head_dim / num_kv_heads / rotary_dim, but for Gemma 4's full layers
  // (their own head_dim and kv heads, RoPE over the whole head).
  int64_t head_dim = 0, num_kv_heads = 0, rotary_dim = 0;
  bool qkv_bias = false;  // q/k/v carry a bias
  bool o_bias = false;    // o_proj carries a bias (tp: added once, by rank 0's partial product)
  bool qk_norm = false;   // per-head RMSNorm of q and k over head_dim, before RoPE
  // RMSNorm of the whole q [num_heads * head_dim] and k [num_kv_heads * head_dim] rows (weights of those
  // widths), before the head reshape and RoPE (MiniMax-M2); never with qk_norm.
  bool qk_norm_whole = false;
  // q_proj's rows are [q_h | gate_h] per head (2 head_dim each); the attention output times sigmoid(gate),
  // per element, before o_proj (Qwen3.5).
  bool output_gate = false;
  RopeTable rope = RopeTable::kGlobal;
  // RoPE pairs (2i, 2i + 1) (GPT-J, DeepSeek's rope_interleave) instead of (i, i + rotary_dim / 2).
  bool rope_interleaved = false;
  int64_t window = 0;    // > 0: query t sees keys j with t - window < j <= t; 0: full causal
  double scale = 0.0;    // > 0: the score scale; 0: 1 / sqrt(head_dim)
  float softcap = 0.0f;  // > 0: scores = tanh(scores / softcap) * softcap
  // Gemma 4: v normalized per head by an RMSNorm without a weight (after k's projection, before attention).
  bool v_norm = false;
  // Gemma 4's attention_k_eq_v full layers: no v_proj; v is k_proj's output before k's norm and RoPE.
  bool k_eq_v = false;
  // A learned sink logit per head joins each query's softmax and is dropped after it (gpt-oss; family.h
  // FamilyTraits::attention_sinks).
  bool sinks = false;
};

enum class ChannelMixerKind {
  kDenseGlu,  // down(act(gate(x)) * up(x)) of intermediate_size
  kExperts,   // a router picks experts per token (ExpertsPlan)
  // Gemma 4's MoE layers: the dense GLU and the experts in parallel on the same residual r,
  //   y = post_ff( post_ff_1(glu(pre_ff(r))) + post_ff_2(experts(pre_ff_2(r))) ),
  // the router reading r itself (ExpertsPlan::router_input_norm).
  kDenseAndExperts,
};

enum class RouterKind {
  // p = softmax(fp32 logits) over the experts; the top k (exact ties: lower id first), renormalized when
  // ExpertsPlan::norm_topk_prob (config.h's semantics).
  kSoftmaxTopK,
  // DeepSeek-V3's router (GLM-4.5, MiniMax-M2; config.h's semantics): s = sigmoid(fp32 logits), the choice
  // s + correction bias, group-limited to the topk_groups best of num_groups groups, top k of the choice
  // (exact ties: lower id first); weights the unbiased s, / (sum + renorm_epsilon) when norm_topk_prob, times
  // routed_scaling_factor.
  kSigmoidGroupLimited,
  // gpt-oss's router (GptOssTopKRouter.forward): the top k of the fp32 logits (exact ties: lower id first),
  // their weights the softmax over those k logits.
  kTopKSoftmax,
};

struct ExpertsPlan {
  RouterKind router = RouterKind::kSoftmaxTopK;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate_size = 0;  // each expert's
  bool norm_topk_prob = false;
  // kSigmoidGroupLimited: the stored e_score_correction_bias [num_experts] is added to s for the choice.
  bool correction_bias = false;
  int64_t num_groups = 1, topk_groups = 1;  // kSigmoidGroupLimited: 1 and 1 is no group limit
  float renorm_epsilon = 0.0f;              // kSigmoidGroupLimited, norm_topk_prob: the sum's epsilon
  float routed_scaling_factor = 1.0f;       // kSigmoidGroupLimited: the weights' factor (fp32)
  // > 0: a shared expert (a SwiGLU MLP of this size) added to the routed sum: scaled by
  // sigmoid(shared_expert_gate . x) (Qwen2-MoE) when shared_expert_gated, else unscaled (DeepSeek-V3's
  // n_shared_experts * moe_intermediate_size).
  int64_t shared_expert_intermediate_size = 0;
  bool shared_expert_gated = true;
  bool shared_expert() const { return shared_expert_intermediate_size > 0; }
  bool router_bias = false;  // the router's logits carry its stored bias [num_experts] (gpt-oss)
  // Gemma 4 (Gemma4TextRouter): the router's input is fp32(fp32(RMSNorm_no_weight(x) * scale) *
  // fp32(hidden^-0.5)) with the stored scale [hidden]; the routed weights are then times the stored
  // per_expert_scale[id].
  bool router_input_norm = false;
  bool per_expert_scale = false;
  bool expert_bias = false;  // every expert's gate, up and down carry a bias (gpt-oss)
};

struct ChannelMixerPlan {
  ChannelMixerKind kind = ChannelMixerKind::kDenseGlu;
  MlpActivation activation = MlpActivation::kSilu;  // the GLU's gate activation (dense and experts)
  int64_t intermediate_size = 0;                    // kDenseGlu
  ExpertsPlan experts;                              // kExperts
};

struct LayerPlan {
  NormPlacement norms = NormPlacement::kPreNorm;
  TokenMixerKind token_mixer = TokenMixerKind::kAttention;
  AttentionPlan attention;     // kAttention
  DeltaNetPlan delta_net;      // kGatedDeltaNet
  LatentAttentionPlan latent;  // kLatentAttention
  ChannelMixerPlan channel_mixer;
  // The layer's output (the residual stream after both branches) times its stored layer_scalar (Gemma 4).
  bool layer_scalar = false;

  bool sandwich() const { return norms == NormPlacement::kSandwich; }
  bool delta_net_mixer() const { return token_mixer == TokenMixerKind::kGatedDeltaNet; }
  bool latent_attention_mixer() const { return token_mixer == TokenMixerKind::kLatentAttention; }
  // The channel mixer has experts (kExperts, kDenseAndExperts) / a dense GLU (kDenseGlu, kDenseAndExperts).
  bool experts() const { return channel_mixer.kind != ChannelMixerKind::kDenseGlu; }
  bool dense_glu() const { return channel_mixer.kind != ChannelMixerKind::kExperts; }
};

struct ModelPlan {
  // > 0: the embeddings are multiplied by it in fp32 (Gemma: fp32(sqrt(hidden_size))).
  float embedding_scale = 0.0f;
  // Every RMSNorm (final, layers, q/k) multiplies by fp32(1 + weight) instead of weight (Gemma).
  bool offset_norms = false;
  // > 0: logits = tanh(logits / cap) * cap before the log-softmax (Gemma 2).
  float final_logit_softcap = 0.0f;
  // rope_scaling longrope: the global table is chosen per sequence by its length (RopeTable::kGlobal).
  bool longrope = false;
  int64_t longrope_original_max_position = 0;  // longrope: sequences longer than this take the long table
  // Some layer rotates with RopeTable::kLocal (its table must exist).
  bool local_rope = false;
  // > 0: the model's context is capped here (SlidingWindowPolicy::kWindowField: no window is computed, so
  // positions up to it are exact).
  int64_t max_context = 0;
  std::vector<LayerPlan> layers;  // [num_layers]

  // Some layer's channel mixer is kExperts.
  bool any_experts() const;
  // Some layer's token mixer is kGatedDeltaNet.
  bool any_delta_net() const;
  // The first layer whose token mixer is kLatentAttention, or -1.
  int64_t first_latent_attention() const;
  // Some attention layer has AttentionPlan::output_gate.
  bool any_output_gate() const;
  // The first kGatedDeltaNet layer's shape (every DeltaNet layer of a model has the same), or zeros.
  DeltaNetPlan delta_net_shape() const;
  // The first kLatentAttention layer's shape (every latent attention layer of a model has the same), or
  // zeros.
  LatentAttentionPlan latent_shape() const;
  // Some layer has a shared expert (gated or not).
  bool any_shared_expert() const;
  // The global table of a sequence of seq_len tokens is the long one (longrope only).
  bool LongRopeFor(int64_t seq_len) const { return longrope && seq_len > longrope_original_max_position; }
};

// The plan of `config` (its family flags and per-layer lists). Pure; never fails for a config that
// ParseModelConfig accepted (hand-built configs with empty per-layer lists plan as the Llama block).
ModelPlan PlanModel(const ModelConfig& config);

// The config whose rope_theta / rope_scaling are table t's (kLocal: local_rope_theta / local_rope_scaling),
// for RopeInvFreq and friends (rope_freq.h).
ModelConfig RopeTableConfig(const ModelConfig& config, RopeTable t);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_LAYER_PLAN_H_
