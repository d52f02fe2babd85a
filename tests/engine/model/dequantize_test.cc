// Known-answer tests of LinearWeight::DequantizeRows for every format and strategy. Goldens come from
// gen_dequant_golden.py (an independent pure-Python implementation); the hand-worked cases at the top
// spell a few values out. Comparisons are bit-exact: the decode is specified to equal
// compressed-tensors' own, so no tolerance applies.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/base/dtype.h"
#include "engine/model/weights.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

#include "tests/engine/model/dequant_golden.inc"

template <typename T, size_t N>
TensorView View(const char* name, DType dtype, std::vector<int64_t> shape, const T (&data)[N]) {
  TensorView t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const uint8_t*>(data);
  t.nbytes = static_cast<int64_t>(sizeof(data));
  t.file = "test";
  EXPECT_EQ(t.NumElements() * DTypeSize(dtype), t.nbytes) << name;
  return t;
}

template <size_t N>
void ExpectRows(const LinearWeight& w, const uint32_t (&expect)[N]) {
  ASSERT_EQ(static_cast<int64_t>(N), w.out_features * w.in_features);
  std::vector<float> out(N, NAN);
  ASSERT_TRUE(w.DequantizeRows(0, w.out_features, out.data()).ok());
  for (size_t i = 0; i < N; ++i) {
    ASSERT_EQ(FloatBits(out[i]), expect[i])
        << w.module << " element " << i << " (row " << i / w.in_features << ", col " << i % w.in_features
        << "): got " << out[i] << ", want " << BitsToFloat(expect[i]);
  }
  // A row range in the middle gives the same rows.
  if (w.out_features >= 2) {
    std::vector<float> part(static_cast<size_t>(w.in_features), NAN);
    ASSERT_TRUE(w.DequantizeRows(1, 2, part.data()).ok());
    for (int64_t k = 0; k < w.in_features; ++k) {
      ASSERT_EQ(FloatBits(part[static_cast<size_t>(k)]), expect[static_cast<size_t>(w.in_features + k)]);
    }
  }
}

LinearWeight Linear(const char* module, WeightFormat format, int64_t out, int64_t in) {
  LinearWeight w;
  w.module = module;
  w.format = format;
  w.out_features = out;
  w.in_features = in;
  return w;
}

// ---- hand-worked values ----

TEST(DequantizeTest, HandWorkedPackInt4BF16) {
  // out 1, in 8, one group of 8, symmetric. q = {-8, -1, 0, 1, 2, 3, 7, -3}; u = q + 8 =
  // {0, 7, 8, 9, 10, 11, 15, 5}; element j at bits 4j -> word 0x5fba9870.
  const uint32_t packed[] = {0x5fba9870u};
  // scale bf16 0x3dcd = 0.10009765625.
  const uint16_t scale[] = {0x3dcd};
  LinearWeight w = Linear("hand", WeightFormat::kPackQuantized, 1, 8);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 8;
  w.weight_packed = View("p", DType::kI32, {1, 1}, packed);
  w.weight_scale = View("s", DType::kBF16, {1, 1}, scale);
  // q * 0.10009765625, exact in fp32. Rounded to bf16 (8 significant bits), as compressed-tensors
  // computes in a bf16 model: 3 -> 0.30029296875 = 153.75/512 -> 154/512 = 0.30078125;
  // 7 -> 0.70068359375 = 179.375/256 -> 179/256 = 0.69921875; -3 -> -0.30078125; the others are exact.
  const float expect[] = {-0.80078125f,  -0.10009765625f, 0.0f,           0.10009765625f,
                          0.2001953125f, 0.30029296875f,  0.70068359375f, -0.30029296875f};
  const float expect_bf16[] = {-0.80078125f,  -0.10009765625f, 0.0f,        0.10009765625f,
                               0.2001953125f, 0.30078125f,     0.69921875f, -0.30078125f};
  float out[8];
  ASSERT_TRUE(w.DequantizeRows(0, 1, out).ok());
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(out[k], expect[k]) << k;
    EXPECT_EQ(RoundToBf16(out[k]), expect_bf16[k]) << k;
  }
}

