// Scoring tail vs ref::ScoreLogits (double exp and sums). The kernel evaluates exp in fp32 (expf, <= 2
// ulp) and sums in double, so S is within ~2.5e-7 relative of the oracle's and logprob = x - m - log S
// within kLogprobAbsTol = 1e-6 (logits of magnitude <= 16); the entropy, a ratio of two such sums, within
// kEntropyAbsTol = 1e-5. greedy, rank and the top-k ids (ties included) must match exactly; top-k logprobs
// are fp32 roundings of values within 1e-6: kLogprobAbsTol + 2 fp32 ulp of |logprob| <= 40. Candidate
// logprobs and the min logprob are the same roundings (kTopKAbsTol), and a candidate that is also a top-k id
// must equal its top-k value bit for bit (one lse, one rounding), on one GPU and combined from shards.
#include "engine/kernels/logprob.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kLogprobAbsTol = 1e-6;
constexpr double kEntropyAbsTol = 1e-5;
constexpr double kTopKAbsTol = 1e-6 + 1e-5;

class LogprobTest : public testing::GpuTest {};

struct Problem {
  int64_t tokens, vocab, ld;
  std::vector<float> logits;  // [tokens, ld]
  std::vector<int32_t> targets;
};

// Random logits with planted ties: a duplicated max (argmax tie -> lowest id), a run of equal values
// straddling the top-k cut, and targets that hit the max, a tie and random ids.
Problem MakeProblem(int64_t tokens, int64_t vocab, uint32_t seed) {
  Problem p{tokens, vocab, vocab + 5, {}, {}};
  p.logits = testing::RandomNormal(tokens * p.ld, seed, 3.0f);
  std::mt19937 rng(seed + 1);
  p.targets.resize(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = p.logits.data() + t * p.ld;
    const int32_t a = static_cast<int32_t>(rng() % vocab), b = static_cast<int32_t>(rng() % vocab);
    row[a] = 16.0f;
    row[b] = 16.0f;
    for (int j = 0; j < 80; ++j) row[rng() % vocab] = 9.5f;  // ties around the top-64 boundary
    switch (t % 4) {
      case 0:
        p.targets[t] = std::min(a, b);
        break;
      case 1:
        p.targets[t] = std::max(a, b);
        break;
      default:
        p.targets[t] = static_cast<int32_t>(rng() % vocab);
        break;
    }
  }
  return p;
}

struct Outputs {
  std::vector<double> logprob;
  std::vector<uint8_t> greedy;
  std::vector<int32_t> rank;
  std::vector<float> entropy;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lp;
};

Outputs RunKernel(cudaStream_t stream, const Problem& p, const LogprobOptions& opt) {
  DeviceArray<float> d_logits(p.logits);
  DeviceArray<int32_t> d_targets(p.targets);
  DeviceArray<double> d_lp(p.tokens);
  DeviceArray<uint8_t> d_greedy(p.tokens);
  DeviceArray<int32_t> d_rank(p.tokens);
  DeviceArray<float> d_entropy(p.tokens);
  const size_t k = static_cast<size_t>(std::max(opt.top_k, 1));
  DeviceArray<int32_t> d_ids(p.tokens * k);
  DeviceArray<float> d_tlp(p.tokens * k);
  d_lp.Poison();
  d_greedy.Poison();
  d_rank.Poison();
  d_entropy.Poison();
  d_ids.Poison();
  d_tlp.Poison();
  LogprobOutputs out;
  out.logprob = d_lp.get();
  out.greedy = d_greedy.get();
  out.rank = d_rank.get();
  out.entropy = d_entropy.get();
  out.top_k_ids = d_ids.get();
  out.top_k_logprobs = d_tlp.get();
  const absl::Status st =
      ScoreLogits(d_logits.get(), p.ld, d_targets.get(), p.tokens, p.vocab, opt, out, stream);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return {d_lp.Download(),      d_greedy.Download(), d_rank.Download(),
          d_entropy.Download(), d_ids.Download(),    d_tlp.Download()};
}

