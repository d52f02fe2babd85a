// PlanModel on the fixtures' real config.json files: each family's structure lands in the plan the backends
// read (norm placement, attention shape per layer, channel mixer per layer, the model-level fields).
#include "engine/model/layer_plan.h"

#include <cmath>
#include <string>

#include "engine/model/config.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

ModelPlan PlanOf(const std::string& fixture, ModelConfig* config = nullptr) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(std::string(SCORED_FIXTURES_DIR) + "/" + fixture);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  if (config != nullptr) *config = *c;
  return PlanModel(*c);
}

TEST(LayerPlanTest, LlamaIsPreNormAttentionAndOneSwiGlu) {
  ModelConfig c;
  const ModelPlan p = PlanOf("llama-w4a16-g128", &c);
  ASSERT_EQ(p.layers.size(), static_cast<size_t>(c.num_layers));
  EXPECT_EQ(p.embedding_scale, 0.0f);
  EXPECT_FALSE(p.offset_norms);
  EXPECT_FALSE(p.any_experts());
  for (const LayerPlan& l : p.layers) {
    EXPECT_EQ(l.norms, NormPlacement::kPreNorm);
    EXPECT_EQ(l.token_mixer, TokenMixerKind::kAttention);
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.qk_norm);
    EXPECT_EQ(l.attention.rope, RopeTable::kGlobal);
    EXPECT_EQ(l.attention.window, 0);
    EXPECT_EQ(l.channel_mixer.kind, ChannelMixerKind::kDenseGlu);
    EXPECT_EQ(l.channel_mixer.activation, MlpActivation::kSilu);
    EXPECT_EQ(l.channel_mixer.intermediate_size, c.intermediate_size);
  }
}

TEST(LayerPlanTest, QwenBiasAndQkNorm) {
  for (const LayerPlan& l : PlanOf("qwen2-w4a16-g128").layers) {
    EXPECT_TRUE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.qk_norm);
  }
  for (const LayerPlan& l : PlanOf("qwen3-w4a16-g128").layers) {
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.o_bias);
    EXPECT_TRUE(l.attention.qk_norm);
  }
  for (const LayerPlan& l : PlanOf("qwen2-w4a16-g128").layers) EXPECT_FALSE(l.attention.o_bias);
  for (const LayerPlan& l : PlanOf("llama-attn-bias-w4a16-g128").layers) {
    EXPECT_TRUE(l.attention.qkv_bias);
    EXPECT_TRUE(l.attention.o_bias);
    EXPECT_FALSE(l.attention.rope_interleaved);
  }
}

// Qwen3.5: layer_types linear x 3, full; the DeltaNet layers' shape from the linear_* fields; the full
// layer's gated attention with q / k norms and 25% partial RoPE; (1 + w) norms everywhere.
TEST(LayerPlanTest, Qwen35DeltaNetLayersAndGatedAttention) {
  ModelConfig c;
  const ModelPlan p = PlanOf("qwen35-bf16", &c);
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_TRUE(p.offset_norms);
  EXPECT_TRUE(p.any_delta_net());
  EXPECT_EQ(c.rotary_dim, 8);
  for (size_t l = 0; l < 3; ++l) {
    const LayerPlan& lp = p.layers[l];
    EXPECT_EQ(lp.token_mixer, TokenMixerKind::kGatedDeltaNet) << l;
    EXPECT_EQ(lp.delta_net.num_k_heads, 2);
    EXPECT_EQ(lp.delta_net.num_v_heads, 4);
    EXPECT_EQ(lp.delta_net.k_head_dim, 16);
    EXPECT_EQ(lp.delta_net.v_head_dim, 16);
    EXPECT_EQ(lp.delta_net.conv_kernel, 4);
    EXPECT_EQ(lp.delta_net.conv_dim(), 2 * 32 + 64);
    EXPECT_EQ(lp.channel_mixer.kind, ChannelMixerKind::kDenseGlu);
  }
  const LayerPlan& full = p.layers[3];
  EXPECT_EQ(full.token_mixer, TokenMixerKind::kAttention);
  EXPECT_TRUE(full.attention.output_gate);
  EXPECT_TRUE(full.attention.qk_norm);
  EXPECT_FALSE(full.attention.qkv_bias);
  for (const LayerPlan& l : PlanOf("qwen3-w4a16-g128").layers) EXPECT_FALSE(l.attention.output_gate);
}

