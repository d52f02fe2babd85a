// SwiGLU vs ref::SwiGlu. Both compute g / (1 + expf(-g)) * u in fp32; CUDA's expf is within 2 ulp of
// the host libm's, which moves the result by a few ulp: kFp32RelTol = 1e-6 (~8 ulp) of max(|ref|, 1e-3).
// bf16 results are one RNE rounding of that: within one bf16 ulp.
#include "engine/kernels/swiglu.h"

#include <cmath>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32RelTol = 1e-6;
constexpr double kBf16RelTol = 1.0 / 256.0;

class SwiGluTest : public testing::GpuTest {};

TEST_F(SwiGluTest, FusedGateUpLayoutMatchesReference) {
  constexpr int64_t kTokens = 23, kInter = 1376;
  const std::vector<float> gate_up = testing::RoundedToBf16(testing::RandomFloats(kTokens * 2 * kInter, 61, -8.0f, 8.0f));
  std::vector<float> gate(kTokens * kInter), up(kTokens * kInter);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kInter; ++i) {
      gate[t * kInter + i] = gate_up[t * 2 * kInter + i];
      up[t * kInter + i] = gate_up[t * 2 * kInter + kInter + i];
    }
  }
  std::vector<float> want(kTokens * kInter);
  ref::SwiGlu(gate.data(), up.data(), kTokens, kInter, want.data());

  DeviceArray<float> d_in32(gate_up), d_out32(kTokens * kInter);
  DeviceArray<bf16_t> d_in16(testing::ToBf16(gate_up)), d_out16(kTokens * kInter);
  d_out32.Poison();
  d_out16.Poison();
  ASSERT_TRUE(SwiGlu(d_in32.get(), d_in32.get() + kInter, 2 * kInter, kTokens, kInter, d_out32.get(), stream_).ok());
  ASSERT_TRUE(SwiGlu(d_in16.get(), d_in16.get() + kInter, 2 * kInter, kTokens, kInter, d_out16.get(), stream_).ok());
  Sync();
  const testing::ErrorStats s = testing::CompareArrays(d_out32.Download(), want);
  testing::Report("swiglu fused f32", s);
  EXPECT_EQ(s.not_finite, 0);
  EXPECT_LE(s.max_rel, kFp32RelTol);
  const std::vector<float> got16 = testing::FromBf16(d_out16.Download());
  testing::Report("swiglu fused bf16", testing::CompareArrays(got16, want));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(got16[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-7) << i;
  }
}

TEST_F(SwiGluTest, SeparateInputsInPlace) {
  constexpr int64_t kTokens = 7, kInter = 999;
  const std::vector<float> gate = testing::RandomFloats(kTokens * kInter, 62, -6.0f, 6.0f);
  const std::vector<float> up = testing::RandomFloats(kTokens * kInter, 63, -2.0f, 2.0f);
  std::vector<float> want(kTokens * kInter);
  ref::SwiGlu(gate.data(), up.data(), kTokens, kInter, want.data());
  DeviceArray<float> d_gate(gate), d_up(up);
  ASSERT_TRUE(SwiGlu(d_gate.get(), d_up.get(), kInter, kTokens, kInter, d_gate.get(), stream_).ok());
  Sync();
  const testing::ErrorStats s = testing::CompareArrays(d_gate.Download(), want);
  testing::Report("swiglu separate in-place f32", s);
  EXPECT_EQ(s.not_finite, 0);
  EXPECT_LE(s.max_rel, kFp32RelTol);
}

}  // namespace
}  // namespace scored::kernels
