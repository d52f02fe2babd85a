#include "engine/base/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace scored {
namespace {

uint32_t Bits(float f) { return FloatBits(f); }

// ---- bf16 ----

TEST(Bf16Test, WidenKnownValues) {
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(Bf16ToFloat(0x3fc0), 1.5f);
  EXPECT_EQ(Bf16ToFloat(0x7f7f), 3.38953139e38f);
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0x7f80)));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7fc0)));
  EXPECT_EQ(Bits(Bf16ToFloat(0x8000)), 0x80000000u);
}

TEST(Bf16Test, RoundTripEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const float f = Bf16ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f)))) << c;
      EXPECT_EQ(FloatToBf16(f) & 0x8000, h & 0x8000) << c;
    } else {
      EXPECT_EQ(FloatToBf16(f), h) << c;
    }
  }
}

TEST(Bf16Test, RoundNearestTiesToEven) {
  // 1 + 2^-8 lies exactly between bf16 1.0 (0x3f80, even) and 1.0078125 (0x3f81, odd): even wins.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f808000u)), 0x3f80);
  // 1.0078125 + 2^-8 lies between 0x3f81 (odd) and 0x3f82 (even): rounds up to even.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f818000u)), 0x3f82);
  // Just above / below the tie.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f817fffu)), 0x3f81);
  // Negative tie.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0xbf808000u)), 0xbf80);
  // Overflow of the largest finite fp32 rounds to inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // Subnormal fp32 tie: 0x00008000 -> 0x0000 (even), 0x00018000 -> 0x0002.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00008000u)), 0x0000);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00018000u)), 0x0002);
  // NaN stays NaN (a signalling payload in the low bits only must not become inf).
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7f800001u)) & 0x7fc0, 0x7fc0);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0xffc00000u)), 0xffc0);
  EXPECT_EQ(RoundToBf16(3.14159265f), 3.140625f);
}

// ---- fp16 ----

TEST(Fp16Test, WidenKnownValues) {
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x03ff), 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(Fp16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(Bits(Fp16ToFloat(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0xfc00)) && Fp16ToFloat(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7e00)));
}

TEST(Fp16Test, RoundTripEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const float f = Fp16ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f)))) << c;
    } else {
      EXPECT_EQ(FloatToFp16(f), h) << c;
    }
  }
}

TEST(Fp16Test, RoundNearestTiesToEven) {
  // 1 + 2^-11: tie between 0x3c00 (even) and 0x3c01.
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Largest finite and the overflow boundary: 65519 -> 65504, 65520 (tie, 65504 odd) -> inf.
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToFp16(-1e10f), 0xfc00);
  // Subnormal ties: 2^-25 -> 0 (even); 3 * 2^-25 -> 2 * 2^-24.
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFp16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  // Largest subnormal + half an ulp rounds up into the smallest normal.
  EXPECT_EQ(FloatToFp16(1023.5f * std::ldexp(1.0f, -24)), 0x0400);
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

#ifdef __FLT16_MAX__
// The compiler's own _Float16 conversion (IEEE RNE) is an independent oracle: sweep fp32 bit patterns
// with a stride that visits every exponent with many mantissas, plus the neighbourhood of every fp16 tie.
TEST(Fp16Test, MatchesCompilerFloat16) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    const float f = BitsToFloat(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expect;
    std::memcpy(&expect, &h, sizeof(expect));
    ASSERT_EQ(FloatToFp16(f), expect) << std::hex << u;
  }
  for (uint32_t c = 0; c < 0x7c00; ++c) {
    const uint32_t mid = FloatBits(Fp16ToFloat(static_cast<uint16_t>(c))) + 0x1000u;
    for (uint32_t d = mid - 2; d <= mid + 2; ++d) {
      const float f = BitsToFloat(d);
      const _Float16 h = static_cast<_Float16>(f);
      uint16_t expect;
      std::memcpy(&expect, &h, sizeof(expect));
      ASSERT_EQ(FloatToFp16(f), expect) << std::hex << d;
    }
  }
}
#endif

// ---- FP8 E4M3FN ----

TEST(Fp8E4M3Test, WidenKnownValues) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x40), 2.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x3c), 1.5f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0.015625f);     // smallest normal 2^-6
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * 0.001953125f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x77), 240.0f);
  EXPECT_EQ(Bits(Fp8E4M3ToFloat(0x80)), 0x80000000u);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
}

// Decodes every code and checks the value against the format's definition computed in double.
TEST(Fp8E4M3Test, EveryCodeMatchesDefinitionAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    const int sign = (c >> 7) & 1, exp = (c >> 3) & 15, man = c & 7;
    const float f = Fp8E4M3ToFloat(b);
    if (exp == 15 && man == 7) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(FloatToFp8E4M3(f), b) << c;  // NaN preserved with its sign
      continue;
    }
    const double mag = exp == 0 ? man * std::ldexp(1.0, -9) : (1.0 + man / 8.0) * std::ldexp(1.0, exp - 7);
    EXPECT_EQ(static_cast<double>(f), sign ? -mag : mag) << c;
    EXPECT_EQ(FloatToFp8E4M3(f), b) << c;
  }
}

// Brute-force oracle: nearest finite code by |value - x| in double, ties to the even code, |x| > 448
// saturates.
uint8_t NearestFp8(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return neg ? 0xfe : 0x7e;
  int best = 0;
  double best_err = a;
  for (int c = 1; c <= 0x7e; ++c) {
    const double err = std::fabs(static_cast<double>(Fp8E4M3ToFloat(static_cast<uint8_t>(c))) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (neg ? 0x80 : 0));
}

TEST(Fp8E4M3Test, NarrowMatchesBruteForceOracle) {
  // Every midpoint between neighbouring codes (the ties) and a little either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    const double hi = Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      EXPECT_EQ(FloatToFp8E4M3(x), NearestFp8(x)) << x;
      EXPECT_EQ(FloatToFp8E4M3(-x), NearestFp8(-x)) << -x;
    }
  }
  // A sweep of fp32 patterns across the fp8 range and beyond.
  for (uint32_t u = 0x30000000u; u < 0x44000000u; u += 4099) {
    const float x = BitsToFloat(u);
    ASSERT_EQ(FloatToFp8E4M3(x), NearestFp8(x)) << x;
  }
}

TEST(Fp8E4M3Test, KnownTiesAndSaturation) {
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);                    // tie 1.0 / 1.125 -> 1.0 (even)
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);                    // tie 1.125 / 1.25 -> 1.25 (even)
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);      // half the smallest subnormal -> 0
  EXPECT_EQ(FloatToFp8E4M3(3 * std::ldexp(1.0f, -10)), 0x02);  // tie 1/2 subnormal units -> 2
  EXPECT_EQ(FloatToFp8E4M3(-3 * std::ldexp(1.0f, -10)), 0x82);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(500.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(1e30f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(0.0146484375f), 0x08);  // largest subnormal + half unit, tie -> 0x08 (even)
}

// ---- E2M1 ----

TEST(E2M1Test, AllSixteenCodes) {
  const float expect[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(Bits(E2M1ToFloat(static_cast<uint8_t>(c))), Bits(expect[c])) << c;
  }
  // Only the low nibble counts.
  EXPECT_EQ(E2M1ToFloat(0xf7), 6.0f);
}

}  // namespace
}  // namespace scored
