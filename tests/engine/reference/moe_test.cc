// MoeRoute, MoeRouteSigmoid and MoeCombine (engine/reference/ops.h) by hand: softmax over all experts, top k
// with exact ties to the lower expert id, renormalization; DeepSeek-V3's sigmoid router (the correction bias
// for the choice only, the group limit, +epsilon renormalization, the scaling); the fp32 combine in ascending
// expert id, with a gated or an ungated shared expert.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(MoeRoute, SoftmaxTopKAndRenormalization) {
  // One token, logits (1, 3, 2, 0): p = e^l / (e^0 + e^1 + e^2 + e^3); top 2 = experts 1, 2.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  int32_t ids[2];
  float w[2];
  MoeRoute(logits.data(), 1, 4, 2, /*renormalize=*/false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(std::exp(3.0) / z));
  EXPECT_FLOAT_EQ(w[1], static_cast<float>(std::exp(2.0) / z));
  MoeRoute(logits.data(), 1, 4, 2, /*renormalize=*/true, ids, w);
  // Renormalized: e^3 / (e^3 + e^2) = 1 / (1 + e^-1).
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(1.0 / (1.0 + std::exp(-1.0))));
  EXPECT_FLOAT_EQ(w[1], static_cast<float>(1.0 / (1.0 + std::exp(1.0))));
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
}

TEST(MoeRoute, ExactTiesGoToTheLowerExpertId) {
  // Experts 1, 2 and 3 tie for first place; the top 2 are 1 and 2, in that order, for any k < 4.
  const std::vector<float> logits = {-1.0f, 0.5f, 0.5f, 0.5f};
  int32_t ids[3];
  float w[3];
  MoeRoute(logits.data(), 1, 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(w[0], w[1]);
  MoeRoute(logits.data(), 1, 4, 3, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], 3);
  EXPECT_FLOAT_EQ(w[2], 1.0f / 3.0f);
  // A lower id that ties with a larger probability further down the list does not jump ahead of it.
  const std::vector<float> logits2 = {0.0f, 2.0f, 0.0f, 1.0f, 0.0f};
  int32_t ids2[3];
  float w2[3];
  MoeRoute(logits2.data(), 1, 5, 3, false, ids2, w2);
  EXPECT_EQ(ids2[0], 1);
  EXPECT_EQ(ids2[1], 3);
  EXPECT_EQ(ids2[2], 0);
}

TEST(MoeRoute, TokensAreIndependentAndKMayBeAllExperts) {
  // Two tokens: the second one's logits (huge) do not change the first one's routing.
  const std::vector<float> logits = {0.0f, 1.0f, 1000.0f, -1000.0f};
  int32_t ids[4];
  float w[4];
  MoeRoute(logits.data(), 2, 2, 2, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 0);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(1.0 / (1.0 + std::exp(-1.0))));
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 1);
  EXPECT_EQ(w[2], 1.0f);  // max-subtracted: exp(0) / (1 + exp(-2000)) with no overflow
  EXPECT_EQ(w[3], 0.0f);
}

TEST(MoeCombine, SumsInFp32InAscendingExpertIdOrder) {
  // Slots hold experts 2, 0, 1 with outputs 1, 1e8, -1e8 (weights 1). In ascending id order the fp32 sum is
  // (1e8 + -1e8) + 1 = 1; in slot order it would be (1 + 1e8) + -1e8 = 0 (1e8 + 1 rounds to 1e8).
  const std::vector<float> out = {1.0f, 1e8f, -1e8f};  // [1 token, 3 slots, hidden 1]
  const int32_t ids[] = {2, 0, 1};
  const float w[] = {1.0f, 1.0f, 1.0f};
  float y = NAN;
  MoeCombine(out.data(), ids, w, 1, 3, 1, nullptr, nullptr, &y);
  EXPECT_EQ(y, 1.0f);
}

