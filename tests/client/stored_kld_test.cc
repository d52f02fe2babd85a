// KL divergence from a stored reference (client/ppl/stored_kld.h), against the exact KL of random
// distributions computed in double over the whole vocabulary: the bounds hold for every K, they meet at the
// exact value when K is the vocabulary, the estimate is exact when Q's tail is proportional to R's (the
// log-sum inequality's equality case), and the window comparison's same top and sizes; the aggregator's
// bounds of the mean and percentiles (client/ppl/kld.h). No server.
#include "client/ppl/stored_kld.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "client/ppl/kld.h"

namespace scored {
namespace ppl {
namespace {

// Float rounding of the stored logprobs and entropy (~1e-7 relative, over logprobs of a few nats).
constexpr double kTol = 2e-6;

// log-probabilities of a random distribution over `v` ids with logits of scale `scale`.
std::vector<double> RandomLogprobs(int v, double scale, std::mt19937* rng) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> l(v);
  for (double& x : l) x = normal(*rng);
  const double m = *std::max_element(l.begin(), l.end());
  double s = 0.0;
  for (double x : l) s += std::exp(x - m);
  for (double& x : l) x -= m + std::log(s);
  return l;
}

double ExactKl(const std::vector<double>& r, const std::vector<double>& q) {
  double kl = 0.0;
  for (size_t i = 0; i < r.size(); ++i) kl += std::exp(r[i]) * (r[i] - q[i]);
  return kl;
}

// What the file and Q's server give for one position at K = k: R's top-k (descending) as floats, Q's at the
// same ids, R's entropy, its tail mass, Q's min.
struct Stored {
  std::vector<float> ref_top, q_at_top;
  double entropy = 0.0, tail = 0.0, q_min = 0.0;
  int32_t ref_argmax = 0;
};

Stored Store(const std::vector<double>& r, const std::vector<double>& q, int k) {
  std::vector<int> ids(r.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return r[a] > r[b]; });
  Stored s;
  for (int i = 0; i < k; ++i) {
    s.ref_top.push_back(static_cast<float>(r[ids[i]]));
    s.q_at_top.push_back(static_cast<float>(q[ids[i]]));
  }
  for (double x : r) s.entropy -= std::exp(x) * x;
  s.entropy = static_cast<float>(s.entropy);
  s.tail = TailMass(s.ref_top, static_cast<int64_t>(r.size()));
  s.q_min = static_cast<float>(*std::min_element(q.begin(), q.end()));
  s.ref_argmax = ids[0];
  return s;
}

TEST(StoredKldTest, BoundsHoldForEveryKAndMeetAtTheWholeVocabulary) {
  std::mt19937 rng(35);
  constexpr int kVocab = 64;
  double widest = 0.0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<double> r = RandomLogprobs(kVocab, 1.0 + trial % 4, &rng);
    std::vector<double> q = r;  // a "quant": R's logits perturbed
    std::normal_distribution<double> noise(0.0, 0.05 + 0.1 * (trial % 5));
    for (double& x : q) x += noise(rng);
    const double m = *std::max_element(q.begin(), q.end());
    double s = 0.0;
    for (double x : q) s += std::exp(x - m);
    for (double& x : q) x -= m + std::log(s);
    const double kl = ExactKl(r, q);
    for (int k : {1, 4, 16, 48, kVocab}) {
      const Stored st = Store(r, q, k);
      const KldBound b = StoredPositionKld(st.ref_top, st.q_at_top, st.entropy, st.tail, st.q_min);
      ASSERT_LE(b.lower, kl + kTol) << "trial " << trial << " k " << k;
      ASSERT_GE(b.upper, kl - kTol) << "trial " << trial << " k " << k;
      ASSERT_EQ(b.estimate, b.lower);
      ASSERT_LE(b.lower, b.upper);
      if (k == kVocab) {
        EXPECT_EQ(st.tail, 0.0);
        EXPECT_EQ(b.lower, b.upper);
        EXPECT_NEAR(b.estimate, kl, kTol) << "trial " << trial;
      } else {
        widest = std::max(widest, b.upper - b.lower);
      }
    }
  }
  EXPECT_GT(widest, 1e-3) << "the bounds never opened: the tail was not exercised";
}

// Q's tail proportional to R's (p_Q = c p_R outside the top-k): the log-sum bound is an equality, so the
// estimate is the exact KL.
TEST(StoredKldTest, EstimateIsExactWhenTheTailsAreProportional) {
  std::mt19937 rng(7);
  const std::vector<double> r = RandomLogprobs(40, 2.0, &rng);
  std::vector<int> ids(r.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return r[a] > r[b]; });
  constexpr int kK = 10;
  std::vector<double> q = r;
  // Top: reshuffled mass; tail: R's tail scaled to what is left.
  double top_q = 0.0, tail_r = 0.0;
  for (int i = 0; i < kK; ++i) {
    q[ids[i]] = r[ids[i]] + 0.3 * std::sin(i);
    top_q += std::exp(q[ids[i]]);
  }
  for (int i = kK; i < 40; ++i) tail_r += std::exp(r[ids[i]]);
  const double scale = 0.2 / tail_r;  // Q's tail mass 0.2
  for (int i = 0; i < kK; ++i) q[ids[i]] += std::log(0.8 / top_q);
  for (int i = kK; i < 40; ++i) q[ids[i]] = r[ids[i]] + std::log(scale);
  const Stored st = Store(r, q, kK);
  const KldBound b = StoredPositionKld(st.ref_top, st.q_at_top, st.entropy, st.tail, st.q_min);
  EXPECT_NEAR(b.estimate, ExactKl(r, q), kTol);
  EXPECT_GT(b.upper, b.estimate + 1e-3);
}