TEST(DequantizeTest, HandWorkedNvfp4) {
  // in 16: nibbles 0x1 (0.5), 0xf (-6), then 0x7 (6) x 14. One fp8 scale 0x40 = 2.0, global scale 3.0:
  // s = fp32(2/3) = 0.666666686534881591796875; 0.5 * s = 0.3333333432674407958984375 -> bf16
  // 0.333984375; -6 * s = -4.0000001192... -> bf16 -4.0; 6 * s -> 4.0.
  const uint8_t packed[] = {0xf1, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77};
  const uint8_t scale[] = {0x40};
  const float global[] = {3.0f};
  LinearWeight w = Linear("hand_nvfp4", WeightFormat::kNvfp4PackQuantized, 1, 16);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 16;
  w.weight_packed = View("p", DType::kU8, {1, 8}, packed);
  w.weight_scale = View("s", DType::kF8E4M3, {1, 1}, scale);
  w.weight_global_scale = View("g", DType::kF32, {1}, global);
  float out[16];
  ASSERT_TRUE(w.DequantizeRows(0, 1, out).ok());
  EXPECT_EQ(out[0], 0.333984375f);
  EXPECT_EQ(out[1], -4.0f);
  for (int k = 2; k < 16; ++k) EXPECT_EQ(out[k], 4.0f) << k;
}

// MXFP4: every E8M0 exponent byte (one row each) times every E2M1 nibble (columns 0..15, twice): the float32
// product E2M1(n) * 2^(e - 127), exponent 0 the subnormal 2^-127, overflow to infinity past 2^128, and 255
// (E8M0's NaN code) infinity, so NaN for a zero nibble. scripts/fixtures/check_mxfp4_decode.py checks that
// compressed-tensors' MXFP4PackedCompressor.decompress gives these 256 x 16 values (in bf16, exactly).
TEST(DequantizeTest, Mxfp4EveryExponentAndNibble) {
  static uint8_t packed[256 * 16];
  static uint8_t scale[256];
  for (int e = 0; e < 256; ++e) {
    scale[e] = static_cast<uint8_t>(e);
    for (int b = 0; b < 16; ++b)
      packed[e * 16 + b] = static_cast<uint8_t>(((2 * b + 1) % 16) << 4 | (2 * b) % 16);
  }
  LinearWeight w = Linear("mxfp4", WeightFormat::kMxfp4PackQuantized, 256, 32);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 32;
  w.weight_packed = View("p", DType::kU8, {256, 16}, packed);
  w.weight_scale = View("s", DType::kU8, {256, 1}, scale);
  std::vector<float> out(256 * 32);
  ASSERT_TRUE(w.DequantizeRows(0, 256, out.data()).ok());
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int e = 0; e < 256; ++e) {
    const float s = std::ldexp(1.0f, e - 127);  // 2^128 is infinity in float
    for (int k = 0; k < 32; ++k) {
      const int n = k % 16;
      const float want = (n & 8 ? -e2m1[n & 7] : e2m1[n & 7]) * s;
      const float got = out[e * 32 + k];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << e << " " << n;
      } else {
        EXPECT_EQ(got, want) << e << " " << n;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << e << " " << n;
      }
    }
  }
  EXPECT_EQ(out[0 * 32 + 1], 0x1p-128f);                                 // 0.5 * 2^-127: a subnormal
  EXPECT_EQ(out[254 * 32 + 3], 0x1.8p127f);                              // 1.5 * 2^127: finite
  EXPECT_EQ(out[254 * 32 + 4], std::numeric_limits<float>::infinity());  // 2 * 2^127 overflows
}

TEST(DequantizeTest, HandWorkedFp8Channel) {
  // Row 0: fp8 0x38 (1.0), 0x3d (1.625); scale bf16 0x3e4d (0.2001953125):
  //   1.625 * 0.2001953125 = 0.3253173828125 (exact); in bf16 0.326171875 (166.5625/512 -> 167/512).
  // Row 1: fp8 0xc0 (-2.0), 0x01 (2^-9); scale bf16 0x4040 (3.0): -6.0, 3 * 2^-9 = 0.005859375.
  const uint8_t weight[] = {0x38, 0x3d, 0xc0, 0x01};
  const uint16_t scale[] = {0x3e4d, 0x4040};
  LinearWeight w = Linear("hand_fp8", WeightFormat::kFloatQuantized, 2, 2);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kChannel;
  w.weight = View("w", DType::kF8E4M3, {2, 2}, weight);
  w.weight_scale = View("s", DType::kBF16, {2, 1}, scale);
  float out[4];
  ASSERT_TRUE(w.DequantizeRows(0, 2, out).ok());
  EXPECT_EQ(out[0], 0.2001953125f);
  EXPECT_EQ(out[1], 0.3253173828125f);
  EXPECT_EQ(RoundToBf16(out[1]), 0.326171875f);
  EXPECT_EQ(out[2], -6.0f);
  EXPECT_EQ(out[3], 0.005859375f);
}

