// W8A8 per-token FP8 quantization vs ref::FakeQuantizeFp8PerToken: the same fp32 divisions, the same
// RNE + saturating rounding and the same product, so the results are bit-exact (also for the fp8 codes and
// scales, checked against dtype.h's converter). A zero row must keep scale 0 and stay 0.
#include "engine/kernels/fp8_quant.h"

#include <algorithm>

#include "engine/base/dtype.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class Fp8QuantTest : public testing::GpuTest {};

constexpr int64_t kTokens = 17, kIn = 1000, kStride = 1024;

std::vector<float> Inputs() {
  std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kStride, 91, 3.0f));
  for (int64_t i = 0; i < kStride; ++i) x[2 * kStride + i] = 0.0f;  // a zero row
  x[5 * kStride + 7] = 1000.0f;                                     // an outlier row
  return x;
}

std::vector<float> Dense(const std::vector<float>& x) {
  std::vector<float> d(kTokens * kIn);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kIn; ++i) d[t * kIn + i] = x[t * kStride + i];
  }
  return d;
}

TEST_F(Fp8QuantTest, FakeQuantBitExact) {
  const std::vector<float> x = Inputs();
  std::vector<float> want = Dense(x);
  ref::FakeQuantizeFp8PerToken(want.data(), kTokens, kIn);
  DeviceArray<float> d_x32(x);
  DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
  ASSERT_TRUE(FakeQuantizeFp8PerToken(d_x32.get(), kStride, kTokens, kIn, stream_).ok());
  ASSERT_TRUE(FakeQuantizeFp8PerToken(d_x16.get(), kStride, kTokens, kIn, stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(Dense(d_x32.Download()), want), 0);
  EXPECT_EQ(
      testing::CountBitDifferences(Dense(testing::FromBf16(d_x16.Download())), testing::RoundedToBf16(want)),
      0);
}

TEST_F(Fp8QuantTest, CodesAndScalesBitExact) {
  const std::vector<float> x = Inputs();
  std::vector<uint8_t> want_q(kTokens * kIn);
  std::vector<float> want_scale(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kIn; ++i) amax = std::max(amax, std::fabs(x[t * kStride + i]));
    const float scale = amax / 448.0f;
    want_scale[t] = scale;
    for (int64_t i = 0; i < kIn; ++i) {
      want_q[t * kIn + i] = scale == 0.0f ? 0 : FloatToFp8E4M3(x[t * kStride + i] / scale);
    }
  }
  DeviceArray<bf16_t> d_x(testing::ToBf16(x));
  DeviceArray<uint8_t> d_q(kTokens * kIn);
  DeviceArray<float> d_scale(kTokens);
  d_q.Poison();
  d_scale.Poison();
  ASSERT_TRUE(QuantizeFp8PerToken(d_x.get(), kStride, kTokens, kIn, d_q.get(), d_scale.get(), stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_q.Download(), want_q), 0);
  EXPECT_EQ(testing::CountBitDifferences(d_scale.Download(), want_scale), 0);
  EXPECT_EQ(d_scale.Download()[2], 0.0f);
}

// Tensor parallelism: a token's input split over two ranks' columns [0, 512) and [512, 1000). Each half's
// row amax, their max (the all-reduce), then quantizing each half with it gives bit for bit the whole-row
// result (a max is exact and order-independent).
TEST_F(Fp8QuantTest, SplitRowsWithSharedAmaxBitExact) {
  const std::vector<float> x = Dense(Inputs());
  std::vector<float> want = x;
  ref::FakeQuantizeFp8PerToken(want.data(), kTokens, kIn);
  const int64_t split[] = {0, 512, kIn};
  std::vector<std::vector<float>> halves(2);
  std::vector<float> amax(kTokens, 0.0f);
  for (int h = 0; h < 2; ++h) {
    const int64_t cols = split[h + 1] - split[h];
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t i = split[h]; i < split[h + 1]; ++i) halves[h].push_back(x[t * kIn + i]);
    }
    DeviceArray<float> d_half(halves[h]);
    DeviceArray<float> d_amax(kTokens);
    d_amax.Poison();
    ASSERT_TRUE(Fp8RowAmax(d_half.get(), cols, kTokens, cols, d_amax.get(), stream_).ok());
    Sync();
    const std::vector<float> part = d_amax.Download();
    for (int64_t t = 0; t < kTokens; ++t) amax[t] = std::max(amax[t], part[t]);
  }
  DeviceArray<float> d_amax(amax);
  std::vector<float> got(kTokens * kIn);
  for (int h = 0; h < 2; ++h) {
    const int64_t cols = split[h + 1] - split[h];
    DeviceArray<float> d_half(halves[h]);
    ASSERT_TRUE(
        FakeQuantizeFp8PerTokenWithAmax(d_half.get(), cols, kTokens, cols, d_amax.get(), stream_).ok());
    Sync();
    const std::vector<float> q = d_half.Download();
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t i = 0; i < cols; ++i) got[t * kIn + split[h] + i] = q[t * cols + i];
    }
  }
  EXPECT_EQ(testing::CountBitDifferences(got, want), 0);
}

