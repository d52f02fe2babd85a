// ExpToFloat (the attention softmax exponential) against the double-precision library exp rounded to fp32.
#include "engine/reference/fast_exp.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>

#include "gtest/gtest.h"

namespace scored::ref {
namespace {

int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  return std::llabs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

TEST(ExpToFloat, KnownValues) {
  EXPECT_EQ(ExpToFloat(0.0f), 1.0f);
  EXPECT_EQ(ExpToFloat(-1.0f), static_cast<float>(std::exp(-1.0)));
  EXPECT_EQ(ExpToFloat(-0.6931471805599453f), static_cast<float>(std::exp(-0.6931471805599453f)));
  EXPECT_EQ(ExpToFloat(-800.0f), 0.0f);    // clamped at -700: e^-700 rounds to 0 in fp32
  EXPECT_EQ(ExpToFloat(-INFINITY), 0.0f);  // a masked score
  EXPECT_GT(ExpToFloat(-100.0f), 0.0f);    // e^-100 = 3.7e-44 is an fp32 subnormal
  EXPECT_EQ(ExpToFloat(-100.0f), static_cast<float>(std::exp(-100.0)));
}

// fp32(e^x) with e^x from the double library exp (error < 1 ulp of double) is the correctly rounded fp32
// value except within ~1e-16 of a boundary; ExpToFloat's own error is ~2e-14 before rounding, so the two
// may differ by one ulp only where e^x lies within ~2e-14 relative of an fp32 rounding boundary: about
// 2e-14 / 6e-8 = 3e-7 of arguments. Allowing 1e-4 of 10^6 samples to differ checks that at a wide margin.
TEST(ExpToFloat, MatchesRoundedDoubleExp) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-110.0f, 0.0f);
  int64_t differ = 0;
  const int64_t samples = 1000000;
  for (int64_t i = 0; i < samples; ++i) {
    const float x = i < 1000 ? -static_cast<float>(i) * 1e-3f : dist(rng);
    const float expected = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = ExpToFloat(x);
    ASSERT_LE(UlpDistance(got, expected), 1) << x;
    differ += got != expected ? 1 : 0;
  }
  EXPECT_LE(differ, samples / 10000);
  std::cout << differ << " of " << samples << " arguments differ by one ulp\n";
}

}  // namespace
}  // namespace scored::ref
