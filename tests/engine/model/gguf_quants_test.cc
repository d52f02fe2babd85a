// ggml block decoding (engine/model/gguf_quants.h) bit for bit against the gguf package's own dequantization:
// tests/fixtures/gguf-blocks (scripts/fixtures/make_gguf_blocks.py) holds random blocks of every decoded type
// and gguf.quants.dequantize's float32 of them. Then the type table and the refusals.
#include "engine/model/gguf_quants.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kDir = std::string(SCORED_FIXTURES_DIR) + "/gguf-blocks";

TEST(GgufQuants, EveryDecodedTypeMatchesTheGgufPackageBitForBit) {
  absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::Open(kDir);
  ASSERT_TRUE(store.ok()) << store.status();
  int checked = 0;
  for (const char* name : {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                           "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"}) {
    SCOPED_TRACE(name);
    const GgmlTypeInfo* info = nullptr;
    for (uint32_t id = 0; id < 64 && info == nullptr; ++id) {
      const GgmlTypeInfo* t = FindGgmlType(id);
      if (t != nullptr && std::string(t->name) == name) info = t;
    }
    ASSERT_NE(info, nullptr);
    EXPECT_TRUE(info->decoded);
    const std::string key = absl::AsciiStrToLower(name);
    absl::StatusOr<TensorView> blocks = (*store)->Get(key + ".blocks");
    absl::StatusOr<TensorView> expected = (*store)->Get(key + ".expected");
    ASSERT_TRUE(blocks.ok() && expected.ok());
    ASSERT_EQ(blocks->shape.size(), 2u);
    ASSERT_EQ(blocks->shape[1], info->type_size);
    const int64_t n = blocks->shape[0];
    ASSERT_EQ(expected->NumElements(), n * info->block_size);
    std::vector<float> got(static_cast<size_t>(n * info->block_size));
    ASSERT_TRUE(DequantizeGgmlBlocks(static_cast<uint32_t>(info->type), blocks->data, n, got.data()).ok());
    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, expected->data + 4 * i, 4);
      if (a != b && ++mismatches == 1) first = static_cast<int64_t>(i);
    }
    EXPECT_EQ(mismatches, 0) << "first at element " << first << " (block " << first / info->block_size << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

// A linear stored as GGUF blocks (WeightFormat::kGgmlBlocks): DequantizeRows decodes each row's blocks, here
// 96 Q4_K blocks as a [12, 2048] matrix (8 blocks a row), every value the gguf package's.
TEST(GgufQuants, LinearWeightRowsAreTheirBlocks) {
  absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::Open(kDir);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<TensorView> blocks = (*store)->Get("q4_k.blocks");
  absl::StatusOr<TensorView> expected = (*store)->Get("q4_k.expected");
  ASSERT_TRUE(blocks.ok() && expected.ok());
  LinearWeight w;
  w.module = "blk.0.attn_q";
  w.format = WeightFormat::kGgmlBlocks;
  w.ggml_type = static_cast<uint32_t>(GgmlType::kQ4_K);
  w.out_features = 12;
  w.in_features = 8 * 256;
  w.weight_packed = *blocks;
  std::vector<float> rows(static_cast<size_t>(5 * w.in_features));
  ASSERT_TRUE(w.DequantizeRows(3, 8, rows.data()).ok());
  EXPECT_EQ(std::memcmp(rows.data(), expected->data + 3 * w.in_features * 4, rows.size() * 4), 0);
  EXPECT_EQ(w.DequantizeRows(0, 13, rows.data()).code(), absl::StatusCode::kOutOfRange);
  w.ggml_type = static_cast<uint32_t>(GgmlType::kIQ2_XXS);
  EXPECT_EQ(w.DequantizeRows(0, 1, rows.data()).code(), absl::StatusCode::kUnimplemented);
}

TEST(GgufQuants, TypeTableAndRefusals) {
  const GgmlTypeInfo* q4k = FindGgmlType(12);
  ASSERT_NE(q4k, nullptr);
  EXPECT_STREQ(q4k->name, "Q4_K");
  EXPECT_EQ(q4k->block_size, 256);
  EXPECT_EQ(q4k->type_size, 144);
  EXPECT_EQ(FindGgmlType(4), nullptr);  // ggml's removed Q4_2
  std::vector<uint8_t> block(66, 0);
  std::vector<float> out(256);
  absl::Status s = DequantizeGgmlBlocks(16, block.data(), 1, out.data());  // IQ2_XXS
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("IQ2_XXS"));
  s = DequantizeGgmlBlocks(99, block.data(), 1, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("99"));
}

}  // namespace
}  // namespace scored
