// Per-head RMSNorm vs ref::RmsNorm applied to every [head_dim] slice. fp32 sums over a warp vs double in
// the oracle: kFp32RelTol = 2e-6 of max|ref|; bf16: within one bf16 ulp.
#include "engine/kernels/qk_norm.h"

#include <cmath>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32RelTol = 2e-6;
constexpr double kBf16RelTol = 1.0 / 256.0;
constexpr float kEps = 1e-6f;

class QkNormTest : public testing::GpuTest {};

TEST_F(QkNormTest, KHeadsOfFusedQkvMatchReference) {
  constexpr int64_t kTokens = 13, kHeads = 16, kKvHeads = 4, kHeadDim = 128;
  constexpr int64_t kStride = (kHeads + 2 * kKvHeads) * kHeadDim;
  const std::vector<float> qkv = testing::RoundedToBf16(testing::RandomNormal(kTokens * kStride, 81, 2.0f));
  const std::vector<float> w = testing::RandomFloats(kHeadDim, 82, 0.5f, 1.5f);
  // Oracle on the k heads only; q and v must stay untouched.
  std::vector<float> want = qkv;
  for (int64_t t = 0; t < kTokens; ++t) {
    float* k = want.data() + t * kStride + kHeads * kHeadDim;
    ref::RmsNorm(k, w.data(), kKvHeads, kHeadDim, kEps, k);
  }
  DeviceArray<float> d_x32(qkv), d_w(w);
  DeviceArray<bf16_t> d_x16(testing::ToBf16(qkv));
  ASSERT_TRUE(
      QkNorm(d_x32.get() + kHeads * kHeadDim, kStride, d_w.get(), kTokens, kKvHeads, kHeadDim, kEps, stream_)
          .ok());
  ASSERT_TRUE(
      QkNorm(d_x16.get() + kHeads * kHeadDim, kStride, d_w.get(), kTokens, kKvHeads, kHeadDim, kEps, stream_)
          .ok());
  Sync();
  const std::vector<float> got32 = d_x32.Download();
  const testing::ErrorStats s = testing::CompareArrays(got32, want);
  testing::Report("qk_norm f32", s);
  double max_ref = 0.0;
  for (float v : want) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  EXPECT_EQ(s.not_finite, 0);
  EXPECT_LE(s.max_abs, kFp32RelTol * max_ref);
  const std::vector<float> got16 = testing::FromBf16(d_x16.Download());
  testing::Report("qk_norm bf16", testing::CompareArrays(got16, want));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(got16[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-7) << i;
  }
}

}  // namespace
}  // namespace scored::kernels
