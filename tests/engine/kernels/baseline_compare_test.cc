// Q against its reference R on the GPU vs ref::CompareWithBaseline (double exp and sums). The kernel takes
// exp in fp32 (expf, <= 2 ulp) and sums in double; kld's error is then the sum over ids of those relative
// errors times p_R(i) times the deviation of log p_R(i) - log p_Q(i) from its mean, far below
// kKldAbsTol = 1e-6 on these rows (logits of magnitude <= 16, a 0.3-sigma perturbation); ref_logprob as
// logprob_test's kLogprobAbsTol. The argmax flags must match exactly (planted ties included), Q == R must
// give exactly 0 for every token, a shard split must agree with the whole row (argmaxes exactly, the rest to
// rounding: a shard takes exp relative to its own maximum, so its sums round differently; measured up to
// 2.4e-8 on kld, bound kKldAbsTol), and a token's results must not depend on the rows around it (bitwise).
#include "engine/kernels/baseline_compare.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kKldAbsTol = 1e-6;
constexpr double kLogprobAbsTol = 1e-6;

class BaselineCompareTest : public testing::GpuTest {};

struct Problem {
  int64_t tokens, vocab, ref_ld, ld;
  std::vector<float> ref_logits;  // [tokens, ref_ld]
  std::vector<float> logits;      // [tokens, ld]
  std::vector<int32_t> targets;
};

// R: N(0, 3) logits; Q: R + N(0, 0.3), with planted cases: R's maximum twice (argmax tie -> lowest id), a
// maximum in the last tile (the running sums rescaled late), Q's maximum elsewhere than R's, and targets at
// R's argmax, at the tie's second id and at random ids.
Problem MakeProblem(int64_t tokens, int64_t vocab, uint32_t seed) {
  Problem p{tokens, vocab, vocab + 3, vocab + 5, {}, {}, {}};
  p.ref_logits = testing::RandomNormal(tokens * p.ref_ld, seed, 3.0f);
  const std::vector<float> noise = testing::RandomNormal(tokens * vocab, seed + 7, 0.3f);
  p.logits.assign(tokens * p.ld, 0.0f);
  std::mt19937 rng(seed + 1);
  p.targets.resize(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    float* r = p.ref_logits.data() + t * p.ref_ld;
    float* q = p.logits.data() + t * p.ld;
    const int32_t a = static_cast<int32_t>(rng() % vocab), b = static_cast<int32_t>(rng() % vocab);
    switch (t % 4) {
      case 0:  // R's maximum at two ids
        r[a] = 16.0f;
        r[b] = 16.0f;
        break;
      case 1:  // R's maximum in the last column (the last tile)
        r[vocab - 1] = 15.0f;
        break;
      default:
        break;
    }
    for (int64_t i = 0; i < vocab; ++i) q[i] = r[i] + noise[t * vocab + i];
    if (t % 4 == 2) q[a] = 20.0f;  // Q's maximum where R's is not
    p.targets[t] = t % 4 == 0   ? std::max(a, b)
                   : t % 4 == 1 ? static_cast<int32_t>(vocab - 1)
                                : static_cast<int32_t>(rng() % vocab);
  }
  return p;
}

struct Outputs {
  std::vector<double> ref_logprob, kld;
  std::vector<uint8_t> ref_greedy, same_top;
};

// The fused kernel over `shards` vocabulary slices (shard r: columns [bounds[r], bounds[r + 1])), combined.
Outputs RunCompare(const Problem& p, const std::vector<int64_t>& bounds) {
  const int64_t n = p.tokens, shards = static_cast<int64_t>(bounds.size()) - 1;
  DeviceArray<float> d_ref(p.ref_logits), d_q(p.logits);
  DeviceArray<int32_t> d_targets(p.targets);
  DeviceArray<BaselinePartialStats> d_stats(shards * n);
  DeviceArray<double> d_lp(n), d_kld(n);
  DeviceArray<uint8_t> d_greedy(n), d_same(n);
  d_lp.Poison();
  d_kld.Poison();
  d_greedy.Poison();
  d_same.Poison();
  BaselineOutputs out;
  out.ref_logprob = d_lp.get();
  out.kld = d_kld.get();
  out.ref_greedy = d_greedy.get();
  out.same_top = d_same.get();
  if (shards == 1 && bounds[0] == 0) {
    EXPECT_TRUE(CompareWithBaseline(d_ref.get(), p.ref_ld, d_q.get(), p.ld, d_targets.get(), n, p.vocab,
                                    d_stats.get(), out, nullptr)
                    .ok());
  } else {
    for (int64_t r = 0; r < shards; ++r) {
      EXPECT_TRUE(ComputeBaselinePartials(d_ref.get() + bounds[r], p.ref_ld, d_q.get() + bounds[r], p.ld,
                                          d_targets.get(), n, bounds[r + 1] - bounds[r], bounds[r],
                                          d_stats.get() + r * n, nullptr)
                      .ok());
    }
    EXPECT_TRUE(CombineBaselinePartials(d_stats.get(), shards, n, d_targets.get(), out, nullptr).ok());
  }
  return {d_lp.Download(), d_kld.Download(), d_greedy.Download(), d_same.Download()};
}

