// The batch wire format between leader and follower processes (engine/dist/batch_wire.h): round trip,
// every truncation and every broken limit is an INTERNAL error naming the field, never a crash.
#include "engine/dist/batch_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace scored::dist {
namespace {

using ::testing::HasSubstr;

cuda::PackedBatch Sample() {
  static const ScoreRequest a = [] {
    ScoreRequest r;
    r.tokens = {1, 2, 3, 4, 5};
    r.top_k = 3;
    return r;
  }();
  static const ScoreRequest b = [] {
    ScoreRequest r;
    r.tokens.assign(200, 7);
    r.score_from = 150;
    r.want_entropy = true;
    r.want_reference = true;
    return r;
  }();
  const std::vector<const ScoreRequest*> group = {&a, &b};
  return cuda::PackBatch(group);
}

void ExpectMalformed(const std::string& bytes, int64_t max_tokens, const std::string& fragment) {
  const absl::StatusOr<cuda::PackedBatch> parsed = ParseBatch(bytes, max_tokens);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInternal) << parsed.status();
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(fragment)) << parsed.status();
}

TEST(BatchWireTest, RoundTrip) {
  const cuda::PackedBatch sent = Sample();
  ASSERT_EQ(sent.fb.lm_head_rows.size(), 2u);
  const absl::StatusOr<cuda::PackedBatch> got = ParseBatch(SerializeBatch(sent), 1024);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->fb.num_tokens, sent.fb.num_tokens);
  EXPECT_EQ(got->fb.num_seqs, sent.fb.num_seqs);
  EXPECT_EQ(got->fb.max_seqlen, sent.fb.max_seqlen);
  EXPECT_EQ(got->fb.cu_seqlens, sent.fb.cu_seqlens);
  EXPECT_EQ(got->fb.options.top_k, 3);
  EXPECT_FALSE(got->fb.options.want_rank);
  EXPECT_TRUE(got->fb.options.want_entropy);
  EXPECT_TRUE(got->fb.options.want_reference);
  ASSERT_EQ(got->fb.lm_head_rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got->fb.lm_head_rows[i].begin, sent.fb.lm_head_rows[i].begin);
    EXPECT_EQ(got->fb.lm_head_rows[i].end, sent.fb.lm_head_rows[i].end);
  }
  EXPECT_EQ(got->tokens, sent.tokens);
  EXPECT_EQ(got->positions, sent.positions);
  EXPECT_EQ(got->targets, sent.targets);
  EXPECT_TRUE(got->candidate_ids.empty());
}

// Candidate ids travel with the batch: every row's ids (-1 where its request named none) and the flags.
TEST(BatchWireTest, RoundTripWithCandidates) {
  ScoreRequest a;
  a.tokens = {1, 2, 3, 4};
  a.score_from = 2;
  a.num_candidates = 2;
  a.candidate_ids = {9, 8, 7, 6};  // positions 2 and 3
  a.want_min_logprob = true;
  ScoreRequest b;
  b.tokens = {5, 6, 7};
  const std::vector<const ScoreRequest*> group = {&a, &b};
  const cuda::PackedBatch sent = cuda::PackBatch(group);
  const absl::StatusOr<cuda::PackedBatch> got = ParseBatch(SerializeBatch(sent), 1024);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->fb.options.num_candidates, 2);
  EXPECT_TRUE(got->fb.options.want_min_logprob);
  EXPECT_EQ(got->candidate_ids, sent.candidate_ids);
  const std::vector<int32_t> want = {-1, -1, 9, 8, 7, 6, -1, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_EQ(got->candidate_ids, want);
}

TEST(BatchWireTest, EveryTruncationIsAnError) {
  const std::string bytes = SerializeBatch(Sample());
  for (size_t size = 0; size < bytes.size(); ++size) {
    const absl::StatusOr<cuda::PackedBatch> parsed = ParseBatch(bytes.substr(0, size), 1024);
    ASSERT_FALSE(parsed.ok()) << size;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInternal);
  }
  ExpectMalformed("", 1024, "truncated at num_tokens");
  ExpectMalformed(bytes.substr(0, bytes.size() - 1), 1024, "truncated in cu_seqlens");
  ExpectMalformed(bytes + "x", 1024, "1 bytes left over");
}

// Overwrites the field at `offset` of a serialized sample.
template <typename T>
std::string With(size_t offset, T value) {
  std::string bytes = SerializeBatch(Sample());
  std::memcpy(&bytes[offset], &value, sizeof(T));
  return bytes;
}

TEST(BatchWireTest, LimitsAreChecked) {
  // Header offsets: num_tokens 0, num_seqs 8, max_seqlen 12, top_k 16, flags 20/21/22, num_candidates 23,
  // want_min_logprob 27, num_spans 28, spans 36.
  ExpectMalformed(SerializeBatch(Sample()), 100, "num_tokens 205 outside [1, 100]");
  ExpectMalformed(With<int64_t>(0, 0), 1024, "num_tokens 0");
  ExpectMalformed(With<int64_t>(0, -5), 1024, "num_tokens -5");
  ExpectMalformed(With<int32_t>(8, 0), 1024, "num_seqs 0");
  ExpectMalformed(With<int32_t>(8, 1000), 1024, "num_seqs 1000");
  ExpectMalformed(With<int32_t>(16, 1025), 1024, "top_k 1025");
  ExpectMalformed(With<int32_t>(16, -1), 1024, "top_k -1");
  ExpectMalformed(With<int32_t>(23, 1025), 1024, "num_candidates 1025");
  ExpectMalformed(With<int32_t>(23, -1), 1024, "num_candidates -1");
  ExpectMalformed(With<int64_t>(28, 3), 1024, "num_spans 3");
  ExpectMalformed(With<int64_t>(28, -1), 1024, "num_spans -1");
  ExpectMalformed(With<int64_t>(36, -1), 1024, "span 0");
  ExpectMalformed(With<int64_t>(44, 206), 1024, "span 0");
  // A num_candidates the bytes do not hold.
  ExpectMalformed(With<int32_t>(23, 2), 1024, "truncated in candidate_ids");
  ExpectMalformed(With<int32_t>(12, 7), 1024, "max_seqlen 7");
  // A huge num_tokens within max_tokens: an error, no allocation of that size.
  ExpectMalformed(With<int64_t>(0, int64_t{1} << 40), int64_t{1} << 41, "truncated");
  // cu_seqlens: the last three int32 of the message.
  const size_t cu = SerializeBatch(Sample()).size() - 12;
  ExpectMalformed(With<int32_t>(cu, 1), 1024, "cu_seqlens run from 1");
  ExpectMalformed(With<int32_t>(cu + 4, 0), 1024, "not increasing at sequence 0");
  ExpectMalformed(With<int32_t>(cu + 8, 204), 1024, "not 0 to num_tokens 205");
}

}  // namespace
}  // namespace scored::dist
