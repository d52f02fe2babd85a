// Embedding lookup vs ref::Embedding. A copy is exact: fp32 -> fp32 and bf16 -> any are bit-exact,
// fp32 -> bf16 equals FloatToBf16 (round to nearest even) of the oracle.
#include "engine/kernels/embedding.h"

#include <cmath>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class EmbeddingTest : public testing::GpuTest {};

constexpr int64_t kVocab = 1000, kHidden = 320, kTokens = 77;

std::vector<int32_t> RandomTokens(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(kTokens);
  for (auto& x : t) x = static_cast<int32_t>(rng() % kVocab);
  t[3] = t[5];  // a repeated id
  t[0] = 0;
  t[1] = kVocab - 1;
  return t;
}

TEST_F(EmbeddingTest, Fp32TableAllOutputTypesBitExact) {
  const std::vector<float> table = testing::RandomNormal(kVocab * kHidden, 11);
  const std::vector<int32_t> tokens = RandomTokens(12);
  std::vector<float> want(kTokens * kHidden);
  ASSERT_TRUE(ref::Embedding(table.data(), tokens.data(), kTokens, kVocab, kHidden, want.data()).ok());

  DeviceArray<float> d_table(table);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_out32(kTokens * kHidden);
  DeviceArray<bf16_t> d_out16(kTokens * kHidden);
  d_out32.Poison();
  d_out16.Poison();
  ASSERT_TRUE(
      Embedding(d_table.get(), d_tokens.get(), kTokens, kVocab, kHidden, d_out32.get(), stream_).ok());
  ASSERT_TRUE(
      Embedding(d_table.get(), d_tokens.get(), kTokens, kVocab, kHidden, d_out16.get(), stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_out32.Download(), want), 0);
  EXPECT_EQ(testing::CountBitDifferences(d_out16.Download(), testing::ToBf16(want)), 0);
}

TEST_F(EmbeddingTest, Bf16TableAllOutputTypesBitExact) {
  const std::vector<float> table = testing::RoundedToBf16(testing::RandomNormal(kVocab * kHidden, 13));
  const std::vector<int32_t> tokens = RandomTokens(14);
  std::vector<float> want(kTokens * kHidden);
  ASSERT_TRUE(ref::Embedding(table.data(), tokens.data(), kTokens, kVocab, kHidden, want.data()).ok());

  DeviceArray<bf16_t> d_table(testing::ToBf16(table));
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_out32(kTokens * kHidden);
  DeviceArray<bf16_t> d_out16(kTokens * kHidden);
  d_out32.Poison();
  d_out16.Poison();
  ASSERT_TRUE(
      Embedding(d_table.get(), d_tokens.get(), kTokens, kVocab, kHidden, d_out32.get(), stream_).ok());
  ASSERT_TRUE(
      Embedding(d_table.get(), d_tokens.get(), kTokens, kVocab, kHidden, d_out16.get(), stream_).ok());
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(d_out32.Download(), want), 0);
  EXPECT_EQ(testing::CountBitDifferences(d_out16.Download(), testing::ToBf16(want)), 0);
}