TEST_F(BaselineCompareTest, MatchesTheDoubleOracle) {
  for (const int64_t vocab : {int64_t{1000}, int64_t{32017}, int64_t{kCompareTile * 3}}) {
    SCOPED_TRACE(vocab);
    const Problem p = MakeProblem(37, vocab, 11);
    const Outputs got = RunCompare(p, {0, vocab});
    int same_top = 0;
    for (int64_t t = 0; t < p.tokens; ++t) {
      SCOPED_TRACE(t);
      const ref::BaselineComparison want = ref::CompareWithBaseline(
          p.ref_logits.data() + t * p.ref_ld, p.logits.data() + t * p.ld, vocab, p.targets[t]);
      EXPECT_NEAR(got.kld[t], want.kld, kKldAbsTol);
      EXPECT_GT(got.kld[t], 0.0);
      EXPECT_NEAR(got.ref_logprob[t], want.ref_logprob, kLogprobAbsTol);
      EXPECT_EQ(got.ref_greedy[t], want.ref_greedy ? 1 : 0);
      EXPECT_EQ(got.same_top[t], want.same_top ? 1 : 0);
      same_top += got.same_top[t];
    }
    // Both outcomes of each flag occur (the planted rows): the test can tell them apart.
    EXPECT_GT(same_top, 0);
    EXPECT_LT(same_top, p.tokens);
  }
}

TEST_F(BaselineCompareTest, ModelAgainstItselfIsExactlyZero) {
  Problem p = MakeProblem(21, 32017, 5);
  p.ld = p.ref_ld;
  p.logits = p.ref_logits;
  for (const std::vector<int64_t>& bounds : {std::vector<int64_t>{0, 32017}, {0, 9000, 20000, 32017}}) {
    const Outputs got = RunCompare(p, bounds);
    for (int64_t t = 0; t < p.tokens; ++t) {
      EXPECT_EQ(got.kld[t], 0.0) << t;
      EXPECT_EQ(got.same_top[t], 1) << t;
    }
  }
}

TEST_F(BaselineCompareTest, ShardsCombineToTheWholeRow) {
  const Problem p = MakeProblem(29, 32017, 23);
  const Outputs whole = RunCompare(p, {0, 32017});
  const Outputs split = RunCompare(p, {0, 5000, 16008, 32017});  // uneven, not tile-aligned
  for (int64_t t = 0; t < p.tokens; ++t) {
    SCOPED_TRACE(t);
    EXPECT_NEAR(split.kld[t], whole.kld[t], kKldAbsTol);
    EXPECT_NEAR(split.ref_logprob[t], whole.ref_logprob[t], kLogprobAbsTol);
    EXPECT_EQ(split.ref_greedy[t], whole.ref_greedy[t]);
    EXPECT_EQ(split.same_top[t], whole.same_top[t]);
  }
}

TEST_F(BaselineCompareTest, ATokensResultDoesNotDependOnItsBatch) {
  const Problem p = MakeProblem(9, 32017, 31);
  const Outputs batch = RunCompare(p, {0, 32017});
  for (const int64_t t : {int64_t{0}, int64_t{4}, int64_t{8}}) {
    Problem one = p;
    one.tokens = 1;
    one.ref_logits.assign(p.ref_logits.begin() + t * p.ref_ld, p.ref_logits.begin() + (t + 1) * p.ref_ld);
    one.logits.assign(p.logits.begin() + t * p.ld, p.logits.begin() + (t + 1) * p.ld);
    one.targets = {p.targets[t]};
    const Outputs alone = RunCompare(one, {0, 32017});
    EXPECT_EQ(std::memcmp(&alone.kld[0], &batch.kld[t], sizeof(double)), 0) << t;
    EXPECT_EQ(std::memcmp(&alone.ref_logprob[0], &batch.ref_logprob[t], sizeof(double)), 0) << t;
  }
}

TEST_F(BaselineCompareTest, RefusesBadShapes) {
  EXPECT_FALSE(ComputeBaselinePartials(nullptr, 10, nullptr, 10, nullptr, 1, 11, 0, nullptr, nullptr).ok());
  EXPECT_FALSE(CombineBaselinePartials(nullptr, 0, 1, nullptr, BaselineOutputs(), nullptr).ok());
  EXPECT_FALSE(CombineBaselinePartials(nullptr, 1, 1, nullptr, BaselineOutputs(), nullptr).ok());
}

}  // namespace
}  // namespace scored::kernels