void CheckAgainstReference(cudaStream_t stream, const Problem& p, int32_t top_k, const std::string& name) {
  LogprobOptions opt;
  opt.top_k = top_k;
  opt.want_rank = true;
  opt.want_entropy = true;
  const Outputs got = RunKernel(stream, p, opt);
  double max_lp = 0.0, max_ent = 0.0, max_top = 0.0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const ref::TokenScore want =
        ref::ScoreLogits(p.logits.data() + t * p.ld, p.vocab, p.targets[t], top_k, true, true);
    max_lp = std::max(max_lp, std::fabs(got.logprob[t] - want.logprob));
    max_ent = std::max(max_ent, std::fabs(got.entropy[t] - want.entropy));
    ASSERT_EQ(got.greedy[t], want.greedy ? 1 : 0) << name << " token " << t;
    ASSERT_EQ(got.rank[t], want.rank) << name << " token " << t;
    ASSERT_EQ(static_cast<int64_t>(want.top_k.size()), top_k);
    for (int32_t i = 0; i < top_k; ++i) {
      ASSERT_EQ(got.top_ids[t * top_k + i], want.top_k[i].id) << name << " token " << t << " rank " << i;
      max_top = std::max(max_top,
                         std::fabs(static_cast<double>(got.top_lp[t * top_k + i]) - want.top_k[i].logprob));
    }
  }
  std::cout << "[ measured ] " << name << ": logprob max_abs=" << max_lp << " entropy max_abs=" << max_ent
            << " top_k logprob max_abs=" << max_top << std::endl;
  EXPECT_LE(max_lp, kLogprobAbsTol) << name;
  EXPECT_LE(max_ent, kEntropyAbsTol) << name;
  EXPECT_LE(max_top, kTopKAbsTol) << name;
}

TEST_F(LogprobTest, MatchesReferenceWithTies) {
  CheckAgainstReference(stream_, MakeProblem(37, 32003, 500), 64, "logprob V=32003 k=64");
  CheckAgainstReference(stream_, MakeProblem(9, 1000, 501), 5, "logprob V=1000 k=5");
  CheckAgainstReference(stream_, MakeProblem(3, 128256, 502), 64, "logprob V=128256 k=64");
  CheckAgainstReference(stream_, MakeProblem(4, 512, 503), 0, "logprob V=512 k=0");
  // The widest top-k (a stored reference's K): the ties at 16.0 and 9.5 inside it, the cut among normals.
  CheckAgainstReference(stream_, MakeProblem(11, 32003, 504), 1024, "logprob V=32003 k=1024");
  CheckAgainstReference(stream_, MakeProblem(3, 128256, 505), 1024, "logprob V=128256 k=1024");
  CheckAgainstReference(stream_, MakeProblem(2, 1024, 506), 1024, "logprob V=1024 k=1024 (whole vocabulary)");
}

// Per token: the reference's top-k ids (so their logprobs must equal the kernel's top-k bitwise), random
// ids, a repeated id and (last) -1, a padding row's id, which gives NaN.
std::vector<int32_t> CandidateIds(const Problem& p, int32_t top_k, int32_t num_candidates, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(p.tokens * num_candidates);
  for (int64_t t = 0; t < p.tokens; ++t) {
    const ref::TokenScore want =
        ref::ScoreLogits(p.logits.data() + t * p.ld, p.vocab, p.targets[t], top_k, false, false);
    int32_t* row = ids.data() + t * num_candidates;
    for (int32_t c = 0; c < num_candidates; ++c) {
      row[c] = c < top_k ? want.top_k[c].id : static_cast<int32_t>(rng() % p.vocab);
    }
    row[num_candidates - 2] = row[0];
    row[num_candidates - 1] = -1;
  }
  return ids;
}

