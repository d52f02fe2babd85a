// CausalAttention: hand-computed causal weights, GQA head mapping, and agreement with a direct double
// implementation on random inputs (bitwise for any thread count).
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(CausalAttention, WeightsFollowScoresAndMask) {
  // head_dim 1 (scale 1), q = 1, k_j = log(j + 1): softmax weights over j <= t are (j + 1) / sum.
  const int64_t n = 5;
  std::vector<float> q(n, 1.0f), k(n), v(n), out(n);
  for (int64_t j = 0; j < n; ++j) {
    k[j] = std::log(static_cast<float>(j + 1));
    v[j] = static_cast<float>(10 * j);
  }
  CausalAttention(q.data(), k.data(), v.data(), n, 1, 1, 1, out.data());
  for (int64_t t = 0; t < n; ++t) {
    double num = 0, den = 0;
    for (int64_t j = 0; j <= t; ++j) {
      num += (j + 1) * 10.0 * j;
      den += j + 1;
    }
    EXPECT_NEAR(out[t], num / den, 1e-5 * (1 + num / den)) << t;  // fp32 logs of k, expf: ~1e-7 relative
  }
  EXPECT_EQ(out[0], 0.0f);  // the first token sees only itself
}

// A sliding window w: query t sees keys t - w < j <= t (transformers' sliding_window_overlay), so with
// uniform scores out[t] is the mean of the last min(w, t + 1) values.
TEST(CausalAttention, SlidingWindowAveragesTheLastWKeys) {
  const int64_t n = 7;
  std::vector<float> q(n, 0.0f), k(n, 0.0f), v(n), out(n);
  for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(j * j);
  for (int64_t w : {1, 3, 7, 100}) {
    AttentionOptions options;
    options.window = w;
    CausalAttention(q.data(), k.data(), v.data(), n, 1, 1, 1, out.data(), nullptr, options);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j0 = std::max<int64_t>(0, t - w + 1);
      double mean = 0;
      for (int64_t j = j0; j <= t; ++j) mean += j * j;
      mean /= static_cast<double>(t + 1 - j0);
      EXPECT_NEAR(out[t], mean, 1e-5 * (1 + mean)) << "w " << w << " t " << t;
    }
  }
}

// Soft-capping and an explicit scale: s = tanh(dot * scale / cap) * cap. Two keys (t = 1): weight of key 1
// is sigmoid(s1 - s0).
TEST(CausalAttention, SoftCapAndScale) {
  const int64_t n = 2;
  std::vector<float> q = {2.0f, 2.0f}, k = {0.0f, 3.0f}, v = {0.0f, 1.0f}, out(n);
  AttentionOptions options;
  options.scale = 0.5;
  options.softcap = 2.0f;
  CausalAttention(q.data(), k.data(), v.data(), n, 1, 1, 1, out.data(), nullptr, options);
  const double s1 = std::tanh(2.0 * 3.0 * 0.5 / 2.0) * 2.0;  // s0 = 0
  EXPECT_NEAR(out[1], 1.0 / (1.0 + std::exp(-s1)), 1e-6);
  options.softcap = 0.0f;  // no cap: sigmoid(3)
  CausalAttention(q.data(), k.data(), v.data(), n, 1, 1, 1, out.data(), nullptr, options);
  EXPECT_NEAR(out[1], 1.0 / (1.0 + std::exp(-3.0)), 1e-6);
}

