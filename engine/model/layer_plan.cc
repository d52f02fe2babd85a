#include "engine/model/layer_plan.h"

#include <algorithm>

namespace scored {

bool ModelPlan::any_experts() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerPlan& l) { return l.experts(); });
}

bool ModelPlan::any_shared_expert() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerPlan& l) {
    return l.experts() && l.channel_mixer.experts.shared_expert_intermediate_size > 0;
  });
}

bool ModelPlan::any_delta_net() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerPlan& l) { return l.delta_net_mixer(); });
}

int64_t ModelPlan::first_latent_attention() const {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].latent_attention_mixer()) return static_cast<int64_t>(l);
  }
  return -1;
}

bool ModelPlan::any_output_gate() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerPlan& l) { return !l.delta_net_mixer() && l.attention.output_gate; });
}

LatentAttentionPlan ModelPlan::latent_shape() const {
  const int64_t l = first_latent_attention();
  return l >= 0 ? layers[static_cast<size_t>(l)].latent : LatentAttentionPlan{};
}

DeltaNetPlan ModelPlan::delta_net_shape() const {
  for (const LayerPlan& l : layers) {
    if (l.delta_net_mixer()) return l.delta_net;
  }
  return {};
}

namespace {

AttentionPlan PlanAttention(const ModelConfig& c, int64_t layer) {
  AttentionPlan a;
  a.head_dim = c.LayerHeadDim(layer);
  a.num_kv_heads = c.LayerKvHeads(layer);
  a.rotary_dim = c.full_head_dim > 0 ? a.head_dim : c.rotary_dim;
  a.v_norm = c.value_norm;
  a.k_eq_v = c.attention_k_eq_v && c.LayerWindow(layer) == 0;
  a.qkv_bias = c.attention_bias;
  a.o_bias = c.o_proj_bias;
  a.rope_interleaved = c.rope_interleave;
  a.qk_norm = c.qk_norm;
  a.qk_norm_whole = c.qk_norm_whole;
  a.output_gate = c.attention_output_gate;
  a.rope = c.LocalRope(layer) ? RopeTable::kLocal : RopeTable::kGlobal;
  a.window = c.LayerWindow(layer);
  a.scale = c.attention_scale;
  a.softcap = c.attn_logit_softcap;
  a.sinks = c.attention_sinks;
  return a;
}

LatentAttentionPlan PlanLatentAttention(const ModelConfig& c) {
  LatentAttentionPlan a;
  a.num_heads = c.num_heads;
  a.q_lora_rank = c.q_lora_rank;
  a.kv_lora_rank = c.kv_lora_rank;
  a.qk_nope_head_dim = c.qk_nope_head_dim;
  a.qk_rope_head_dim = c.qk_rope_head_dim;
  a.v_head_dim = c.v_head_dim;
  a.a_bias = c.attention_bias;
  a.o_bias = c.o_proj_bias;
  a.rope_interleaved = c.rope_interleave;
  a.scale = c.attention_scale;
  return a;
}

ChannelMixerPlan PlanChannelMixer(const ModelConfig& c, int64_t layer) {
  ChannelMixerPlan m;
  m.activation = c.mlp_activation;
  m.intermediate_size = c.intermediate_size;
  if (!c.IsSparseLayer(layer)) return m;
  m.kind = c.parallel_dense_experts ? ChannelMixerKind::kDenseAndExperts : ChannelMixerKind::kExperts;
  ExpertsPlan& e = m.experts;
  e.router = c.sigmoid_router        ? RouterKind::kSigmoidGroupLimited
             : c.router_topk_softmax ? RouterKind::kTopKSoftmax
                                     : RouterKind::kSoftmaxTopK;
  e.num_experts = c.num_experts;
  e.top_k = c.num_experts_per_tok;
  e.expert_intermediate_size = c.moe_intermediate_size;
  e.norm_topk_prob = c.norm_topk_prob;
  if (c.sigmoid_router) {
    e.correction_bias = c.router_correction_bias;
    e.num_groups = c.router_num_groups;
    e.topk_groups = c.router_topk_groups;
    e.renorm_epsilon = c.router_renorm_epsilon;
    e.routed_scaling_factor = c.routed_scaling_factor;
  }
  e.shared_expert_intermediate_size = c.shared_expert_intermediate_size;
  e.shared_expert_gated = c.shared_expert_gated;
  e.router_bias = c.router_bias;
  e.router_input_norm = c.gemma4_router;
  e.per_expert_scale = c.gemma4_router;
  e.expert_bias = c.expert_bias;
  return m;
}

}  // namespace

ModelPlan PlanModel(const ModelConfig& c) {
  ModelPlan p;
  p.embedding_scale = c.embedding_scale;
  p.offset_norms = c.gemma_norm;
  p.final_logit_softcap = c.final_logit_softcap;
  p.longrope = c.rope_scaling.type == RopeType::kLongrope;
  p.longrope_original_max_position = c.rope_scaling.original_max_position_embeddings;
  p.max_context = c.sliding_window;
  p.layers.resize(static_cast<size_t>(std::max<int64_t>(0, c.num_layers)));
  for (int64_t l = 0; l < static_cast<int64_t>(p.layers.size()); ++l) {
    LayerPlan& layer = p.layers[static_cast<size_t>(l)];
    layer.norms = c.sandwich_norms ? NormPlacement::kSandwich : NormPlacement::kPreNorm;
    if (c.latent_attention) {
      layer.token_mixer = TokenMixerKind::kLatentAttention;
      layer.latent = PlanLatentAttention(c);
    } else if (c.LinearAttentionLayer(l)) {
      layer.token_mixer = TokenMixerKind::kGatedDeltaNet;
      layer.delta_net = {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                         c.linear_value_head_dim, c.linear_conv_kernel_dim};
    } else {
      layer.token_mixer = TokenMixerKind::kAttention;
      layer.attention = PlanAttention(c, l);
    }
    layer.channel_mixer = PlanChannelMixer(c, l);
    layer.layer_scalar = c.layer_scalar;
    p.local_rope = p.local_rope || layer.attention.rope == RopeTable::kLocal;
  }
  return p;
}

ModelConfig RopeTableConfig(const ModelConfig& c, RopeTable t) {
  if (t == RopeTable::kGlobal && c.full_head_dim > 0) {  // Gemma 4: the full layers' table spans their heads
    ModelConfig full = c;
    full.head_dim = c.full_head_dim;
    full.rotary_dim = c.full_head_dim;
    return full;
  }
  if (t == RopeTable::kGlobal) return c;
  ModelConfig local = c;
  local.rope_theta = c.local_rope_theta;
  local.rope_scaling = c.local_rope_scaling;
  return local;
}

}  // namespace scored
