// W8A8 per-token INT8 fake quantization vs ref::FakeQuantizeInt8PerToken: the same fp32 operations in the
// same order (IEEE division, ties to even), so fp32 results are bit-exact, symmetric and asymmetric; bf16
// rows are the oracle's results on the same (bf16) inputs rounded to bf16. A zero row stays 0, a row of one
// sign keeps its zero point in range, and a row split over "ranks" (Int8RowRange of each part, combined by
// max) quantizes bitwise as the whole row.
#include "engine/kernels/int8_quant.h"

#include <algorithm>
#include <tuple>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class Int8QuantTest : public testing::GpuTest {};

constexpr int64_t kTokens = 19, kIn = 1000, kStride = 1024;

std::vector<float> Inputs() {
  std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kStride, 57, 3.0f));
  for (int64_t i = 0; i < kStride; ++i) x[2 * kStride + i] = 0.0f;                           // a zero row
  for (int64_t i = 0; i < kStride; ++i) x[3 * kStride + i] = std::fabs(x[3 * kStride + i]);  // one sign
  for (int64_t i = 0; i < kStride; ++i) x[4 * kStride + i] = -std::fabs(x[4 * kStride + i]);
  x[5 * kStride + 7] = 1000.0f;  // an outlier
  // Exact halves: with amax 127.5 the symmetric scale is 1, so x = k + 0.5 rounds to even.
  for (int64_t i = 0; i < kIn; ++i) x[6 * kStride + i] = static_cast<float>(i % 255) - 127.5f;
  x[6 * kStride] = 127.5f;
  return x;
}

std::vector<float> Dense(const std::vector<float>& x) {
  std::vector<float> d(kTokens * kIn);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kIn; ++i) d[t * kIn + i] = x[t * kStride + i];
  }
  return d;
}

TEST_F(Int8QuantTest, FakeQuantBitExact) {
  for (const bool symmetric : {true, false}) {
    SCOPED_TRACE(symmetric ? "symmetric" : "asymmetric");
    const std::vector<float> x = Inputs();
    std::vector<float> want = Dense(x);
    ref::FakeQuantizeInt8PerToken(want.data(), kTokens, kIn, symmetric);
    DeviceArray<float> d_x32(x);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
    ASSERT_TRUE(FakeQuantizeInt8PerToken(d_x32.get(), kStride, kTokens, kIn, symmetric, stream_).ok());
    ASSERT_TRUE(FakeQuantizeInt8PerToken(d_x16.get(), kStride, kTokens, kIn, symmetric, stream_).ok());
    Sync();
    const std::vector<float> got = Dense(d_x32.Download());
    EXPECT_EQ(testing::CountBitDifferences(got, want), 0);
    EXPECT_EQ(testing::CountBitDifferences(Dense(testing::FromBf16(d_x16.Download())),
                                           testing::RoundedToBf16(want)),
              0);
    for (int64_t i = 0; i < kIn; ++i) EXPECT_EQ(got[2 * kIn + i], 0.0f);  // the zero row
    // The quantization did something: most values moved.
    int moved = 0;
    for (int64_t i = 0; i < kIn; ++i) moved += got[kIn + i] != x[kStride + i] ? 1 : 0;
    EXPECT_GT(moved, kIn / 2);
  }
}

TEST_F(Int8QuantTest, RangeCombinedOverShardsIsTheWholeRows) {
  for (const bool symmetric : {true, false}) {
    SCOPED_TRACE(symmetric ? "symmetric" : "asymmetric");
    const std::vector<float> x = Inputs();
    DeviceArray<float> whole(x), split(x);
    DeviceArray<float> range_a(kTokens * 2), range_b(kTokens * 2);
    // Two "ranks": columns [0, 400) and [400, kIn).
    ASSERT_TRUE(Int8RowRange(split.get(), kStride, kTokens, 400, range_a.get(), stream_).ok());
    ASSERT_TRUE(Int8RowRange(split.get() + 400, kStride, kTokens, kIn - 400, range_b.get(), stream_).ok());
    Sync();
    std::vector<float> a = range_a.Download(), b = range_b.Download();
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);  // the all-reduce (max)
    DeviceArray<float> range(a);
    ASSERT_TRUE(
        FakeQuantizeInt8PerTokenWithRange(split.get(), kStride, kTokens, 400, symmetric, range.get(), stream_)
            .ok());
    ASSERT_TRUE(FakeQuantizeInt8PerTokenWithRange(split.get() + 400, kStride, kTokens, kIn - 400, symmetric,
                                                  range.get(), stream_)
                    .ok());
    ASSERT_TRUE(FakeQuantizeInt8PerToken(whole.get(), kStride, kTokens, kIn, symmetric, stream_).ok());
    Sync();
    EXPECT_EQ(testing::CountBitDifferences(Dense(split.Download()), Dense(whole.Download())), 0);
  }
}