TEST(StoredKldTest, ModelAgainstItselfIsZero) {
  std::mt19937 rng(3);
  const std::vector<double> r = RandomLogprobs(30, 1.5, &rng);
  const Stored all = Store(r, r, 30);
  const KldBound b = StoredPositionKld(all.ref_top, all.q_at_top, all.entropy, all.tail, all.q_min);
  EXPECT_EQ(b.estimate, 0.0);
  EXPECT_EQ(b.upper, 0.0);
  const Stored some = Store(r, r, 5);
  const KldBound c = StoredPositionKld(some.ref_top, some.q_at_top, some.entropy, some.tail, some.q_min);
  EXPECT_EQ(c.estimate, 0.0);  // top 0, log-sum term m log(m / m) = 0
  EXPECT_GE(c.upper, 0.0);
}

TEST(StoredKldTest, CompareWithStoredWindow) {
  std::mt19937 rng(11);
  ReferenceWindow w;
  w.window = 4;
  w.num_scored = 2;
  w.k = 3;
  w.sum_logprob = -3.5;
  std::vector<float> q_cand, q_min;
  std::vector<double> kls;
  for (int i = 0; i < 2; ++i) {
    const std::vector<double> r = RandomLogprobs(3, 1.0, &rng), q = RandomLogprobs(3, 1.0, &rng);
    const Stored st = Store(r, q, 3);
    w.logprob.push_back(static_cast<float>(r[1]));
    w.entropy.push_back(static_cast<float>(st.entropy));
    w.tail_mass.push_back(st.tail);
    w.top_ids.insert(w.top_ids.end(), {st.ref_argmax, 90, 91});
    w.top_logprobs.insert(w.top_logprobs.end(), st.ref_top.begin(), st.ref_top.end());
    q_cand.insert(q_cand.end(), st.q_at_top.begin(), st.q_at_top.end());
    q_min.push_back(static_cast<float>(st.q_min));
    kls.push_back(ExactKl(r, q));
  }
  const std::vector<int32_t> q_argmax = {w.top_ids[0], 91};
  StoredComparison c;
  ASSERT_TRUE(CompareWithStored(w, q_cand, q_min, q_argmax, &c).ok());
  EXPECT_EQ(c.ref_logprobs, w.logprob);
  EXPECT_EQ(c.same_top, (std::vector<uint8_t>{1, 0}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(c.kld[i], kls[i], kTol) << i;  // k = vocab: exact
    EXPECT_EQ(c.kld_lower[i], c.kld_upper[i]) << i;
  }
  q_cand.pop_back();
  EXPECT_EQ(CompareWithStored(w, q_cand, q_min, q_argmax, &c).code(), absl::StatusCode::kInvalidArgument);
}

// The aggregator's bounds: the mean of the lower and upper bounds, and each percentile of the lower and upper
// values (which bound the estimates' percentile).
TEST(StoredKldTest, AggregatorReportsTheBounds) {
  KldAggregator agg;
  const std::vector<float> lp = {-1.0f, -2.0f, -3.0f, -0.5f};
  const std::vector<float> kld = {0.1f, 0.3f, 0.2f, 0.0f};
  const std::vector<float> lower = {0.1f, 0.3f, 0.2f, 0.0f};
  const std::vector<float> upper = {0.5f, 0.4f, 0.2f, 1.0f};
  const std::vector<uint8_t> same = {1, 0, 1, 1};
  ASSERT_TRUE(agg.AddWindow(-6.5, -6.0, lp, lp, kld, same).ok());
  EXPECT_EQ(agg.AddKldBounds(lower, {0.5f}, 0.0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(agg.AddKldBounds(lower, upper, 0.2).ok());
  agg.set_reference_top_k(64);
  const KldStats s = agg.Finish();
  ASSERT_TRUE(s.kld_bounded);
  EXPECT_NEAR(s.kld_mean_lower, 0.15, 1e-7);
  EXPECT_NEAR(s.kld_mean_upper, 0.525, 1e-7);
  EXPECT_NEAR(s.tail_mass_mean, 0.05, 1e-12);
  EXPECT_EQ(s.reference_top_k, 64);
  ASSERT_EQ(s.kld_percentiles_upper.size(), s.kld_percentiles.size());
  for (size_t i = 0; i < s.kld_percentiles.size(); ++i) {
    EXPECT_LE(s.kld_percentiles_lower[i], s.kld_percentiles[i] + 1e-9) << i;
    EXPECT_GE(s.kld_percentiles_upper[i], s.kld_percentiles[i] - 1e-9) << i;
  }
  EXPECT_FLOAT_EQ(s.kld_percentiles_upper.front(), 1.0f);  // max
  EXPECT_FLOAT_EQ(s.kld_percentiles_upper.back(), 0.2f);   // min
  const nlohmann::json j = KldStatsToJson(s);
  EXPECT_EQ(j["kld_source"], "stored");
  EXPECT_EQ(j["reference_top_k"], 64);
  EXPECT_NEAR(j["kld_percentiles_upper"]["max"].get<double>(), 1.0, 1e-7);
  EXPECT_THAT(KldStatsToText(s), ::testing::HasSubstr("bounds ["));
  EXPECT_THAT(KldStatsToText(s), ::testing::HasSubstr("Exact: PPL(Q), PPL(R)"));
}

}  // namespace
}  // namespace ppl
}  // namespace scored
