// Host-side batch packing of the CUDA engine (engine/cuda/batch_pack.h): row layout, lm_head spans (merged
// across small gaps), the union of the requests' options, and results unpacked per request. CPU only.
#include "engine/cuda/batch_pack.h"

#include <gtest/gtest.h>

#include <vector>

namespace scored::cuda {
namespace {

ScoreRequest Request(int n, int32_t score_from = 1, int32_t top_k = 0, bool rank = false) {
  ScoreRequest r;
  for (int i = 0; i < n; ++i) r.tokens.push_back(10 + i);
  r.score_from = score_from;
  r.top_k = top_k;
  r.want_rank = rank;
  return r;
}

TEST(BatchPackTest, PacksRowsTargetsAndSpans) {
  const ScoreRequest a = Request(4), b = Request(3, 2, 2, true);
  const std::vector<const ScoreRequest*> group = {&a, &b};
  const PackedBatch p = PackBatch(group);
  EXPECT_EQ(p.fb.num_tokens, 7);
  EXPECT_EQ(p.fb.num_seqs, 2);
  EXPECT_EQ(p.fb.max_seqlen, 4);
  EXPECT_EQ(p.fb.cu_seqlens, (std::vector<int32_t>{0, 4, 7}));
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2}));
  EXPECT_EQ(p.targets, (std::vector<int32_t>{11, 12, 13, 0, 11, 12, 0}));
  EXPECT_EQ(p.first_row, (std::vector<int64_t>{0, 5}));
  // Spans [0, 3) and [5, 6) are 2 rows apart: merged into one.
  ASSERT_EQ(p.fb.lm_head_rows.size(), 1u);
  EXPECT_EQ(p.fb.lm_head_rows[0].begin, 0);
  EXPECT_EQ(p.fb.lm_head_rows[0].end, 6);
  EXPECT_EQ(p.fb.options.top_k, 2);
  EXPECT_TRUE(p.fb.options.want_rank);
  EXPECT_FALSE(p.fb.options.want_entropy);
}

TEST(BatchPackTest, SpansFartherApartThanTheGapStaySeparate) {
  const ScoreRequest a = Request(3), b = Request(100, 90);
  const std::vector<const ScoreRequest*> group = {&a, &b};
  const PackedBatch p = PackBatch(group);
  ASSERT_EQ(p.fb.lm_head_rows.size(), 2u);
  EXPECT_EQ(p.fb.lm_head_rows[0].end, 2);
  EXPECT_EQ(p.fb.lm_head_rows[1].begin, 3 + 89);
  EXPECT_EQ(p.fb.lm_head_rows[1].end, 3 + 99);
}

