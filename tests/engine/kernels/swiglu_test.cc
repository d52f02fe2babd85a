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

// More tokens than the vector path's grid (each block loops over rows); a row computed alone is bitwise
// equal to the same row inside the batch.
TEST_F(SwiGluTest, ManyTokensMatchReferenceAndBatch) {
  constexpr int64_t kTokens = 2500, kInter = 512;
  const std::vector<float> gate_up = testing::RoundedToBf16(testing::RandomFloats(kTokens * 2 * kInter, 65, -8.0f, 8.0f));
  std::vector<float> gate(kTokens * kInter), up(kTokens * kInter);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kInter; ++i) {
      gate[t * kInter + i] = gate_up[t * 2 * kInter + i];
      up[t * kInter + i] = gate_up[t * 2 * kInter + kInter + i];
    }
  }
  std::vector<float> want(kTokens * kInter);
  ref::SwiGlu(gate.data(), up.data(), kTokens, kInter, want.data());
  DeviceArray<bf16_t> d_in(testing::ToBf16(gate_up)), d_out(kTokens * kInter), d_one(kInter);
  d_out.Poison();
  d_one.Poison();
  constexpr int64_t kRow = 1234;
  ASSERT_TRUE(SwiGlu(d_in.get(), d_in.get() + kInter, 2 * kInter, kTokens, kInter, d_out.get(), stream_).ok());
  ASSERT_TRUE(SwiGlu(d_in.get() + kRow * 2 * kInter, d_in.get() + kRow * 2 * kInter + kInter, 2 * kInter, 1, kInter,
                     d_one.get(), stream_).ok());
  Sync();
  const std::vector<bf16_t> all = d_out.Download();
  const std::vector<float> got = testing::FromBf16(all);
  testing::Report("swiglu bf16 2500 tokens", testing::CompareArrays(got, want));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-7) << i;
  }
  EXPECT_EQ(testing::CountBitDifferences(std::vector<bf16_t>(all.begin() + kRow * kInter, all.begin() + (kRow + 1) * kInter),
                                         d_one.Download()), 0);
}

// Llama-3-8B MLP shape (intermediate 14336) over 8192 tokens, fused gate|up input: 0.7 GB moved, many
// times the L2. Reports only; the tests above are the gate.
TEST_F(SwiGluTest, ThroughputLlama8B) {
  constexpr int64_t kTokens = 8192, kInter = 14336;
  const std::vector<float> values = testing::RandomNormal(kTokens * 2 * kInter, 64, 2.0f);
  DeviceArray<bf16_t> d_in(testing::ToBf16(values)), d_out(kTokens * kInter);
  DeviceArray<float> d_in32(kTokens * 2 * kInter / 2), d_out32(kTokens * kInter / 2);
  auto bf16 = [&] {
    return SwiGlu(d_in.get(), d_in.get() + kInter, 2 * kInter, kTokens, kInter, d_out.get(), stream_);
  };
  const float ms = testing::MedianMs(stream_, bf16, 20);
  ASSERT_GT(ms, 0.0f);
  testing::ReportBandwidth("swiglu bf16 8192 x 14336 (fused gate|up)", ms, 3.0 * kTokens * kInter * 2);
  std::vector<float> values32(values.begin(), values.begin() + d_in32.size());
  d_in32.Upload(values32);
  auto fp32 = [&] {
    return SwiGlu(d_in32.get(), d_in32.get() + kInter, 2 * kInter, kTokens / 2, kInter, d_out32.get(), stream_);
  };
  const float ms32 = testing::MedianMs(stream_, fp32, 20);
  ASSERT_GT(ms32, 0.0f);
  testing::ReportBandwidth("swiglu fp32 4096 x 14336 (fused gate|up)", ms32, 3.0 * (kTokens / 2) * kInter * 4);
}

}  // namespace
}  // namespace scored::kernels
