// DecompressSparse24 on hand-built tensors: the library's semantics (zeros, then the flattened values
// in row-major order at the set bits of a little-endian packed mask) and its errors. The end-to-end
// check against compressed-tensors' own decompression is fixtures_test (llama-sparse24 and the
// stories260k-sparse24-* fixtures).
#include "engine/model/sparse24.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

// A TensorView over `bytes` (kept alive by the caller).
TensorView View(const std::string& name, DType dtype, std::vector<int64_t> shape,
                const std::vector<uint8_t>& bytes) {
  TensorView t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = bytes.data();
  t.nbytes = static_cast<int64_t>(bytes.size());
  t.file = "model.safetensors";
  return t;
}

std::vector<uint8_t> Shape(int64_t out, int64_t in) {
  std::vector<uint8_t> b(16);
  std::memcpy(b.data(), &out, 8);
  std::memcpy(b.data() + 8, &in, 8);
  return b;
}

// int8 weight [2, 12]: row 0 keeps columns {0, 3 | 5, 6 | 9, 10}, row 1 {1, 2 | 4, 7 | 8, 11}. Mask bytes
// are little-endian: bit j of byte b is column 8b + j; 12 columns take 2 bytes per row.
TEST(Sparse24Test, Int8ValuesLandAtSetBitsInRowMajorOrder) {
  const std::vector<int> keep[2] = {{0, 3, 5, 6, 9, 10}, {1, 2, 4, 7, 8, 11}};
  std::vector<uint8_t> mask(4, 0), values;
  for (int o = 0; o < 2; ++o) {
    for (int k : keep[o]) {
      mask[o * 2 + k / 8] |= static_cast<uint8_t>(1u << (k % 8));
      values.push_back(static_cast<uint8_t>(static_cast<int8_t>(10 * o + k - 7)));
    }
  }
  // Bits 12..15 of each row's second byte are padding: numpy's unpackbits(count=12) ignores them.
  mask[1] |= 0xf0;
  mask[3] |= 0xa0;
  const std::vector<uint8_t> shape = Shape(2, 12);
  auto dense = DecompressSparse24(View("m.shape", DType::kI64, {2, 1}, shape),
                                  View("m.compressed", DType::kI8, {2, 6}, values),
                                  View("m.bitmask", DType::kU8, {2, 2}, mask), 2, 12);
  ASSERT_TRUE(dense.ok()) << dense.status();
  ASSERT_EQ(dense->size(), 24u);
  for (int o = 0; o < 2; ++o) {
    for (int k = 0; k < 12; ++k) {
      const bool kept = std::find(keep[o].begin(), keep[o].end(), k) != keep[o].end();
      EXPECT_EQ(static_cast<int8_t>((*dense)[o * 12 + k]), kept ? 10 * o + k - 7 : 0) << o << "," << k;
    }
  }
}

// The library fills the mask globally in row-major order; a row with 3 kept of 4 followed by one with 1
// still decodes (the values shift across the row boundary exactly as torch's boolean assignment does).
TEST(Sparse24Test, Bf16ValuesFollowTheGlobalMaskOrder) {
  // [2, 4]: row 0 keeps {0, 1, 2}, row 1 keeps {3}; 4 values of BF16.
  const std::vector<uint8_t> mask = {0x07, 0x08};
  const std::vector<uint16_t> v = {0x3f80, 0x4000, 0x4040, 0xbf80};  // 1, 2, 3, -1
  std::vector<uint8_t> values(8);
  std::memcpy(values.data(), v.data(), 8);
  const std::vector<uint8_t> shape = Shape(2, 4);
  auto dense = DecompressSparse24(View("m.shape", DType::kI64, {2, 1}, shape),
                                  View("m.compressed", DType::kBF16, {2, 2}, values),
                                  View("m.bitmask", DType::kU8, {2, 1}, mask), 2, 4);
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::vector<uint16_t> out(8);
  std::memcpy(out.data(), dense->data(), 16);
  EXPECT_EQ(out, (std::vector<uint16_t>{0x3f80, 0x4000, 0x4040, 0, 0, 0, 0, 0xbf80}));
}

TEST(Sparse24Test, InconsistentTensorsFailNamingThem) {
  const std::vector<uint8_t> shape = Shape(1, 8), wrong_shape = Shape(1, 16);
  const std::vector<uint8_t> values(4, 1), three_bits = {0x07}, two_bits = {0x11};
  auto run = [&](const std::vector<uint8_t>& s, const std::vector<uint8_t>& mask, DType dtype) {
    return DecompressSparse24(View("m.shape", DType::kI64, {2, 1}, s),
                              View("m.compressed", dtype, {1, 4}, values),
                              View("m.bitmask", DType::kU8, {1, 1}, mask), 1, 8);
  };
  auto bits = run(shape, three_bits, DType::kI8);
  ASSERT_FALSE(bits.ok());
  EXPECT_EQ(bits.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bits.status().message()), HasSubstr("m.bitmask"));
  EXPECT_THAT(std::string(bits.status().message()), HasSubstr("3 set bits for 4 stored values"));
  auto dims = run(wrong_shape, two_bits, DType::kI8);
  ASSERT_FALSE(dims.ok());
  EXPECT_THAT(std::string(dims.status().message()), HasSubstr("holds (1, 16), expected (1, 8)"));
  auto dtype = run(shape, two_bits, DType::kU8);
  ASSERT_FALSE(dtype.ok());
  EXPECT_THAT(std::string(dtype.status().message()), HasSubstr("m.compressed"));
  // Still fails on two_bits: 2 set bits for 4 values.
  auto count = run(shape, two_bits, DType::kI8);
  ASSERT_FALSE(count.ok());
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("2 set bits for 4 stored values"));
}

}  // namespace
}  // namespace scored
