// RoPE vs ref::Rope with the llama3 / linear / default tables of ref::RopeInvFreq.
// The kernel evaluates cos/sin in double and rounds once, like the oracle, and does the rotation in the
// same fp32 operation order without FMA, so fp32 results are expected bit-exact; kFp32AbsTol = 1e-6
// (a few ulp of |x| <= 4) only allows for a libm/CUDA double sin/cos that round differently in the last
// fp32 bit. bf16 results are one RNE rounding of that: within one bf16 ulp (2^-8 relative).
#include "engine/kernels/rope.h"

#include <cmath>

#include "engine/model/config.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32AbsTol = 1e-6;
constexpr double kBf16RelTol = 1.0 / 256.0;

class RopeTest : public testing::GpuTest {};

ModelConfig Config(RopeType type, int64_t head_dim) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = type == RopeType::kLlama3 ? 500000.0 : 10000.0;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = type == RopeType::kLinear ? 4.0 : 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

// Positions of a varlen batch: windows of the given lengths, each restarting at 0.
std::vector<int32_t> Positions(const std::vector<int32_t>& lengths, int32_t offset) {
  std::vector<int32_t> p;
  for (int32_t len : lengths) {
    for (int32_t i = 0; i < len; ++i) p.push_back(offset + i);
  }
  return p;
}

TEST_F(RopeTest, FusedQkvLayoutMatchesReference) {
  struct Case {
    RopeType type;
    int64_t head_dim, num_heads, num_kv_heads;
    int32_t offset;
    std::vector<int32_t> lengths = {5, 130, 1, 64};
  };
  for (const Case& c : {Case{RopeType::kLlama3, 128, 8, 2, 0}, Case{RopeType::kLinear, 64, 4, 4, 3000},
                       Case{RopeType::kDefault, 8, 8, 4, 100000}, Case{RopeType::kDefault, 32, 4, 2, 7},
                       // More tokens than the vector path's grid: each block loops over several tokens.
                       Case{RopeType::kLlama3, 128, 4, 1, 0, {2048, 1500, 900}}}) {
    const std::string name = "rope hd=" + std::to_string(c.head_dim) + " type=" + std::to_string(static_cast<int>(c.type));
    const std::vector<float> inv_freq = ref::RopeInvFreq(Config(c.type, c.head_dim));
    const std::vector<int32_t> positions = Positions(c.lengths, c.offset);
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t heads_qk = c.num_heads + c.num_kv_heads;
    const int64_t stride = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    const std::vector<float> qkv = testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 51, -4.0f, 4.0f));

    // Oracle: rotate the q|k part of each token as a [tokens, heads_qk, head_dim] tensor.
    std::vector<float> qk(tokens * heads_qk * c.head_dim);
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(qkv.begin() + t * stride, qkv.begin() + t * stride + heads_qk * c.head_dim,
                qk.begin() + t * heads_qk * c.head_dim);
    }
    ref::Rope(qk.data(), positions.data(), inv_freq.data(), tokens, heads_qk, c.head_dim);
    std::vector<float> want = qkv;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(qk.begin() + t * heads_qk * c.head_dim, qk.begin() + (t + 1) * heads_qk * c.head_dim,
                want.begin() + t * stride);
    }

    DeviceArray<float> d_f(inv_freq), d_x32(qkv);
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(qkv));
    ASSERT_TRUE(Rope(d_x32.get(), stride, d_pos.get(), d_f.get(), tokens, heads_qk, c.head_dim, stream_).ok());
    ASSERT_TRUE(Rope(d_x16.get(), stride, d_pos.get(), d_f.get(), tokens, heads_qk, c.head_dim, stream_).ok());
    Sync();
    const std::vector<float> got32 = d_x32.Download();
    const testing::ErrorStats s = testing::CompareArrays(got32, want);
    testing::Report(name + " f32", s);
    EXPECT_EQ(s.not_finite, 0);
    EXPECT_LE(s.max_abs, kFp32AbsTol) << name;
    const std::vector<float> got16 = testing::FromBf16(d_x16.Download());
    testing::Report(name + " bf16", testing::CompareArrays(got16, want));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(std::fabs(got16[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-6) << name << " at " << i;
    }
    // v (the columns after q|k) must be untouched, bit for bit.
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = heads_qk * c.head_dim; j < stride; ++j) ASSERT_EQ(got32[t * stride + j], qkv[t * stride + j]);
    }
  }
}

// Llama-3-8B attention shape (32 + 8 heads rotated of 48, head_dim 128) over 16384 tokens, in place in
// the fused QKV buffer: 0.34 GB moved (q|k read and written). Reports only.
TEST_F(RopeTest, ThroughputLlama8B) {
  constexpr int64_t kTokens = 16384, kHeadDim = 128, kHeads = 32, kKvHeads = 8;
  constexpr int64_t kStride = (kHeads + 2 * kKvHeads) * kHeadDim;
  const std::vector<float> inv_freq = ref::RopeInvFreq(Config(RopeType::kLlama3, kHeadDim));
  std::vector<int32_t> positions(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) positions[t] = static_cast<int32_t>(t % 2048);
  DeviceArray<float> d_f(inv_freq);
  DeviceArray<int32_t> d_pos(positions);
  DeviceArray<bf16_t> d_x(testing::ToBf16(testing::RandomFloats(kTokens * kStride, 52, -4.0f, 4.0f)));
  auto launch = [&] {
    return Rope(d_x.get(), kStride, d_pos.get(), d_f.get(), kTokens, kHeads + kKvHeads, kHeadDim, stream_);
  };
  const float ms = testing::MedianMs(stream_, launch, 20);
  ASSERT_GT(ms, 0.0f);
  testing::ReportBandwidth("rope bf16 16384 tokens, 40 of 48 heads, hd 128 (in place)", ms,
                           2.0 * kTokens * (kHeads + kKvHeads) * kHeadDim * 2);
}

}  // namespace
}  // namespace scored::kernels