// ---- generated goldens ----

TEST(DequantizeTest, PackInt4GroupSymBF16) {
  LinearWeight w = Linear("pack_i4_group_sym_bf16", WeightFormat::kPackQuantized, 3, 32);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 16;
  w.weight_packed = View("p", DType::kI32, {3, 4}, pack_i4_group_sym_bf16_packed);
  w.weight_scale = View("s", DType::kBF16, {3, 2}, pack_i4_group_sym_bf16_scale);
  ExpectRows(w, pack_i4_group_sym_bf16_expect);
}

TEST(DequantizeTest, PackInt4ChannelAsymF16ZeroPointPackedAlongOut) {
  LinearWeight w = Linear("pack_i4_channel_asym_f16", WeightFormat::kPackQuantized, 9, 16);
  w.num_bits = 4;
  w.symmetric = false;
  w.strategy = QuantStrategy::kChannel;
  w.weight_packed = View("p", DType::kI32, {9, 2}, pack_i4_channel_asym_f16_packed);
  w.weight_scale = View("s", DType::kF16, {9, 1}, pack_i4_channel_asym_f16_scale);
  w.weight_zero_point = View("z", DType::kI32, {2, 1}, pack_i4_channel_asym_f16_zp);
  ExpectRows(w, pack_i4_channel_asym_f16_expect);
}

TEST(DequantizeTest, PackInt4GroupAsymActorderBF16) {
  LinearWeight w = Linear("pack_i4_group_asym_actorder_bf16", WeightFormat::kPackQuantized, 9, 32);
  w.num_bits = 4;
  w.symmetric = false;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 8;
  w.actorder_group = true;
  w.weight_packed = View("p", DType::kI32, {9, 4}, pack_i4_group_asym_actorder_bf16_packed);
  w.weight_scale = View("s", DType::kBF16, {9, 4}, pack_i4_group_asym_actorder_bf16_scale);
  w.weight_zero_point = View("z", DType::kI32, {2, 4}, pack_i4_group_asym_actorder_bf16_zp);
  w.weight_g_idx = View("g", DType::kI32, {32}, pack_i4_group_asym_actorder_bf16_g_idx);
  ExpectRows(w, pack_i4_group_asym_actorder_bf16_expect);
}

TEST(DequantizeTest, PackInt8ChannelSymBF16) {
  LinearWeight w = Linear("pack_i8_channel_sym_bf16", WeightFormat::kPackQuantized, 2, 8);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kChannel;
  w.weight_packed = View("p", DType::kI32, {2, 2}, pack_i8_channel_sym_bf16_packed);
  w.weight_scale = View("s", DType::kBF16, {2, 1}, pack_i8_channel_sym_bf16_scale);
  ExpectRows(w, pack_i8_channel_sym_bf16_expect);
}

TEST(DequantizeTest, PackInt8TensorSymF32) {
  LinearWeight w = Linear("pack_i8_tensor_sym_f32", WeightFormat::kPackQuantized, 2, 8);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kTensor;
  w.weight_packed = View("p", DType::kI32, {2, 2}, pack_i8_tensor_sym_f32_packed);
  w.weight_scale = View("s", DType::kF32, {1}, pack_i8_tensor_sym_f32_scale);
  ExpectRows(w, pack_i8_tensor_sym_f32_expect);
}

TEST(DequantizeTest, PackInt3GroupAsymFieldsStraddleWords) {
  LinearWeight w = Linear("pack_i3_group_asym_bf16", WeightFormat::kPackQuantized, 12, 32);
  w.num_bits = 3;
  w.symmetric = false;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 16;
  w.weight_packed = View("p", DType::kI32, {12, 3}, pack_i3_group_asym_bf16_packed);
  w.weight_scale = View("s", DType::kBF16, {12, 2}, pack_i3_group_asym_bf16_scale);
  w.weight_zero_point = View("z", DType::kI32, {2, 2}, pack_i3_group_asym_bf16_zp);
  ExpectRows(w, pack_i3_group_asym_bf16_expect);
}

TEST(DequantizeTest, NaiveInt8ChannelAsymBF16) {
  LinearWeight w = Linear("naive_i8_channel_asym_bf16", WeightFormat::kNaiveQuantized, 3, 8);
  w.num_bits = 8;
  w.symmetric = false;
  w.strategy = QuantStrategy::kChannel;
  w.weight = View("w", DType::kI8, {3, 8}, naive_i8_channel_asym_bf16_weight);
  w.weight_scale = View("s", DType::kBF16, {3, 1}, naive_i8_channel_asym_bf16_scale);
  w.weight_zero_point = View("z", DType::kI8, {3, 1}, naive_i8_channel_asym_bf16_zp);
  ExpectRows(w, naive_i8_channel_asym_bf16_expect);
}