// Checks candidate logprobs [tokens, c] and min logprobs against the oracle, and the first top_k candidates
// bitwise against the kernel's top-k values top_lp [tokens, top_k].
void CheckCandidates(const Problem& p, const std::vector<int32_t>& ids, int32_t num_candidates,
                     const std::vector<float>& got, const std::vector<float>& got_min,
                     const std::vector<float>& top_lp, int32_t top_k, const std::string& name) {
  double max_cand = 0.0, max_min = 0.0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const ref::TokenScore want =
        ref::ScoreLogits(p.logits.data() + t * p.ld, p.vocab, p.targets[t], 0, false, false,
                         ids.data() + t * num_candidates, num_candidates, true);
    for (int32_t c = 0; c < num_candidates; ++c) {
      const float g = got[t * num_candidates + c];
      if (c == num_candidates - 1) {
        EXPECT_TRUE(std::isnan(g)) << name << " token " << t << ": id -1 gave " << g;
        continue;
      }
      max_cand = std::max(max_cand, std::fabs(static_cast<double>(g) - want.candidate_logprob[c]));
      if (c < top_k) {
        ASSERT_EQ(std::memcmp(&g, &top_lp[t * top_k + c], sizeof(float)), 0)
            << name << " token " << t << " " << c;
      }
    }
    max_min = std::max(max_min, std::fabs(static_cast<double>(got_min[t]) - want.min_logprob));
  }
  std::cout << "[ measured ] " << name << ": candidate logprob max_abs=" << max_cand
            << " min logprob max_abs=" << max_min << std::endl;
  EXPECT_LE(max_cand, kTopKAbsTol) << name;
  EXPECT_LE(max_min, kTopKAbsTol) << name;
}

TEST_F(LogprobTest, CandidateGatherAndMinLogprob) {
  for (const auto& [vocab, top_k, num_candidates] :
       {std::tuple<int64_t, int32_t, int32_t>{32003, 64, 1024}, {128256, 256, 300}, {512, 1, 3}}) {
    const Problem p = MakeProblem(13, vocab, 540 + static_cast<uint32_t>(top_k));
    const std::vector<int32_t> ids = CandidateIds(p, top_k, num_candidates, 541);
    DeviceArray<float> d_logits(p.logits);
    DeviceArray<int32_t> d_targets(p.targets), d_cand_ids(ids);
    DeviceArray<double> d_lp(p.tokens);
    DeviceArray<uint8_t> d_greedy(p.tokens);
    DeviceArray<int32_t> d_top_ids(p.tokens * top_k);
    DeviceArray<float> d_top_lp(p.tokens * top_k), d_cand(p.tokens * num_candidates), d_min(p.tokens);
    d_cand.Poison();
    d_min.Poison();
    LogprobOutputs out;
    out.logprob = d_lp.get();
    out.greedy = d_greedy.get();
    out.top_k_ids = d_top_ids.get();
    out.top_k_logprobs = d_top_lp.get();
    out.candidate_ids = d_cand_ids.get();
    out.candidate_logprobs = d_cand.get();
    out.min_logprob = d_min.get();
    LogprobOptions opt;
    opt.top_k = top_k;
    opt.num_candidates = num_candidates;
    opt.want_min_logprob = true;
    ASSERT_TRUE(
        ScoreLogits(d_logits.get(), p.ld, d_targets.get(), p.tokens, p.vocab, opt, out, stream_).ok());
    Sync();
    CheckCandidates(p, ids, num_candidates, d_cand.Download(), d_min.Download(), d_top_lp.Download(), top_k,
                    absl::StrCat("candidates V=", vocab, " c=", num_candidates));
  }
}

TEST_F(LogprobTest, TokenResultIndependentOfBatch) {
  const Problem all = MakeProblem(16, 5000, 510);
  Problem one{1, all.vocab, all.ld, {}, {}};
  one.logits.assign(all.logits.begin() + 11 * all.ld, all.logits.begin() + 12 * all.ld);
  one.targets = {all.targets[11]};
  LogprobOptions opt;
  opt.top_k = 8;
  opt.want_rank = opt.want_entropy = true;
  const Outputs a = RunKernel(stream_, all, opt);
  const Outputs b = RunKernel(stream_, one, opt);
  EXPECT_EQ(std::memcmp(&a.logprob[11], &b.logprob[0], sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&a.entropy[11], &b.entropy[0], sizeof(float)), 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a.top_ids[11 * 8 + i], b.top_ids[i]);
    EXPECT_EQ(std::memcmp(&a.top_lp[11 * 8 + i], &b.top_lp[i], sizeof(float)), 0);
  }
}

