// Known answers for ScoreLogits (DESIGN.md §3): log-softmax, entropy, rank, greedy and top-k tie rules.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

// Logits log(1..4) give probabilities 0.1..0.4 (up to the fp32 rounding of the logs, ~1e-8 relative).
TEST(ScoreLogits, LogSoftmaxOfKnownDistribution) {
  const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  for (int target = 0; target < 4; ++target) {
    const TokenScore s = ScoreLogits(logits.data(), 4, target, 0, true, true);
    EXPECT_NEAR(s.logprob, std::log((target + 1) / 10.0), 1e-7) << target;
    EXPECT_EQ(s.rank, 4 - target);
    EXPECT_EQ(s.greedy, target == 3);
    // -sum p log p for p = 0.1, 0.2, 0.3, 0.4, computed by hand (float64).
    EXPECT_NEAR(s.entropy, 1.2798542258336676, 1e-7);
    EXPECT_TRUE(s.top_k.empty());
  }
}

TEST(ScoreLogits, LogSumExpOfOneTwoThree) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  // 3 + log(1 + e^-1 + e^-2) = 3.4076059644443806; the logits are exact, so only double rounding remains.
  EXPECT_NEAR(ScoreLogits(logits.data(), 3, 0, 0, false, false).logprob, 1.0 - 3.4076059644443806, 1e-12);
}

TEST(ScoreLogits, UniformDistribution) {
  const int64_t vocab = 1000;
  const std::vector<float> logits(vocab, 0.25f);
  const TokenScore first = ScoreLogits(logits.data(), vocab, 0, 3, true, true);
  EXPECT_NEAR(first.logprob, -std::log(1000.0), 1e-12);
  EXPECT_NEAR(first.entropy, std::log(1000.0), 1e-12);
  EXPECT_EQ(first.rank, 1);
  EXPECT_TRUE(first.greedy);  // all tied: the lowest id is the argmax
  const TokenScore later = ScoreLogits(logits.data(), vocab, 7, 3, true, false);
  EXPECT_FALSE(later.greedy);
  EXPECT_EQ(later.rank, 1);  // no id is strictly larger
  ASSERT_EQ(later.top_k.size(), 3u);
  EXPECT_EQ(later.top_k[0].id, 0);
  EXPECT_EQ(later.top_k[1].id, 1);
  EXPECT_EQ(later.top_k[2].id, 2);
  EXPECT_NEAR(later.top_k[0].logprob, -std::log(1000.0), 1e-6);
}

TEST(ScoreLogits, ArgmaxTieTakesLowestIdAndTopKOrdersTiesById) {
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 5.0f, 5.0f, -2.0f};
  EXPECT_TRUE(ScoreLogits(logits.data(), 6, 1, 0, false, false).greedy);
  EXPECT_FALSE(ScoreLogits(logits.data(), 6, 3, 0, false, false).greedy);
  EXPECT_FALSE(ScoreLogits(logits.data(), 6, 4, 0, false, false).greedy);
  EXPECT_EQ(ScoreLogits(logits.data(), 6, 4, 0, true, false).rank, 1);
  EXPECT_EQ(ScoreLogits(logits.data(), 6, 2, 0, true, false).rank, 4);
  EXPECT_EQ(ScoreLogits(logits.data(), 6, 5, 0, true, false).rank, 6);
  const TokenScore s = ScoreLogits(logits.data(), 6, 0, 5, false, false);
  ASSERT_EQ(s.top_k.size(), 5u);
  const int32_t expected_ids[] = {1, 3, 4, 2, 0};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.top_k[i].id, expected_ids[i]) << i;
  EXPECT_EQ(s.top_k[0].logprob, s.top_k[1].logprob);
  EXPECT_GT(s.top_k[2].logprob, s.top_k[3].logprob);
  // top_k larger than the vocabulary returns the whole vocabulary.
  EXPECT_EQ(ScoreLogits(logits.data(), 6, 0, 64, false, false).top_k.size(), 6u);
}

TEST(ScoreLogits, LargeLogitsDoNotOverflow) {
  // Max subtraction: exp(1e4) would overflow double.
  const std::vector<float> logits = {10000.0f, 10000.0f + std::log(3.0f)};
  const TokenScore s = ScoreLogits(logits.data(), 2, 0, 0, false, true);
  EXPECT_NEAR(s.logprob, std::log(0.25), 1e-3);  // fp32 spacing at 1e4 is ~1e-3: log(3) is rounded there
  EXPECT_TRUE(std::isfinite(s.entropy));
  const double other = ScoreLogits(logits.data(), 2, 1, 0, false, false).logprob;
  EXPECT_NEAR(std::exp(s.logprob) + std::exp(other), 1.0, 1e-12);
}

}  // namespace
}  // namespace scored::ref
