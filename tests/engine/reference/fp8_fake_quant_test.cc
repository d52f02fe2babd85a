// FP8 E4M3FN rounding (nearest-even, subnormals, saturation) and per-token fake quantization, by hand.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(RoundToFp8E4M3, RepresentableValuesAreExact) {
  for (float v : {0.0f, 1.0f, 1.125f, 1.75f, 2.0f, 240.0f, 256.0f, 448.0f, 0.015625f /* 2^-6 */,
                  0.001953125f /* 2^-9 */, 0.005859375f /* 3 * 2^-9 */}) {
    EXPECT_EQ(RoundToFp8E4M3(v), v) << v;
    EXPECT_EQ(RoundToFp8E4M3(-v), -v) << v;
  }
}

TEST(RoundToFp8E4M3, RoundsToNearestEven) {
  EXPECT_EQ(RoundToFp8E4M3(1.0625f), 1.0f);   // halfway 1 (mantissa 000) / 1.125 (001): even is 1
  EXPECT_EQ(RoundToFp8E4M3(1.1875f), 1.25f);  // halfway 1.125 (001) / 1.25 (010): even is 1.25
  EXPECT_EQ(RoundToFp8E4M3(1.07f), 1.125f);   // above halfway
  EXPECT_EQ(RoundToFp8E4M3(17.0f), 16.0f);    // halfway 16 / 18 (step 2 in [16, 32))
  EXPECT_EQ(RoundToFp8E4M3(19.0f), 20.0f);    // halfway 18 (001) / 20 (010)
  EXPECT_EQ(RoundToFp8E4M3(-17.5f), -18.0f);
  EXPECT_EQ(RoundToFp8E4M3(0.0009765625f), 0.0f);         // 2^-10: halfway 0 / 2^-9 -> 0
  EXPECT_EQ(RoundToFp8E4M3(0.0029296875f), 0.00390625f);  // 1.5 * 2^-9: halfway 2^-9 / 2^-8 -> 2^-8
  EXPECT_EQ(RoundToFp8E4M3(0.0001f), 0.0f);
  EXPECT_EQ(RoundToFp8E4M3(0.0157f), 0.015625f);  // 2^-6 + less than half a step (2^-9)
  EXPECT_EQ(RoundToFp8E4M3(0.0156f), 0.015625f);  // just below 2^-6 rounds up to it
}

TEST(RoundToFp8E4M3, Saturates) {
  EXPECT_EQ(RoundToFp8E4M3(447.0f), 448.0f);
  EXPECT_EQ(RoundToFp8E4M3(464.0f), 448.0f);  // would round to 480 (not an E4M3FN value)
  EXPECT_EQ(RoundToFp8E4M3(1e6f), 448.0f);
  EXPECT_EQ(RoundToFp8E4M3(-1e6f), -448.0f);
  EXPECT_TRUE(std::isnan(RoundToFp8E4M3(NAN)));
}

TEST(FakeQuantizeFp8PerToken, ScalesEachRowByItsAmax) {
  std::vector<float> x = {
      1.0f,  -2.0f,  0.5f,    4.0f,   // amax 4: x / scale = 112, -224, 56, 448 (exact E4M3)
      17.0f, 448.0f, 1.0625f, 3.0f,   // amax 448: scale 1, 17 -> 16, 1.0625 -> 1
      0.0f,  0.0f,   0.0f,    0.0f,   // zero row stays zero
      -1.0f, 0.0f,   0.0f,    0.0f};  // a lone negative amax: -448 * scale
  FakeQuantizeFp8PerToken(x.data(), 4, 4);
  const float s0 = 4.0f / 448.0f;
  EXPECT_EQ(x[0], RoundToFp8E4M3(1.0f / s0) * s0);
  EXPECT_NEAR(x[0], 1.0f, 1e-6);
  EXPECT_NEAR(x[1], -2.0f, 1e-6);
  EXPECT_NEAR(x[2], 0.5f, 1e-6);
  EXPECT_NEAR(x[3], 4.0f, 1e-6);
  EXPECT_EQ(x[4], 16.0f);
  EXPECT_EQ(x[5], 448.0f);
  EXPECT_EQ(x[6], 1.0f);
  EXPECT_EQ(x[7], 3.0f);
  for (int i = 8; i < 12; ++i) EXPECT_EQ(x[i], 0.0f);
  EXPECT_EQ(x[12], -448.0f * (1.0f / 448.0f));
  EXPECT_EQ(x[13], 0.0f);
}

TEST(FakeQuantizeFp8PerTokenGroup, EachGroupHasItsOwnScale) {
  // Row of 5 in groups of 2: (17, 448) scale 1 -> (16, 448); (1.0625, 0.5) scale 1.0625/448; (3) alone.
  std::vector<float> x = {17.0f, 448.0f, 1.0625f, 0.5f, 3.0f, 0.0f, 0.0f, -2.0f, 4.0f, 0.0f};
  std::vector<float> expected = x;
  FakeQuantizeFp8PerToken(expected.data() + 0, 1, 2);
  FakeQuantizeFp8PerToken(expected.data() + 2, 1, 2);
  FakeQuantizeFp8PerToken(expected.data() + 4, 1, 1);
  FakeQuantizeFp8PerToken(expected.data() + 5, 1, 2);
  FakeQuantizeFp8PerToken(expected.data() + 7, 1, 2);
  FakeQuantizeFp8PerToken(expected.data() + 9, 1, 1);
  FakeQuantizeFp8PerTokenGroup(x.data(), 2, 5, 2);
  EXPECT_EQ(x, expected);
  EXPECT_EQ(x[0], 16.0f);
  EXPECT_EQ(x[1], 448.0f);
  EXPECT_EQ(x[4], 3.0f);  // a lone value is its own amax: exact
  // A group as wide as the row is the per-token quantization.
  std::vector<float> a = {0.3f, -7.0f, 2.2f, 100.0f}, b = a;
  FakeQuantizeFp8PerTokenGroup(a.data(), 1, 4, 128);
  FakeQuantizeFp8PerToken(b.data(), 1, 4);
  EXPECT_EQ(a, b);
}

TEST(FakeQuantizeFp8PerToken, RelativeErrorWithinHalfAStep) {
  // Normal E4M3 values have 3 mantissa bits: relative rounding error <= 2^-4 for |x| >= 2^-6 * scale.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * 3.0f;
  const std::vector<float> in = x;
  FakeQuantizeFp8PerToken(x.data(), 1, 64);
  float amax = 0;
  for (float v : in) amax = std::max(amax, std::fabs(v));
  for (int i = 0; i < 64; ++i) {
    if (std::fabs(in[i]) >= amax / 448.0f * 0.015625f) {
      EXPECT_LE(std::fabs(x[i] - in[i]), std::fabs(in[i]) * 0.0625f * 1.0001f) << i;
    }
  }
}

}  // namespace
}  // namespace scored::ref
