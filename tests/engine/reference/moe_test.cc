// MoeRoute and MoeCombine (engine/reference/ops.h) by hand: softmax over all experts, top k with exact ties
// to the lower expert id, renormalization, and the fp32 combine in ascending expert id.
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

}  // namespace
}  // namespace scored::ref
