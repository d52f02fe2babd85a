// RoPE vs ref::Rope with the llama3 / linear / default tables of RopeInvFreq (engine/model/rope_freq.h).
// The kernel evaluates cos/sin in double and rounds once, like the oracle, and does the rotation in the
// same fp32 operation order without FMA, so fp32 results are expected bit-exact; kFp32AbsTol = 1e-6
// (a few ulp of |x| <= 4) only allows for a libm/CUDA double sin/cos that round differently in the last
// fp32 bit. bf16 results are one RNE rounding of that: within one bf16 ulp (2^-8 relative).
// RopeWithTable / RopeCosSinTable: the table holds the very values the per-call path computes (same device
// CosSin code) and the rotation is the same _rn sequence, so table-path outputs are compared with the
// inv_freq path BIT FOR BIT (no tolerance), fp32 and bf16, vector and scalar paths.
#include "engine/kernels/rope.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/rope_freq.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr double kFp32AbsTol = 1e-6;
constexpr double kBf16RelTol = 1.0 / 256.0;

class RopeTest : public testing::GpuTest {};

ModelConfig Config(RopeType type, int64_t head_dim) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = type == RopeType::kLlama3 ? 500000.0 : 10000.0;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = type == RopeType::kLinear ? 4.0 : 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

// Positions of a varlen batch: windows of the given lengths, each restarting at 0.
std::vector<int32_t> Positions(const std::vector<int32_t>& lengths, int32_t offset) {
  std::vector<int32_t> p;
  for (int32_t len : lengths) {
    for (int32_t i = 0; i < len; ++i) p.push_back(offset + i);
  }
  return p;
}

TEST_F(RopeTest, FusedQkvLayoutMatchesReference) {
  struct Case {
    RopeType type;
    int64_t head_dim, num_heads, num_kv_heads;
    int32_t offset;
    std::vector<int32_t> lengths = {5, 130, 1, 64};
  };
  for (const Case& c : {Case{RopeType::kLlama3, 128, 8, 2, 0}, Case{RopeType::kLinear, 64, 4, 4, 3000},
                        Case{RopeType::kDefault, 8, 8, 4, 100000}, Case{RopeType::kDefault, 32, 4, 2, 7},
                        // More tokens than the vector path's grid: each block loops over several tokens.
                        Case{RopeType::kLlama3, 128, 4, 1, 0, {2048, 1500, 900}}}) {
    const std::string name =
        "rope hd=" + std::to_string(c.head_dim) + " type=" + std::to_string(static_cast<int>(c.type));
    const std::vector<float> inv_freq = RopeInvFreq(Config(c.type, c.head_dim));
    const std::vector<int32_t> positions = Positions(c.lengths, c.offset);
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t heads_qk = c.num_heads + c.num_kv_heads;
    const int64_t stride = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    const std::vector<float> qkv =
        testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 51, -4.0f, 4.0f));

    // Oracle: rotate the q|k part of each token as a [tokens, heads_qk, head_dim] tensor.
    std::vector<float> qk(tokens * heads_qk * c.head_dim);
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(qkv.begin() + t * stride, qkv.begin() + t * stride + heads_qk * c.head_dim,
                qk.begin() + t * heads_qk * c.head_dim);
    }
    ref::Rope(qk.data(), positions.data(), inv_freq.data(), tokens, heads_qk, c.head_dim);
    std::vector<float> want = qkv;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(qk.begin() + t * heads_qk * c.head_dim, qk.begin() + (t + 1) * heads_qk * c.head_dim,
                want.begin() + t * stride);
    }

    DeviceArray<float> d_f(inv_freq), d_x32(qkv);
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(qkv));
    ASSERT_TRUE(
        Rope(d_x32.get(), stride, d_pos.get(), d_f.get(), tokens, heads_qk, c.head_dim, stream_).ok());
    ASSERT_TRUE(
        Rope(d_x16.get(), stride, d_pos.get(), d_f.get(), tokens, heads_qk, c.head_dim, stream_).ok());
    Sync();
    const std::vector<float> got32 = d_x32.Download();
    const testing::ErrorStats s = testing::CompareArrays(got32, want);
    testing::Report(name + " f32", s);
    EXPECT_EQ(s.not_finite, 0);
    EXPECT_LE(s.max_abs, kFp32AbsTol) << name;
    const std::vector<float> got16 = testing::FromBf16(d_x16.Download());
    testing::Report(name + " bf16", testing::CompareArrays(got16, want));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(std::fabs(got16[i] - want[i]), kBf16RelTol * std::fabs(want[i]) + 1e-6)
          << name << " at " << i;
    }
    // v (the columns after q|k) must be untouched, bit for bit.
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = heads_qk * c.head_dim; j < stride; ++j)
        ASSERT_EQ(got32[t * stride + j], qkv[t * stride + j]);
    }
  }
}

