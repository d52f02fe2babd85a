// LatentAttention (DeepSeek-V3's multi-head latent attention after its projections): a hand computation of
// the shared rope key and the per-head k_nope / v at widths qk_head_dim != v_head_dim, and bitwise agreement
// with CausalAttention on the keys and values it assembles (random inputs, any thread count).
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

// Two tokens, two heads, qk_nope 1, qk_rope 2, v 1 (scale 1). Token 0 sees only itself; token 1's weights
// are softmax(q_1 . k_0, q_1 . k_1) with k_j = [k_nope(j, h) | k_rope(j)], the rope key shared by the heads.
TEST(LatentAttention, HandComputedTwoTokens) {
  const LatentAttentionShape shape{/*num_heads=*/2, /*qk_nope_head_dim=*/1, /*qk_rope_head_dim=*/2,
                                   /*v_head_dim=*/1};
  // q [2 tokens, 2 heads, nope | rope]
  const std::vector<float> q = {0.5f, 1.0f, -1.0f, /**/ 2.0f,  0.0f, 0.5f,   // token 0: heads 0, 1
                                1.0f, 0.5f, 0.25f, /**/ -1.0f, 1.0f, 2.0f};  // token 1
  // kv [2 tokens, 2 heads, k_nope | v]
  const std::vector<float> kv = {0.25f, 3.0f,  /**/ -0.5f, 5.0f,        // token 0
                                 1.5f,  -2.0f, /**/ 0.75f, 7.0f};       // token 1
  const std::vector<float> k_rope = {0.5f, -0.25f, /**/ 1.0f, 0.125f};  // [2 tokens, 2]
  std::vector<float> out(4, -99.0f);
  LatentAttention(q.data(), kv.data(), k_rope.data(), 2, shape, 1.0, out.data());
  EXPECT_EQ(out[0], 3.0f);  // token 0, head 0: its own v
  EXPECT_EQ(out[1], 5.0f);
  for (int h = 0; h < 2; ++h) {
    const float* qh = q.data() + (2 + h) * 3;
    double s[2];
    for (int j = 0; j < 2; ++j) {
      s[j] = static_cast<double>(qh[0]) * kv[(j * 2 + h) * 2] + static_cast<double>(qh[1]) * k_rope[j * 2] +
             static_cast<double>(qh[2]) * k_rope[j * 2 + 1];
    }
    const double w1 = 1.0 / (1.0 + std::exp(s[0] - s[1]));
    const double expected = (1.0 - w1) * kv[(0 * 2 + h) * 2 + 1] + w1 * kv[(1 * 2 + h) * 2 + 1];
    EXPECT_NEAR(out[2 + h], expected, 1e-6 * (1.0 + std::fabs(expected))) << "head " << h;
  }
}

// The same function as CausalAttention on [k_nope | k_rope] keys and v values, bit for bit, when the two
// widths agree (no padding) and when they differ (either wider), for 1 and 3 threads.
TEST(LatentAttention, EqualsCausalAttentionOnTheAssembledHeads) {
  std::mt19937 rng(35);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 37, heads = 3;
  for (const auto& [nope, rope, vd] :
       {std::tuple<int64_t, int64_t, int64_t>{16, 8, 24}, std::tuple<int64_t, int64_t, int64_t>{16, 8, 16},
        std::tuple<int64_t, int64_t, int64_t>{8, 4, 20}}) {
    const LatentAttentionShape shape{heads, nope, rope, vd};
    const int64_t qk = nope + rope;
    std::vector<float> q(n * heads * qk), kv(n * heads * (nope + vd)), k_rope(n * rope);
    for (float& x : q) x = dist(rng);
    for (float& x : kv) x = dist(rng);
    for (float& x : k_rope) x = dist(rng);
    const double scale = 0.1352;
    std::vector<float> out(n * heads * vd, NAN);
    ThreadPool pool(3);
    LatentAttention(q.data(), kv.data(), k_rope.data(), n, shape, scale, out.data(), &pool);
    std::vector<float> single(n * heads * vd, NAN);
    LatentAttention(q.data(), kv.data(), k_rope.data(), n, shape, scale, single.data());
    EXPECT_EQ(out, single);
    if (qk != vd) continue;
    std::vector<float> k(n * heads * qk), v(n * heads * vd), expected(n * heads * vd, NAN);
    for (int64_t r = 0; r < n * heads; ++r) {
      const int64_t t = r / heads;
      for (int64_t d = 0; d < nope; ++d) k[r * qk + d] = kv[r * (nope + vd) + d];
      for (int64_t d = 0; d < rope; ++d) k[r * qk + nope + d] = k_rope[t * rope + d];
      for (int64_t d = 0; d < vd; ++d) v[r * vd + d] = kv[r * (nope + vd) + nope + d];
    }
    AttentionOptions options;
    options.scale = scale;
    CausalAttention(q.data(), k.data(), v.data(), n, heads, heads, qk, expected.data(), nullptr, options);
    EXPECT_EQ(out, expected);
  }
}

}  // namespace
}  // namespace scored::ref