TEST(MoeCombine, WeightsAndTheGatedSharedExpert) {
  // Two tokens, top 2, hidden 2; a shared expert with gate logits 0 (sigmoid 0.5) and ln 3 (sigmoid 0.75).
  const std::vector<float> out = {1,  2,  10, 20,  // token 0: experts 3, 1
                                  -1, -2, 4,  8};  // token 1: experts 0, 2
  const int32_t ids[] = {3, 1, 0, 2};
  const float w[] = {0.75f, 0.25f, 0.5f, 0.5f};
  const std::vector<float> shared = {4, 8, 2, 2};
  const float gate[] = {0.0f, static_cast<float>(std::log(3.0))};
  std::vector<float> y(4, NAN);
  MoeCombine(out.data(), ids, w, 2, 2, 2, shared.data(), gate, y.data());
  EXPECT_FLOAT_EQ(y[0], 0.75f * 1 + 0.25f * 10 + 0.5f * 4);
  EXPECT_FLOAT_EQ(y[1], 0.75f * 2 + 0.25f * 20 + 0.5f * 8);
  EXPECT_FLOAT_EQ(y[2], 0.5f * -1 + 0.5f * 4 + 0.75f * 2);
  EXPECT_FLOAT_EQ(y[3], 0.5f * -2 + 0.5f * 8 + 0.75f * 2);
  // Without the shared expert.
  MoeCombine(out.data(), ids, w, 2, 2, 2, nullptr, nullptr, y.data());
  EXPECT_FLOAT_EQ(y[0], 3.25f);
  EXPECT_FLOAT_EQ(y[3], 3.0f);
}

float Sigmoid(double x) { return static_cast<float>(1.0 / (1.0 + std::exp(-x))); }