// Bit patterns of a float / bf16 array, for bitwise comparisons that NaN cannot fool.
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}
std::vector<uint32_t> Bits(const std::vector<bf16_t>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}

// The table on the device: poisoned (NaN) before RopeCosSinTable, so unwritten entries show.
std::vector<float> BuildTable(const DeviceArray<float>& d_inv_freq, DeviceArray<float>* d_table,
                              int64_t num_positions, int64_t half, cudaStream_t stream) {
  d_table->Poison();
  EXPECT_TRUE(RopeCosSinTable(d_inv_freq.get(), num_positions, half, d_table->get(), stream).ok());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return d_table->Download();
}

// The table equals what the inv_freq path computes, bit for bit: rotating the unit pair (x_i, x_{i+h}) =
// (1, 0) with the per-call kernel gives exactly (1 c - 0 s, 0 c + 1 s) = (c, s) (products with 1 and 0
// are exact; c - (+-0) = c, (+-0) + s = s). Also against the host oracle's cos/sin (glibc double,
// rounded once): expected bit-exact too, reported and allowed one fp32 ulp only for the reason given at
// the top (two double libms may round the last double bit differently).
TEST_F(RopeTest, CosSinTableEqualsPerCallCosSin) {
  struct Case {
    RopeType type;
    int64_t head_dim;
    int64_t num_positions;
  };
  for (const Case& c : {Case{RopeType::kLlama3, 128, 8192}, Case{RopeType::kLinear, 64, 8192},
                        Case{RopeType::kDefault, 32, 3000}, Case{RopeType::kDefault, 8, 5}}) {
    const std::string name = "cos/sin table hd=" + std::to_string(c.head_dim) +
                             " type=" + std::to_string(static_cast<int>(c.type));
    const int64_t half = c.head_dim / 2;
    const std::vector<float> inv_freq = RopeInvFreq(Config(c.type, c.head_dim));
    DeviceArray<float> d_f(inv_freq), d_table(c.num_positions * half * 2);
    const std::vector<float> table = BuildTable(d_f, &d_table, c.num_positions, half, stream_);

    std::vector<float> unit(c.num_positions * c.head_dim, 0.0f);
    std::vector<int32_t> positions(c.num_positions);
    for (int64_t p = 0; p < c.num_positions; ++p) {
      positions[p] = static_cast<int32_t>(p);
      for (int64_t i = 0; i < half; ++i) unit[p * c.head_dim + i] = 1.0f;
    }
    DeviceArray<float> d_unit(unit);
    DeviceArray<int32_t> d_pos(positions);
    ASSERT_TRUE(
        Rope(d_unit.get(), c.head_dim, d_pos.get(), d_f.get(), c.num_positions, 1, c.head_dim, stream_).ok());
    Sync();
    const std::vector<float> rotated = d_unit.Download();
    std::vector<float> from_rope(table.size()), host(table.size());
    for (int64_t p = 0; p < c.num_positions; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        from_rope[(p * half + i) * 2] = rotated[p * c.head_dim + i];
        from_rope[(p * half + i) * 2 + 1] = rotated[p * c.head_dim + half + i];
        const float angle = static_cast<float>(p) * inv_freq[i];
        host[(p * half + i) * 2] = static_cast<float>(std::cos(static_cast<double>(angle)));
        host[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    EXPECT_EQ(testing::CountBitDifferences(Bits(table), Bits(from_rope)), 0) << name;
    const testing::ErrorStats s = testing::CompareArrays(table, host);
    testing::Report(name + " vs host double cos/sin (bit differences: " +
                        std::to_string(testing::CountBitDifferences(Bits(table), Bits(host))) + ")",
                    s);
    EXPECT_EQ(s.not_finite, 0) << name;
    EXPECT_LE(s.max_abs, 6e-8) << name;  // one fp32 ulp of |cos|, |sin| <= 1
  }
}

// RopeWithTable is bitwise the inv_freq Rope on the fused-QKV layout (only the first heads_qk heads of a
// token rotated, v untouched) and on odd shapes: head_dim 128/64/32/8 (bf16 hd 8 and a token_stride that
// is not a whole number of 16-byte vectors take the scalar table kernel), positions up to 8191, llama3,
// linear and default scaling.
TEST_F(RopeTest, TablePathBitwiseEqualsInvFreqPath) {
  struct Case {
    RopeType type;
    int64_t head_dim, heads_qk, stride_heads;
    int64_t
        extra_stride;  // elements past stride_heads * head_dim: a non-multiple of 8 forces the scalar path
    std::vector<int32_t> lengths;
    int32_t offset;
  };
  const std::vector<Case> cases = {
      // Llama-3-8B fused qkv: 32 q + 8 k heads rotated of 48, hd 128, varlen windows of up to 2048.
      {RopeType::kLlama3, 128, 40, 48, 0, {2048, 1500, 7, 1}, 0},
      {RopeType::kLlama3, 128, 40, 48, 0, {700}, 7491},          // positions up to 8190
      {RopeType::kLinear, 64, 8, 12, 0, {5, 130, 1, 64}, 8000},  // up to 8191
      {RopeType::kDefault, 32, 6, 8, 0, {300, 33}, 7},
      {RopeType::kDefault, 8, 12, 16, 0, {257, 3}, 100},
      {RopeType::kLlama3, 128, 5, 6, 2, {129, 64}, 40},  // token_stride % 8 != 0: scalar path
  };
  constexpr int64_t kNumPositions = 8192;
  for (const Case& c : cases) {
    const std::string name = "table vs inv_freq hd=" + std::to_string(c.head_dim) +
                             " type=" + std::to_string(static_cast<int>(c.type)) +
                             " heads=" + std::to_string(c.heads_qk) + "/" + std::to_string(c.stride_heads) +
                             " extra=" + std::to_string(c.extra_stride);
    const int64_t half = c.head_dim / 2;
    const std::vector<float> inv_freq = RopeInvFreq(Config(c.type, c.head_dim));
    const std::vector<int32_t> positions = Positions(c.lengths, c.offset);
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t stride = c.stride_heads * c.head_dim + c.extra_stride;
    const std::vector<float> x =
        testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 53, -4.0f, 4.0f));

    DeviceArray<float> d_f(inv_freq), d_table(kNumPositions * half * 2);
    BuildTable(d_f, &d_table, kNumPositions, half, stream_);
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<float> d_old32(x), d_new32(x);
    DeviceArray<bf16_t> d_old16(testing::ToBf16(x)), d_new16(testing::ToBf16(x));
    ASSERT_TRUE(
        Rope(d_old32.get(), stride, d_pos.get(), d_f.get(), tokens, c.heads_qk, c.head_dim, stream_).ok());
    ASSERT_TRUE(RopeWithTable(d_new32.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              c.heads_qk, c.head_dim, stream_)
                    .ok());
    ASSERT_TRUE(
        Rope(d_old16.get(), stride, d_pos.get(), d_f.get(), tokens, c.heads_qk, c.head_dim, stream_).ok());
    ASSERT_TRUE(RopeWithTable(d_new16.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              c.heads_qk, c.head_dim, stream_)
                    .ok());
    Sync();
    const std::vector<float> old32 = d_old32.Download(), new32 = d_new32.Download();
    const std::vector<bf16_t> old16 = d_old16.Download(), new16 = d_new16.Download();
    EXPECT_EQ(testing::CountBitDifferences(Bits(new32), Bits(old32)), 0) << name << " f32";
    EXPECT_EQ(testing::CountBitDifferences(Bits(new16), Bits(old16)), 0) << name << " bf16";
    int64_t changed = 0, not_finite = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < stride; ++j) {
        const float v = new32[t * stride + j];
        not_finite += !std::isfinite(v);
        if (j < c.heads_qk * c.head_dim) {
          changed += v != x[t * stride + j];
        } else {
          ASSERT_EQ(v, x[t * stride + j]) << name << " v column " << j << " of token " << t;
        }
      }
    }
    EXPECT_EQ(not_finite, 0) << name;
    // Position 0 leaves its token unchanged; every other token must move (a no-op kernel fails here).
    EXPECT_GT(changed, tokens * c.heads_qk * c.head_dim / 4) << name;
    std::cout << "[ measured ] " << name << ": bitwise equal (f32, bf16), " << tokens << " tokens"
              << std::endl;
  }
}

