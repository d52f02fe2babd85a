// The rotation of ref::Rope on hand cases. Its frequencies (RopeInvFreq, engine/model/rope_freq.h) are
// tested in tests/engine/model/rope_freq_test.cc.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace scored::ref
