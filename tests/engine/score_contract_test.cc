// The Score contract's request checks (engine/score_contract.h): every error code and its message, the
// order of the checks, and the tensor-parallel top_k limit.
#include "engine/score_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace scored {
namespace {

using ::testing::HasSubstr;

ScoreLimits Limits() {
  ScoreLimits l;
  l.max_seq_len = 16;
  l.max_batch_tokens = 12;
  l.vocab_size = 100;
  return l;
}

ScoreRequest Request(int n) {
  ScoreRequest r;
  for (int i = 0; i < n; ++i) r.tokens.push_back(i);
  return r;
}

void ExpectError(const ScoreRequest& r, const ScoreLimits& limits, absl::StatusCode code,
                 const std::string& fragment) {
  const absl::Status status = ValidateScoreRequest(r, limits);
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(fragment)) << status;
}

TEST(ScoreContractTest, AcceptsValidRequests) {
  EXPECT_TRUE(ValidateScoreRequest(Request(2), Limits()).ok());
  ScoreRequest r = Request(12);
  r.score_from = 11;
  r.top_k = 64;
  r.want_rank = r.want_entropy = true;
  EXPECT_TRUE(ValidateScoreRequest(r, Limits()).ok());
  r.score_from = -5;  // values < 1 act as 1
  EXPECT_TRUE(ValidateScoreRequest(r, Limits()).ok());
}

TEST(ScoreContractTest, EveryErrorNamesWhatIsWrong) {
  ExpectError(Request(0), Limits(), absl::StatusCode::kInvalidArgument, "at least 2 tokens");
  ExpectError(Request(1), Limits(), absl::StatusCode::kInvalidArgument, "got 1");
  ScoreLimits long_batch = Limits();
  long_batch.max_batch_tokens = 64;
  ExpectError(Request(17), long_batch, absl::StatusCode::kOutOfRange, "17 tokens; max_seq_len is 16");
  ExpectError(Request(13), Limits(), absl::StatusCode::kOutOfRange, "13 tokens; max_batch_tokens is 12");
  ScoreRequest r = Request(3);
  r.score_from = 3;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "score_from 3 must be less than the number of tokens 3");
  r = Request(3);
  r.top_k = 1025;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "top_k must be in [0, 1024], got 1025");
  r.top_k = 101;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "top_k 101 exceeds the vocabulary size 100");
  r.top_k = -1;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "got -1");
  r = Request(5);
  r.tokens[3] = 100;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "token id 100 at position 3 is out of range [0, 100)");
  r.tokens[3] = -1;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "token id -1 at position 3");
}

TEST(ScoreContractTest, ShardLimitOnlyWhenSet) {
  ScoreLimits limits = Limits();
  limits.vocab_size = 70;
  ScoreRequest r = Request(3);
  r.top_k = 64;
  EXPECT_TRUE(ValidateScoreRequest(r, limits).ok());
  limits.smallest_vocab_shard = SmallestVocabShard(70, 2);
  EXPECT_EQ(limits.smallest_vocab_shard, 35);
  ExpectError(r, limits, absl::StatusCode::kInvalidArgument, "top_k 64 exceeds the 35 vocabulary rows");
  r.top_k = 35;
  EXPECT_TRUE(ValidateScoreRequest(r, limits).ok());
}

// Candidate ids (a stored reference's gather): exactly num_scored * num_candidates ids, within the limits,
// each inside the vocabulary; the message names the limit, or the scored position and the id.
TEST(ScoreContractTest, CandidateIds) {
  ScoreRequest r = Request(5);
  r.score_from = 3;  // positions 3 and 4 are scored
  r.num_candidates = 2;
  r.candidate_ids = {0, 99, 7, 7};
  r.want_min_logprob = true;
  EXPECT_TRUE(ValidateScoreRequest(r, Limits()).ok());
  r.candidate_ids.pop_back();
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "candidate_ids has 3 ids; num_candidates 2 at each of the 2 scored positions needs 4");
  r.candidate_ids = {0, 99, 7, 100};
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "candidate id 100 at scored position 1 (position 4), candidate 1, is out of range [0, 100)");
  r.candidate_ids = {-3, 99, 7, 7};
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "candidate id -3 at scored position 0 (position 3)");
  r.num_candidates = 1025;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument,
              "num_candidates must be in [0, 1024] (kMaxCandidates), got 1025");
  r.num_candidates = 0;  // ids without a count
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "num_candidates 0 at each of the 2");
  r.candidate_ids.clear();
  EXPECT_TRUE(ValidateScoreRequest(r, Limits()).ok());
  // The request-wide bound: 4,097 scored positions of 1024 ids.
  ScoreLimits big = Limits();
  big.max_seq_len = big.max_batch_tokens = 8192;
  r = Request(4098);
  for (int32_t& id : r.tokens) id %= 100;
  r.num_candidates = kMaxCandidates;
  r.candidate_ids.assign(4097 * static_cast<size_t>(kMaxCandidates), 1);
  ExpectError(r, big, absl::StatusCode::kInvalidArgument,
              "candidate_ids has 4195328 ids, more than the 4194304 a request may name (kMaxCandidateIds)");
  r.candidate_ids.resize(4096 * static_cast<size_t>(kMaxCandidates));
  r.score_from = 2;
  EXPECT_TRUE(ValidateScoreRequest(r, big).ok());
}

TEST(ScoreContractTest, SmallestVocabShardIsTheLastRanks) {
  EXPECT_EQ(SmallestVocabShard(100, 1), 100);
  EXPECT_EQ(SmallestVocabShard(128256, 8), 128256 - 7 * 16032);
  EXPECT_EQ(SmallestVocabShard(10, 4), 10 - 3 * 3);
}

}  // namespace
}  // namespace scored
