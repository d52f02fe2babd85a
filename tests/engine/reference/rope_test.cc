// RoPE frequencies (default, linear, llama3) against values computed independently here in double, and the
// rotation itself on hand cases.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

// fp32 rounding of the exponent 2i/d alone moves theta^(2i/d) by up to ~6e-8 * ln(theta) relative (8e-7 at
// theta 5e5), and a few fp32 roundings follow: 2e-6 relative separates that from any formula error.
constexpr double kInvFreqRelTol = 2e-6;

ModelConfig MakeConfig(int64_t head_dim, double theta) {
  ModelConfig config;
  config.head_dim = head_dim;
  config.rope_theta = theta;
  return config;
}

double DefaultInvFreq(double theta, int64_t i, int64_t d) { return std::pow(theta, -2.0 * i / d); }

TEST(RopeInvFreq, DefaultMatchesPowers) {
  const std::vector<float> f = RopeInvFreq(MakeConfig(8, 10000.0));
  ASSERT_EQ(f.size(), 4u);
  const double expected[] = {1.0, 0.1, 0.01, 0.001};  // 10000^(-2i/8)
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], expected[i], expected[i] * kInvFreqRelTol) << i;
}

TEST(RopeInvFreq, LinearDividesByFactor) {
  ModelConfig config = MakeConfig(64, 10000.0);
  config.rope_scaling.type = RopeType::kLinear;
  config.rope_scaling.factor = 4.0;
  const std::vector<float> f = RopeInvFreq(config);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double expected = DefaultInvFreq(10000.0, i, 64) / 4.0;
    EXPECT_NEAR(f[i], expected, expected * kInvFreqRelTol) << i;
  }
}

// Llama-3.1 parameters: theta 5e5, head_dim 128, factor 8, low 1, high 4, original context 8192.
TEST(RopeInvFreq, Llama3Bands) {
  ModelConfig config = MakeConfig(128, 500000.0);
  config.rope_scaling.type = RopeType::kLlama3;
  config.rope_scaling.factor = 8.0;
  config.rope_scaling.low_freq_factor = 1.0;
  config.rope_scaling.high_freq_factor = 4.0;
  config.rope_scaling.original_max_position_embeddings = 8192;
  const std::vector<float> f = RopeInvFreq(config);
  ASSERT_EQ(f.size(), 64u);
  const double kPi = 3.14159265358979323846;
  for (int i = 0; i < 64; ++i) {
    const double inv = DefaultInvFreq(500000.0, i, 128);
    const double wavelen = 2.0 * kPi / inv;
    double expected;
    if (wavelen < 8192.0 / 4.0) {
      expected = inv;
    } else if (wavelen > 8192.0 / 1.0) {
      expected = inv / 8.0;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expected = (1.0 - smooth) * inv / 8.0 + smooth * inv;
    }
    EXPECT_NEAR(f[i], expected, expected * kInvFreqRelTol) << i;
  }
  // The band edges worked out by hand for these parameters: wavelengths 1956 (i=28) < 2048 <= 2402 (i=29),
  // 6695 (i=34) <= 8192 < 8219 (i=35).
  EXPECT_NEAR(f[28], DefaultInvFreq(500000.0, 28, 128), 1e-8);
  EXPECT_LT(f[29], DefaultInvFreq(500000.0, 29, 128) * 0.999);
  EXPECT_GT(f[34], DefaultInvFreq(500000.0, 34, 128) / 8.0 * 1.001);
  EXPECT_NEAR(f[35], DefaultInvFreq(500000.0, 35, 128) / 8.0, 1e-9);
}

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

}  // namespace
}  // namespace scored::ref
