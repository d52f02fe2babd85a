// The latent attention's q|k|v packing (kernels/latent_attention_pack.h): a copy bit for bit in both dtypes
// (the layout, the zero columns, strided inputs); and packed, rotated with the interleaved RoPE kernel and
// run through kernels::CausalAttention in fp32 it is ref::LatentAttention of ref::Rope's rotated inputs to
// fp32 rounding, with the rope part first in each packed head (the function the CUDA forward computes).
#include "engine/kernels/latent_attention_pack.h"

#include <cmath>
#include <vector>

#include "engine/kernels/attention.h"
#include "engine/kernels/rope.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class LatentAttentionPackTest : public testing::GpuTest {};

// The packed rows as the contract writes them, from host copies of the inputs.
std::vector<float> PackOnHost(const std::vector<float>& q, int64_t q_stride, const std::vector<float>& kv,
                              int64_t kv_stride, const std::vector<float>& k_rope, int64_t k_rope_stride,
                              int64_t n, const LatentPackShape& s) {
  const int64_t h_n = s.num_heads, nope = s.qk_nope_head_dim, rope = s.qk_rope_head_dim;
  const int64_t vd = s.v_head_dim, d = s.packed_head_dim, width = 3 * h_n * d;
  std::vector<float> out(n * width, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < h_n; ++h) {
      float* qo = out.data() + t * width + h * d;
      float* ko = qo + h_n * d;
      float* vo = ko + h_n * d;
      const float* qi = q.data() + t * q_stride + h * (nope + rope);
      const float* kvi = kv.data() + t * kv_stride + h * (nope + vd);
      for (int64_t j = 0; j < rope; ++j) qo[j] = qi[nope + j], ko[j] = k_rope[t * k_rope_stride + j];
      for (int64_t j = 0; j < nope; ++j) qo[rope + j] = qi[j], ko[rope + j] = kvi[j];
      for (int64_t j = 0; j < vd; ++j) vo[j] = kvi[nope + j];
    }
  }
  return out;
}

TEST_F(LatentAttentionPackTest, CopiesTheLayoutBitForBit) {
  const LatentPackShape s{3, 16, 8, 12, 32};
  const int64_t n = 29, q_stride = 3 * 24 + 5, kv_stride = 3 * 28 + 3, rope_stride = 40;
  const std::vector<float> q = testing::RoundedToBf16(testing::RandomFloats(n * q_stride, 91));
  const std::vector<float> kv = testing::RoundedToBf16(testing::RandomFloats(n * kv_stride, 92));
  const std::vector<float> kr = testing::RoundedToBf16(testing::RandomFloats(n * rope_stride, 93));
  const std::vector<float> want = PackOnHost(q, q_stride, kv, kv_stride, kr, rope_stride, n, s);
  DeviceArray<float> q32(q), kv32(kv), kr32(kr), out32(want.size());
  DeviceArray<bf16_t> q16(testing::ToBf16(q)), kv16(testing::ToBf16(kv)), kr16(testing::ToBf16(kr)),
      out16(want.size());
  out32.Poison();
  out16.Poison();
  ASSERT_TRUE(LatentAttentionPack(q32.get(), q_stride, kv32.get(), kv_stride, kr32.get(), rope_stride, n, s,
                                  out32.get(), stream_)
                  .ok());
  ASSERT_TRUE(LatentAttentionPack(q16.get(), q_stride, kv16.get(), kv_stride, kr16.get(), rope_stride, n, s,
                                  out16.get(), stream_)
                  .ok());
  Sync();
  const std::vector<float> got32 = out32.Download(), got16 = testing::FromBf16(out16.Download());
  for (size_t e = 0; e < want.size(); ++e) {
    ASSERT_EQ(got32[e], want[e]) << "fp32 at " << e;
    ASSERT_EQ(got16[e], want[e]) << "bf16 at " << e;
  }
  LatentPackShape narrow = s;
  narrow.packed_head_dim = 16;  // < nope + rope
  EXPECT_FALSE(LatentAttentionPack(q32.get(), q_stride, kv32.get(), kv_stride, kr32.get(), rope_stride, n,
                                   narrow, out32.get(), stream_)
                   .ok());
}