TEST_F(LogprobTest, VocabShardStatsCombineToFullResult) {
  const Problem p = MakeProblem(21, 30000, 520);
  const int64_t shards[] = {0, 9000, 21000, 30000};  // uneven shards
  constexpr int64_t kShards = 3;
  DeviceArray<float> d_logits(p.logits);
  DeviceArray<int32_t> d_targets(p.targets);
  DeviceArray<LogitPartialStats> d_stats(kShards * p.tokens);
  for (int64_t r = 0; r < kShards; ++r) {
    ASSERT_TRUE(ComputeLogitPartialStats(d_logits.get() + shards[r], p.ld, d_targets.get(), p.tokens,
                                         shards[r + 1] - shards[r], shards[r], d_stats.get() + r * p.tokens,
                                         stream_)
                    .ok());
  }
  DeviceArray<double> d_lp(p.tokens);
  DeviceArray<uint8_t> d_greedy(p.tokens);
  DeviceArray<float> d_entropy(p.tokens), d_target_logit(p.tokens);
  d_lp.Poison();
  d_greedy.Poison();
  d_entropy.Poison();
  d_target_logit.Poison();
  ASSERT_TRUE(CombineLogitPartialStats(d_stats.get(), kShards, p.tokens, d_targets.get(), d_lp.get(),
                                       d_greedy.get(), stream_, d_entropy.get(), d_target_logit.get())
                  .ok());
  // Rank across shards: each shard counts its logits above the target's (shard 0 adds the 1); the counts
  // sum to the rank exactly (integers).
  std::vector<int32_t> rank(p.tokens, 0);
  for (int64_t r = 0; r < kShards; ++r) {
    DeviceArray<int32_t> d_count(p.tokens);
    d_count.Poison();
    ASSERT_TRUE(CountLogitsAbove(d_logits.get() + shards[r], p.ld, p.tokens, shards[r + 1] - shards[r],
                                 d_target_logit.get(), r == 0 ? 1 : 0, d_count.get(), stream_)
                    .ok());
    const std::vector<int32_t> count = d_count.Download();
    for (int64_t t = 0; t < p.tokens; ++t) rank[t] += count[t];
  }
  Sync();
  const std::vector<double> lp = d_lp.Download();
  const std::vector<uint8_t> greedy = d_greedy.Download();
  const std::vector<float> entropy = d_entropy.Download();
  const std::vector<float> target_logit = d_target_logit.Download();
  double max_err = 0.0, max_entropy_err = 0.0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const ref::TokenScore want =
        ref::ScoreLogits(p.logits.data() + t * p.ld, p.vocab, p.targets[t], 0, true, true);
    max_err = std::max(max_err, std::fabs(lp[t] - want.logprob));
    max_entropy_err = std::max(max_entropy_err, std::fabs(entropy[t] - want.entropy));
    EXPECT_EQ(greedy[t], want.greedy ? 1 : 0) << t;
    EXPECT_EQ(rank[t], want.rank) << t;
    EXPECT_EQ(target_logit[t], p.logits[t * p.ld + p.targets[t]]) << t;
  }
  std::cout << "[ measured ] logprob 3-shard combine: logprob max_abs=" << max_err
            << " entropy max_abs=" << max_entropy_err << std::endl;
  EXPECT_LE(max_err, kLogprobAbsTol);
  EXPECT_LE(max_entropy_err, kEntropyAbsTol);

  // Candidates and the min logprob across the shards: each shard's logits of the ids it holds (+0
  // elsewhere) summed over the shards (here on the host, as the all-reduce does: x + 0 + 0 = x exactly),
  // then the combined lse subtracted; min from the shards' stats.
  {
    constexpr int32_t kTopK = 64, kCandidates = 200;
    const std::vector<int32_t> ids = CandidateIds(p, kTopK, kCandidates, 521);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<LogitPartialStats> d_min_stats(kShards * p.tokens);
    std::vector<float> summed(p.tokens * kCandidates, 0.0f);
    for (int64_t r = 0; r < kShards; ++r) {
      ASSERT_TRUE(ComputeLogitPartialStats(d_logits.get() + shards[r], p.ld, d_targets.get(), p.tokens,
                                           shards[r + 1] - shards[r], shards[r],
                                           d_min_stats.get() + r * p.tokens, stream_, /*want_min=*/true)
                      .ok());
      DeviceArray<float> d_values(p.tokens * kCandidates);
      d_values.Poison();
      ASSERT_TRUE(ShardCandidateLogits(d_logits.get() + shards[r], p.ld, p.tokens, shards[r + 1] - shards[r],
                                       shards[r], d_ids.get(), kCandidates, d_values.get(), stream_)
                      .ok());
      const std::vector<float> values = d_values.Download();
      for (size_t e = 0; e < summed.size(); ++e) summed[e] += values[e];
    }
    DeviceArray<float> d_summed(summed), d_min(p.tokens);
    DeviceArray<double> d_lp2(p.tokens);
    DeviceArray<uint8_t> d_greedy2(p.tokens);
    d_min.Poison();
    ASSERT_TRUE(FinishCandidateLogprobs(d_min_stats.get(), kShards, p.tokens, p.vocab, d_ids.get(),
                                        kCandidates, d_summed.get(), stream_)
                    .ok());
    ASSERT_TRUE(CombineLogitPartialStats(d_min_stats.get(), kShards, p.tokens, d_targets.get(), d_lp2.get(),
                                         d_greedy2.get(), stream_, nullptr, nullptr, d_min.get())
                    .ok());
    // The shards' top-k of the same stats, for the bitwise check of the candidates that are top-k ids.
    DeviceArray<int32_t> d_cand_ids(kShards * p.tokens * kTopK), d_top_ids(p.tokens * kTopK);
    DeviceArray<float> d_cand_values(kShards * p.tokens * kTopK), d_top_lps(p.tokens * kTopK);
    for (int64_t r = 0; r < kShards; ++r) {
      ASSERT_TRUE(ShardTopK(d_logits.get() + shards[r], p.ld, p.tokens, shards[r + 1] - shards[r], shards[r],
                            kTopK, d_cand_ids.get() + r * p.tokens * kTopK,
                            d_cand_values.get() + r * p.tokens * kTopK, kTopK, stream_)
                      .ok());
    }
    ASSERT_TRUE(MergeShardTopK(d_cand_ids.get(), d_cand_values.get(), kTopK, d_min_stats.get(), kShards,
                               p.tokens, kTopK, d_top_ids.get(), d_top_lps.get(), stream_)
                    .ok());
    Sync();
    CheckCandidates(p, ids, kCandidates, d_summed.Download(), d_min.Download(), d_top_lps.Download(), kTopK,
                    "candidates 3-shard");
  }

  // Top-k across the shards: each shard's top k, merged; the same ids (the logits are the same, and the
  // order is total) and log-probs within the top-k tolerance.
  for (int32_t k : {1, 7, 64, 1024}) {
    DeviceArray<int32_t> d_cand_ids(kShards * p.tokens * k);
    DeviceArray<float> d_cand_values(kShards * p.tokens * k);
    d_cand_ids.Poison();
    d_cand_values.Poison();
    for (int64_t r = 0; r < kShards; ++r) {
      ASSERT_TRUE(ShardTopK(d_logits.get() + shards[r], p.ld, p.tokens, shards[r + 1] - shards[r], shards[r],
                            k, d_cand_ids.get() + r * p.tokens * k, d_cand_values.get() + r * p.tokens * k, k,
                            stream_)
                      .ok());
    }
    DeviceArray<int32_t> d_top_ids(p.tokens * k);
    DeviceArray<float> d_top_lps(p.tokens * k);
    d_top_ids.Poison();
    d_top_lps.Poison();
    ASSERT_TRUE(MergeShardTopK(d_cand_ids.get(), d_cand_values.get(), k, d_stats.get(), kShards, p.tokens, k,
                               d_top_ids.get(), d_top_lps.get(), stream_)
                    .ok());
    Sync();
    const std::vector<int32_t> top_ids = d_top_ids.Download();
    const std::vector<float> top_lps = d_top_lps.Download();
    double max_topk_err = 0.0;
    for (int64_t t = 0; t < p.tokens; ++t) {
      const ref::TokenScore want =
          ref::ScoreLogits(p.logits.data() + t * p.ld, p.vocab, p.targets[t], k, false, false);
      ASSERT_EQ(want.top_k.size(), static_cast<size_t>(k));
      for (int32_t j = 0; j < k; ++j) {
        EXPECT_EQ(top_ids[t * k + j], want.top_k[j].id) << "k " << k << " token " << t << " entry " << j;
        max_topk_err = std::max(max_topk_err,
                                std::fabs(static_cast<double>(top_lps[t * k + j]) - want.top_k[j].logprob));
      }
    }
    std::cout << "[ measured ] logprob 3-shard top-" << k << ": logprob max_abs=" << max_topk_err
              << std::endl;
    EXPECT_LE(max_topk_err, kTopKAbsTol);
  }
}

