// QkNormRope is bitwise QkNorm (q heads, then k heads) followed by RopeWithTable over both: fp32 and bf16,
// head_dim 64 / 128 / 256, a fused QKV row whose v heads must stay untouched, an odd number of (token, head)
// items (the last warp takes one of its two), and positions outside the table (NaN, as RopeWithTable).
// QkNorm and RopeWithTable themselves are checked against the oracle in qk_norm_test.cc and rope_test.cc.
#include "engine/kernels/qk_norm_rope.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/qk_norm.h"
#include "engine/kernels/rope.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr float kEps = 1e-6f;

class QkNormRopeTest : public testing::GpuTest {
 protected:
  // x after the two-kernel sequence and after QkNormRope, compared bit for bit (CountBitDifferences: NaN
  // too).
  template <typename T>
  void Compare(const std::vector<float>& x, int64_t stride, const DeviceArray<float>& q_w,
               const DeviceArray<float>& k_w, const DeviceArray<int32_t>& pos,
               const DeviceArray<float>& table, int64_t num_positions, int64_t tokens, int64_t heads,
               int64_t kv_heads, int64_t head_dim, const std::string& name) {
    std::vector<T> host;
    if constexpr (std::is_same_v<T, float>) {
      host = x;
    } else {
      host = testing::ToBf16(x);
    }
    DeviceArray<T> two(host), one(host);
    ASSERT_TRUE(QkNorm<T>(two.get(), stride, q_w.get(), tokens, heads, head_dim, kEps, stream_).ok());
    ASSERT_TRUE(
        QkNorm<T>(two.get() + heads * head_dim, stride, k_w.get(), tokens, kv_heads, head_dim, kEps, stream_)
            .ok());
    ASSERT_TRUE(RopeWithTable<T>(two.get(), stride, pos.get(), table.get(), num_positions, tokens,
                                 heads + kv_heads, head_dim, stream_)
                    .ok());
    ASSERT_TRUE(QkNormRope<T>(one.get(), stride, q_w.get(), k_w.get(), pos.get(), table.get(), num_positions,
                              tokens, heads, kv_heads, head_dim, kEps, stream_)
                    .ok());
    Sync();
    const std::vector<T> want = two.Download(), got = one.Download();
    EXPECT_EQ(testing::CountBitDifferences(got, want), 0) << name;
    // v untouched (the sequence leaves it, so this guards the comparison itself)
    const std::vector<T>& input = host;
    int64_t v_changed = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = (heads + kv_heads) * head_dim; i < stride; ++i)
        v_changed += std::memcmp(&got[t * stride + i], &input[t * stride + i], sizeof(T)) != 0;
    }
    EXPECT_EQ(v_changed, 0) << name;
  }
};

TEST_F(QkNormRopeTest, BitwiseQkNormThenRopeWithTable) {
  struct Case {
    int64_t head_dim, heads, kv_heads, tokens;
  };
  // (token, head) items: 37 x 7 = 259 (odd), 64 x 20, 9 x 5 = 45
  const Case cases[] = {{128, 6, 1, 37}, {128, 16, 4, 64}, {64, 8, 2, 9}, {256, 4, 1, 9}};
  constexpr int64_t kNumPositions = 100;
  for (const Case& c : cases) {
    const std::string name = "hd " + std::to_string(c.head_dim) + " heads " + std::to_string(c.heads) + "+" +
                             std::to_string(c.kv_heads) + " tokens " + std::to_string(c.tokens);
    const int64_t stride = (c.heads + 2 * c.kv_heads) * c.head_dim;
    const std::vector<float> x =
        testing::RoundedToBf16(testing::RandomNormal(c.tokens * stride, 7 + c.head_dim, 2.0f));
    std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
    for (int64_t t = 0; t < c.tokens; ++t) positions[t] = static_cast<int32_t>((t * 37) % kNumPositions);
    positions[1] = kNumPositions;  // outside the table: NaN in both
    positions[c.tokens - 1] = -1;
    const DeviceArray<float> q_w(testing::RandomFloats(c.head_dim, 11, 0.5f, 1.5f));
    const DeviceArray<float> k_w(testing::RandomFloats(c.head_dim, 12, 0.5f, 1.5f));
    const DeviceArray<float> table(testing::RandomFloats(kNumPositions * c.head_dim, 13, -1.0f, 1.0f));
    const DeviceArray<int32_t> pos(positions);
    Compare<float>(x, stride, q_w, k_w, pos, table, kNumPositions, c.tokens, c.heads, c.kv_heads, c.head_dim,
                   name + " f32");
    Compare<bf16_t>(x, stride, q_w, k_w, pos, table, kNumPositions, c.tokens, c.heads, c.kv_heads, c.head_dim,
                    name + " bf16");
  }
}

TEST_F(QkNormRopeTest, RefusesOtherHeadDims) {
  DeviceArray<float> x(4 * 96), w(96), table(96);
  DeviceArray<int32_t> pos(std::vector<int32_t>{0});
  EXPECT_FALSE(QkNormRopeSupports(96));
  EXPECT_EQ(QkNormRope<float>(x.get(), 4 * 96, w.get(), w.get(), pos.get(), table.get(), 1, 1, 2, 1, 96, kEps,
                              stream_)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QkNormRopeSupports(128));
}

}  // namespace
}  // namespace scored::kernels