TEST(LayerPlanTest, PhiMasksEveryLayerWithItsWindow) {
  for (const LayerPlan& l : PlanOf("phi3-w4a16-g32").layers) EXPECT_EQ(l.attention.window, 48);
}

TEST(LayerPlanTest, GemmaSandwichGeGluSoftCapsAndWindowsPerLayer) {
  ModelConfig c;
  const ModelPlan p = PlanOf("gemma2-w4a16-g32", &c);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_TRUE(p.offset_norms);
  EXPECT_EQ(p.embedding_scale, static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
  EXPECT_EQ(p.final_logit_softcap, 3.0f);
  const int64_t windows[] = {8, 0, 8};  // layer_types: sliding, full, sliding
  for (size_t l = 0; l < 3; ++l) {
    const LayerPlan& layer = p.layers[l];
    EXPECT_EQ(layer.norms, NormPlacement::kSandwich);
    EXPECT_EQ(layer.attention.window, windows[l]) << l;
    EXPECT_EQ(layer.attention.softcap, 5.0f);
    EXPECT_DOUBLE_EQ(layer.attention.scale, 1.0 / std::sqrt(20.0));
    EXPECT_EQ(layer.attention.rope, RopeTable::kGlobal);
    EXPECT_EQ(layer.channel_mixer.activation, MlpActivation::kGeluTanh);
  }
}

TEST(LayerPlanTest, Gemma3SlidingLayersRotateWithTheLocalTable) {
  ModelConfig c;
  const ModelPlan p = PlanOf("gemma3-w4a16-g32", &c);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_TRUE(p.local_rope);
  EXPECT_EQ(p.layers[0].attention.rope, RopeTable::kLocal);
  EXPECT_EQ(p.layers[1].attention.rope, RopeTable::kLocal);
  EXPECT_EQ(p.layers[2].attention.rope, RopeTable::kGlobal);
  EXPECT_TRUE(p.layers[2].attention.qk_norm);
  const ModelConfig local = RopeTableConfig(c, RopeTable::kLocal);
  EXPECT_EQ(local.rope_theta, c.local_rope_theta);
  EXPECT_EQ(RopeTableConfig(c, RopeTable::kGlobal).rope_theta, c.rope_theta);
}

TEST(LayerPlanTest, QwenMoeLayersAreExpertsWithTheSharedExpert) {
  const ModelPlan p = PlanOf("qwen2-moe-bf16");
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_TRUE(p.any_experts());
  EXPECT_TRUE(p.any_shared_expert());
  for (const LayerPlan& l : p.layers) {
    ASSERT_TRUE(l.experts());
    const ExpertsPlan& e = l.channel_mixer.experts;
    EXPECT_EQ(e.router, RouterKind::kSoftmaxTopK);
    EXPECT_EQ(e.num_experts, 4);
    EXPECT_EQ(e.top_k, 2);
    EXPECT_EQ(e.expert_intermediate_size, 32);
    EXPECT_FALSE(e.norm_topk_prob);
    EXPECT_EQ(e.shared_expert_intermediate_size, 64);
  }
  const ModelPlan mixtral = PlanOf("mixtral-moe-bf16");
  EXPECT_TRUE(mixtral.any_experts());
  EXPECT_FALSE(mixtral.any_shared_expert());
  for (const LayerPlan& l : mixtral.layers) EXPECT_TRUE(l.channel_mixer.experts.norm_topk_prob);
}

TEST(LayerPlanTest, AHandBuiltConfigPlansAsTheLlamaBlock) {
  ModelConfig c;
  c.num_layers = 2;
  c.intermediate_size = 16;
  const ModelPlan p = PlanModel(c);
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[1].norms, NormPlacement::kPreNorm);
  EXPECT_EQ(p.layers[1].channel_mixer.kind, ChannelMixerKind::kDenseGlu);
  EXPECT_FALSE(p.local_rope);
}

}  // namespace
}  // namespace scored
