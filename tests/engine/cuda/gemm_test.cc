// GemmRunner against a float64 CPU product, and its batch invariance (a row's bits do not depend on how
// many other rows the call has).
#include "engine/cuda/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/cuda/device_buffer.h"
#include "tests/engine/cuda/gpu_fixture.h"

namespace scored::cuda {
namespace {

using ::scored::testing::GpuTest;

struct Shape {
  int64_t tokens, out, in;
};

// Random bf16 bit patterns of N(0, 1) values, and the same values widened.
void RandomBf16(int64_t n, std::mt19937& rng, std::vector<uint16_t>* bits, std::vector<double>* values) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  bits->resize(n);
  values->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*bits)[i] = FloatToBf16(dist(rng));
    (*values)[i] = Bf16ToFloat((*bits)[i]);
  }
}

std::vector<double> Reference(const std::vector<double>& x, const std::vector<double>& w, const Shape& s) {
  std::vector<double> y(s.tokens * s.out);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t o = 0; o < s.out; ++o) {
      double acc = 0.0;
      for (int64_t k = 0; k < s.in; ++k) acc += x[t * s.in + k] * w[o * s.in + k];
      y[t * s.out + o] = acc;
    }
  }
  return y;
}

class GemmTest : public GpuTest {};

// bf16 inputs are exact; fp32 accumulation of K products of N(0,1) values errs by about
// K * 2^-24 * |terms| (<< 1e-3 relative to the sqrt(K) output scale); a bf16 output adds one rounding
// (2^-9 relative). Tolerances: fp32 out 1e-4 * sqrt(K), bf16 out |y| * 2^-8 + 1e-4 * sqrt(K).
TEST_F(GemmTest, Bf16MatchesFloat64) {
  std::mt19937 rng(7);
  auto runner = GemmRunner::Create(512);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (const Shape& s : {Shape{1, 64, 64}, Shape{37, 192, 64}, Shape{300, 172, 64}, Shape{512, 64, 172},
                         Shape{129, 512, 256}}) {
    SCOPED_TRACE(::testing::Message() << "shape " << s.tokens << "x" << s.out << "x" << s.in);
    std::vector<uint16_t> xb, wb;
    std::vector<double> xv, wv;
    RandomBf16(s.tokens * s.in, rng, &xb, &xv);
    RandomBf16(s.out * s.in, rng, &wb, &wv);
    const std::vector<double> ref = Reference(xv, wv, s);
    auto x = UploadToDevice(xb.data(), xb.size() * 2, "x");
    auto w = UploadToDevice(wb.data(), wb.size() * 2, "w");
    auto y32 = DeviceBuffer::Allocate(s.tokens * s.out * 4, "y32");
    auto y16 = DeviceBuffer::Allocate(s.tokens * s.out * 2, "y16");
    ASSERT_TRUE(x.ok() && w.ok() && y32.ok() && y16.ok());
    ASSERT_EQ(cudaMemset(y32->data(), 0xff, y32->bytes()), cudaSuccess);  // NaN poison
    ASSERT_EQ(cudaMemset(y16->data(), 0xff, y16->bytes()), cudaSuccess);
    ASSERT_TRUE((*runner)
                    ->Linear(x->data(), w->data(), y32->data(), s.tokens, s.out, s.in, GemmTypes::kBf16ToFp32,
                             stream->get())
                    .ok());
    ASSERT_TRUE((*runner)
                    ->Linear(x->data(), w->data(), y16->data(), s.tokens, s.out, s.in, GemmTypes::kBf16ToBf16,
                             stream->get())
                    .ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    std::vector<float> got32(s.tokens * s.out);
    std::vector<uint16_t> got16(s.tokens * s.out);
    ASSERT_EQ(cudaMemcpy(got32.data(), y32->data(), y32->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got16.data(), y16->data(), y16->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    const double abs_tol = 1e-4 * std::sqrt(static_cast<double>(s.in));
    for (int64_t i = 0; i < s.tokens * s.out; ++i) {
      ASSERT_NEAR(got32[i], ref[i], abs_tol) << "fp32 out, element " << i;
      ASSERT_NEAR(Bf16ToFloat(got16[i]), ref[i], std::abs(ref[i]) * 0x1p-8 + abs_tol)
          << "bf16 out, element " << i;
    }
  }
}

// fp32 mode: plain fp32 FMAs (no TF32, whose 10-bit mantissa would err by ~1e-3 relative).
TEST_F(GemmTest, Fp32MatchesFloat64) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const Shape s{77, 160, 96};
  std::vector<float> x(s.tokens * s.in), w(s.out * s.in);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  const std::vector<double> ref =
      Reference(std::vector<double>(x.begin(), x.end()), std::vector<double>(w.begin(), w.end()), s);
  auto runner = GemmRunner::Create(128);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto dx = UploadToDevice(x.data(), x.size() * 4, "x");
  auto dw = UploadToDevice(w.data(), w.size() * 4, "w");
  auto dy = DeviceBuffer::Allocate(s.tokens * s.out * 4, "y");
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  ASSERT_TRUE(
      (*runner)
          ->Linear(dx->data(), dw->data(), dy->data(), s.tokens, s.out, s.in, GemmTypes::kFp32, nullptr)
          .ok());
  std::vector<float> got(s.tokens * s.out);
  ASSERT_EQ(cudaMemcpy(got.data(), dy->data(), dy->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t i = 0; i < s.tokens * s.out; ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * std::sqrt(96.0) * 4) << i;
}

// The pinned algorithm makes every row bitwise independent of the number of rows in the call; with `tune`,
// the algorithm Tune() picked (timed at max_tokens rows) is pinned the same way and stays correct.
void CheckBatchInvariance(bool tune) {
  std::mt19937 rng(3);
  const int64_t max_tokens = 1024, out = 1024, in = 512;
  std::vector<uint16_t> xb, wb;
  std::vector<double> xv, wv;
  RandomBf16(max_tokens * in, rng, &xb, &xv);
  RandomBf16(out * in, rng, &wb, &wv);
  auto runner = GemmRunner::Create(max_tokens);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto x = UploadToDevice(xb.data(), xb.size() * 2, "x");
  auto w = UploadToDevice(wb.data(), wb.size() * 2, "w");
  auto y = DeviceBuffer::Allocate(max_tokens * out * 4, "y");
  ASSERT_TRUE(x.ok() && w.ok() && y.ok());
  std::vector<float> full(max_tokens * out), part(max_tokens * out);
  if (tune) {
    ASSERT_TRUE(
        (*runner)->Tune(x->data(), w->data(), y->data(), out, in, GemmTypes::kBf16ToFp32, nullptr).ok());
    EXPECT_EQ((*runner)->Choice(out, in, GemmTypes::kBf16ToFp32).rfind("heuristic candidate ", 0), 0u)
        << (*runner)->Choice(out, in, GemmTypes::kBf16ToFp32);
  }
  ASSERT_TRUE(
      (*runner)
          ->Linear(x->data(), w->data(), y->data(), max_tokens, out, in, GemmTypes::kBf16ToFp32, nullptr)
          .ok());
  ASSERT_EQ(cudaMemcpy(full.data(), y->data(), y->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  // The last 8 rows against float64 (tolerance as in Bf16MatchesFloat64).
  const Shape tail{8, out, in};
  const std::vector<double> ref = Reference(std::vector<double>(xv.end() - 8 * in, xv.end()), wv, tail);
  for (int64_t i = 0; i < 8 * out; ++i) {
    ASSERT_NEAR(full[(max_tokens - 8) * out + i], ref[i], 1e-4 * std::sqrt(static_cast<double>(in))) << i;
  }
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{333}, int64_t{1000}}) {
    ASSERT_EQ(cudaMemset(y->data(), 0xff, y->bytes()), cudaSuccess);
    ASSERT_TRUE((*runner)
                    ->Linear(x->as<uint16_t>() + (max_tokens - rows) * in, w->data(), y->data(), rows, out,
                             in, GemmTypes::kBf16ToFp32, nullptr)
                    .ok());
    ASSERT_EQ(cudaMemcpy(part.data(), y->data(), rows * out * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(part.data(), full.data() + (max_tokens - rows) * out, rows * out * 4), 0)
        << rows << " rows differ from the same rows in a " << max_tokens << "-row call";
  }
}

// accumulate = true (the engine's o_proj / down_proj joining the fp32 residual stream): y + x . w^T in one
// epilogue is bitwise the plain GEMM's fp32 result added to y in fp32 (one rounding each), for bf16 -> fp32
// and fp32 types; a row's result stays independent of the rows beside it.
TEST_F(GemmTest, AccumulateIsGemmPlusAdd) {
  std::mt19937 rng(19);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  const int64_t max_tokens = 300, out = 256, in = 192;
  std::vector<uint16_t> xb, wb;
  std::vector<double> xv, wv;
  RandomBf16(max_tokens * in, rng, &xb, &xv);
  RandomBf16(out * in, rng, &wb, &wv);
  std::vector<float> base(max_tokens * out);
  for (float& v : base) v = dist(rng);
  std::vector<float> x32(xv.begin(), xv.end()), w32(wv.begin(), wv.end());
  auto runner = GemmRunner::Create(max_tokens);
  ASSERT_TRUE(runner.ok()) << runner.status();
  for (const GemmTypes types : {GemmTypes::kBf16ToFp32, GemmTypes::kFp32}) {
    SCOPED_TRACE(types == GemmTypes::kFp32 ? "fp32" : "bf16 -> fp32");
    const bool bf16 = types == GemmTypes::kBf16ToFp32;
    auto x = bf16 ? UploadToDevice(xb.data(), xb.size() * 2, "x")
                  : UploadToDevice(x32.data(), x32.size() * 4, "x");
    auto w = bf16 ? UploadToDevice(wb.data(), wb.size() * 2, "w")
                  : UploadToDevice(w32.data(), w32.size() * 4, "w");
    auto plain = DeviceBuffer::Allocate(max_tokens * out * 4, "plain");
    auto acc = UploadToDevice(base.data(), base.size() * 4, "acc");
    ASSERT_TRUE(x.ok() && w.ok() && plain.ok() && acc.ok());
    ASSERT_TRUE(
        (*runner)->Linear(x->data(), w->data(), plain->data(), max_tokens, out, in, types, nullptr).ok());
    ASSERT_TRUE((*runner)
                    ->Linear(x->data(), w->data(), acc->data(), max_tokens, out, in, types, nullptr,
                             LinearOptions::Accumulate())
                    .ok());
    std::vector<float> p(max_tokens * out), a(max_tokens * out);
    ASSERT_EQ(cudaMemcpy(p.data(), plain->data(), plain->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(a.data(), acc->data(), acc->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < max_tokens * out; ++i) {
      const float want = base[i] + p[i];
      ASSERT_EQ(std::memcmp(&a[i], &want, 4), 0) << "element " << i << ": " << a[i] << " vs " << want;
    }
    // 7 rows alone, accumulated onto the same base rows: the same bits.
    const int64_t first = 100, rows = 7;
    auto part = UploadToDevice(base.data() + first * out, rows * out * 4, "part");
    ASSERT_TRUE(part.ok());
    const int64_t elem = bf16 ? 2 : 4;
    ASSERT_TRUE((*runner)
                    ->Linear(static_cast<const char*>(x->data()) + first * in * elem, w->data(), part->data(),
                             rows, out, in, types, nullptr, LinearOptions::Accumulate())
                    .ok());
    std::vector<float> got(rows * out);
    ASSERT_EQ(cudaMemcpy(got.data(), part->data(), part->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), a.data() + first * out, rows * out * 4), 0);
  }
}

// The one-GPU forward's row-parallel sums in halves (forward/linear.h SumsInHalves): y += x_a . W_a^T, then
// y += x_b . W_b^T, run with ld = in over column blocks of the whole x and w, is bitwise what tp 2's ranks
// compute on their contiguous shards (rank 0 adds its half to y, rank 1 writes its own, then one fp32 add),
// for 8B o_proj / down_proj shapes and a small model's, bf16 -> fp32 and fp32.
TEST_F(GemmTest, HalvesWithRowStrideAreBitwiseTheShardsSum) {
  struct Case {
    int64_t tokens, out, in;
    GemmTypes types;
  };
  const Case cases[] = {{512, 4096, 4096, GemmTypes::kBf16ToFp32},
                        {512, 4096, 14336, GemmTypes::kBf16ToFp32},
                        {300, 256, 768, GemmTypes::kBf16ToFp32},
                        {300, 256, 768, GemmTypes::kFp32}};
  std::mt19937 rng(29);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (const Case& c : cases) {
    const bool fp32 = c.types == GemmTypes::kFp32;
    const int64_t elem = fp32 ? 4 : 2, half = c.in / 2;
    SCOPED_TRACE(std::to_string(c.out) + " x " + std::to_string(c.in) + (fp32 ? " fp32" : " bf16 -> fp32"));
    std::vector<uint16_t> xb, wb;
    std::vector<double> xv, wv;
    RandomBf16(c.tokens * c.in, rng, &xb, &xv);
    RandomBf16(c.out * c.in, rng, &wb, &wv);
    std::vector<float> x32(xv.begin(), xv.end()), w32(wv.begin(), wv.end());
    const char* xh =
        fp32 ? reinterpret_cast<const char*>(x32.data()) : reinterpret_cast<const char*>(xb.data());
    const char* wh =
        fp32 ? reinterpret_cast<const char*>(w32.data()) : reinterpret_cast<const char*>(wb.data());
    // Each rank's contiguous shard: columns [r * half, (r + 1) * half) of x and w.
    std::vector<char> x_shard[2], w_shard[2];
    for (int r = 0; r < 2; ++r) {
      x_shard[r].resize(c.tokens * half * elem);
      w_shard[r].resize(c.out * half * elem);
      for (int64_t t = 0; t < c.tokens; ++t) {
        std::memcpy(&x_shard[r][t * half * elem], xh + (t * c.in + r * half) * elem, half * elem);
      }
      for (int64_t o = 0; o < c.out; ++o) {
        std::memcpy(&w_shard[r][o * half * elem], wh + (o * c.in + r * half) * elem, half * elem);
      }
    }
    std::vector<float> residual(c.tokens * c.out);
    for (float& v : residual) v = dist(rng);
    auto x = UploadToDevice(xh, c.tokens * c.in * elem, "x");
    auto w = UploadToDevice(wh, c.out * c.in * elem, "w");
    auto x0 = UploadToDevice(x_shard[0].data(), x_shard[0].size(), "x0");
    auto x1 = UploadToDevice(x_shard[1].data(), x_shard[1].size(), "x1");
    auto w0 = UploadToDevice(w_shard[0].data(), w_shard[0].size(), "w0");
    auto w1 = UploadToDevice(w_shard[1].data(), w_shard[1].size(), "w1");
    auto one_gpu = UploadToDevice(residual.data(), residual.size() * 4, "one gpu");
    auto rank0 = UploadToDevice(residual.data(), residual.size() * 4, "rank 0");
    auto rank1 = DeviceBuffer::Allocate(residual.size() * 4, "rank 1");
    ASSERT_TRUE(x.ok() && w.ok() && x0.ok() && x1.ok() && w0.ok() && w1.ok() && one_gpu.ok() && rank0.ok() &&
                rank1.ok());
    auto one = GemmRunner::Create(c.tokens);
    auto ranks = GemmRunner::Create(c.tokens);
    ASSERT_TRUE(one.ok() && ranks.ok());
    ASSERT_TRUE((*one)
                    ->Linear(x->data(), w->data(), one_gpu->data(), c.tokens, c.out, half, c.types, nullptr,
                             LinearOptions::AccumulateColumns(c.in))
                    .ok());
    ASSERT_TRUE((*one)
                    ->Linear(x->as<char>() + half * elem, w->as<char>() + half * elem, one_gpu->data(),
                             c.tokens, c.out, half, c.types, nullptr, LinearOptions::AccumulateColumns(c.in))
                    .ok());
    ASSERT_TRUE((*ranks)
                    ->Linear(x0->data(), w0->data(), rank0->data(), c.tokens, c.out, half, c.types, nullptr,
                             LinearOptions::Accumulate())
                    .ok());
    ASSERT_TRUE((*ranks)
                    ->Linear(x1->data(), w1->data(), rank1->data(), c.tokens, c.out, half, c.types, nullptr)
                    .ok());
    std::vector<float> got(residual.size()), p0(residual.size()), p1(residual.size());
    ASSERT_EQ(cudaMemcpy(got.data(), one_gpu->data(), got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(p0.data(), rank0->data(), p0.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(p1.data(), rank1->data(), p1.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = p0[i] + p1[i];  // the two-rank all-reduce
      differing += std::memcmp(&got[i], &want, 4) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differing, 0) << "of " << got.size();
  }
}

TEST_F(GemmTest, RowsAreBatchInvariant) { CheckBatchInvariance(false); }

TEST_F(GemmTest, TunedRowsAreBatchInvariant) { CheckBatchInvariance(true); }

// ---- FP8 (W8A8): E4M3 x E4M3 with per-token and per-channel fp32 scales in the epilogue ----

class Fp8GemmTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major < 9) GTEST_SKIP() << "FP8 GEMMs need Hopper or newer";
    // On Hopper the outer-vector scaled FP8 GEMM is what the W8A8 path relies on: its absence is a failure.
    ASSERT_TRUE(GemmRunner::Fp8Supported()) << "cuBLASLt offers no FP8 GEMM here";
  }
};

// Random E4M3 codes of N(0, sigma) values (finite: FloatToFp8E4M3 saturates, never NaN) and their values.
void RandomFp8(int64_t n, float sigma, std::mt19937& rng, std::vector<uint8_t>* codes,
               std::vector<double>* values) {
  std::normal_distribution<float> dist(0.0f, sigma);
  codes->resize(n);
  values->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*codes)[i] = FloatToFp8E4M3(dist(rng));
    (*values)[i] = Fp8E4M3ToFloat((*codes)[i]);
  }
}

std::vector<float> RandomScales(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(1e-3f, 1e-2f);
  std::vector<float> s(n);
  for (float& v : s) v = dist(rng);
  return s;
}

// The decoded values are exact (E4M3 products have 8 significant bits: exact in fp32). The error is the
// accumulation: Hopper's FP8 tensor cores add products into partial sums that keep fewer bits than fp32
// (about 14 significant bits per MMA step; cuBLASLt without fast accumulation promotes them into fp32 every
// K tile), so each output errs by a small multiple of 2^-14 of sum_k |x_k w_k| per tile; we allow
// 2^-10 * sum_k |x_k w_k| * s_x * s_w. bf16 output adds one bf16 rounding (unit roundoff 2^-8) with
// outer-vector scales, two when the scales are applied after the GEMM (fp8_scale.h): 2^-7 |y| covers both.
TEST_F(Fp8GemmTest, Fp8MatchesFloat64) {
  std::mt19937 rng(17);
  auto runner = GemmRunner::Create(512);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (const Shape& s : {Shape{1, 64, 64}, Shape{37, 192, 64}, Shape{300, 176, 96}, Shape{129, 512, 256},
                         Shape{512, 64, 4096}}) {
    SCOPED_TRACE(::testing::Message() << "shape " << s.tokens << "x" << s.out << "x" << s.in);
    std::vector<uint8_t> xq, wq;
    std::vector<double> xv, wv;
    RandomFp8(s.tokens * s.in, 100.0f, rng, &xq, &xv);
    RandomFp8(s.out * s.in, 100.0f, rng, &wq, &wv);
    const std::vector<float> xs = RandomScales(s.tokens, rng), ws = RandomScales(s.out, rng);
    auto x = UploadToDevice(xq.data(), xq.size(), "x");
    auto w = UploadToDevice(wq.data(), wq.size(), "w");
    auto dxs = UploadToDevice(xs.data(), xs.size() * 4, "x scale");
    auto dws = UploadToDevice(ws.data(), ws.size() * 4, "w scale");
    auto y32 = DeviceBuffer::Allocate(s.tokens * s.out * 4, "y32");
    auto y16 = DeviceBuffer::Allocate(s.tokens * s.out * 2, "y16");
    ASSERT_TRUE(x.ok() && w.ok() && dxs.ok() && dws.ok() && y32.ok() && y16.ok());
    ASSERT_EQ(cudaMemset(y32->data(), 0xff, y32->bytes()), cudaSuccess);  // NaN poison
    ASSERT_EQ(cudaMemset(y16->data(), 0xff, y16->bytes()), cudaSuccess);
    for (auto [y, types] :
         {std::pair{y32->data(), GemmTypes::kFp8ToFp32}, std::pair{y16->data(), GemmTypes::kFp8ToBf16}}) {
      const absl::Status status =
          (*runner)->Fp8Linear(x->as<uint8_t>(), dxs->as<float>(), w->as<uint8_t>(), dws->as<float>(), y,
                               s.tokens, s.out, s.in, types, stream->get());
      ASSERT_TRUE(status.ok()) << status;
    }
    ASSERT_TRUE(stream->Synchronize().ok());
    std::vector<float> got32(s.tokens * s.out);
    std::vector<uint16_t> got16(s.tokens * s.out);
    ASSERT_EQ(cudaMemcpy(got32.data(), y32->data(), y32->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got16.data(), y16->data(), y16->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0.0;  // largest |error| / (sum |terms| * scales), for the failure message
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t o = 0; o < s.out; ++o) {
        double acc = 0.0, mag = 0.0;
        for (int64_t k = 0; k < s.in; ++k) {
          acc += xv[t * s.in + k] * wv[o * s.in + k];
          mag += std::abs(xv[t * s.in + k] * wv[o * s.in + k]);
        }
        const double scale = static_cast<double>(xs[t]) * ws[o];
        const double ref = acc * scale, tol = 0x1p-10 * mag * scale + 1e-30;
        const int64_t i = t * s.out + o;
        worst = std::max(worst, std::abs(got32[i] - ref) / (mag * scale + 1e-30));
        ASSERT_NEAR(got32[i], ref, tol) << "fp32 out, element " << i << " (worst so far " << worst << ")";
        ASSERT_NEAR(Bf16ToFloat(got16[i]), ref, std::abs(ref) * 0x1p-7 + tol) << "bf16 out, element " << i;
      }
    }
  }
}

// Rows alone or in any batch give the same bits (pinned algorithm, no split-K), heuristic or tuned.
void CheckFp8BatchInvariance(bool tune) {
  std::mt19937 rng(5);
  const int64_t max_tokens = 1024, out = 1024, in = 512;
  std::vector<uint8_t> xq, wq;
  std::vector<double> xv, wv;
  RandomFp8(max_tokens * in, 100.0f, rng, &xq, &xv);
  RandomFp8(out * in, 100.0f, rng, &wq, &wv);
  const std::vector<float> xs = RandomScales(max_tokens, rng), ws = RandomScales(out, rng);
  auto runner = GemmRunner::Create(max_tokens);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto x = UploadToDevice(xq.data(), xq.size(), "x");
  auto w = UploadToDevice(wq.data(), wq.size(), "w");
  auto dxs = UploadToDevice(xs.data(), xs.size() * 4, "x scale");
  auto dws = UploadToDevice(ws.data(), ws.size() * 4, "w scale");
  auto y = DeviceBuffer::Allocate(max_tokens * out * 2, "y");
  ASSERT_TRUE(x.ok() && w.ok() && dxs.ok() && dws.ok() && y.ok());
  const GemmTypes types = GemmTypes::kFp8ToBf16;
  if (tune) {
    const absl::Status tuned = (*runner)->Tune(x->data(), w->data(), y->data(), out, in, types, nullptr,
                                               dxs->as<float>(), dws->as<float>());
    ASSERT_TRUE(tuned.ok()) << tuned;
    EXPECT_NE((*runner)->Choice(out, in, types).find("heuristic candidate "), std::string::npos)
        << (*runner)->Choice(out, in, types);
  }
  std::vector<uint16_t> full(max_tokens * out), part(max_tokens * out);
  ASSERT_TRUE((*runner)
                  ->Fp8Linear(x->as<uint8_t>(), dxs->as<float>(), w->as<uint8_t>(), dws->as<float>(),
                              y->data(), max_tokens, out, in, types, nullptr)
                  .ok());
  ASSERT_EQ(cudaMemcpy(full.data(), y->data(), y->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{333}, int64_t{1000}}) {
    ASSERT_EQ(cudaMemset(y->data(), 0xff, y->bytes()), cudaSuccess);
    const int64_t first = max_tokens - rows;
    ASSERT_TRUE((*runner)
                    ->Fp8Linear(x->as<uint8_t>() + first * in, dxs->as<float>() + first, w->as<uint8_t>(),
                                dws->as<float>(), y->data(), rows, out, in, types, nullptr)
                    .ok());
    ASSERT_EQ(cudaMemcpy(part.data(), y->data(), rows * out * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(part.data(), full.data() + first * out, rows * out * 2), 0)
        << rows << " rows differ from the same rows in a " << max_tokens << "-row call";
  }
}

TEST_F(Fp8GemmTest, RowsAreBatchInvariant) { CheckFp8BatchInvariance(false); }

TEST_F(Fp8GemmTest, TunedRowsAreBatchInvariant) { CheckFp8BatchInvariance(true); }

// Throughput probe (no pass/fail bound on the rate: it depends on the card and its temperature): tuned
// FP8 vs tuned bf16 GEMMs at the Llama-3-8B layer shapes with 8192 rows (4 windows of 2048),
// printed as TFLOP/s. The only check: every call succeeds.
TEST_F(Fp8GemmTest, ThroughputAt8BShapes) {
  const int64_t tokens = 8192;
  struct Layer {
    const char* name;
    int64_t out, in;
    bool fp32_out;
  };
  const Layer layers[] = {{"qkv", 6144, 4096, false},
                          {"o", 4096, 4096, true},
                          {"gate|up", 28672, 4096, false},
                          {"down", 4096, 14336, true}};
  auto runner = GemmRunner::Create(tokens);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto x = DeviceBuffer::Allocate(tokens * 14336 * 2, "x");
  auto w = DeviceBuffer::Allocate(28672 * 4096 * 2, "w");
  auto y = DeviceBuffer::Allocate(tokens * 28672 * 4, "y");
  auto xs = DeviceBuffer::Allocate(tokens * 4, "x scale");
  auto ws = DeviceBuffer::Allocate(28672 * 4, "w scale");
  ASSERT_TRUE(x.ok() && w.ok() && y.ok() && xs.ok() && ws.ok());
  // 0x38 / 0x3838 / 0x3c23d70a: E4M3 0.5, bf16 0.0439..., fp32 0.01: finite everywhere.
  ASSERT_EQ(cudaMemset(x->data(), 0x38, x->bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(w->data(), 0x38, w->bytes()), cudaSuccess);
  const std::vector<float> ones(28672, 0.01f);
  ASSERT_EQ(cudaMemcpy(xs->data(), ones.data(), tokens * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ws->data(), ones.data(), 28672 * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cudaEvent_t start, stop;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  constexpr int kRuns = 20;
  double total_bf16 = 0.0, total_fp8 = 0.0;
  for (const Layer& l : layers) {
    const GemmTypes bf16 = l.fp32_out ? GemmTypes::kBf16ToFp32 : GemmTypes::kBf16ToBf16;
    const GemmTypes fp8 = l.fp32_out ? GemmTypes::kFp8ToFp32 : GemmTypes::kFp8ToBf16;
    ASSERT_TRUE((*runner)->Tune(x->data(), w->data(), y->data(), l.out, l.in, bf16, nullptr).ok());
    ASSERT_TRUE((*runner)
                    ->Tune(x->data(), w->data(), y->data(), l.out, l.in, fp8, nullptr, xs->as<float>(),
                           ws->as<float>())
                    .ok());
    double ms[2] = {0.0, 0.0};
    for (int pass = 0; pass < 2; ++pass) {
      for (int r = 0; r <= kRuns; ++r) {
        if (r == 1) {  // run 0 warms up
          ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
        }
        const absl::Status status =
            pass == 0 ? (*runner)->Linear(x->data(), w->data(), y->data(), tokens, l.out, l.in, bf16, nullptr)
                      : (*runner)->Fp8Linear(x->as<uint8_t>(), xs->as<float>(), w->as<uint8_t>(),
                                             ws->as<float>(), y->data(), tokens, l.out, l.in, fp8, nullptr);
        ASSERT_TRUE(status.ok()) << status;
      }
      ASSERT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float elapsed = 0.0f;
      cudaEventElapsedTime(&elapsed, start, stop);
      ms[pass] = elapsed / kRuns;
    }
    total_bf16 += ms[0];
    total_fp8 += ms[1];
    const double flop = 2.0 * tokens * l.out * l.in;
    std::printf("GEMM %-8s FP8 mode: %s\n", l.name, (*runner)->Choice(l.out, l.in, fp8).c_str());
    std::printf(
        "GEMM %-8s [%lld, %lld] x [%lld, %lld]^T: bf16 %.3f ms (%.0f TFLOP/s), fp8 %.3f ms (%.0f TFLOP/s), "
        "%.2fx\n",
        l.name, static_cast<long long>(tokens), static_cast<long long>(l.in), static_cast<long long>(l.out),
        static_cast<long long>(l.in), ms[0], flop / ms[0] * 1e-9, ms[1], flop / ms[1] * 1e-9, ms[0] / ms[1]);
  }
  std::printf("GEMM layer total at %lld rows: bf16 %.3f ms, fp8 %.3f ms, %.2fx\n",
              static_cast<long long>(tokens), total_bf16, total_fp8, total_bf16 / total_fp8);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace scored::cuda
