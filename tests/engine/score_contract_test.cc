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
  r.top_k = 65;
  ExpectError(r, Limits(), absl::StatusCode::kInvalidArgument, "top_k must be in [0, 64], got 65");
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

TEST(ScoreContractTest, SmallestVocabShardIsTheLastRanks) {
  EXPECT_EQ(SmallestVocabShard(100, 1), 100);
  EXPECT_EQ(SmallestVocabShard(128256, 8), 128256 - 7 * 16032);
  EXPECT_EQ(SmallestVocabShard(10, 4), 10 - 3 * 3);
}

}  // namespace
}  // namespace scored
