// RowChunks (engine/cuda/row_chunks.h): tensor-parallel row chunks are blocks of whole sequences. Host code:
// runs without a GPU.
#include "engine/cuda/row_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace scored::cuda {
namespace {

// cu_seqlens of sequences with these lengths.
std::vector<int32_t> Offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// The chunks cover the batch in order, each of whole sequences, with each chunk's longest sequence.
void ExpectTiling(const std::vector<RowChunk>& chunks, const std::vector<int32_t>& lengths) {
  const std::vector<int32_t> cu = Offsets(lengths);
  int64_t row = 0;
  int32_t seq = 0;
  for (const RowChunk& c : chunks) {
    EXPECT_EQ(c.begin, row);
    EXPECT_EQ(c.first_seq, seq);
    ASSERT_GE(c.num_seqs, 1);
    int32_t longest = 0;
    for (int32_t s = seq; s < seq + c.num_seqs; ++s) longest = std::max(longest, lengths[s]);
    EXPECT_EQ(c.max_seqlen, longest);
    EXPECT_EQ(c.rows, cu[seq + c.num_seqs] - cu[seq]);
    row += c.rows;
    seq += c.num_seqs;
  }
  EXPECT_EQ(row, cu.back());
  EXPECT_EQ(seq, static_cast<int32_t>(lengths.size()));
}

std::vector<RowChunk> Chunks(const std::vector<int32_t>& lengths, int wanted, bool chunked = true) {
  const std::vector<int32_t> cu = Offsets(lengths);
  int32_t longest = 0;
  for (int32_t n : lengths) longest = std::max(longest, n);
  return RowChunks(cu, cu.back(), static_cast<int32_t>(lengths.size()), longest, wanted, chunked);
}

TEST(RowChunksTest, AutoIsTwoChunksFromTheThresholdAndOneBelow) {
  const std::vector<int32_t> eight(8, 2048), three(3, 2048);
  const auto a = Chunks(eight, 0);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].num_seqs, 4);
  ExpectTiling(a, eight);
  EXPECT_EQ(Chunks(three, 0).size(), 1u);    // 6144 tokens < kTpAutoMinTokens
  const std::vector<int32_t> four(4, 2048);  // exactly the threshold
  EXPECT_EQ(Chunks(four, 0).size(), 2u);
}

TEST(RowChunksTest, WholeSequencesOnlyAndAtMostWanted) {
  // The tp engine test's batch: 434 tokens in sequences of 64, 37, 128, 5 and 200.
  const std::vector<int32_t> mixed = {64, 37, 128, 5, 200};
  const auto three = Chunks(mixed, 3);
  ASSERT_EQ(three.size(), 2u);  // 229 rows, then 205: a third chunk would have no sequence left to close it
  EXPECT_EQ(three[0].rows, 229);
  ExpectTiling(three, mixed);
  const auto eight = Chunks(mixed, 8);
  ASSERT_EQ(eight.size(), 3u);  // 64, 165, 205
  EXPECT_EQ(eight[1].rows, 165);
  ExpectTiling(eight, mixed);
  for (int wanted = 1; wanted <= kMaxTpRowChunks + 3; ++wanted) {
    const auto c = Chunks(mixed, wanted);
    EXPECT_LE(static_cast<int>(c.size()), std::min(wanted, kMaxTpRowChunks));
    ExpectTiling(c, mixed);
  }
}

TEST(RowChunksTest, OneSequenceOrUnchunkedIsOneChunkOfTheWholeBatch) {
  const std::vector<int32_t> one = {9000};
  const auto c = Chunks(one, 4);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].rows, 9000);
  EXPECT_EQ(c[0].max_seqlen, 9000);
  const std::vector<int32_t> many(16, 1024);
  const auto off = Chunks(many, 4, /*chunked=*/false);
  ASSERT_EQ(off.size(), 1u);
  EXPECT_EQ(off[0].num_seqs, 16);
  EXPECT_EQ(Chunks(many, 1).size(), 1u);
  // cu_seqlens of the wrong length (a caller without the host offsets): one chunk, not a guess.
  const auto bad = RowChunks({0, 1024}, 16384, 16, 1024, 4, true);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].rows, 16384);
}

}  // namespace
}  // namespace scored::cuda
