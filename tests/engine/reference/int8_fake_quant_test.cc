// W8A8 INT8 dynamic per-token activation fake quantization, by hand. Every expected value was also checked
// against compressed-tensors 0.19 itself (compute_dynamic_scales_and_zp + fake_quantize on the same rows).
#include <cfloat>
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

std::vector<float> Quantized(std::vector<float> row, bool symmetric) {
  FakeQuantizeInt8PerToken(row.data(), 1, static_cast<int64_t>(row.size()), symmetric);
  return row;
}

// amax 127.5: scale = 127.5 / 127.5 = 1 exactly, so x / scale = x and the rounding is visible directly.
TEST(FakeQuantizeInt8, SymmetricRoundsHalfToEvenAndClamps) {
  const std::vector<float> row = {127.5f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.4999999f, -127.5f};
  const Int8TokenParams p = Int8TokenQuantParams(row.data(), static_cast<int64_t>(row.size()), true);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 0.0f);
  const std::vector<float> q = Quantized(row, true);
  EXPECT_EQ(q[0], 127.0f);   // +amax / scale = 127.5 clamps to 127
  EXPECT_EQ(q[1], 2.0f);     // ties to even
  EXPECT_EQ(q[2], 4.0f);     // ties to even
  EXPECT_EQ(q[3], -2.0f);    // ties to even
  EXPECT_EQ(q[4], 0.0f);     // -0.5 -> -0
  EXPECT_EQ(q[5], 0.0f);     // 0.5 -> 0
  EXPECT_EQ(q[6], 1.0f);     // below the tie
  EXPECT_EQ(q[7], -128.0f);  // -amax / scale = -127.5: inside [-128, 127], ties to even -128
}

// amax 1: scale = fp32(1 / 127.5) = 0.007843137718737125, just above 1 / 127.5, so +-1 / scale is just inside
// +-127.5 and both ends land on +-127.
TEST(FakeQuantizeInt8, SymmetricScaleIsAmaxOver127Point5) {
  const std::vector<float> row = {1.0f, -1.0f, 0.25f, -0.5f};
  const Int8TokenParams p = Int8TokenQuantParams(row.data(), static_cast<int64_t>(row.size()), true);
  EXPECT_EQ(p.scale, 1.0f / 127.5f);
  EXPECT_EQ(p.scale, 0.007843137718737125f);
  const std::vector<float> q = Quantized(row, true);
  EXPECT_EQ(q[0], 127.0f * p.scale);
  EXPECT_EQ(q[0], 0.9960784912109375f);
  EXPECT_EQ(q[1], -0.9960784912109375f);
  EXPECT_EQ(q[2], 32.0f * p.scale);  // 0.25 / scale = 31.875 -> 32
  EXPECT_EQ(q[2], 0.250980406999588f);
  EXPECT_EQ(q[3], -0.501960813999176f);  // -63.75 -> -64
}

// Asymmetric: scale = (max(x, 0) - min(x, 0)) / 255, zero point = round(-128 - min / scale).
TEST(FakeQuantizeInt8, AsymmetricZeroPoint) {
  // All >= 0: min 0 -> zero point -128; scale 255 / 255 = 1. x - 128 rounds half to even.
  const std::vector<float> pos = {0.0f, 2.5f, 3.5f, 51.0f, 255.0f};
  const Int8TokenParams pp = Int8TokenQuantParams(pos.data(), static_cast<int64_t>(pos.size()), false);
  EXPECT_EQ(pp.scale, 1.0f);
  EXPECT_EQ(pp.zero_point, -128.0f);
  EXPECT_EQ(Quantized(pos, false), (std::vector<float>{0.0f, 2.0f, 4.0f, 51.0f, 255.0f}));

  // min -0.75, max 254.25: scale 1, zero point -128 + 0.75 = -127.25 -> -127 (an integer, as int8 holds it).
  const std::vector<float> row = {-0.75f, 0.0f, 0.5f, 1.5f, 254.25f};
  const Int8TokenParams p = Int8TokenQuantParams(row.data(), static_cast<int64_t>(row.size()), false);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, -127.0f);
  const std::vector<float> q = Quantized(row, false);
  EXPECT_EQ(q[0], -1.0f);  // -0.75 - 127 = -127.75 -> -128; (-128 + 127) * 1: the zero point's rounding shows
  EXPECT_EQ(q[1], 0.0f);   // 0 stays exactly 0
  EXPECT_EQ(q[2], 1.0f);   // -126.5 -> -126 (even)
  EXPECT_EQ(q[3], 1.0f);   // -125.5 -> -126 (even)
  EXPECT_EQ(q[4], 254.0f);  // 127.25 clamps to 127: (127 + 127) * 1
}

// An all-zero row: scale 0 becomes float32 eps and the row stays 0 (asymmetric: the zero point 0 / 0 is NaN,
// which torch's conversion to int8 makes 0).
TEST(FakeQuantizeInt8, AllZeroRowStaysZero) {
  for (const bool symmetric : {true, false}) {
    const std::vector<float> row(6, 0.0f);
    const Int8TokenParams p = Int8TokenQuantParams(row.data(), static_cast<int64_t>(row.size()), symmetric);
    EXPECT_EQ(p.scale, FLT_EPSILON) << symmetric;
    EXPECT_EQ(p.zero_point, 0.0f) << symmetric;
    EXPECT_EQ(Quantized(row, symmetric), row) << symmetric;
  }
}

// Each token (row) has its own scale and zero point.
TEST(FakeQuantizeInt8, OneScalePerToken) {
  std::vector<float> x = {127.5f, 2.5f, -127.5f,  // scale 1
                          255.0f, 5.0f, -1.0f};   // scale 2: 5 / 2 = 2.5 -> 2 -> 4; -1 / 2 = -0.5 -> -0
  FakeQuantizeInt8PerToken(x.data(), 2, 3, true);
  EXPECT_EQ(x, (std::vector<float>{127.0f, 2.0f, -128.0f, 254.0f, 4.0f, 0.0f}));
}

}  // namespace
}  // namespace scored::ref