// The real-FP8 path of a row-parallel shard: codes and scales of each half quantized with the shared amax are
// bit for bit the whole row's QuantizeFp8PerToken codes (restricted to the half) and scales.
TEST_F(Fp8QuantTest, SplitRowsCodesWithSharedAmaxBitExact) {
  const std::vector<float> x = Dense(Inputs());
  DeviceArray<float> d_x(x);
  DeviceArray<uint8_t> d_q(kTokens * kIn);
  DeviceArray<float> d_scale(kTokens);
  ASSERT_TRUE(QuantizeFp8PerToken(d_x.get(), kIn, kTokens, kIn, d_q.get(), d_scale.get(), stream_).ok());
  Sync();
  const std::vector<uint8_t> want_q = d_q.Download();
  const std::vector<float> want_scale = d_scale.Download();
  const int64_t split[] = {0, 512, kIn};
  std::vector<std::vector<float>> halves(2);
  std::vector<float> amax(kTokens, 0.0f);
  for (int h = 0; h < 2; ++h) {
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t i = split[h]; i < split[h + 1]; ++i) {
        halves[h].push_back(x[t * kIn + i]);
        amax[t] = std::max(amax[t], std::fabs(x[t * kIn + i]));
      }
    }
  }
  DeviceArray<float> d_amax(amax);
  for (int h = 0; h < 2; ++h) {
    const int64_t cols = split[h + 1] - split[h];
    // fp32 input (generic kernel) and the same values in bf16 (the fast bf16 path).
    DeviceArray<float> d_half(halves[h]);
    DeviceArray<bf16_t> d_half16(testing::ToBf16(halves[h]));
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      DeviceArray<uint8_t> d_hq(kTokens * cols);
      DeviceArray<float> d_hs(kTokens);
      d_hq.Poison();
      d_hs.Poison();
      const absl::Status status =
          bf16 ? QuantizeFp8PerTokenWithAmax(d_half16.get(), cols, kTokens, cols, d_amax.get(), d_hq.get(),
                                             d_hs.get(), stream_)
               : QuantizeFp8PerTokenWithAmax(d_half.get(), cols, kTokens, cols, d_amax.get(), d_hq.get(),
                                             d_hs.get(), stream_);
      ASSERT_TRUE(status.ok()) << status;
      Sync();
      const std::vector<uint8_t> q = d_hq.Download();
      int64_t differences = 0;
      for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t i = 0; i < cols; ++i) differences += q[t * cols + i] != want_q[t * kIn + split[h] + i];
      }
      EXPECT_EQ(differences, 0) << "half " << h << (bf16 ? " bf16" : " fp32");
      EXPECT_EQ(testing::CountBitDifferences(d_hs.Download(), want_scale), 0) << "half " << h;
    }
  }
}

// Row widths that take each register tiling of the fast bf16 path (1, 2, 4, 8 vectors per thread) and the
// generic path (a width not a multiple of 8), against the host computation: bit-exact codes and scales.
TEST_F(Fp8QuantTest, CodesBitExactAtEveryRowWidth) {
  constexpr int64_t kRows = 5;
  for (int64_t cols : {int64_t{8}, int64_t{2048}, int64_t{3000}, int64_t{6000}, int64_t{14336},
                       int64_t{16384}, int64_t{1001}}) {
    SCOPED_TRACE(cols);
    std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kRows * cols, 7, 3.0f));
    for (int64_t i = 0; i < cols; ++i) x[1 * cols + i] = 0.0f;  // a zero row
    x[3 * cols + cols / 2] = -2000.0f;                          // an outlier
    std::vector<uint8_t> want_q(kRows * cols);
    std::vector<float> want_scale(kRows);
    for (int64_t t = 0; t < kRows; ++t) {
      float amax = 0.0f;
      for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[t * cols + i]));
      want_scale[t] = amax / 448.0f;
      for (int64_t i = 0; i < cols; ++i) {
        want_q[t * cols + i] = want_scale[t] == 0.0f ? 0 : FloatToFp8E4M3(x[t * cols + i] / want_scale[t]);
      }
    }
    DeviceArray<bf16_t> d_x(testing::ToBf16(x));
    DeviceArray<uint8_t> d_q(kRows * cols);
    DeviceArray<float> d_scale(kRows);
    d_q.Poison();
    d_scale.Poison();
    ASSERT_TRUE(QuantizeFp8PerToken(d_x.get(), cols, kRows, cols, d_q.get(), d_scale.get(), stream_).ok());
    Sync();
    EXPECT_EQ(testing::CountBitDifferences(d_q.Download(), want_q), 0);
    EXPECT_EQ(testing::CountBitDifferences(d_scale.Download(), want_scale), 0);
  }
}

// The W8A8 GEMM's input pass at the Llama-3-8B down_proj input (8192 tokens x 14336): reads bf16 (twice:
// amax, then the codes; the second read mostly from L2), writes the FP8 codes and scales. Reports only.
TEST_F(Fp8QuantTest, ThroughputLlama8B) {
  constexpr int64_t kRows = 8192, kCols = 14336;
  DeviceArray<bf16_t> d_x(testing::ToBf16(testing::RandomNormal(kRows * kCols, 5, 2.0f)));
  DeviceArray<uint8_t> d_q(kRows * kCols);
  DeviceArray<float> d_scale(kRows);
  auto quantize = [&] {
    return QuantizeFp8PerToken(d_x.get(), kCols, kRows, kCols, d_q.get(), d_scale.get(), stream_);
  };
  const float ms = testing::MedianMs(stream_, quantize, 20);
  ASSERT_GT(ms, 0.0f);
  testing::ReportBandwidth("QuantizeFp8PerToken bf16 8192 x 14336 (bf16 read once + fp8 written)", ms,
                           3.0 * kRows * kCols);
}

}  // namespace
}  // namespace scored::kernels