TEST_F(LatentAttentionPackTest, PackedRopeAndAttentionAreTheReferenceLatentAttention) {
  // DeepSeek-V3's head proportions at a small size: nope 16, rope 8, v 16 in heads packed to 32; two
  // sequences (attention never crosses them), interleaved RoPE as rope_interleave.
  const LatentPackShape s{4, 16, 8, 16, 32};
  const int64_t heads = s.num_heads, nope = s.qk_nope_head_dim, rope = s.qk_rope_head_dim;
  const int64_t vd = s.v_head_dim, d = s.packed_head_dim, qk = nope + rope;
  const std::vector<int32_t> cu = {0, 41, 70};
  const int64_t n = cu.back();
  const double scale = 0.3;
  const std::vector<float> q = testing::RandomFloats(n * heads * qk, 94);
  const std::vector<float> kv = testing::RandomFloats(n * heads * (nope + vd), 95);
  const std::vector<float> kr = testing::RandomFloats(n * rope, 96);
  std::vector<float> inv_freq(rope / 2);
  for (int64_t i = 0; i < rope / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / rope));
  }
  std::vector<int32_t> positions(n);
  for (size_t sq = 0; sq + 1 < cu.size(); ++sq) {
    for (int32_t t = cu[sq]; t < cu[sq + 1]; ++t) positions[t] = t - cu[sq];
  }
  // The oracle: per sequence, rotate q_rope and k_rope (ref::Rope), then ref::LatentAttention.
  std::vector<float> want(n * heads * vd);
  for (size_t sq = 0; sq + 1 < cu.size(); ++sq) {
    const int64_t b = cu[sq], len = cu[sq + 1] - cu[sq];
    std::vector<float> qs(q.begin() + b * heads * qk, q.begin() + (b + len) * heads * qk);
    std::vector<float> krs(kr.begin() + b * rope, kr.begin() + (b + len) * rope);
    std::vector<float> q_rope(len * heads * rope);
    for (int64_t r = 0; r < len * heads; ++r) std::copy_n(qs.data() + r * qk + nope, rope, &q_rope[r * rope]);
    ref::Rope(q_rope.data(), positions.data() + b, inv_freq.data(), len, heads, rope, rope, 1.0f, true);
    ref::Rope(krs.data(), positions.data() + b, inv_freq.data(), len, 1, rope, rope, 1.0f, true);
    for (int64_t r = 0; r < len * heads; ++r) std::copy_n(&q_rope[r * rope], rope, qs.data() + r * qk + nope);
    const ref::LatentAttentionShape shape{heads, nope, rope, vd};
    ref::LatentAttention(qs.data(), kv.data() + b * heads * (nope + vd), krs.data(), len, shape, scale,
                         want.data() + b * heads * vd);
  }
  DeviceArray<float> dq(q), dkv(kv), dkr(kr), dfreq(inv_freq), packed(n * 3 * heads * d),
      table(n * (rope / 2) * 2), out(n * heads * d);
  DeviceArray<int32_t> dpos(positions), dcu(cu);
  ASSERT_TRUE(RopeCosSinTable(dfreq.get(), n, rope / 2, table.get(), stream_).ok());
  ASSERT_TRUE(LatentAttentionPack(dq.get(), heads * qk, dkv.get(), heads * (nope + vd), dkr.get(), rope, n, s,
                                  packed.get(), stream_)
                  .ok());
  ASSERT_TRUE(RopeInterleavedWithTable<float>(packed.get(), 3 * heads * d, dpos.get(), table.get(), n, n,
                                              2 * heads, d, rope, stream_)
                  .ok());
  AttentionShape shape;
  shape.num_tokens = n;
  shape.num_seqs = static_cast<int32_t>(cu.size() - 1);
  shape.max_seqlen = 41;
  shape.num_heads = shape.num_kv_heads = static_cast<int32_t>(heads);
  shape.head_dim = static_cast<int32_t>(d);
  shape.q_stride = shape.kv_stride = 3 * heads * d;
  shape.scale = static_cast<float>(scale);
  ASSERT_TRUE(CausalAttention<float>(packed.get(), packed.get() + heads * d, packed.get() + 2 * heads * d,
                                     dcu.get(), shape, out.get(), stream_)
                  .ok());
  Sync();
  const std::vector<float> got_packed = out.Download();
  std::vector<float> got(n * heads * vd);
  for (int64_t r = 0; r < n * heads; ++r) std::copy_n(&got_packed[r * d], vd, &got[r * vd]);
  for (int64_t r = 0; r < n * heads; ++r) {  // the padded columns of V give zeros
    for (int64_t j = vd; j < d; ++j) ASSERT_EQ(got_packed[r * d + j], 0.0f) << "row " << r << " col " << j;
  }
  const testing::ErrorStats e = testing::CompareArrays(got, want);
  EXPECT_EQ(e.not_finite, 0);
  EXPECT_LE(e.max_abs, 2e-6) << "worst at " << e.worst_index;
}

}  // namespace
}  // namespace scored::kernels
