// Static per-tensor activation fake quantization (stored input_scale / input_zero_point), by hand. The
// fixtures' reference_act_quant.safetensors check the same functions against compressed-tensors on real
// inputs (Fixtures.Static*ActivationQuantMatchesCompressedTensorsBitwise).
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

// scale 0.5: x / scale = 2x exactly, so FP8's grid and saturation show directly. One static scale for every
// element, whatever the row: unlike the dynamic per-token path, a row of small values is not rescaled.
TEST(FakeQuantizeFp8Static, RoundsOnTheFp8GridAndSaturates) {
  std::vector<float> x = {1.0f, 1.0625f, 1.1875f, 300.0f, -300.0f, 0.0009765625f, 0.0f, 8.25f};
  FakeQuantizeFp8Static(x.data(), static_cast<int64_t>(x.size()), 0.5f);
  EXPECT_EQ(x[0], 1.0f);     // 2 is on the grid
  EXPECT_EQ(x[1], 1.0f);     // 2.125: halfway between 2 and 2.25 (step 0.25 in [2, 4)), ties to even -> 2
  EXPECT_EQ(x[2], 1.25f);    // 2.375: halfway between 2.25 and 2.5, ties to even (2.5) -> 1.25
  EXPECT_EQ(x[3], 224.0f);   // 600 clamps to 448 -> 448 * 0.5
  EXPECT_EQ(x[4], -224.0f);  // and symmetric
  EXPECT_EQ(x[5], 0.0009765625f);  // 2^-9: the smallest subnormal, kept
  EXPECT_EQ(x[6], 0.0f);
  EXPECT_EQ(x[7], 8.0f);  // 16.5: step 2 in [16, 32), 16.5 rounds to 16
}

// Static int8: the stored scale and zero point for every element (FakeQuantizeInt8Span).
TEST(FakeQuantizeInt8Static, UsesTheStoredZeroPoint) {
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 100.0f, -100.0f, 0.25f};
  FakeQuantizeInt8Span(x.data(), static_cast<int64_t>(x.size()), Int8TokenParams{0.5f, 5.0f});
  EXPECT_EQ(x[0], 0.0f);    // 0 / 0.5 + 5 = 5 -> (5 - 5) * 0.5
  EXPECT_EQ(x[1], 1.0f);    // 2 + 5 = 7
  EXPECT_EQ(x[2], -1.0f);   // -2 + 5 = 3
  EXPECT_EQ(x[3], 61.0f);   // 200 + 5 clamps to 127: (127 - 5) * 0.5
  EXPECT_EQ(x[4], -66.5f);  // -200 + 5 clamps to -128: (-128 - 5) * 0.5
  EXPECT_EQ(x[5], 0.5f);    // 0.5 + 5 = 5.5, ties to even -> 6: (6 - 5) * 0.5
}

}  // namespace
}  // namespace scored::ref
