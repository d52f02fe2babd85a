// The scaled INT8 GEMM (kernels/int8_gemm.h) against the exact host computation: the int32 dot product of
// the int8 rows (exact in int64), converted to fp32, times w_scale, times x_scale, each product rounded to
// nearest in fp32 (then to bf16 for a bf16 output; for the accumulating variant added to the previous
// fp32 output). Shapes cover tile tails in m, n and k. Together with QuantizeInt8PerToken's bitwise
// agreement with the fake quantization (int8_quant_test), this is the INT8 W8A8 linear of the CPU oracle
// up to where fp32 sums round.
#include "engine/kernels/int8_gemm.h"

#include <cmath>
#include <cstring>
#include <random>

#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class Int8GemmTest : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    if (!Int8GemmSupported(device)) GTEST_SKIP() << "no int8 GEMM kernel for this device or build";
  }
};

std::vector<int8_t> RandomInt8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(n);
  for (int8_t& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

struct Case {
  int64_t m, n, k;
};

// The expected fp32 result before the output's own rounding: x_scale * (w_scale * float(acc)).
std::vector<float> Expected(const std::vector<int8_t>& x, const std::vector<float>& xs,
                            const std::vector<int8_t>& w, const std::vector<float>& ws, const Case& c) {
  std::vector<float> y(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < c.k; ++k) acc += int64_t{x[i * c.k + k]} * w[j * c.k + k];
      const float a = static_cast<float>(static_cast<int32_t>(acc));
      y[i * c.n + j] = xs[i] * (ws[j] * a);
    }
  }
  return y;
}

// Bitwise equality, naming the first difference.
void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const int64_t differ = testing::CountBitDifferences(got, want);
  if (differ == 0) return;
  size_t i = 0;
  while (i < got.size() && std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
  ADD_FAILURE() << what << ": " << differ << " of " << got.size() << " values differ; first at " << i
                << ": got " << got[i] << " want " << want[i];
}

TEST_F(Int8GemmTest, MatchesTheExactIntegerProductScaled) {
  // An extreme row and column: all -128 against all -128 gives the largest sum, 16384 * k.
  for (const Case& c : {Case{1, 16, 16}, Case{77, 208, 96}, Case{300, 384, 1040}, Case{129, 256, 4096}}) {
    SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " k " << c.k);
    std::vector<int8_t> x = RandomInt8(c.m * c.k, 11), w = RandomInt8(c.n * c.k, 12);
    for (int64_t k = 0; k < c.k; ++k) x[k] = w[k] = -128;
    std::vector<float> xs = testing::RandomFloats(c.m, 13, 1e-4f, 0.05f);
    std::vector<float> ws = testing::RandomFloats(c.n, 14, 1e-4f, 0.02f);
    const std::vector<float> want = Expected(x, xs, w, ws, c);
    DeviceArray<int8_t> d_x(x), d_w(w);
    DeviceArray<float> d_xs(xs), d_ws(ws), d_y32(c.m * c.n);
    DeviceArray<bf16_t> d_y16(c.m * c.n);
    d_y32.Poison();
    d_y16.Poison();
    ASSERT_TRUE(Int8ScaledGemm(d_x.get(), d_xs.get(), d_w.get(), d_ws.get(), d_y32.get(), c.m, c.n, c.k,
                               Int8GemmOutput::kFp32, stream_)
                    .ok());
    ASSERT_TRUE(Int8ScaledGemm(d_x.get(), d_xs.get(), d_w.get(), d_ws.get(), d_y16.get(), c.m, c.n, c.k,
                               Int8GemmOutput::kBf16, stream_)
                    .ok());
    Sync();
    ExpectBitwise(d_y32.Download(), want, "fp32 output");
    ExpectBitwise(testing::FromBf16(d_y16.Download()), testing::RoundedToBf16(want), "bf16 output");

    // Accumulating: y = previous + the scaled product, the last multiply fused with the add or not: within an
    // ulp of the sum plus an ulp of the product (its own rounding, which a fused multiply-add skips).
    const std::vector<float> previous = testing::RandomNormal(c.m * c.n, 15, 100.0f);
    DeviceArray<float> d_acc(previous);
    ASSERT_TRUE(Int8ScaledGemm(d_x.get(), d_xs.get(), d_w.get(), d_ws.get(), d_acc.get(), c.m, c.n, c.k,
                               Int8GemmOutput::kFp32Accumulate, stream_)
                    .ok());
    Sync();
    const std::vector<float> got = d_acc.Download();
    double worst_ulps = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double exact = static_cast<double>(previous[i]) + static_cast<double>(want[i]);
      const double ulp = std::ldexp(1.0, std::ilogb(std::fabs(exact) + 1e-30) - 23) +
                         std::ldexp(1.0, std::ilogb(std::fabs(static_cast<double>(want[i])) + 1e-30) - 23);
      worst_ulps = std::max(worst_ulps, std::fabs(got[i] - exact) / ulp);
    }
    EXPECT_LE(worst_ulps, 1.0);
  }
}

TEST_F(Int8GemmTest, RefusesShapesItCannotTake) {
  DeviceArray<int8_t> a(64 * 64);
  DeviceArray<float> s(64), y(64 * 64);
  EXPECT_EQ(
      Int8ScaledGemm(a.get(), s.get(), a.get(), s.get(), y.get(), 4, 24, 16, Int8GemmOutput::kFp32, stream_)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Int8ScaledGemm(a.get(), s.get(), a.get(), s.get(), y.get(), 4, 16, 40, Int8GemmOutput::kFp32, stream_)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Int8ScaledGemm(a.get(), s.get(), a.get(), s.get(), y.get(), 0, 16, 16, Int8GemmOutput::kFp32, stream_)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored::kernels
