// ApplyFp8Scales vs the same fp32 products on the host: y * (x_scale * w_scale), each product rounded to
// nearest even in fp32 and the result once to the output type, so the results are bit-exact.
#include "engine/kernels/fp8_scale.h"

#include "engine/base/dtype.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class Fp8ScaleTest : public testing::GpuTest {};

constexpr int64_t kTokens = 37, kOut = 200;

TEST_F(Fp8ScaleTest, Fp32AndBf16BitExact) {
  const std::vector<float> y = testing::RoundedToBf16(testing::RandomNormal(kTokens * kOut, 3, 5000.0f));
  const std::vector<float> xs = testing::RandomFloats(kTokens, 4, 1e-3f, 1e-2f);
  const std::vector<float> ws = testing::RandomFloats(kOut, 5, 1e-3f, 1e-2f);
  std::vector<float> want(kTokens * kOut);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t o = 0; o < kOut; ++o) {
      const float s = xs[t] * ws[o];
      want[t * kOut + o] = y[t * kOut + o] * s;
    }
  }
  DeviceArray<float> d_y32(y), d_xs(xs), d_ws(ws);
  DeviceArray<bf16_t> d_y16(testing::ToBf16(y));
  ASSERT_TRUE(ApplyFp8Scales(d_y32.get(), kTokens, kOut, d_xs.get(), d_ws.get(), stream_).ok());
  ASSERT_TRUE(ApplyFp8Scales(d_y16.get(), kTokens, kOut, d_xs.get(), d_ws.get(), stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_y32.Download(), want), 0);
  EXPECT_EQ(testing::CountBitDifferences(testing::FromBf16(d_y16.Download()), testing::RoundedToBf16(want)),
            0);
  EXPECT_EQ(ApplyFp8Scales(d_y32.get(), kTokens, 12, d_xs.get(), d_ws.get(), stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

// AddFp8Scaled: acc + y * (x_scale * w_scale) with the same two fp32 roundings as the host; with null scales
// a plain fp32 add.
TEST_F(Fp8ScaleTest, AddScaledBitExact) {
  const std::vector<float> y = testing::RandomNormal(kTokens * kOut, 6, 5000.0f);
  const std::vector<float> acc = testing::RandomNormal(kTokens * kOut, 7, 3.0f);
  const std::vector<float> xs = testing::RandomFloats(kTokens, 8, 1e-3f, 1e-2f);
  const std::vector<float> ws = testing::RandomFloats(kOut, 9, 1e-3f, 1e-2f);
  std::vector<float> want(kTokens * kOut), want_plain(kTokens * kOut);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t o = 0; o < kOut; ++o) {
      const float s = xs[t] * ws[o];
      const float scaled = y[t * kOut + o] * s;
      want[t * kOut + o] = acc[t * kOut + o] + scaled;
      want_plain[t * kOut + o] = acc[t * kOut + o] + y[t * kOut + o];
    }
  }
  DeviceArray<float> d_y(y), d_acc(acc), d_plain(acc), d_xs(xs), d_ws(ws);
  ASSERT_TRUE(AddFp8Scaled(d_y.get(), kTokens, kOut, d_xs.get(), d_ws.get(), d_acc.get(), stream_).ok());
  ASSERT_TRUE(AddFp8Scaled(d_y.get(), kTokens, kOut, nullptr, nullptr, d_plain.get(), stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_acc.Download(), want), 0);
  EXPECT_EQ(testing::CountBitDifferences(d_plain.Download(), want_plain), 0);
  EXPECT_EQ(AddFp8Scaled(d_y.get(), kTokens, kOut, d_xs.get(), nullptr, d_acc.get(), stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored::kernels
