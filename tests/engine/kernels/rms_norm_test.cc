// RMSNorm (+ residual add) vs ref::RmsNorm.
// Tolerances: the kernel sums squares in fp32 (a tree over 256 threads) where the oracle sums in double;
// the relative error of the mean is ~ sqrt(hidden / 256) * 2^-24 plus rsqrtf's 2 ulp, so fp32 outputs
// agree within kFp32RelTol = 4e-6 of max|ref| (per element about 10 ulp). bf16 outputs are one RNE
// rounding of a value that close: within one bf16 ulp, kBf16RelTol = 2^-8 of |ref|.
// The residual update residual + x is one fp32 addition on both sides: bit-exact.
#include "engine/kernels/rms_norm.h"

#include <cmath>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32RelTol = 4e-6;
constexpr double kBf16RelTol = 1.0 / 256.0;
constexpr float kEps = 1e-5f;

class RmsNormTest : public testing::GpuTest {};

double MaxAbs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

void ExpectClose(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                 bool bf16) {
  const testing::ErrorStats s = testing::CompareArrays(got, want, 1e-2);
  testing::Report(what, s);
  EXPECT_EQ(s.not_finite, 0) << what;
  if (bf16) {
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-30) << what << " at " << i;
    }
  } else {
    EXPECT_LE(s.max_abs, kFp32RelTol * MaxAbs(want)) << what;
  }
}

struct Case {
  int64_t tokens, hidden;
};

TEST_F(RmsNormTest, PlainMatchesReference) {
  // 1001: not a multiple of 8 (the scalar path); 2500 x 256: more tokens than the vector path's grid.
  for (const Case c :
       {Case{33, 4096}, Case{5, 64}, Case{7, 1000}, Case{2, 12288}, Case{3, 1001}, Case{2500, 256}}) {
    const std::string name = "rms_norm T=" + std::to_string(c.tokens) + " H=" + std::to_string(c.hidden);
    const int64_t stride = c.hidden + 8;  // rows with a gap: the stride is honoured
    std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(c.tokens * stride, 21, 2.0f));
    const std::vector<float> w = testing::RandomFloats(c.hidden, 22, 0.5f, 1.5f);
    std::vector<float> x_dense(c.tokens * c.hidden);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t i = 0; i < c.hidden; ++i) x_dense[t * c.hidden + i] = x[t * stride + i];
    }
    std::vector<float> want(c.tokens * c.hidden);
    ref::RmsNorm(x_dense.data(), w.data(), c.tokens, c.hidden, kEps, want.data());

    DeviceArray<float> d_x(x), d_w(w), d_out32(c.tokens * c.hidden);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x)), d_out16(c.tokens * c.hidden);
    d_out32.Poison();
    d_out16.Poison();
    ASSERT_TRUE(
        RmsNorm(d_x.get(), stride, d_w.get(), c.tokens, c.hidden, kEps, d_out32.get(), c.hidden, stream_)
            .ok());
    ASSERT_TRUE(
        RmsNorm(d_x16.get(), stride, d_w.get(), c.tokens, c.hidden, kEps, d_out16.get(), c.hidden, stream_)
            .ok());
    Sync();
    ExpectClose(name + " f32->f32", d_out32.Download(), want, false);
    ExpectClose(name + " bf16->bf16", testing::FromBf16(d_out16.Download()), want, true);
  }
}

