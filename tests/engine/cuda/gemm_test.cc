// GemmRunner against a float64 CPU product, and its batch invariance (a row's bits do not depend on how
// many other rows the call has).
#include "engine/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
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

TEST_F(GemmTest, RowsAreBatchInvariant) { CheckBatchInvariance(false); }

TEST_F(GemmTest, TunedRowsAreBatchInvariant) { CheckBatchInvariance(true); }

}  // namespace
}  // namespace scored::cuda