// Vocab-parallel lookup: every shard writes its own rows bit for bit and exact zeros for the other ids, so
// the shards' sum (what the all-reduce computes) is the full lookup, bit for bit.
TEST_F(EmbeddingTest, ShardsWriteTheirRowsAndZerosElsewhere) {
  const std::vector<float> table = testing::RandomNormal(kVocab * kHidden, 16);
  const std::vector<int32_t> tokens = RandomTokens(17);
  std::vector<float> want(kTokens * kHidden);
  ASSERT_TRUE(ref::Embedding(table.data(), tokens.data(), kTokens, kVocab, kHidden, want.data()).ok());
  DeviceArray<float> d_table(table);
  DeviceArray<int32_t> d_tokens(tokens);
  const int64_t shards[] = {0, 334, 668, kVocab};  // ceil(1000 / 3) rows per shard, the last shorter
  std::vector<float> sum(kTokens * kHidden, 0.0f);
  for (int r = 0; r < 3; ++r) {
    DeviceArray<float> d_out(kTokens * kHidden);
    d_out.Poison();
    ASSERT_TRUE(EmbeddingShard(d_table.get() + shards[r] * kHidden, d_tokens.get(), kTokens, kVocab,
                               shards[r], shards[r + 1] - shards[r], kHidden, d_out.get(), stream_)
                    .ok());
    Sync();
    const std::vector<float> out = d_out.Download();
    for (int64_t t = 0; t < kTokens; ++t) {
      const bool mine = tokens[t] >= shards[r] && tokens[t] < shards[r + 1];
      for (int64_t i = 0; i < kHidden; ++i) {
        const float expect = mine ? want[t * kHidden + i] : 0.0f;
        ASSERT_EQ(testing::CountBitDifferences(std::vector<float>{out[t * kHidden + i]},
                                               std::vector<float>{expect}),
                  0)
            << "shard " << r << " token " << t << " column " << i;
        sum[t * kHidden + i] += out[t * kHidden + i];
      }
    }
  }
  EXPECT_EQ(testing::CountBitDifferences(sum, want), 0);
}

TEST_F(EmbeddingTest, OutOfRangeIdGivesNanRow) {
  const std::vector<float> table = testing::RandomNormal(kVocab * kHidden, 15);
  std::vector<int32_t> tokens = {5, static_cast<int32_t>(kVocab), -1};
  DeviceArray<float> d_table(table);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_out(3 * kHidden);
  d_out.Poison();
  ASSERT_TRUE(Embedding(d_table.get(), d_tokens.get(), 3, kVocab, kHidden, d_out.get(), stream_).ok());
  Sync();
  const std::vector<float> out = d_out.Download();
  for (int64_t i = 0; i < kHidden; ++i) {
    EXPECT_EQ(out[i], table[5 * kHidden + i]);
    EXPECT_TRUE(std::isnan(out[kHidden + i]));
    EXPECT_TRUE(std::isnan(out[2 * kHidden + i]));
  }
}

TEST_F(EmbeddingTest, RejectsBadArguments) {
  float* null_out = nullptr;
  EXPECT_EQ(
      Embedding(static_cast<const float*>(nullptr), nullptr, 4, kVocab, kHidden, null_out, stream_).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Embedding(static_cast<const float*>(nullptr), nullptr, -1, kVocab, kHidden, null_out, stream_).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Embedding(static_cast<const float*>(nullptr), nullptr, 0, kVocab, kHidden, null_out, stream_).ok());
}

// Gemma's normalizer: fp32 rows times the scale (fp32 mode: bit-exact fp32 products, as the oracle's
// `e *= embedding_scale`), or with the bf16 rounding (bf16 mode): each product rounded to bf16 once.
TEST_F(EmbeddingTest, ScaleEmbeddingFp32AndBf16Rounding) {
  const std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kHidden, 13));
  const float scale = std::sqrt(2304.0f);      // Gemma-2-2B's hidden size: 48, exact
  const float scale_odd = std::sqrt(3840.0f);  // Gemma-3-12B's: not a bf16 value
  for (const bool round : {false, true}) {
    for (const float s : {scale, scale_odd}) {
      DeviceArray<float> d_x(x);
      ASSERT_TRUE(ScaleEmbedding(d_x.get(), kTokens * kHidden, s, round, stream_).ok());
      Sync();
      const std::vector<float> got = d_x.Download();
      for (size_t i = 0; i < x.size(); ++i) {
        const float product = x[i] * s;
        const float want = round ? testing::RoundedToBf16(std::vector<float>{product})[0] : product;
        ASSERT_EQ(got[i], want) << "round=" << round << " scale=" << s << " at " << i;
      }
    }
  }
  EXPECT_FALSE(ScaleEmbedding(nullptr, 4, 2.0f, false, stream_).ok());
  EXPECT_TRUE(ScaleEmbedding(nullptr, 0, 2.0f, false, stream_).ok());
}

}  // namespace
}  // namespace scored::kernels