TEST_F(RmsNormTest, FusedResidualAddMatchesReference) {
  constexpr int64_t kTokens = 19, kHidden = 2048;
  const std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kHidden, 31));
  const std::vector<float> residual = testing::RandomNormal(kTokens * kHidden, 32, 3.0f);
  const std::vector<float> w = testing::RandomFloats(kHidden, 33, 0.5f, 1.5f);
  std::vector<float> new_residual(kTokens * kHidden);
  for (size_t i = 0; i < x.size(); ++i) new_residual[i] = residual[i] + x[i];
  std::vector<float> want(kTokens * kHidden);
  ref::RmsNorm(new_residual.data(), w.data(), kTokens, kHidden, kEps, want.data());

  for (int variant = 0; variant < 2; ++variant) {
    DeviceArray<float> d_res(residual), d_w(w);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x)), d_out16(kTokens * kHidden);
    DeviceArray<float> d_x32(x), d_out32(kTokens * kHidden);
    d_out16.Poison();
    d_out32.Poison();
    if (variant == 0) {
      ASSERT_TRUE(AddRmsNorm(d_x16.get(), kHidden, d_res.get(), d_w.get(), kTokens, kHidden, kEps,
                             d_out16.get(), kHidden, stream_)
                      .ok());
      Sync();
      ExpectClose("add_rms_norm bf16->bf16", testing::FromBf16(d_out16.Download()), want, true);
    } else {
      ASSERT_TRUE(AddRmsNorm(d_x32.get(), kHidden, d_res.get(), d_w.get(), kTokens, kHidden, kEps,
                             d_out32.get(), kHidden, stream_)
                      .ok());
      Sync();
      ExpectClose("add_rms_norm f32->f32", d_out32.Download(), want, false);
    }
    EXPECT_EQ(testing::CountBitDifferences(d_res.Download(), new_residual), 0)
        << "residual update, variant " << variant;
  }
}

TEST_F(RmsNormTest, InPlaceAndBatchIndependent) {
  constexpr int64_t kTokens = 9, kHidden = 768;
  const std::vector<float> x = testing::RandomNormal(kTokens * kHidden, 41);
  const std::vector<float> w = testing::RandomFloats(kHidden, 42, 0.5f, 1.5f);
  DeviceArray<float> d_x(x), d_w(w), d_one(kHidden);
  d_one.Poison();
  ASSERT_TRUE(
      RmsNorm(d_x.get() + 4 * kHidden, kHidden, d_w.get(), 1, kHidden, kEps, d_one.get(), kHidden, stream_)
          .ok());
  ASSERT_TRUE(
      RmsNorm(d_x.get(), kHidden, d_w.get(), kTokens, kHidden, kEps, d_x.get(), kHidden, stream_).ok());
  Sync();
  const std::vector<float> all = d_x.Download();
  const std::vector<float> one = d_one.Download();
  EXPECT_EQ(testing::CountBitDifferences(
                std::vector<float>(all.begin() + 4 * kHidden, all.begin() + 5 * kHidden), one),
            0);
}

// The engine's residual add + RMSNorm at Llama-3-8B width: fp32 x and residual, bf16 out, hidden 4096,
// 16384 tokens: 0.94 GB moved (x read, residual read and written, out written). Reports only.
TEST_F(RmsNormTest, ThroughputLlama8B) {
  constexpr int64_t kTokens = 16384, kHidden = 4096;
  DeviceArray<float> d_x(testing::RandomNormal(kTokens * kHidden, 43)),
      d_res(testing::RandomNormal(kTokens * kHidden, 44));
  DeviceArray<float> d_w(testing::RandomFloats(kHidden, 45, 0.5f, 1.5f));
  DeviceArray<bf16_t> d_out(kTokens * kHidden);
  auto add = [&] {
    return AddRmsNorm(d_x.get(), kHidden, d_res.get(), d_w.get(), kTokens, kHidden, kEps, d_out.get(),
                      kHidden, stream_);
  };
  const float ms = testing::MedianMs(stream_, add, 20);
  ASSERT_GT(ms, 0.0f);
  testing::ReportBandwidth("add_rms_norm f32 -> bf16 16384 x 4096", ms, 14.0 * kTokens * kHidden);
  auto plain = [&] {
    return RmsNorm(d_res.get(), kHidden, d_w.get(), kTokens, kHidden, kEps, d_out.get(), kHidden, stream_);
  };
  const float ms_plain = testing::MedianMs(stream_, plain, 20);
  ASSERT_GT(ms_plain, 0.0f);
  testing::ReportBandwidth("rms_norm f32 -> bf16 16384 x 4096", ms_plain, 6.0 * kTokens * kHidden);
}

}  // namespace
}  // namespace scored::kernels