TEST_F(LogprobTest, RejectsBadOptions) {
  LogprobOptions opt;
  opt.top_k = kMaxTopK + 1;
  LogprobOutputs out;
  EXPECT_EQ(ScoreLogits(nullptr, 10, nullptr, 1, 10, opt, out, stream_).code(),
            absl::StatusCode::kInvalidArgument);
  opt.top_k = 0;
  opt.num_candidates = kMaxCandidates + 1;
  EXPECT_EQ(ScoreLogits(nullptr, 10, nullptr, 1, 10, opt, out, stream_).code(),
            absl::StatusCode::kInvalidArgument);
  opt.num_candidates = 4;  // asked for without candidate_ids / candidate_logprobs
  EXPECT_EQ(ScoreLogits(nullptr, 10, nullptr, 1, 10, opt, out, stream_).code(),
            absl::StatusCode::kInvalidArgument);
  opt.num_candidates = 0;
  opt.top_k = 0;
  EXPECT_EQ(ScoreLogits(nullptr, 10, nullptr, 1, 10, opt, out, stream_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScoreLogits(nullptr, 5, nullptr, 1, 10, opt, out, stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

// Times the tail at Llama-3 vocabulary (128256) for 2048 tokens with every option on. Reports only.
TEST_F(LogprobTest, ThroughputLlama3Vocab) {
  constexpr int64_t kTokens = 2048, kVocab = 128256;
  DeviceArray<float> d_logits(testing::RandomNormal(kTokens * kVocab, 530, 3.0f));
  std::vector<int32_t> targets(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) targets[t] = static_cast<int32_t>((t * 7919) % kVocab);
  DeviceArray<int32_t> d_targets(targets);
  DeviceArray<double> d_lp(kTokens);
  DeviceArray<uint8_t> d_greedy(kTokens);
  std::vector<int32_t> cand_ids(kTokens * kMaxCandidates);
  for (size_t e = 0; e < cand_ids.size(); ++e) cand_ids[e] = static_cast<int32_t>((e * 104729) % kVocab);
  DeviceArray<int32_t> d_rank(kTokens), d_ids(kTokens * kMaxTopK), d_cand_ids(cand_ids);
  DeviceArray<float> d_entropy(kTokens), d_tlp(kTokens * kMaxTopK), d_cand(kTokens * kMaxCandidates);
  DeviceArray<float> d_min(kTokens);
  LogprobOutputs out;
  out.logprob = d_lp.get();
  out.greedy = d_greedy.get();
  out.rank = d_rank.get();
  out.entropy = d_entropy.get();
  out.top_k_ids = d_ids.get();
  out.top_k_logprobs = d_tlp.get();
  out.candidate_ids = d_cand_ids.get();  // spread over the row, as a reference's top ids are
  out.candidate_logprobs = d_cand.get();
  out.min_logprob = d_min.get();
  // top_k 1024: a stored reference's save run; 1024 candidates + min: its Q run.
  for (int32_t k : {0, 64, 1024, -1}) {
    LogprobOptions opt;
    opt.top_k = k > 0 ? k : 0;
    opt.want_rank = opt.want_entropy = k > 0;
    if (k < 0) {
      opt.top_k = 1;
      opt.num_candidates = kMaxCandidates;
      opt.want_min_logprob = true;
    }
    ASSERT_TRUE(
        ScoreLogits(d_logits.get(), kVocab, d_targets.get(), kTokens, kVocab, opt, out, stream_).ok());
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream_);
    constexpr int kIters = 5;
    for (int i = 0; i < kIters; ++i) {
      ASSERT_TRUE(
          ScoreLogits(d_logits.get(), kVocab, d_targets.get(), kTokens, kVocab, opt, out, stream_).ok());
    }
    cudaEventRecord(stop, stream_);
    Sync();
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    ms /= kIters;
    std::cout << "[ measured ] logprob 2048 x 128256 top_k=" << opt.top_k
              << (opt.want_rank ? " +rank +entropy" : "")
              << (opt.num_candidates > 0 ? " +1024 candidates +min" : "") << ": " << ms << " ms, "
              << kTokens * kVocab * 4.0 / ms / 1e9 << " TB/s of logits read once" << std::endl;
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

}  // namespace
}  // namespace scored::kernels
