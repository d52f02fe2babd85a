// The attention output gate against ref::SigmoidGateMul: fp32 bit for bit (the same double sigmoid rounded
// once and one fp32 product), bf16 one rounding of it; strided rows (the gate rows of a q|k|v|gate GEMM
// output) and the columns past width untouched.
#include "engine/kernels/sigmoid_gate.h"

#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class SigmoidGateTest : public testing::GpuTest {};

TEST_F(SigmoidGateTest, MatchesReferenceOnStridedRows) {
  const int64_t tokens = 37, width = 96, x_stride = 100, gate_stride = 260;
  const std::vector<float> x =
      testing::RoundedToBf16(testing::RandomFloats(tokens * x_stride, 81, -4.0f, 4.0f));
  const std::vector<float> g =
      testing::RoundedToBf16(testing::RandomFloats(tokens * gate_stride, 82, -12.0f, 12.0f));
  std::vector<float> want = x;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> row(x.begin() + t * x_stride, x.begin() + t * x_stride + width);
    ref::SigmoidGateMul(row.data(), g.data() + t * gate_stride, width);
    std::copy(row.begin(), row.end(), want.begin() + t * x_stride);
  }
  DeviceArray<float> d32(x), g32(g);
  DeviceArray<bf16_t> d16(testing::ToBf16(x)), g16(testing::ToBf16(g));
  ASSERT_TRUE(SigmoidGateMul(d32.get(), x_stride, g32.get(), gate_stride, tokens, width, stream_).ok());
  ASSERT_TRUE(SigmoidGateMul(d16.get(), x_stride, g16.get(), gate_stride, tokens, width, stream_).ok());
  Sync();
  const std::vector<float> got32 = d32.Download();
  const std::vector<float> got16 = testing::FromBf16(d16.Download());
  for (int64_t e = 0; e < tokens * x_stride; ++e) {
    ASSERT_EQ(got32[e], want[e]) << "fp32 at " << e;
    ASSERT_LE(std::fabs(got16[e] - want[e]), std::fabs(want[e]) / 256.0 + 1e-6) << "bf16 at " << e;
  }
  EXPECT_FALSE(SigmoidGateMul<float>(nullptr, 8, nullptr, 8, 1, 16, stream_).ok()) << "stride < width";
}

}  // namespace
}  // namespace scored::kernels