// Sinks (gpt-oss): head h's sink logit s_h joins the softmax and is dropped, so with uniform scores 0 over
// the t + 1 keys out[t] = sum_j v_j / (t + 1 + exp(s_h)); a sink far below the scores changes nothing, one
// far above drives the output to 0 (it takes the mass); the max includes the sink (no overflow at s_h = 100).
TEST(CausalAttention, SinksTakeProbabilityMassAndAddNoValue) {
  const int64_t n = 6, heads = 2;
  std::vector<float> q(n * heads, 0.0f), k(n, 0.0f), v(n), out(n * heads);
  for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(j + 1);
  for (float sink : {-1.5f, 0.0f, 0.7f, 3.0f}) {
    const std::vector<float> sinks = {sink, -200.0f};
    AttentionOptions options;
    options.sinks = sinks.data();
    CausalAttention(q.data(), k.data(), v.data(), n, heads, 1, 1, out.data(), nullptr, options);
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0;
      for (int64_t j = 0; j <= t; ++j) sum += j + 1;
      const double with_sink = sum / (t + 1 + std::exp(static_cast<double>(sink)));
      EXPECT_NEAR(out[t * heads], with_sink, 1e-6 * (1 + with_sink)) << "sink " << sink << " t " << t;
      EXPECT_NEAR(out[t * heads + 1], sum / (t + 1), 1e-6 * (1 + sum)) << "a negligible sink, t " << t;
    }
  }
  const std::vector<float> huge = {100.0f, 100.0f};
  AttentionOptions options;
  options.sinks = huge.data();
  CausalAttention(q.data(), k.data(), v.data(), n, heads, 1, 1, out.data(), nullptr, options);
  for (float o : out) {
    EXPECT_TRUE(std::isfinite(o));
    EXPECT_LT(std::fabs(o), 1e-30f);
  }
}

TEST(CausalAttention, GroupedQueryHeadsReadTheirKvHead) {
  // 4 query heads, 2 kv heads: heads 0,1 -> kv 0 and heads 2,3 -> kv 1. k = 0 gives uniform weights, so
  // out[t, h, d] = mean_{j<=t} v[j, g, d] with v[j, g, d] = 100 g + 10 j + d: 100 g + 5 t + d.
  const int64_t n = 6, heads = 4, kv_heads = 2, dim = 4;
  std::vector<float> q(n * heads * dim), k(n * kv_heads * dim, 0.0f), v(n * kv_heads * dim),
      out(n * heads * dim, NAN);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : q) x = dist(rng);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t d = 0; d < dim; ++d) v[(j * kv_heads + g) * dim + d] = 100.0f * g + 10.0f * j + d;
  CausalAttention(q.data(), k.data(), v.data(), n, heads, kv_heads, dim, out.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d)
        EXPECT_NEAR(out[(t * heads + h) * dim + d], 100.0 * (h / 2) + 5.0 * t + d, 1e-4) << t << " " << h;
}

// Direct transcription of the contract in double (scores rounded to fp32, expf), for random inputs.
std::vector<float> Direct(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, int64_t n, int64_t heads, int64_t kv_heads,
                          int64_t dim) {
  std::vector<float> out(n * heads * dim);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads);
      std::vector<float> s(t + 1);
      float m = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += static_cast<double>(q[(t * heads + h) * dim + d]) * k[(j * kv_heads + g) * dim + d];
        s[j] = static_cast<float>(dot / std::sqrt(static_cast<double>(dim)));
        m = std::max(m, s[j]);
      }
      double den = 0;
      std::vector<double> num(dim, 0.0);
      for (int64_t j = 0; j <= t; ++j) {
        const float p = std::exp(s[j] - m);
        den += p;
        for (int64_t d = 0; d < dim; ++d) num[d] += static_cast<double>(p) * v[(j * kv_heads + g) * dim + d];
      }
      for (int64_t d = 0; d < dim; ++d) out[(t * heads + h) * dim + d] = static_cast<float>(num[d] / den);
    }
  }
  return out;
}

TEST(CausalAttention, MatchesDirectImplementationForAnyThreadCount) {
  const int64_t n = 37, heads = 6, kv_heads = 3, dim = 16;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> q(n * heads * dim), k(n * kv_heads * dim), v(n * kv_heads * dim);
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  // The scale 1/sqrt(dim) may be applied as a multiplication by a rounded reciprocal: 1 ulp of a score
  // moves an output by ~1e-7 relative; 1e-5 absolute on O(1) values bounds that.
  const std::vector<float> expected = Direct(q, k, v, n, heads, kv_heads, dim);
  std::vector<float> serial(n * heads * dim, NAN);
  CausalAttention(q.data(), k.data(), v.data(), n, heads, kv_heads, dim, serial.data());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(serial[i], expected[i], 1e-5) << i;
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    std::vector<float> parallel(n * heads * dim, NAN);
    CausalAttention(q.data(), k.data(), v.data(), n, heads, kv_heads, dim, parallel.data(), &pool);
    EXPECT_EQ(parallel, serial) << threads << " threads";
  }
}

}  // namespace
}  // namespace scored::ref
