// The rotation of ref::Rope on hand cases, and its interleaved pairs against transformers' own
// apply_rotary_pos_emb_interleave (tests/fixtures/rope_yarn_golden.json, key "interleave", made by
// scripts/fixtures/make_rope_goldens.py). Its frequencies (RopeInvFreq, engine/model/rope_freq.h) are tested
// in tests/engine/model/rope_freq_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored::ref {
namespace {

TEST(Rope, RotatesHalvesByPositionAngle) {
  // head_dim 2, inv_freq 1: position p rotates (a, b) by angle p.
  const float inv_freq[] = {1.0f};
  const int32_t positions[] = {0, 1, 2};
  std::vector<float> x = {1.0f, 0.0f,   // t0: identity
                          1.0f, 0.0f,   // t1: (cos 1, sin 1)
                          0.0f, 1.0f};  // t2: (-sin 2, cos 2)
  Rope(x.data(), positions, inv_freq, 3, 1, 2);
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  EXPECT_FLOAT_EQ(x[1], 0.0f);
  EXPECT_NEAR(x[2], std::cos(1.0), 1e-7);
  EXPECT_NEAR(x[3], std::sin(1.0), 1e-7);
  EXPECT_NEAR(x[4], -std::sin(2.0), 1e-7);
  EXPECT_NEAR(x[5], std::cos(2.0), 1e-7);
}

TEST(Rope, PairsIAndIPlusHalfForEveryHead) {
  // head_dim 4 (pairs (0,2) and (1,3)), 2 heads, position 3, inv_freq {1, 0.5}.
  const float inv_freq[] = {1.0f, 0.5f};
  const int32_t positions[] = {3};
  std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 2, -3};
  const std::vector<float> in = x;
  Rope(x.data(), positions, inv_freq, 1, 2, 4);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 2; ++i) {
      const double angle = 3.0 * (i == 0 ? 1.0 : 0.5);
      const double a = in[h * 4 + i], b = in[h * 4 + i + 2];
      EXPECT_NEAR(x[h * 4 + i], a * std::cos(angle) - b * std::sin(angle), 1e-6);
      EXPECT_NEAR(x[h * 4 + i + 2], b * std::cos(angle) + a * std::sin(angle), 1e-6);
    }
  }
}

// Partial rotary (Phi-3): head_dim 6, rotary_dim 4: pairs (0, 2) and (1, 3) rotate, elements 4 and 5 pass
// through untouched; the attention scaling multiplies cos and sin (longrope), not the pass-through part.
TEST(Rope, PartialRotaryLeavesTheTailAndScalesCosSin) {
  const float inv_freq[] = {1.0f, 0.25f};
  const int32_t positions[] = {2};
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> in = x;
  const float scaling = 1.25f;
  Rope(x.data(), positions, inv_freq, 1, 1, 6, /*rotary_dim=*/4, scaling);
  for (int i = 0; i < 2; ++i) {
    const double angle = 2.0 * (i == 0 ? 1.0 : 0.25);
    const double c = std::cos(angle) * scaling, sn = std::sin(angle) * scaling;
    EXPECT_NEAR(x[i], in[i] * c - in[i + 2] * sn, 1e-6);
    EXPECT_NEAR(x[i + 2], in[i + 2] * c + in[i] * sn, 1e-6);
  }
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
  // rotary_dim 0 = head_dim, scaling 1: the plain rotation, bit for bit.
  std::vector<float> a = in, b = in;
  const float inv3[] = {1.0f, 0.5f, 0.25f};
  Rope(a.data(), positions, inv3, 1, 1, 6);
  Rope(b.data(), positions, inv3, 1, 1, 6, 6, 1.0f);
  EXPECT_EQ(a, b);
}

