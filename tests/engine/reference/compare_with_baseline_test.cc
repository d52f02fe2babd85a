// Known answers of ref::CompareWithBaseline (issue 17's per-position comparison of a model with its
// reference): KL of small rows in closed form, exact zero for equal rows, argmax ties to the lowest id.
#include <cmath>
#include <random>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(CompareWithBaselineTest, TwoTokenKnownAnswer) {
  // p_R = (1/2, 1/2), p_Q = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
  const float r[] = {0.0f, 0.0f};
  const float q[] = {static_cast<float>(std::log(3.0)), 0.0f};
  const BaselineComparison c = CompareWithBaseline(r, q, 2, /*target=*/1);
  // q[0] is ln 3 rounded to fp32: the closed form of the rounded row.
  const double p_q0 = std::exp(static_cast<double>(q[0])) / (std::exp(static_cast<double>(q[0])) + 1.0);
  EXPECT_NEAR(c.kld, 0.5 * std::log(0.5 / p_q0) + 0.5 * std::log(0.5 / (1.0 - p_q0)), 1e-15);
  EXPECT_NEAR(c.kld, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_DOUBLE_EQ(c.ref_logprob, -std::log(2.0));
  EXPECT_FALSE(c.ref_greedy);  // tie at 0: R's argmax is id 0, the target is 1
  EXPECT_TRUE(c.same_top);     // Q's argmax is id 0 too
}

TEST(CompareWithBaselineTest, TiesGoToTheLowestId) {
  const float r[] = {1.0f, 1.0f, 0.0f};
  const float q[] = {0.0f, 1.0f, 1.0f};
  const BaselineComparison c = CompareWithBaseline(r, q, 3, /*target=*/0);
  EXPECT_TRUE(c.ref_greedy);  // argmax_R = 0
  EXPECT_FALSE(c.same_top);   // argmax_Q = 1
  EXPECT_GT(c.kld, 0.0);
}

// Equal rows give exactly 0 on a large random row, and every flag agrees.
TEST(CompareWithBaselineTest, EqualRowsGiveExactlyZero) {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  std::vector<float> row(32000);
  for (float& x : row) x = dist(rng);
  const BaselineComparison c = CompareWithBaseline(row.data(), row.data(), 32000, /*target=*/123);
  EXPECT_EQ(c.kld, 0.0);
  EXPECT_TRUE(c.same_top);
}

// KL is invariant to a constant added to Q's logits, and matches the plain double formula on a random row.
TEST(CompareWithBaselineTest, MatchesPlainFormulaAndShiftInvariance) {
  std::mt19937 rng(18);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  const int64_t v = 4096;
  std::vector<float> r(v), q(v), q_shifted(v);
  for (int64_t i = 0; i < v; ++i) {
    r[i] = dist(rng);
    q[i] = r[i] + 0.3f * dist(rng);
    q_shifted[i] = q[i] + 16.0f;  // rounds to fp32 again: compared within 1e-5 relative
  }
  double lse_r = 0.0, lse_q = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    lse_r += std::exp(static_cast<double>(r[i]));
    lse_q += std::exp(static_cast<double>(q[i]));
  }
  lse_r = std::log(lse_r);
  lse_q = std::log(lse_q);
  double kl = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const double lr = r[i] - lse_r;
    kl += std::exp(lr) * (lr - (q[i] - lse_q));
  }
  const BaselineComparison c = CompareWithBaseline(r.data(), q.data(), v, 7);
  EXPECT_NEAR(c.kld, kl, 1e-12 + 1e-10 * kl);
  EXPECT_NEAR(c.ref_logprob, r[7] - lse_r, 1e-12);
  const BaselineComparison s = CompareWithBaseline(r.data(), q_shifted.data(), v, 7);
  EXPECT_NEAR(s.kld, c.kld, 1e-5 * c.kld);
}

}  // namespace
}  // namespace scored::ref