// The real quantization for the int8 GEMM: q * scale is the fake quantization's fp32 value (and its bf16
// rounding for bf16 inputs; bitwise but for the sign of zero), with each row's own range and with a given
// (all-reduced) one.
TEST_F(Int8QuantTest, QuantizeGivesTheFakeQuantizationsIntegersAndScales) {
  const std::vector<float> x = Inputs();
  std::vector<float> want = Dense(x);
  ref::FakeQuantizeInt8PerToken(want.data(), kTokens, kIn, /*symmetric=*/true);
  DeviceArray<float> d_x32(x);
  DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
  DeviceArray<float> range(kTokens * 2);
  ASSERT_TRUE(Int8RowRange(d_x32.get(), kStride, kTokens, kIn, range.get(), stream_).ok());
  for (const bool given_range : {false, true}) {
    SCOPED_TRACE(given_range ? "given range" : "own range");
    const float* r = given_range ? range.get() : nullptr;
    DeviceArray<int8_t> q32(kTokens * kIn), q16(kTokens * kIn);
    DeviceArray<float> s32(kTokens), s16(kTokens);
    ASSERT_TRUE(
        QuantizeInt8PerToken(d_x32.get(), kStride, kTokens, kIn, r, q32.get(), s32.get(), stream_).ok());
    ASSERT_TRUE(
        QuantizeInt8PerToken(d_x16.get(), kStride, kTokens, kIn, r, q16.get(), s16.get(), stream_).ok());
    Sync();
    for (auto [q, s, is_bf16] : {std::make_tuple(q32.Download(), s32.Download(), false),
                                 std::make_tuple(q16.Download(), s16.Download(), true)}) {
      std::vector<float> got(kTokens * kIn);
      for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t i = 0; i < kIn; ++i) got[t * kIn + i] = static_cast<float>(q[t * kIn + i]) * s[t];
      }
      const std::vector<float> g = is_bf16 ? testing::RoundedToBf16(got) : got;
      const std::vector<float> w = is_bf16 ? testing::RoundedToBf16(want) : want;
      // Equal as values: an int8 code 0 is +0 where the fake quantization keeps rint's -0 (the same product).
      int64_t differ = 0;
      for (size_t i = 0; i < g.size(); ++i) differ += g[i] == w[i] ? 0 : 1;
      EXPECT_EQ(differ, 0) << (is_bf16 ? "bf16" : "fp32");
      for (size_t i = 0; differ > 0 && i < g.size(); ++i) {
        if (g[i] == w[i]) continue;
        ADD_FAILURE() << "first difference: token " << i / kIn << " column " << i % kIn << ": got " << g[i]
                      << " (q " << int{q[i]} << ", scale " << s[i / kIn] << ") want " << w[i];
        break;
      }
    }
  }
}

TEST_F(Int8QuantTest, RefusesBadShapes) {
  EXPECT_FALSE(FakeQuantizeInt8PerToken<float>(nullptr, 4, 1, 8, true, stream_).ok());
  EXPECT_FALSE(Int8RowRange<float>(nullptr, 8, 1, 8, nullptr, stream_).ok());
  EXPECT_FALSE(FakeQuantizeInt8PerTokenWithRange<float>(nullptr, 8, 1, 8, true, nullptr, stream_).ok());
}

}  // namespace
}  // namespace scored::kernels