// A position outside [0, num_positions) reads nothing out of bounds: that token's rotated pairs become
// NaN (fp32 and bf16, vector and scalar paths), every other element is what the inv_freq path gives.
TEST_F(RopeTest, TablePathPoisonsOutOfRangePositions) {
  constexpr int64_t kNumPositions = 64;
  for (int64_t extra : {int64_t{0}, int64_t{2}}) {  // vector path, scalar path
    constexpr int64_t kHeadDim = 64, kHeadsQk = 6, kStrideHeads = 8;
    const int64_t half = kHeadDim / 2;
    const int64_t stride = kStrideHeads * kHeadDim + extra;
    const std::vector<int32_t> positions = {0, 63, 64, -1, 5, 1 << 30, -2147483647 - 1, 17};
    const auto bad = [&](int64_t t) { return positions[t] < 0 || positions[t] >= kNumPositions; };
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const std::vector<float> inv_freq = RopeInvFreq(Config(RopeType::kLlama3, kHeadDim));
    const std::vector<float> x =
        testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 54, -4.0f, 4.0f));
    // The inv_freq path for the in-range tokens: their positions are valid there too.
    std::vector<int32_t> clean = positions;
    for (int64_t t = 0; t < tokens; ++t) clean[t] = bad(t) ? 0 : positions[t];

    DeviceArray<float> d_f(inv_freq), d_table(kNumPositions * half * 2);
    BuildTable(d_f, &d_table, kNumPositions, half, stream_);
    DeviceArray<int32_t> d_pos(positions), d_clean(clean);
    DeviceArray<float> d_old32(x), d_new32(x);
    DeviceArray<bf16_t> d_new16(testing::ToBf16(x));
    ASSERT_TRUE(
        Rope(d_old32.get(), stride, d_clean.get(), d_f.get(), tokens, kHeadsQk, kHeadDim, stream_).ok());
    ASSERT_TRUE(RopeWithTable(d_new32.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              kHeadsQk, kHeadDim, stream_)
                    .ok());
    ASSERT_TRUE(RopeWithTable(d_new16.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              kHeadsQk, kHeadDim, stream_)
                    .ok());
    Sync();
    const std::vector<float> old32 = d_old32.Download(), new32 = d_new32.Download();
    const std::vector<float> new16 = testing::FromBf16(d_new16.Download());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < stride; ++j) {
        const int64_t e = t * stride + j;
        if (j >= kHeadsQk * kHeadDim) {
          ASSERT_EQ(new32[e], x[e]) << "extra=" << extra << " token " << t << " v column " << j;
          ASSERT_EQ(new16[e], x[e]) << "extra=" << extra << " token " << t << " v column " << j;
        } else if (bad(t)) {
          ASSERT_TRUE(std::isnan(new32[e])) << "extra=" << extra << " token " << t << " at " << j;
          ASSERT_TRUE(std::isnan(new16[e])) << "extra=" << extra << " token " << t << " at " << j;
        } else {
          ASSERT_EQ(Bits(std::vector<float>{new32[e]}), Bits(std::vector<float>{old32[e]}))
              << "extra=" << extra << " token " << t << " at " << j;
        }
      }
    }
  }
}

// Argument checks return before any CUDA call, so they run without a device too.
TEST(RopeArgsTest, RejectsBadArguments) {
  float* x = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const float* table = reinterpret_cast<const float*>(uintptr_t{256});
  float* out = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(RopeCosSinTable(table, -1, 64, out, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeCosSinTable(table, (int64_t{1} << 31) + 1, 64, out, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeCosSinTable(table, 16, 0, out, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeCosSinTable(nullptr, 16, 64, out, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeCosSinTable(table, 16, 64, nullptr, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RopeCosSinTable(nullptr, 0, 64, nullptr, nullptr).ok());  // nothing to fill

  EXPECT_EQ(RopeWithTable(x, 128, pos, table, 16, 4, 1, 127, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 128, pos, table, 16, 4, 1, 2048, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 100, pos, table, 16, 4, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 128, pos, table, -1, 4, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 128, pos, table, 16, -1, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 128, pos, nullptr, 16, 4, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(x, 128, nullptr, table, 16, 4, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeWithTable(static_cast<float*>(nullptr), 128, pos, table, 16, 4, 1, 128, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      RopeWithTable(static_cast<float*>(nullptr), 128, nullptr, nullptr, 16, 0, 1, 128, nullptr).ok());
  EXPECT_EQ(Rope(x, 100, pos, table, 4, 1, 128, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Llama-3-8B attention shape (32 + 8 heads rotated of 48, head_dim 128) over 16384 tokens, in place in
// the fused QKV buffer: 0.34 GB moved (q|k read and written). Reports only.
TEST_F(RopeTest, ThroughputLlama8B) {
  constexpr int64_t kTokens = 16384, kHeadDim = 128, kHeads = 32, kKvHeads = 8;
  constexpr int64_t kStride = (kHeads + 2 * kKvHeads) * kHeadDim;
  const std::vector<float> inv_freq = RopeInvFreq(Config(RopeType::kLlama3, kHeadDim));
  std::vector<int32_t> positions(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) positions[t] = static_cast<int32_t>(t % 2048);
  DeviceArray<float> d_f(inv_freq);
  DeviceArray<int32_t> d_pos(positions);
  DeviceArray<bf16_t> d_x(testing::ToBf16(testing::RandomFloats(kTokens * kStride, 52, -4.0f, 4.0f)));
  auto launch = [&] {
    return Rope(d_x.get(), kStride, d_pos.get(), d_f.get(), kTokens, kHeads + kKvHeads, kHeadDim, stream_);
  };
  const float ms = testing::MedianMs(stream_, launch, 20);
  ASSERT_GT(ms, 0.0f);
  testing::ReportBandwidth("rope bf16 16384 tokens, 40 of 48 heads, hd 128 (in place)", ms,
                           2.0 * kTokens * (kHeads + kKvHeads) * kHeadDim * 2);
}

// The same call through the cos/sin table (2048 positions, 1 MiB, L2 resident), at 16384 and 32768 tokens;
// rope.cu predicts ~0.084 and ~0.168 ms (bytes / 4 TB/s). Also times the one-off table build at load
// (8192 positions). Reports only.
TEST_F(RopeTest, ThroughputLlama8BTable) {
  constexpr int64_t kHeadDim = 128, kHeads = 32, kKvHeads = 8, kPositions = 2048;
  constexpr int64_t kStride = (kHeads + 2 * kKvHeads) * kHeadDim;
  const std::vector<float> inv_freq = RopeInvFreq(Config(RopeType::kLlama3, kHeadDim));
  DeviceArray<float> d_f(inv_freq), d_table(kPositions * kHeadDim), d_big_table(4 * kPositions * kHeadDim);
  BuildTable(d_f, &d_table, kPositions, kHeadDim / 2, stream_);
  const float table_ms = testing::MedianMs(
      stream_,
      [&] { return RopeCosSinTable(d_f.get(), 4 * kPositions, kHeadDim / 2, d_big_table.get(), stream_); },
      5);
  ASSERT_GT(table_ms, 0.0f);
  std::cout << "[ measured ] rope cos/sin table build, 8192 positions x 64 pairs: " << table_ms << " ms"
            << std::endl;
  for (int64_t tokens : {int64_t{16384}, int64_t{32768}}) {
    std::vector<int32_t> positions(tokens);
    for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(t % kPositions);
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<bf16_t> d_x(testing::ToBf16(testing::RandomFloats(tokens * kStride, 55, -4.0f, 4.0f)));
    const auto table_launch = [&] {
      return RopeWithTable(d_x.get(), kStride, d_pos.get(), d_table.get(), kPositions, tokens,
                           kHeads + kKvHeads, kHeadDim, stream_);
    };
    const auto freq_launch = [&] {
      return Rope(d_x.get(), kStride, d_pos.get(), d_f.get(), tokens, kHeads + kKvHeads, kHeadDim, stream_);
    };
    const double bytes = 2.0 * tokens * (kHeads + kKvHeads) * kHeadDim * 2;
    const float table_call_ms = testing::MedianMs(stream_, table_launch, 20);
    const float freq_call_ms = testing::MedianMs(stream_, freq_launch, 20);
    ASSERT_GT(table_call_ms, 0.0f);
    ASSERT_GT(freq_call_ms, 0.0f);
    const std::string shape = std::to_string(tokens) + " tokens, 40 of 48 heads, hd 128 (in place)";
    testing::ReportBandwidth("rope bf16 table path " + shape, table_call_ms, bytes);
    testing::ReportBandwidth("rope bf16 inv_freq path " + shape, freq_call_ms, bytes);
  }
}

// Partial rotary (Phi-3's partial_rotary_factor) and an attention scaling baked into the table (longrope's
// attention factor) against ref::Rope with the same rotary_dim and scaling: only the first rotary_dim
// elements of each head move, the rest stay bit for bit. head_dim 16 / rotary 12 (the fixture's; the
// scalar path), head_dim 128 / rotary 64 and 96 / 96 (vector paths; head stride != rotary_dim in the first).
TEST_F(RopeTest, PartialRotaryAndScaledTableMatchReference) {
  struct Case {
    int64_t head_dim, rotary_dim, heads_qk, stride_heads;
    float scaling;
  };
  for (const Case& c : {Case{16, 12, 6, 8, 1.0f}, Case{16, 12, 6, 8, 1.1902f}, Case{128, 64, 10, 12, 1.0f},
                        Case{96, 96, 64, 96, 1.1902f}, Case{96, 48, 3, 5, 1.25f}}) {
    const std::string name = "partial rotary hd=" + std::to_string(c.head_dim) +
                             " rot=" + std::to_string(c.rotary_dim) + " scaling=" + std::to_string(c.scaling);
    ModelConfig config = Config(RopeType::kDefault, c.head_dim);
    config.rotary_dim = c.rotary_dim;
    const std::vector<float> inv_freq = RopeInvFreq(config);
    ASSERT_EQ(static_cast<int64_t>(inv_freq.size()), c.rotary_dim / 2);
    const std::vector<int32_t> positions = Positions({300, 7, 65}, 0);
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t stride = c.stride_heads * c.head_dim;
    const std::vector<float> x =
        testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 57, -4.0f, 4.0f));

    std::vector<float> qk(tokens * c.heads_qk * c.head_dim);
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(x.begin() + t * stride, x.begin() + t * stride + c.heads_qk * c.head_dim,
                qk.begin() + t * c.heads_qk * c.head_dim);
    }
    ref::Rope(qk.data(), positions.data(), inv_freq.data(), tokens, c.heads_qk, c.head_dim, c.rotary_dim,
              c.scaling);
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(qk.begin() + t * c.heads_qk * c.head_dim, qk.begin() + (t + 1) * c.heads_qk * c.head_dim,
                want.begin() + t * stride);
    }
    constexpr int64_t kNumPositions = 512;
    const int64_t half = c.rotary_dim / 2;
    DeviceArray<float> d_f(inv_freq), d_table(kNumPositions * half * 2);
    d_table.Poison();
    ASSERT_TRUE(RopeCosSinTable(d_f.get(), kNumPositions, half, c.scaling, d_table.get(), stream_).ok());
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<float> d_x32(x);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
    ASSERT_TRUE(RopeWithTable(d_x32.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              c.heads_qk, c.head_dim, c.rotary_dim, stream_)
                    .ok());
    ASSERT_TRUE(RopeWithTable(d_x16.get(), stride, d_pos.get(), d_table.get(), kNumPositions, tokens,
                              c.heads_qk, c.head_dim, c.rotary_dim, stream_)
                    .ok());
    Sync();
    const std::vector<float> got32 = d_x32.Download();
    const testing::ErrorStats s = testing::CompareArrays(got32, want);
    testing::Report(name + " f32", s);
    EXPECT_EQ(s.not_finite, 0) << name;
    EXPECT_LE(s.max_abs, kFp32AbsTol) << name;
    const std::vector<float> got16 = testing::FromBf16(d_x16.Download());
    int64_t moved = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < stride; ++j) {
        const int64_t e = t * stride + j;
        ASSERT_LE(std::fabs(got16[e] - want[e]), kBf16RelTol * std::fabs(want[e]) + 1e-6)
            << name << " at " << e;
        const bool rotated = j < c.heads_qk * c.head_dim && j % c.head_dim < c.rotary_dim;
        if (!rotated) {
          ASSERT_EQ(got32[e], x[e]) << name << " unrotated element " << j << " of token " << t;
        } else {
          moved += got32[e] != x[e];
        }
      }
    }
    EXPECT_GT(moved, tokens * c.heads_qk * c.rotary_dim / 4) << name;
  }
}

// Interleaved pairs (DeepSeek's rope_interleave: RopeInterleavedWithTable) against ref::Rope(...,
// interleaved): fp32 within kFp32AbsTol (the same CosSin values and _rn operations: expected bit for bit),
// bf16 within one rounding; a full head (DeepSeek's 64-wide rotary part alone) and a partial one (the rope
// part ahead of pass-through elements), with a scaled table (YaRN's attention factor).
TEST_F(RopeTest, InterleavedPairsMatchReference) {
  struct Case {
    int64_t head_dim, rotary_dim, heads_qk, stride_heads;
    float scaling;
  };
  for (const Case& c : {Case{64, 64, 6, 8, 1.0f}, Case{16, 8, 5, 7, 1.25f}, Case{192, 64, 3, 3, 1.0f}}) {
    const std::string name =
        "interleaved hd=" + std::to_string(c.head_dim) + " rot=" + std::to_string(c.rotary_dim);
    ModelConfig config = Config(RopeType::kDefault, c.head_dim);
    config.rotary_dim = c.rotary_dim;
    const std::vector<float> inv_freq = RopeInvFreq(config);
    const std::vector<int32_t> positions = Positions({300, 7, 65}, 0);
    const int64_t tokens = static_cast<int64_t>(positions.size());
    const int64_t stride = c.stride_heads * c.head_dim, width = c.heads_qk * c.head_dim;
    const std::vector<float> x =
        testing::RoundedToBf16(testing::RandomFloats(tokens * stride, 59, -4.0f, 4.0f));
    std::vector<float> qk(tokens * width);
    for (int64_t t = 0; t < tokens; ++t)
      std::copy(x.begin() + t * stride, x.begin() + t * stride + width, qk.begin() + t * width);
    ref::Rope(qk.data(), positions.data(), inv_freq.data(), tokens, c.heads_qk, c.head_dim, c.rotary_dim,
              c.scaling, /*interleaved=*/true);
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t)
      std::copy(qk.begin() + t * width, qk.begin() + (t + 1) * width, want.begin() + t * stride);
    constexpr int64_t kNumPositions = 512;
    const int64_t half = c.rotary_dim / 2;
    DeviceArray<float> d_f(inv_freq), d_table(kNumPositions * half * 2);
    ASSERT_TRUE(RopeCosSinTable(d_f.get(), kNumPositions, half, c.scaling, d_table.get(), stream_).ok());
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<float> d_x32(x);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
    ASSERT_TRUE(RopeInterleavedWithTable(d_x32.get(), stride, d_pos.get(), d_table.get(), kNumPositions,
                                         tokens, c.heads_qk, c.head_dim, c.rotary_dim, stream_)
                    .ok());
    ASSERT_TRUE(RopeInterleavedWithTable(d_x16.get(), stride, d_pos.get(), d_table.get(), kNumPositions,
                                         tokens, c.heads_qk, c.head_dim, c.rotary_dim, stream_)
                    .ok());
    Sync();
    const std::vector<float> got32 = d_x32.Download();
    const testing::ErrorStats s = testing::CompareArrays(got32, want);
    testing::Report(name + " f32", s);
    EXPECT_EQ(s.not_finite, 0) << name;
    EXPECT_LE(s.max_abs, kFp32AbsTol) << name;
    const std::vector<float> got16 = testing::FromBf16(d_x16.Download());
    for (int64_t e = 0; e < tokens * stride; ++e) {
      ASSERT_LE(std::fabs(got16[e] - want[e]), kBf16RelTol * std::fabs(want[e]) + 1e-6)
          << name << " at " << e;
    }
  }
  EXPECT_FALSE(RopeInterleavedWithTable<float>(nullptr, 64, nullptr, nullptr, 8, 1, 1, 64, 3, stream_).ok())
      << "odd rotary_dim";
}

}  // namespace
}  // namespace scored::kernels