TEST(MoeRouteSigmoid, BiasPicksTheWeightsStayUnbiased) {
  // Logits (2, 1, 0, -1): s descends with the id, but the correction bias makes expert 3 then 2 the choice.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 1.0f};
  SigmoidRouting r;
  r.correction_bias = bias.data();
  int32_t ids[2];
  float w[2];
  MoeRouteSigmoid(logits.data(), 1, 4, 2, r, ids, w);
  EXPECT_EQ(ids[0], 3);  // c = s(-1) + 1 = 1.269
  EXPECT_EQ(ids[1], 2);  // c = 0.5 + 0.5 = 1.0 > s(2) = 0.881
  EXPECT_EQ(w[0], Sigmoid(-1.0));
  EXPECT_EQ(w[1], Sigmoid(0.0));
  // Renormalized with DeepSeek's epsilon and scaled by 2.5: fp32(s / fp32(sum + 1e-20)) * 2.5.
  r.renormalize = true;
  r.renorm_epsilon = 1e-20f;
  r.scaling_factor = 2.5f;
  MoeRouteSigmoid(logits.data(), 1, 4, 2, r, ids, w);
  const float sum = static_cast<float>(static_cast<double>(Sigmoid(-1.0)) + Sigmoid(0.0));
  EXPECT_EQ(w[0], Sigmoid(-1.0) / sum * 2.5f);
  EXPECT_EQ(w[1], Sigmoid(0.0) / sum * 2.5f);
  // Without a bias: plain top 2 of s.
  r.correction_bias = nullptr;
  MoeRouteSigmoid(logits.data(), 1, 4, 2, r, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
}

TEST(MoeRouteSigmoid, GroupsKeepTheBestTopTwoSums) {
  // 8 experts in 4 groups of 2. Choices (bias 0): group 0 {0.9, 0.1} sums 1.0, group 1 {0.6, 0.6} 1.2,
  // group 2 {0.95, 0.0} 0.95, group 3 {0.5, 0.55} 1.05. Keep 2 groups: 1 and 3; expert 4 (0.95, the largest
  // choice) and expert 0 are in dropped groups and never chosen.
  const float c[] = {0.9f, 0.1f, 0.6f, 0.6f, 0.95f, 0.0f, 0.5f, 0.55f};
  std::vector<float> logits(8);
  for (int e = 0; e < 8; ++e) logits[e] = static_cast<float>(std::log(c[e] / (1.0 - c[e])));  // s ~= c
  logits[5] = -30.0f;
  SigmoidRouting r;
  r.num_groups = 4;
  r.topk_groups = 2;
  int32_t ids[3];
  float w[3];
  MoeRouteSigmoid(logits.data(), 1, 8, 3, r, ids, w);
  // Group 1's experts tie at 0.6 (exactly, the same logit): the lower id first; then 7 (0.55).
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 7);
  EXPECT_EQ(w[0], w[1]);
  // One group kept, exact ties between groups 1 and 3 go to the lower group id.
  logits[6] = logits[7] = logits[2];
  r.topk_groups = 1;
  MoeRouteSigmoid(logits.data(), 1, 8, 2, r, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
}

TEST(MoeRouteSigmoid, ExactTiesGoToTheLowerExpertIdAndTokensAreIndependent) {
  // Token 0: experts 1, 2, 3 tie; token 1: the bias breaks nothing of token 0's.
  const std::vector<float> logits = {-1.0f, 0.5f, 0.5f, 0.5f, 9.0f, -9.0f, 0.0f, 0.0f};
  int32_t ids[4];
  float w[4];
  SigmoidRouting r;
  r.renormalize = true;  // MiniMax-M2: a plain sum
  MoeRouteSigmoid(logits.data(), 2, 4, 2, r, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(w[0], 0.5f);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 2);
  EXPECT_FLOAT_EQ(w[2] + w[3], 1.0f);
}

// gpt-oss's router: the top k LOGITS, then their softmax (not a softmax over every expert); exact ties to
// the lower id; each token on its own.
TEST(MoeRouteTopKSoftmax, SoftmaxOverTheTopKLogitsOnly) {
  const std::vector<float> logits = {0.5f,  3.0f,  -1.0f, 2.0f,  2.0f, 1.0f,  // token 0: a tie 2.0 at 3 and 4
                                     -4.0f, -3.0f, -2.0f, -1.0f, 0.0f, 1.0f};  // token 1
  std::vector<int32_t> ids(2 * 3);
  std::vector<float> w(2 * 3);
  MoeRouteTopKSoftmax(logits.data(), 2, 6, 3, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 5, 4, 3}));
  const double d0 = 1 + 2 * std::exp(-1.0);  // exp(l - 3) over 3, 2, 2
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(1 / d0));
  EXPECT_FLOAT_EQ(w[1], static_cast<float>(std::exp(-1.0) / d0));
  EXPECT_EQ(w[1], w[2]);
  const double d1 = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_FLOAT_EQ(w[3], static_cast<float>(1 / d1));
  EXPECT_FLOAT_EQ(w[5], static_cast<float>(std::exp(-2.0) / d1));
  // A softmax over all six experts renormalized over the top 3 is the same function: the weights agree.
  std::vector<int32_t> ids2(6);
  std::vector<float> w2(6);
  MoeRoute(logits.data(), 2, 6, 3, /*renormalize=*/true, ids2.data(), w2.data());
  EXPECT_EQ(ids2, ids);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(w2[i], w[i], 1e-7) << i;
}

TEST(MoeCombine, UngatedSharedExpertIsAddedAfterTheRoutedSum) {
  // DeepseekV3MoE: experts(x) + shared_experts(x), no gate. 1e8 + (-1e8) first, then the shared 1: exactly 1.
  const std::vector<float> out = {1e8f, -1e8f};  // [1 token, 2 slots, hidden 1]
  const int32_t ids[] = {1, 0};
  const float w[] = {1.0f, 1.0f};
  const float shared = 1.0f;
  float y = NAN;
  MoeCombine(out.data(), ids, w, 1, 2, 1, &shared, nullptr, &y);
  EXPECT_EQ(y, 1.0f);
}

}  // namespace
}  // namespace scored::ref
