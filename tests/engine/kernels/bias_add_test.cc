// Bias add: one fp32 addition (and for bf16 one RNE rounding) per element, computed the same way on the
// host: bit-exact.
#include "engine/kernels/bias_add.h"

#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class BiasAddTest : public testing::GpuTest {};

TEST_F(BiasAddTest, StridedRowsBitExact) {
  constexpr int64_t kTokens = 31, kWidth = 640, kStride = 700;
  const std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kStride, 71));
  const std::vector<float> bias = testing::RandomNormal(kWidth, 72, 0.3f);
  std::vector<float> want = x;
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < kWidth; ++j) want[t * kStride + j] = x[t * kStride + j] + bias[j];
  }
  DeviceArray<float> d_x32(x), d_b(bias);
  DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
  ASSERT_TRUE(BiasAdd(d_x32.get(), kStride, d_b.get(), kTokens, kWidth, stream_).ok());
  ASSERT_TRUE(BiasAdd(d_x16.get(), kStride, d_b.get(), kTokens, kWidth, stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_x32.Download(), want), 0);
  EXPECT_EQ(testing::CountBitDifferences(d_x16.Download(), testing::ToBf16(want)), 0);
}

}  // namespace
}  // namespace scored::kernels