TEST(BatchPackTest, UnpackKeepsWhatEachRequestAskedFor) {
  const ScoreRequest a = Request(3), b = Request(4, 2, 1, true);
  const std::vector<const ScoreRequest*> group = {&a, &b};
  const PackedBatch p = PackBatch(group);
  HostResults host;
  host.Resize(p);
  ASSERT_EQ(host.top_ids.size(), 7u * 1);
  ASSERT_EQ(host.rank.size(), 7u);
  EXPECT_TRUE(host.entropy.empty());
  for (int r = 0; r < 7; ++r) {
    host.logprob[r] = -0.5 * r;
    host.greedy[r] = r % 2;
    host.rank[r] = 100 + r;
    host.top_ids[r] = 200 + r;
    host.top_lps[r] = -0.25f * r;
  }
  const std::vector<ScoreResult> results = UnpackResults(group, p, host);
  ASSERT_EQ(results.size(), 2u);
  // a: rows 0, 1 scored (row 2 is its last token).
  EXPECT_EQ(results[0].num_scored, 2);
  EXPECT_EQ(results[0].logprob, (std::vector<float>{0.0f, -0.5f}));
  EXPECT_DOUBLE_EQ(results[0].sum_logprob, -0.5);
  EXPECT_TRUE(results[0].rank.empty());
  EXPECT_TRUE(results[0].top_k.empty());
  // b: rows 3..6, score_from 2 -> rows 4, 5.
  EXPECT_EQ(results[1].num_scored, 2);
  EXPECT_EQ(results[1].logprob, (std::vector<float>{-2.0f, -2.5f}));
  EXPECT_EQ(results[1].greedy, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(results[1].rank, (std::vector<int32_t>{104, 105}));
  ASSERT_EQ(results[1].top_k.size(), 2u);
  EXPECT_EQ(results[1].top_k[1][0].id, 205);
  EXPECT_FLOAT_EQ(results[1].top_k[1][0].logprob, -1.25f);
  EXPECT_TRUE(results[1].kld.empty());
}

// The reference comparison's rows go to the requests that asked for it, summed in double.
TEST(BatchPackTest, UnpackKeepsTheBaselineComparisonWhereAsked) {
  ScoreRequest a = Request(3), b = Request(4, 2);
  b.want_reference = true;
  const std::vector<const ScoreRequest*> group = {&a, &b};
  const PackedBatch p = PackBatch(group);
  EXPECT_TRUE(p.fb.options.want_reference);
  HostResults host;
  host.Resize(p);
  ASSERT_EQ(host.kld.size(), 7u);
  for (int r = 0; r < 7; ++r) {
    host.ref_logprob[r] = -0.5 * r;
    host.kld[r] = 0.125 * r;
    host.ref_greedy[r] = r % 2;
    host.same_top[r] = 1 - r % 2;
  }
  const std::vector<ScoreResult> results = UnpackResults(group, p, host);
  EXPECT_TRUE(results[0].kld.empty());
  EXPECT_TRUE(results[0].ref_logprob.empty());
  // b: rows 4, 5.
  EXPECT_EQ(results[1].kld, (std::vector<float>{0.5f, 0.625f}));
  EXPECT_EQ(results[1].ref_logprob, (std::vector<float>{-2.0f, -2.5f}));
  EXPECT_EQ(results[1].ref_greedy, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(results[1].same_top, (std::vector<uint8_t>{1, 0}));
  EXPECT_DOUBLE_EQ(results[1].sum_kld, 1.125);
  EXPECT_DOUBLE_EQ(results[1].sum_ref_logprob, -4.5);
}

// Candidate ids: each scored row gets its request's ids for that position, -1 everywhere else (rows of other
// requests, unscored rows, columns beyond a request's own count); each result gets back its own columns.
TEST(BatchPackTest, CandidatesPackPerRowAndUnpackPerRequest) {
  ScoreRequest a = Request(3);  // rows 0, 1 scored; 3 candidates each
  a.num_candidates = 3;
  a.candidate_ids = {1, 2, 3, 4, 5, 6};
  a.want_min_logprob = true;
  ScoreRequest b = Request(4, 3);  // rows 3..6, row 5 scored; 1 candidate
  b.num_candidates = 1;
  b.candidate_ids = {9};
  const ScoreRequest c = Request(2);  // rows 7, 8: none
  const std::vector<const ScoreRequest*> group = {&a, &b, &c};
  const PackedBatch p = PackBatch(group);
  EXPECT_EQ(p.fb.options.num_candidates, 3);
  EXPECT_TRUE(p.fb.options.want_min_logprob);
  const std::vector<int32_t> want = {1,  2, 3,  4,  5,  6,  -1, -1, -1, -1, -1, -1, -1, -1,
                                     -1, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_EQ(p.candidate_ids, want);
  HostResults host;
  host.Resize(p);
  ASSERT_EQ(host.candidate_logprobs.size(), 9u * 3);
  ASSERT_EQ(host.min_logprob.size(), 9u);
  for (size_t e = 0; e < host.candidate_logprobs.size(); ++e) host.candidate_logprobs[e] = -0.5f * e;
  for (size_t r = 0; r < 9; ++r) host.min_logprob[r] = -10.0f - r;
  const std::vector<ScoreResult> results = UnpackResults(group, p, host);
  EXPECT_EQ(results[0].candidate_logprob, (std::vector<float>{0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -2.5f}));
  EXPECT_EQ(results[0].min_logprob, (std::vector<float>{-10.0f, -11.0f}));
  EXPECT_EQ(results[1].candidate_logprob, (std::vector<float>{-7.5f}));  // row 5, column 0
  EXPECT_TRUE(results[1].min_logprob.empty());
  EXPECT_TRUE(results[2].candidate_logprob.empty());
  // Without candidates nothing is packed.
  const std::vector<const ScoreRequest*> plain = {&c};
  EXPECT_TRUE(PackBatch(plain).candidate_ids.empty());
}

}  // namespace
}  // namespace scored::cuda