// Interleaved (GPT-J) pairs: head_dim 6, rotary_dim 4: pairs (0, 1) and (2, 3) rotate by inv_freq 0 and 1,
// (4, 5) pass through; the same fp32 arithmetic as the halves' layout on the same pair values.
TEST(Rope, InterleavedRotatesAdjacentPairs) {
  const float inv_freq[] = {1.0f, 0.25f};
  const int32_t positions[] = {3, 0};
  std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, 0.5f, 2, -3, 7, 8};
  const std::vector<float> in = x;
  Rope(x.data(), positions, inv_freq, 2, 1, 6, /*rotary_dim=*/4, 1.0f, /*interleaved=*/true);
  for (int i = 0; i < 2; ++i) {
    const double angle = 3.0 * (i == 0 ? 1.0 : 0.25);
    const double a = in[2 * i], b = in[2 * i + 1];
    EXPECT_NEAR(x[2 * i], a * std::cos(angle) - b * std::sin(angle), 1e-6);
    EXPECT_NEAR(x[2 * i + 1], b * std::cos(angle) + a * std::sin(angle), 1e-6);
  }
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
  for (int i = 6; i < 12; ++i) EXPECT_EQ(x[i], in[i]) << "position 0 is the identity";
  // Bit for bit the halves' rotation of the de-interleaved head.
  std::vector<float> halves = {in[0], in[2], in[1], in[3], in[4], in[5]};
  Rope(halves.data(), positions, inv_freq, 1, 1, 6, 4);
  EXPECT_EQ(x[0], halves[0]);
  EXPECT_EQ(x[2], halves[1]);
  EXPECT_EQ(x[1], halves[2]);
  EXPECT_EQ(x[3], halves[3]);
}

// transformers (DeepseekV3RotaryEmbedding's cos / sin, apply_rotary_pos_emb_interleave) writes each head as
// (rotated evens, rotated odds); ours rotates in place, so its evens then odds must equal transformers'.
// torch evaluates cos / sin in fp32 (within an ulp of the correctly rounded value ours takes from double):
// bound 2e-6 on |x| <= 4 (a few fp32 ulps), measured max printed.
TEST(Rope, InterleavedEqualsTransformersDeepseekV3) {
  std::ifstream in(std::string(SCORED_FIXTURES_DIR) + "/rope_yarn_golden.json");
  ASSERT_TRUE(in.good()) << "tests/fixtures/rope_yarn_golden.json";
  const nlohmann::json g = nlohmann::json::parse(in)["interleave"];
  const std::vector<int32_t> positions = g["positions"].get<std::vector<int32_t>>();
  const std::vector<uint32_t> bits = g["inv_freq_bits"].get<std::vector<uint32_t>>();
  std::vector<float> inv_freq(bits.size());
  std::memcpy(inv_freq.data(), bits.data(), bits.size() * sizeof(float));
  const int64_t heads = g["num_heads"].get<int64_t>(), dim = g["rotary_dim"].get<int64_t>();
  const int64_t tokens = static_cast<int64_t>(positions.size());
  ASSERT_EQ(static_cast<int64_t>(inv_freq.size()), dim / 2);
  std::vector<float> x, want;
  for (const nlohmann::json& token : g["q"])
    for (const nlohmann::json& head : token)
      for (const nlohmann::json& v : head) x.push_back(v.get<float>());
  for (const nlohmann::json& token : g["q_embed"])
    for (const nlohmann::json& head : token)
      for (const nlohmann::json& v : head) want.push_back(v.get<float>());
  ASSERT_EQ(static_cast<int64_t>(x.size()), tokens * heads * dim);
  Rope(x.data(), positions.data(), inv_freq.data(), tokens, heads, dim, dim,
       g["attention_scaling"].get<float>(), /*interleaved=*/true);
  double max_diff = 0.0;
  for (int64_t r = 0; r < tokens * heads; ++r) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float* got = x.data() + r * dim;
      const float* hf = want.data() + r * dim;
      max_diff = std::max({max_diff, std::fabs(double{got[2 * i]} - hf[i]),
                           std::fabs(double{got[2 * i + 1]} - hf[i + dim / 2])});
    }
  }
  std::printf("interleaved RoPE vs transformers: max |diff| %.3g over %lld values\n", max_diff,
              static_cast<long long>(x.size()));
  EXPECT_LE(max_diff, 2e-6);
}

}  // namespace
}  // namespace scored::ref