TEST(DequantizeTest, NaiveInt8GroupSymF16) {
  LinearWeight w = Linear("naive_i8_group_sym_f16", WeightFormat::kNaiveQuantized, 2, 16);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 8;
  w.weight = View("w", DType::kI8, {2, 16}, naive_i8_group_sym_f16_weight);
  w.weight_scale = View("s", DType::kF16, {2, 2}, naive_i8_group_sym_f16_scale);
  ExpectRows(w, naive_i8_group_sym_f16_expect);
}

TEST(DequantizeTest, Fp8Tensor) {
  LinearWeight w = Linear("fp8_tensor_bf16", WeightFormat::kFloatQuantized, 2, 8);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kTensor;
  w.weight = View("w", DType::kF8E4M3, {2, 8}, fp8_tensor_bf16_weight);
  w.weight_scale = View("s", DType::kBF16, {1}, fp8_tensor_bf16_scale);
  ExpectRows(w, fp8_tensor_bf16_expect);
}

TEST(DequantizeTest, Fp8Channel) {
  LinearWeight w = Linear("fp8_channel_bf16", WeightFormat::kFloatQuantized, 3, 8);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kChannel;
  w.weight = View("w", DType::kF8E4M3, {3, 8}, fp8_channel_bf16_weight);
  w.weight_scale = View("s", DType::kBF16, {3, 1}, fp8_channel_bf16_scale);
  ExpectRows(w, fp8_channel_bf16_expect);
}

TEST(DequantizeTest, Fp8BlockPartialBlocks) {
  LinearWeight w = Linear("fp8_block_f32", WeightFormat::kFloatQuantized, 5, 6);
  w.num_bits = 8;
  w.strategy = QuantStrategy::kBlock;
  w.block_rows = 2;
  w.block_cols = 4;
  w.weight = View("w", DType::kF8E4M3, {5, 6}, fp8_block_f32_weight);
  w.weight_scale = View("s", DType::kF32, {3, 2}, fp8_block_f32_scale);
  ExpectRows(w, fp8_block_f32_expect);

  LinearWeight b = Linear("fp8_block_bf16", WeightFormat::kFloatQuantized, 3, 5);
  b.num_bits = 8;
  b.strategy = QuantStrategy::kBlock;
  b.block_rows = 2;
  b.block_cols = 2;
  b.weight = View("w", DType::kF8E4M3, {3, 5}, fp8_block_bf16_weight);
  b.weight_scale = View("s", DType::kBF16, {2, 3}, fp8_block_bf16_scale);
  ExpectRows(b, fp8_block_bf16_expect);
}

TEST(DequantizeTest, Nvfp4) {
  LinearWeight w = Linear("nvfp4", WeightFormat::kNvfp4PackQuantized, 3, 32);
  w.num_bits = 4;
  w.strategy = QuantStrategy::kGroup;
  w.group_size = 16;
  w.weight_packed = View("p", DType::kU8, {3, 16}, nvfp4_packed);
  w.weight_scale = View("s", DType::kF8E4M3, {3, 2}, nvfp4_scale);
  w.weight_global_scale = View("g", DType::kF32, {1}, nvfp4_global);
  ExpectRows(w, nvfp4_expect);
}

TEST(DequantizeTest, DenseAndRangeChecks) {
  const uint16_t bf16[] = {0x3f80, 0xc000, 0x3fc0, 0x0000};
  LinearWeight w = Linear("dense", WeightFormat::kDense, 2, 2);
  w.weight = View("w", DType::kBF16, {2, 2}, bf16);
  float out[4];
  ASSERT_TRUE(w.DequantizeRows(0, 2, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 1.5f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(w.StoredBytes(), 8);
  EXPECT_EQ(w.DequantizeRows(1, 3, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(w.DequantizeRows(-1, 1, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(w.DequantizeRows(2, 1, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(w.DequantizeRows(2, 2, nullptr).ok());

  float f[4];
  ASSERT_TRUE(TensorToFloat(w.weight, f, 4).ok());
  EXPECT_EQ(f[2], 1.5f);
  EXPECT_EQ(TensorToFloat(w.weight, f, 3).code(), absl::StatusCode::kInvalidArgument);
  const int32_t ints[] = {1};
  EXPECT_EQ(TensorToFloat(View("i", DType::kI32, {1}, ints), f, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored
