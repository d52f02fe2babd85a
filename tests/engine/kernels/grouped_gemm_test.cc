// GroupedGemm / GroupedGemmInt4 (grouped_gemm.h) against ref::Linear (double accumulation) per expert, with
// expert row counts of 0, 1, 127, 128, 129 and 300 (on and off the 128-row tile boundary), n = 192 (a
// partial 128-column tile), leading dimensions wider than the rows, and rows past offsets[E] that must stay
// untouched. The 4-bit variant's weights are decoded on the host (float(u - zp) * scale, rounded once to
// bf16), checked bitwise against kernels::Dequantize, and the int4 GEMM must equal the dense grouped GEMM
// over those bf16 weights bit for bit (same values, same accumulation order). Batch invariance: an expert's
// rows give bitwise the same outputs when every other expert's count and the rows' offset change.
//
// Every dense test runs the Hopper kernel (GroupedGemmSm90, and GroupedGemmSm90Stacked over
// DequantizeGroupedInt4's stacked weights) too where the device offers it (GroupedGemmSm90Supported), with
// the same tolerances and the same bitwise batch invariance; its leading dimension of y is rounded up to
// 16 bytes (its TMA store's limit). DequantizeGroupedInt4 (any device) must give bitwise the host decode.
//
// Tolerance (fp32 output): the kernel accumulates k bf16 products (exact in fp32) in fp32, so
// |y - exact| <= k * 2^-24 * sum_k |x w| (the classic recursive-summation bound; ref::Linear's double
// result is exact to 2^-53 before its fp32 rounding, 2^-24 |y| more). bf16 output adds the final rounding,
// 2^-9 |y|; we allow 2^-8 |y|.
#include "engine/kernels/grouped_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/kernels/dequant.h"
#include "engine/kernels/moe_combine.h"
#include "engine/kernels/moe_dispatch.h"
#include "engine/kernels/swiglu.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class GroupedGemmTest : public testing::GpuTest {
 protected:
  // Whether this device runs GroupedGemmSm90 (an sm_90 device, a build for 90a).
  bool Sm90() const {
    int device = 0;
    return cudaGetDevice(&device) == cudaSuccess && GroupedGemmSm90Supported(device);
  }
};

// Which grouped kernel a run uses.
enum class Path { kMma, kSm90, kSm90Cluster, kSm90Pingpong };
const char* Name(Path p) {
  switch (p) {
    case Path::kMma:
      return "mma.sync";
    case Path::kSm90:
      return "sm90 cooperative";
    case Path::kSm90Cluster:
      return "sm90 cooperative 2x1";
    case Path::kSm90Pingpong:
      return "sm90 ping-pong";
  }
  return "?";
}
constexpr Path kSm90Paths[] = {Path::kSm90, Path::kSm90Cluster, Path::kSm90Pingpong};

// Output columns, input columns and the leading dimensions of x and y (wider than the rows).
struct Dims {
  int64_t n, k, ldx, ldy;
};
constexpr Dims kDims = {192, 256, 264, 194};
constexpr int64_t kSpareRows = 3;
const std::vector<int32_t> kCounts = {0, 1, 127, 128, 129, 300, 5};

// 0, 1, ..., n - 1: each slot its own row.
std::vector<int32_t> RowIds(int64_t n) {
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) rows[s] = static_cast<int32_t>(s);
  return rows;
}

// RowIds(n) shuffled by an mt19937 seeded with `seed`: each slot's row in some grouped order.
std::vector<int32_t> ShuffledRowIds(int64_t n, uint32_t seed) {
  std::vector<int32_t> rows = RowIds(n);
  std::mt19937 rng(seed);
  std::shuffle(rows.begin(), rows.end(), rng);
  return rows;
}

std::vector<int32_t> Offsets(const std::vector<int32_t>& counts) {
  std::vector<int32_t> offsets(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
  return offsets;
}

// x [rows, d.ldx] with bf16 values (the columns past d.k random too: the kernel must not read them into y).
std::vector<float> RandomX(int64_t rows, const Dims& d, uint32_t seed) {
  return testing::RoundedToBf16(testing::RandomFloats(rows * d.ldx, seed));
}

// The exact products of expert e's rows: want[r, o] (ref::Linear) and bound[r, o] = sum_k |x w|.
struct Expected {
  std::vector<float> want;    // [rows, d.n]
  std::vector<double> bound;  // [rows, d.n]
};

Expected Reference(const std::vector<float>& x, const std::vector<int32_t>& offsets,
                   const std::vector<std::vector<float>>& w, int64_t rows, const Dims& d) {
  Expected out;
  out.want.assign(rows * d.n, 0.0f);
  out.bound.assign(rows * d.n, 0.0);
  std::vector<float> xs;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t m = offsets[e + 1] - offsets[e];
    if (m == 0) continue;
    xs.assign(m * d.k, 0.0f);
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(&xs[r * d.k], &x[(offsets[e] + r) * d.ldx], d.k * sizeof(float));
    ref::Linear(xs.data(), w[e].data(), nullptr, m, d.k, d.n, out.want.data() + offsets[e] * d.n);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t o = 0; o < d.n; ++o) {
        double s = 0.0;
        for (int64_t c = 0; c < d.k; ++c) s += std::fabs(double{xs[r * d.k + c]} * w[e][o * d.k + c]);
        out.bound[(offsets[e] + r) * d.n + o] = s;
      }
    }
  }
  return out;
}

// Checks y [rows, d.ldy] (fp32 values of the output type) against `ref` for the rows below `total`, and that
// the columns past d.n and the rows from `total` on still hold the poison (NaN).
void ExpectMatches(const std::vector<float>& y, const Expected& ref, int64_t total, int64_t rows, bool bf16,
                   const std::string& what, const Dims& d) {
  testing::ErrorStats stats;
  int64_t bad = 0, touched = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < d.ldy; ++o) {
      const float got = y[r * d.ldy + o];
      if (r >= total || o >= d.n) {
        touched += !std::isnan(got);
        continue;
      }
      const double want = ref.want[r * d.n + o];
      const double tol =
          d.k * std::ldexp(ref.bound[r * d.n + o], -24) + std::ldexp(std::fabs(want), bf16 ? -8 : -23);
      const double err = std::fabs(double{got} - want);
      if (!(err <= tol)) ++bad;
      if (err > stats.max_abs) stats.max_abs = err;
    }
  }
  testing::Report(what, stats);
  EXPECT_EQ(bad, 0) << what;
  EXPECT_EQ(touched, 0) << what << ": wrote outside its rows / columns";
}

// The dense weights of every expert on the device and their pointer table.
struct DenseWeights {
  std::vector<std::unique_ptr<DeviceArray<bf16_t>>> arrays;
  std::unique_ptr<DeviceArray<const bf16_t*>> table;
};
DenseWeights UploadDense(const std::vector<std::vector<float>>& w) {
  DenseWeights d;
  std::vector<const bf16_t*> ptrs;
  for (const std::vector<float>& we : w) {
    d.arrays.push_back(std::make_unique<DeviceArray<bf16_t>>(testing::ToBf16(we)));
    ptrs.push_back(d.arrays.back()->get());
  }
  d.table = std::make_unique<DeviceArray<const bf16_t*>>(ptrs);
  return d;
}

GroupedGemmShape Shape(int64_t experts, int64_t rows, const Dims& d) {
  GroupedGemmShape s;
  s.num_experts = experts;
  s.rows = rows;
  s.n = d.n;
  s.k = d.k;
  s.ldx = d.ldx;
  s.ldy = d.ldy;
  return s;
}

// The dims with y's leading dimension rounded up to 8 elements (GroupedGemmSm90's 16-byte rows for bf16 and
// fp32 y alike).
Dims Sm90Dims(Dims d) {
  d.ldy = (d.ldy + 7) / 8 * 8;
  return d;
}

// GroupedGemmSm90's workspace for `experts` experts.
std::unique_ptr<DeviceArray<uint8_t>> Sm90Workspace(int64_t experts) {
  return std::make_unique<DeviceArray<uint8_t>>(static_cast<size_t>(GroupedGemmSm90WorkspaceBytes(experts)));
}

// One grouped GEMM on the device's buffers with either kernel (stacked: GroupedGemmSm90Stacked's [E, n, k]
// weights instead of the table).
template <typename OutT>
absl::Status Launch(Path path, const bf16_t* x, const int32_t* offsets, const bf16_t* const* table,
                    const GroupedGemmShape& shape, OutT* y, cudaStream_t stream,
                    const bf16_t* stacked = nullptr) {
  if (path == Path::kMma) return GroupedGemm<OutT>(x, offsets, table, shape, y, stream);
  const std::unique_ptr<DeviceArray<uint8_t>> ws = Sm90Workspace(shape.num_experts);
  const GroupedGemmSm90Schedule schedule = path == Path::kSm90 ? GroupedGemmSm90Schedule::kCooperative
                                           : path == Path::kSm90Cluster
                                               ? GroupedGemmSm90Schedule::kCooperative2x1
                                               : GroupedGemmSm90Schedule::kPingpong;
  const int64_t bytes = static_cast<int64_t>(ws->size());
  const absl::Status st =
      stacked != nullptr
          ? GroupedGemmSm90Stacked<OutT>(x, offsets, stacked, shape, y, ws->get(), bytes, stream, schedule)
          : GroupedGemmSm90<OutT>(x, offsets, table, shape, y, ws->get(), bytes, stream, schedule);
  // The workspace is freed on return: wait for the launches that read it.
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  }
  return st;
}

template <typename OutT>
std::vector<OutT> RunDense(cudaStream_t stream, const std::vector<float>& x,
                           const std::vector<int32_t>& offsets, const DenseWeights& w, int64_t rows,
                           const Dims& d, Path path = Path::kMma, const bf16_t* stacked = nullptr) {
  DeviceArray<bf16_t> d_x(testing::ToBf16(x));
  DeviceArray<int32_t> d_off(offsets);
  DeviceArray<OutT> d_y(rows * d.ldy);
  d_y.Poison();
  const absl::Status st =
      Launch<OutT>(path, d_x.get(), d_off.get(), w.table->get(),
                   Shape(static_cast<int64_t>(offsets.size()) - 1, rows, d), d_y.get(), stream, stacked);
  EXPECT_TRUE(st.ok()) << st;
  return d_y.Download();
}

// The paths this device runs.
std::vector<Path> Paths(bool sm90) {
  if (sm90) return {Path::kMma, Path::kSm90, Path::kSm90Cluster, Path::kSm90Pingpong};
  std::printf("GroupedGemmSm90 not offered on this device / build: the mma.sync kernel only\n");
  return {Path::kMma};
}

// The Qwen3-like case, the test fixtures' gate|up and down (n 64 / 32, k 32: a single k tile), and a k that
// ends in a partial k tile (40 = 32 + 8) with n 24.
TEST_F(GroupedGemmTest, DenseMatchesReference) {
  const Dims cases[] = {kDims, {64, 32, 32, 64}, {32, 32, 40, 34}, {24, 40, 48, 26}};
  const std::vector<int32_t> offsets = Offsets(kCounts);
  const int64_t total = offsets.back(), rows = total + kSpareRows;
  for (const Dims& d : cases) {
    const std::string name = "n " + std::to_string(d.n) + " k " + std::to_string(d.k);
    SCOPED_TRACE(name);
    const std::vector<float> x = RandomX(rows, d, 1);
    std::vector<std::vector<float>> w;
    for (size_t e = 0; e < kCounts.size(); ++e) {
      w.push_back(testing::RoundedToBf16(testing::RandomFloats(d.n * d.k, 100 + static_cast<uint32_t>(e))));
    }
    const Expected ref = Reference(x, offsets, w, total, d);
    const DenseWeights dw = UploadDense(w);
    for (Path path : Paths(Sm90())) {
      const Dims pd = path != Path::kMma ? Sm90Dims(d) : d;
      const std::string what = std::string(Name(path)) + ", " + name;
      ExpectMatches(RunDense<float>(stream_, x, offsets, dw, rows, pd, path), ref, total, rows, false,
                    "grouped fp32 out, " + what, pd);
      ExpectMatches(testing::FromBf16(RunDense<bf16_t>(stream_, x, offsets, dw, rows, pd, path)), ref, total,
                    rows, true, "grouped bf16 out, " + what, pd);
    }
  }
}

// The Hopper kernel over many experts (a persistent grid walking 150 groups, most of several tiles, some
// empty), n = 320 (a partial 256-column tile) against the reference.
TEST_F(GroupedGemmTest, Sm90ManyExpertsMatchReference) {
  if (!Sm90()) GTEST_SKIP() << "GroupedGemmSm90 not offered on this device / build";
  const Dims d = {320, 128, 136, 328};
  std::mt19937 rng(77);
  std::vector<int32_t> counts(150);
  for (int32_t& c : counts) c = rng() % 5 == 0 ? 0 : static_cast<int32_t>(rng() % 400);
  const std::vector<int32_t> offsets = Offsets(counts);
  const int64_t total = offsets.back(), rows = total + kSpareRows;
  const std::vector<float> x = RandomX(rows, d, 78);
  std::vector<std::vector<float>> w;
  for (size_t e = 0; e < counts.size(); ++e) {
    w.push_back(testing::RoundedToBf16(testing::RandomFloats(d.n * d.k, 900 + static_cast<uint32_t>(e))));
  }
  const Expected ref = Reference(x, offsets, w, total, d);
  const DenseWeights dw = UploadDense(w);
  std::vector<std::vector<float>> fp32_outs;
  for (Path path : kSm90Paths) {
    const std::string what = std::string(Name(path)) + ", 150 experts";
    fp32_outs.push_back(RunDense<float>(stream_, x, offsets, dw, rows, d, path));
    ExpectMatches(fp32_outs.back(), ref, total, rows, false, "fp32 out, " + what, d);
    ExpectMatches(testing::FromBf16(RunDense<bf16_t>(stream_, x, offsets, dw, rows, d, path)), ref, total,
                  rows, true, "bf16 out, " + what, d);
  }
  // The clusters only share loads: the same tiles, the same k order, bitwise the same results.
  EXPECT_EQ(testing::CountBitDifferences(fp32_outs[0], fp32_outs[1]), 0);
}

TEST_F(GroupedGemmTest, RowsAreBatchInvariant) {
  // Expert 2's 130 rows, first alone with small neighbours, then with other counts, 70 more rows of its own
  // after them, and a different offset: its first 130 rows' outputs must not change by one bit.
  const int64_t kRows = 130;
  const Dims d = kDims;
  const std::vector<float> own = RandomX(kRows + 70, d, 7);
  std::vector<std::vector<float>> w;
  for (int e = 0; e < 5; ++e) {
    w.push_back(testing::RoundedToBf16(testing::RandomFloats(d.n * d.k, 200 + static_cast<uint32_t>(e))));
  }
  const DenseWeights dw = UploadDense(w);
  for (Path path : Paths(Sm90())) {
    SCOPED_TRACE(Name(path));
    const Dims pd = path != Path::kMma ? Sm90Dims(d) : d;
    std::vector<std::vector<float>> outs;
    const std::vector<std::vector<int32_t>> runs = {{3, 0, kRows, 1, 0}, {250, 17, kRows + 70, 0, 129}};
    for (const std::vector<int32_t>& counts : runs) {
      const std::vector<int32_t> offsets = Offsets(counts);
      const int64_t rows = offsets.back();
      std::vector<float> x = RandomX(rows, pd, 8 + static_cast<uint32_t>(counts[0]));
      std::memcpy(&x[offsets[2] * pd.ldx], own.data(), counts[2] * pd.ldx * sizeof(float));
      const std::vector<float> y = RunDense<float>(stream_, x, offsets, dw, rows, pd, path);
      outs.emplace_back(y.begin() + offsets[2] * pd.ldy, y.begin() + (offsets[2] + kRows) * pd.ldy);
    }
    EXPECT_EQ(testing::CountBitDifferences(outs[0], outs[1]), 0);
  }
}

// ---------------------------------------------------------------- 4-bit pack-quantized

struct Int4Case {
  const char* name;
  bool symmetric;
  int64_t group_size;  // 0 = channel
  DType scale_dtype;
};

// One part's stored tensors (host) and their decoded bf16 values.
struct HostPart {
  int64_t rows = 0;
  std::vector<int32_t> packed;  // [rows, d.k / 8]
  std::vector<uint8_t> scale;   // [rows, scale_cols] of scale_dtype
  std::vector<int32_t> zp;      // [ceil(rows / 8), scale_cols] (asymmetric)
  std::vector<float> decoded;   // [rows, d.k], bf16 values
};

HostPart MakePart(const Int4Case& c, int64_t rows, const Dims& d, uint32_t seed) {
  HostPart p;
  p.rows = rows;
  const int64_t scale_cols = c.group_size > 0 ? d.k / c.group_size : 1;
  std::mt19937 rng(seed);
  p.packed.resize(rows * d.k / 8);
  for (int32_t& v : p.packed) v = static_cast<int32_t>(rng());
  p.zp.resize((rows + 7) / 8 * scale_cols);
  for (int32_t& v : p.zp) v = static_cast<int32_t>(rng());
  const std::vector<float> s = testing::RandomFloats(rows * scale_cols, seed + 1, 0.002f, 0.05f);
  const size_t width = c.scale_dtype == DType::kF32 ? 4 : 2;
  p.scale.resize(s.size() * width);
  std::vector<float> scale_values(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const float v = i % 3 == 0 ? -s[i] : s[i];
    if (c.scale_dtype == DType::kF32) {
      std::memcpy(&p.scale[4 * i], &v, 4);
      scale_values[i] = v;
    } else {
      const uint16_t h = c.scale_dtype == DType::kF16 ? FloatToFp16(v) : FloatToBf16(v);
      std::memcpy(&p.scale[2 * i], &h, 2);
      scale_values[i] = c.scale_dtype == DType::kF16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
    }
  }
  p.decoded.resize(rows * d.k);
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t k = 0; k < d.k; ++k) {
      const int64_t g = c.group_size > 0 ? k / c.group_size : 0;
      const uint32_t word = static_cast<uint32_t>(p.packed[o * (d.k / 8) + k / 8]);
      const int32_t u = static_cast<int32_t>((word >> ((k % 8) * 4)) & 0xf);
      int32_t zp = 8;
      if (!c.symmetric) {
        const uint32_t zword = static_cast<uint32_t>(p.zp[(o / 8) * scale_cols + g]);
        zp = static_cast<int32_t>((zword >> ((o % 8) * 4)) & 0xf);
      }
      const float product = static_cast<float>(u - zp) * scale_values[o * scale_cols + g];
      p.decoded[o * d.k + k] = RoundToBf16(product);
    }
  }
  return p;
}

struct DevicePart {
  std::unique_ptr<DeviceArray<int32_t>> packed, zp;
  std::unique_ptr<DeviceArray<uint8_t>> scale;
};

TEST_F(GroupedGemmTest, Int4MatchesDequantizedDense) {
  const std::vector<Int4Case> cases = {{"sym g128 bf16", true, 128, DType::kBF16},
                                       {"asym g32 f16", false, 32, DType::kF16},
                                       {"sym channel f32", true, 0, DType::kF32},
                                       {"asym channel bf16", false, 0, DType::kBF16},
                                       {"asym g64 f32", false, 64, DType::kF32}};
  const Dims d = kDims;
  const std::vector<int32_t> offsets = Offsets(kCounts);
  const int64_t experts = static_cast<int64_t>(kCounts.size());
  const int64_t total = offsets.back(), rows = total + kSpareRows;
  const int64_t split = 96;  // gate|up-like: two parts, the split inside a 128-column tile
  const std::vector<float> x = RandomX(rows, d, 3);
  for (const Int4Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<float>> w;  // decoded [d.n, d.k] per expert
    std::vector<DevicePart> dev;
    std::vector<GroupedInt4Expert> table(experts);
    const int64_t scale_cols = c.group_size > 0 ? d.k / c.group_size : 1;
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<float> we;
      table[e].split = split;
      for (int part = 0; part < 2; ++part) {
        const int64_t part_rows = part == 0 ? split : d.n - split;
        HostPart hp = MakePart(c, part_rows, d, static_cast<uint32_t>(1000 * e + 10 * part + 5));
        DevicePart dp;
        dp.packed = std::make_unique<DeviceArray<int32_t>>(hp.packed);
        dp.scale = std::make_unique<DeviceArray<uint8_t>>(hp.scale);
        dp.zp = std::make_unique<DeviceArray<int32_t>>(hp.zp);
        table[e].parts[part].packed = dp.packed->get();
        table[e].parts[part].scale = dp.scale->get();
        table[e].parts[part].zero_point = c.symmetric ? nullptr : dp.zp->get();
        if (e == 3) {  // the host decode is kernels::Dequantize's, bit for bit
          DequantParams dq;
          dq.format = WeightFormat::kPackQuantized;
          dq.strategy = c.group_size > 0 ? QuantStrategy::kGroup : QuantStrategy::kChannel;
          dq.out_features = part_rows;
          dq.in_features = d.k;
          dq.num_bits = 4;
          dq.symmetric = c.symmetric;
          dq.group_size = c.group_size;
          dq.values = dp.packed->get();
          dq.values_dtype = DType::kI32;
          dq.values_cols = d.k / 8;
          dq.scale = dp.scale->get();
          dq.scale_dtype = c.scale_dtype;
          dq.scale_cols = scale_cols;
          dq.zero_point = c.symmetric ? nullptr : dp.zp->get();
          dq.zero_point_dtype = DType::kI32;
          dq.zero_point_cols = scale_cols;
          DeviceArray<bf16_t> d_dq(part_rows * d.k);
          ASSERT_TRUE(Dequantize<bf16_t>(dq, 0, part_rows, d_dq.get(), stream_).ok());
          EXPECT_EQ(testing::CountBitDifferences(d_dq.Download(), testing::ToBf16(hp.decoded)), 0);
        }
        we.insert(we.end(), hp.decoded.begin(), hp.decoded.end());
        dev.push_back(std::move(dp));
      }
      w.push_back(std::move(we));
    }
    DeviceArray<GroupedInt4Expert> d_table(table);
    GroupedInt4Format format;
    format.scale_dtype = c.scale_dtype;
    format.group_size = c.group_size;
    format.symmetric = c.symmetric;
    const Expected ref = Reference(x, offsets, w, total, d);
    const DenseWeights dw = UploadDense(w);
    // Every expert decoded at once into [E, n, k] (the sm90_dequant path's weights): the host decode,
    // bitwise; the Hopper kernel over them: the reference, and bitwise itself over the same values as tables.
    DeviceArray<bf16_t> stacked(experts * d.n * d.k);
    ASSERT_TRUE(
        DequantizeGroupedInt4(d_table.get(), nullptr, format, experts, d.n, d.k, stacked.get(), stream_)
            .ok());
    std::vector<float> all_w;
    for (const std::vector<float>& we : w) all_w.insert(all_w.end(), we.begin(), we.end());
    EXPECT_EQ(testing::CountBitDifferences(stacked.Download(), testing::ToBf16(all_w)), 0);
    {  // with the offsets: expert 0 (no rows) left as it was (the poison), the others decoded
      DeviceArray<int32_t> d_offsets(offsets);
      DeviceArray<bf16_t> skipping(experts * d.n * d.k);
      skipping.Poison();
      ASSERT_TRUE(DequantizeGroupedInt4(d_table.get(), d_offsets.get(), format, experts, d.n, d.k,
                                        skipping.get(), stream_)
                      .ok());
      std::vector<bf16_t> want = testing::ToBf16(all_w);
      std::fill(want.begin(), want.begin() + d.n * d.k, bf16_t{0xFFFF});
      ASSERT_EQ(kCounts[0], 0);
      EXPECT_EQ(testing::CountBitDifferences(skipping.Download(), want), 0);
    }
    for (Path path : kSm90Paths) {
      if (!Sm90()) break;
      const Dims sd = Sm90Dims(d);
      const std::string what = std::string(Name(path)) + " stacked, " + c.name;
      const std::vector<float> ys = RunDense<float>(stream_, x, offsets, dw, rows, sd, path, stacked.get());
      const std::vector<bf16_t> ysb =
          RunDense<bf16_t>(stream_, x, offsets, dw, rows, sd, path, stacked.get());
      ExpectMatches(ys, ref, total, rows, false, "fp32 out, " + what, sd);
      ExpectMatches(testing::FromBf16(ysb), ref, total, rows, true, "bf16 out, " + what, sd);
      EXPECT_EQ(testing::CountBitDifferences(ys, RunDense<float>(stream_, x, offsets, dw, rows, sd, path)),
                0);
      EXPECT_EQ(testing::CountBitDifferences(ysb, RunDense<bf16_t>(stream_, x, offsets, dw, rows, sd, path)),
                0);
    }
    DeviceArray<bf16_t> d_x(testing::ToBf16(x));
    DeviceArray<int32_t> d_off(offsets);
    DeviceArray<float> d_y(rows * d.ldy);
    DeviceArray<bf16_t> d_yb(rows * d.ldy);
    d_y.Poison();
    d_yb.Poison();
    ASSERT_TRUE(GroupedGemmInt4<float>(d_x.get(), d_off.get(), d_table.get(), format, Shape(experts, rows, d),
                                       d_y.get(), stream_)
                    .ok());
    ASSERT_TRUE(GroupedGemmInt4<bf16_t>(d_x.get(), d_off.get(), d_table.get(), format,
                                        Shape(experts, rows, d), d_yb.get(), stream_)
                    .ok());
    const std::vector<float> y = d_y.Download();
    const std::vector<bf16_t> yb = d_yb.Download();
    ExpectMatches(y, ref, total, rows, false, std::string("int4 fp32 out, ") + c.name, d);
    ExpectMatches(testing::FromBf16(yb), ref, total, rows, true, std::string("int4 bf16 out, ") + c.name, d);
    EXPECT_EQ(testing::CountBitDifferences(y, RunDense<float>(stream_, x, offsets, dw, rows, d)), 0);
    EXPECT_EQ(testing::CountBitDifferences(yb, RunDense<bf16_t>(stream_, x, offsets, dw, rows, d)), 0);
  }
}

// The grouped layout (MoeGroupByExpert's offsets = the counts' exclusive scan, MoeGroupedRows' slot_rows =
// the inverse of the grouping) and MoeCombineGroupedFinish writing over the residual with no shared expert
// (the sum alone), bitwise the per-expert MoeAccumulate into a zeroed acc.
TEST_F(GroupedGemmTest, GroupedCombineMatchesPerExpertAccumulate) {
  constexpr int64_t kTokens = 301, kExperts = 300, kTopK = 8, kHidden = 96;  // > 256 experts: two scan rounds
  std::mt19937 rng(31);
  std::vector<int32_t> ids(kTokens * kTopK);
  std::vector<int32_t> all(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) all[e] = e;
  for (int64_t t = 0; t < kTokens; ++t) {
    std::shuffle(all.begin(), all.begin() + 40, rng);  // experts >= 40 get no token
    std::copy_n(all.begin(), kTopK, ids.begin() + t * kTopK);
  }
  const std::vector<float> weights = testing::RandomFloats(kTokens * kTopK, 32, 0.0f, 1.0f);
  const std::vector<float> y = testing::RandomNormal(kTokens * kTopK * kHidden, 33);
  DeviceArray<int32_t> d_ids(ids), counts(kExperts), slots(kTokens * kTopK), offsets(kExperts + 1),
      slot_rows(kTokens * kTopK);
  DeviceArray<float> d_w(weights), d_y(y), acc_old(kTokens * kHidden), acc_new(kTokens * kHidden);
  offsets.Poison();
  slot_rows.Poison();
  acc_new.Poison();
  DeviceArray<int32_t> group_ws(MoeGroupByExpertWorkspaceBytes(kTokens * kTopK, kExperts) / 4);
  ASSERT_TRUE(MoeGroupByExpert(d_ids.get(), kTokens * kTopK, kExperts, counts.get(), slots.get(),
                               offsets.get(), group_ws.get(), static_cast<int64_t>(group_ws.size()) * 4,
                               stream_)
                  .ok());
  ASSERT_TRUE(
      MoeGroupedRows(offsets.get(), kExperts, slots.get(), kTokens * kTopK, slot_rows.get(), stream_).ok());
  ASSERT_TRUE(MoeCombineGroupedFinish(d_y.get(), slot_rows.get(), d_w.get(), kTokens, kTopK, kHidden, nullptr,
                                      nullptr, 0, false, acc_new.get(), stream_)
                  .ok());
  Sync();
  const std::vector<int32_t> host_counts = counts.Download(), host_offsets = offsets.Download();
  const std::vector<int32_t> host_slots = slots.Download(), host_rows = slot_rows.Download();
  std::vector<int32_t> want_offsets(kExperts + 1, 0);
  for (int64_t e = 0; e < kExperts; ++e) want_offsets[e + 1] = want_offsets[e] + host_counts[e];
  EXPECT_EQ(host_offsets, want_offsets);
  for (int64_t r = 0; r < kTokens * kTopK; ++r) EXPECT_EQ(host_rows[host_slots[r]], r);
  ASSERT_EQ(cudaMemset(acc_old.get(), 0, kTokens * kHidden * sizeof(float)), cudaSuccess);
  for (int64_t e = 0; e < kExperts; ++e) {
    ASSERT_TRUE(MoeAccumulate(d_y.get() + int64_t{want_offsets[e]} * kHidden, slots.get() + want_offsets[e],
                              host_counts[e], kTopK, d_w.get(), kHidden, acc_old.get(), stream_)
                    .ok());
  }
  Sync();
  EXPECT_EQ(testing::CountBitDifferences(acc_new.Download(), acc_old.Download()), 0);
}

// MoeCombineGroupedFinish with a shared expert and adding to the residual, bitwise its sum alone (the test
// above: the per-expert accumulation) then MoeFinish: float4 and scalar widths (hidden 96, 50), with and
// without a shared expert, adding to the residual and writing over it (tensor parallelism's ranks but 0:
// MoeFinish over a zeroed residual).
TEST_F(GroupedGemmTest, GroupedCombineFinishMatchesTwoPasses) {
  constexpr int64_t kTokens = 77, kTopK = 6;
  const std::vector<int32_t> rows = ShuffledRowIds(kTokens * kTopK, 41);
  const std::vector<float> weights = testing::RandomFloats(kTokens * kTopK, 42, 0.0f, 1.0f);
  const std::vector<float> gate = testing::RandomNormal(kTokens * 3, 43);  // column 2 of a [t, 3] matrix
  DeviceArray<int32_t> d_rows(rows);
  DeviceArray<float> d_w(weights), d_gate(gate);
  for (int64_t hidden : {96, 50}) {
    const std::vector<float> y = testing::RandomNormal(kTokens * kTopK * hidden, 44);
    const std::vector<float> shared = testing::RandomNormal(kTokens * hidden, 45);
    const std::vector<float> residual = testing::RandomNormal(kTokens * hidden, 46);
    DeviceArray<float> d_y(y), d_shared(shared), acc(kTokens * hidden);
    for (bool with_shared : {false, true}) {
      for (bool accumulate : {true, false}) {
        const float* sh = with_shared ? d_shared.get() : nullptr;
        DeviceArray<float> want(residual), got(residual);
        if (!accumulate) {
          ASSERT_EQ(cudaMemset(want.get(), 0, kTokens * hidden * sizeof(float)), cudaSuccess);
        }
        ASSERT_TRUE(MoeCombineGroupedFinish(d_y.get(), d_rows.get(), d_w.get(), kTokens, kTopK, hidden,
                                            nullptr, nullptr, 0, false, acc.get(), stream_)
                        .ok());
        ASSERT_TRUE(MoeFinish(acc.get(), sh, d_gate.get() + 2, 3, kTokens, hidden, want.get(), stream_).ok());
        ASSERT_TRUE(MoeCombineGroupedFinish(d_y.get(), d_rows.get(), d_w.get(), kTokens, kTopK, hidden, sh,
                                            d_gate.get() + 2, 3, accumulate, got.get(), stream_)
                        .ok());
        Sync();
        const std::vector<float> g = got.Download(), w = want.Download();
        EXPECT_EQ(testing::CountBitDifferences(g, w), 0)
            << "hidden " << hidden << " shared " << with_shared << " accumulate " << accumulate;
        if (accumulate) {
          EXPECT_NE(g, residual) << "the residual unchanged";
        }
      }
    }
  }
}

// bf16 expert outputs (the bf16 mode's) enter the combine widened exactly: MoeCombineGroupedFinish and
// MoeAccumulate over bf16 rows bitwise the same over their fp32 widening, at the vector and scalar widths.
TEST_F(GroupedGemmTest, Bf16OutputsCombineAsTheirWidening) {
  constexpr int64_t kTokens = 53, kTopK = 4;
  const std::vector<int32_t> rows = ShuffledRowIds(kTokens * kTopK, 51);
  DeviceArray<int32_t> d_rows(rows);
  DeviceArray<float> d_w(testing::RandomFloats(kTokens * kTopK, 52, 0.0f, 1.0f));
  for (int64_t hidden : {96, 50}) {
    const std::vector<bf16_t> y = testing::ToBf16(testing::RandomNormal(kTokens * kTopK * hidden, 53));
    const std::vector<float> residual = testing::RandomNormal(kTokens * hidden, 54);
    DeviceArray<bf16_t> d_y(y);
    DeviceArray<float> d_wide(testing::FromBf16(y));
    DeviceArray<float> got(residual), want(residual);
    ASSERT_TRUE(MoeCombineGroupedFinish(d_y.get(), d_rows.get(), d_w.get(), kTokens, kTopK, hidden, nullptr,
                                        nullptr, 0, true, got.get(), stream_)
                    .ok());
    ASSERT_TRUE(MoeCombineGroupedFinish(d_wide.get(), d_rows.get(), d_w.get(), kTokens, kTopK, hidden,
                                        nullptr, nullptr, 0, true, want.get(), stream_)
                    .ok());
    // MoeAccumulate with top_k 1 and slot r for row r: every row its own token, no two rows on one acc row
    DeviceArray<int32_t> identity_slots(RowIds(kTokens * kTopK));
    const std::vector<float> acc0 = testing::RandomNormal(kTokens * kTopK * hidden, 55);
    DeviceArray<float> acc_got(acc0), acc_want(acc0);
    ASSERT_TRUE(MoeAccumulate(d_y.get(), identity_slots.get(), kTokens * kTopK, 1, d_w.get(), hidden,
                              acc_got.get(), stream_)
                    .ok());
    ASSERT_TRUE(MoeAccumulate(d_wide.get(), identity_slots.get(), kTokens * kTopK, 1, d_w.get(), hidden,
                              acc_want.get(), stream_)
                    .ok());
    Sync();
    const std::vector<float> g = got.Download();
    EXPECT_EQ(testing::CountBitDifferences(g, want.Download()), 0) << "hidden " << hidden;
    EXPECT_NE(g, residual) << "the residual unchanged";
    const std::vector<float> a = acc_got.Download();
    EXPECT_EQ(testing::CountBitDifferences(a, acc_want.Download()), 0) << "hidden " << hidden;
    EXPECT_NE(a, acc0) << "nothing accumulated";
  }
}

// The engine's grouped expert MLP (transformer.cc RunGroupedExperts: group, offsets, one gather, grouped
// gate|up, SwiGLU, grouped down, MoeCombineGroupedFinish) against the same kernels run expert by expert (each
// expert's rows alone, a one-expert GroupedGemm, MoeAccumulate into a zeroed acc, the old path's order):
// bitwise equal, as each row's GEMM result does not depend on the rows around it.
TEST_F(GroupedGemmTest, GroupedMlpMatchesExpertByExpert) {
  for (Path path : Paths(Sm90())) {
    SCOPED_TRACE(Name(path));
    constexpr int64_t kTokens = 203, kExperts = 16, kTopK = 4, kHidden = 64, kInter = 32;
    const int64_t slots_n = kTokens * kTopK;
    std::mt19937 rng(41);
    std::vector<int32_t> ids(slots_n);
    std::vector<int32_t> all(kExperts);
    for (int32_t e = 0; e < kExperts; ++e) all[e] = e;
    for (int64_t t = 0; t < kTokens; ++t) {
      std::shuffle(all.begin(), all.end() - 3, rng);  // the last 3 experts get no token
      std::copy_n(all.begin(), kTopK, ids.begin() + t * kTopK);
    }
    std::vector<std::unique_ptr<DeviceArray<bf16_t>>> w_gu, w_dn;
    std::vector<const bf16_t*> p_gu, p_dn;
    for (int64_t e = 0; e < kExperts; ++e) {
      const uint32_t seed = 500 + 2 * static_cast<uint32_t>(e);
      w_gu.push_back(std::make_unique<DeviceArray<bf16_t>>(
          testing::ToBf16(testing::RandomFloats(2 * kInter * kHidden, seed, -0.2f, 0.2f))));
      w_dn.push_back(std::make_unique<DeviceArray<bf16_t>>(
          testing::ToBf16(testing::RandomFloats(kHidden * kInter, seed + 1, -0.2f, 0.2f))));
      p_gu.push_back(w_gu.back()->get());
      p_dn.push_back(w_dn.back()->get());
    }
    DeviceArray<const bf16_t*> t_gu(p_gu), t_dn(p_dn);
    DeviceArray<bf16_t> x(testing::ToBf16(testing::RandomNormal(kTokens * kHidden, 42)));
    DeviceArray<float> weights(testing::RandomFloats(slots_n, 43, 0.0f, 1.0f));
    DeviceArray<int32_t> d_ids(ids), counts(kExperts), slots(slots_n), offsets(kExperts + 1),
        slot_rows(slots_n);
    DeviceArray<bf16_t> in(slots_n * kHidden), gate_up(slots_n * 2 * kInter), mlp(slots_n * kInter);
    DeviceArray<bf16_t> out(slots_n * kHidden);  // bf16 expert outputs, as the engine's bf16 mode
    DeviceArray<float> acc_new(kTokens * kHidden), acc_old(kTokens * kHidden);
    acc_new.Poison();
    GroupedGemmShape up;
    up.num_experts = kExperts;
    up.rows = slots_n;
    up.n = 2 * kInter;
    up.k = kHidden;
    up.ldx = kHidden;
    up.ldy = 2 * kInter;
    GroupedGemmShape down = up;
    down.n = kHidden;
    down.k = kInter;
    down.ldx = kInter;
    down.ldy = kHidden;
    DeviceArray<int32_t> group_ws(MoeGroupByExpertWorkspaceBytes(slots_n, kExperts) / 4);
    ASSERT_TRUE(MoeGroupByExpert(d_ids.get(), slots_n, kExperts, counts.get(), slots.get(), offsets.get(),
                                 group_ws.get(), static_cast<int64_t>(group_ws.size()) * 4, stream_)
                    .ok());
    ASSERT_TRUE(MoeGroupedRows(offsets.get(), kExperts, slots.get(), slots_n, slot_rows.get(), stream_).ok());
    ASSERT_TRUE(
        MoeGatherRows<bf16_t>(x.get(), kHidden, slots.get(), slots_n, kTopK, kHidden, in.get(), stream_)
            .ok());
    ASSERT_TRUE(Launch<bf16_t>(path, in.get(), offsets.get(), t_gu.get(), up, gate_up.get(), stream_).ok());
    ASSERT_TRUE(
        SwiGlu<bf16_t>(gate_up.get(), gate_up.get() + kInter, 2 * kInter, slots_n, kInter, in.get(), stream_)
            .ok());
    ASSERT_TRUE(Launch<bf16_t>(path, in.get(), offsets.get(), t_dn.get(), down, out.get(), stream_).ok());
    ASSERT_TRUE(MoeCombineGroupedFinish(out.get(), slot_rows.get(), weights.get(), kTokens, kTopK, kHidden,
                                        nullptr, nullptr, 0, false, acc_new.get(), stream_)
                    .ok());
    Sync();
    // Expert by expert, each alone in its GEMMs (one-expert tables: the expert's entry of the same tables).
    const std::vector<int32_t> host_counts = counts.Download();
    ASSERT_EQ(cudaMemset(acc_old.get(), 0, kTokens * kHidden * sizeof(float)), cudaSuccess);
    DeviceArray<int32_t> one(2);
    int64_t offset = 0;
    for (int64_t e = 0; e < kExperts; ++e) {
      const int64_t m = host_counts[e];
      if (m == 0) continue;
      one.Upload({0, static_cast<int32_t>(m)});
      GroupedGemmShape up1 = up, down1 = down;
      up1.num_experts = down1.num_experts = 1;
      up1.rows = down1.rows = m;
      const int32_t* expert_slots = slots.get() + offset;
      ASSERT_TRUE(
          MoeGatherRows<bf16_t>(x.get(), kHidden, expert_slots, m, kTopK, kHidden, in.get(), stream_).ok());
      ASSERT_TRUE(
          Launch<bf16_t>(path, in.get(), one.get(), t_gu.get() + e, up1, gate_up.get(), stream_).ok());
      ASSERT_TRUE(
          SwiGlu<bf16_t>(gate_up.get(), gate_up.get() + kInter, 2 * kInter, m, kInter, mlp.get(), stream_)
              .ok());
      ASSERT_TRUE(Launch<bf16_t>(path, mlp.get(), one.get(), t_dn.get() + e, down1, out.get(), stream_).ok());
      ASSERT_TRUE(
          MoeAccumulate(out.get(), expert_slots, m, kTopK, weights.get(), kHidden, acc_old.get(), stream_)
              .ok());
      Sync();  // `one` is rewritten next expert
      offset += m;
    }
    EXPECT_EQ(offset, slots_n);
    const std::vector<float> got = acc_new.Download();
    EXPECT_EQ(testing::CountBitDifferences(got, acc_old.Download()), 0);
    int64_t not_finite = 0;
    for (float v : got) not_finite += !std::isfinite(v);
    EXPECT_EQ(not_finite, 0);
  }
}

TEST_F(GroupedGemmTest, RejectsUnsupportedShapes) {
  DeviceArray<bf16_t> x(256 * 128);
  DeviceArray<int32_t> off(3);
  DeviceArray<const bf16_t*> table(2);
  DeviceArray<float> y(256 * 128);
  GroupedGemmShape s;
  s.num_experts = 2;
  s.rows = 16;
  s.n = 100;  // not a multiple of 8
  s.k = 128;
  s.ldx = 128;
  s.ldy = 128;
  EXPECT_EQ(GroupedGemm<float>(x.get(), off.get(), table.get(), s, y.get(), stream_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(GroupedGemmSupports(100, 128, false));
  EXPECT_TRUE(GroupedGemmSupports(1536, 2048, false));
  EXPECT_TRUE(GroupedGemmSupports(64, 16, false));
  EXPECT_FALSE(GroupedGemmSupports(64, 16, true));  // int4: k a multiple of 32
  EXPECT_TRUE(GroupedGemmSupports(64, 32, true));
  s.n = 128;
  s.ldx = 100;  // not a multiple of 8
  EXPECT_EQ(GroupedGemm<float>(x.get(), off.get(), table.get(), s, y.get(), stream_).code(),
            absl::StatusCode::kInvalidArgument);
  s.ldx = 128;
  EXPECT_TRUE(GroupedGemmSm90Supports(s, true));
  s.ldy = 130;  // not 16 bytes a row: the Hopper kernel's TMA store cannot take it (the mma.sync one can)
  EXPECT_FALSE(GroupedGemmSm90Supports(s, true));
  EXPECT_FALSE(GroupedGemmSm90Supports(s, false));
  s.ldy = 132;
  EXPECT_TRUE(GroupedGemmSm90Supports(s, true));
  EXPECT_FALSE(GroupedGemmSm90Supports(s, false));
  s.ldy = 128;
  DeviceArray<uint8_t> ws(static_cast<size_t>(GroupedGemmSm90WorkspaceBytes(2)));
  EXPECT_EQ(GroupedGemmSm90<float>(x.get(), off.get(), table.get(), s, y.get(), ws.get(), 16, stream_).code(),
            Sm90() ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kFailedPrecondition);
  GroupedInt4Format f;
  f.group_size = 16;
  DeviceArray<GroupedInt4Expert> experts(2);
  EXPECT_EQ(GroupedGemmInt4<float>(x.get(), off.get(), experts.get(), f, s, y.get(), stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored::kernels
