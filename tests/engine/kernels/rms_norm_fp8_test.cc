// RmsNormQuantFp8 (RMSNorm + per-token FP8 quantization in one pass) against the two passes it replaces,
// RmsNorm<float, bf16_t> then QuantizeFp8PerToken<bf16_t>, run on the same GPU: q, scale and the bf16
// normed row must be BITWISE equal (the fused op runs the same row code and the same quantizer arithmetic;
// tolerance 0). Against the fp64 oracle ref::RmsNorm the dequantized values fp32(q) * scale must lie
// within one FP8 step of the exact value: FP8 rounding costs at most half a step, the bf16 rounding before
// it 2^-9 relative (a sixteenth of a step at most) and the fp32 norm ~1e-6 relative (see rms_norm_test.cc).
// Inputs are fp32 residual rows: N(0, 2), one zero row (scale 0, codes 0), one row scaled by 3000 and
// one with a single 6e4 outlier (the massive activations of real residual streams); rows padded with
// random values the kernel must not read (x_stride = hidden + 8).
#include "engine/kernels/rms_norm_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/rms_norm.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr float kEps = 1e-5f;
constexpr int64_t kZeroRow = 1, kLargeRow = 2, kOutlierRow = 3;

class RmsNormFp8Test : public testing::GpuTest {};

int64_t XStride(int64_t hidden) { return hidden + 8; }
int64_t OutStride(int64_t hidden) { return hidden + 16; }

std::vector<float> ResidualRows(int64_t tokens, int64_t hidden, uint32_t seed) {
  const int64_t stride = XStride(hidden);
  std::vector<float> x = testing::RandomNormal(tokens * stride, seed, 2.0f);
  if (tokens > kZeroRow)
    std::fill(x.begin() + kZeroRow * stride, x.begin() + kZeroRow * stride + hidden, 0.0f);
  if (tokens > kLargeRow) {
    for (int64_t i = 0; i < hidden; ++i) x[kLargeRow * stride + i] *= 3000.0f;
  }
  if (tokens > kOutlierRow) x[kOutlierRow * stride + 5] = 6e4f;
  return x;
}

std::vector<float> Weights(int64_t hidden) { return testing::RandomFloats(hidden, 7, 0.5f, 1.5f); }

// Rows [0, tokens) of a [*, stride] array, dense [tokens, hidden].
template <typename T>
std::vector<T> DenseRows(const std::vector<T>& a, int64_t tokens, int64_t hidden, int64_t stride) {
  std::vector<T> d(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(&d[t * hidden], &a[t * stride], hidden * sizeof(T));
  }
  return d;
}

TEST_F(RmsNormFp8Test, BitwiseEqualsRmsNormThenQuantize) {
  for (const int64_t hidden : {256, 768, 4096, 8192, 16384}) {
    constexpr int64_t kMaxTokens = 5000;
    const std::vector<float> x = ResidualRows(kMaxTokens, hidden, 100 + static_cast<uint32_t>(hidden));
    DeviceArray<float> d_x(x), d_w(Weights(hidden));
    for (const int64_t tokens : {1, 7, 300, 5000}) {
      const std::string name = "T=" + std::to_string(tokens) + " H=" + std::to_string(hidden);
      // The two passes.
      DeviceArray<bf16_t> d_normed(tokens * hidden);
      DeviceArray<uint8_t> d_q_want(tokens * hidden);
      DeviceArray<float> d_scale_want(tokens);
      d_normed.Poison();
      d_q_want.Poison();
      d_scale_want.Poison();
      ASSERT_TRUE(RmsNorm(d_x.get(), XStride(hidden), d_w.get(), tokens, hidden, kEps, d_normed.get(), hidden,
                          stream_)
                      .ok());
      ASSERT_TRUE(QuantizeFp8PerToken(d_normed.get(), hidden, tokens, hidden, d_q_want.get(),
                                      d_scale_want.get(), stream_)
                      .ok());
      Sync();
      const std::vector<bf16_t> normed = d_normed.Download();
      const std::vector<uint8_t> q_want = d_q_want.Download();
      const std::vector<float> scale_want = d_scale_want.Download();

      for (const bool with_out : {true, false}) {
        DeviceArray<bf16_t> d_out(tokens * OutStride(hidden));
        DeviceArray<uint8_t> d_q(tokens * hidden);
        DeviceArray<float> d_scale(tokens);
        d_out.Poison();
        d_q.Poison();
        d_scale.Poison();
        ASSERT_TRUE(RmsNormQuantFp8(d_x.get(), XStride(hidden), d_w.get(), tokens, hidden, kEps,
                                    with_out ? d_out.get() : nullptr, OutStride(hidden), d_q.get(),
                                    d_scale.get(), stream_)
                        .ok())
            << name;
        Sync();
        const std::string what = name + (with_out ? " with out" : " without out");
        EXPECT_EQ(testing::CountBitDifferences(d_q.Download(), q_want), 0) << what << ": q";
        EXPECT_EQ(testing::CountBitDifferences(d_scale.Download(), scale_want), 0) << what << ": scale";
        const std::vector<bf16_t> out = d_out.Download();
        if (with_out) {
          EXPECT_EQ(testing::CountBitDifferences(DenseRows(out, tokens, hidden, OutStride(hidden)), normed),
                    0)
              << what << ": out";
        } else {
          int64_t written = 0;
          for (const bf16_t v : out) written += v.bits != 0xFFFFu;
          EXPECT_EQ(written, 0) << what << ": out was written";
        }
        if (tokens > kZeroRow) {
          const std::vector<float> scale = d_scale.Download();
          const std::vector<uint8_t> q = d_q.Download();
          EXPECT_EQ(scale[kZeroRow], 0.0f) << what;
          for (int64_t i = 0; i < hidden; ++i)
            ASSERT_EQ(q[kZeroRow * hidden + i], 0) << what << " zero row at " << i;
        }
      }
    }
  }
}

// One FP8 E4M3 step (the spacing of representable values) at magnitude |y|, in the scaled domain:
// 2^(e - 3) for |y| in [2^e, 2^(e+1)), e >= -6; 2^-9 among the subnormals.
double Fp8Step(double y) {
  const int e = y > 0.0 ? static_cast<int>(std::floor(std::log2(y))) : -6;
  return std::ldexp(1.0, (e < -6 ? -6 : e) - 3);
}

TEST_F(RmsNormFp8Test, DequantizedWithinOneFp8StepOfReference) {
  constexpr int64_t kTokens = 300;
  for (const int64_t hidden : {256, 768, 4096, 8192, 16384}) {
    const std::vector<float> x = ResidualRows(kTokens, hidden, 200 + static_cast<uint32_t>(hidden));
    const std::vector<float> w = Weights(hidden);
    std::vector<float> want(kTokens * hidden);
    ref::RmsNorm(DenseRows(x, kTokens, hidden, XStride(hidden)).data(), w.data(), kTokens, hidden, kEps,
                 want.data());

    DeviceArray<float> d_x(x), d_w(w), d_scale(kTokens);
    DeviceArray<uint8_t> d_q(kTokens * hidden);
    d_q.Poison();
    d_scale.Poison();
    ASSERT_TRUE(RmsNormQuantFp8(d_x.get(), XStride(hidden), d_w.get(), kTokens, hidden, kEps, nullptr, 0,
                                d_q.get(), d_scale.get(), stream_)
                    .ok());
    Sync();
    const std::vector<uint8_t> q = d_q.Download();
    const std::vector<float> scale = d_scale.Download();
    std::vector<float> got(kTokens * hidden);
    double worst_steps = 0.0;
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t i = 0; i < hidden; ++i) {
        const int64_t k = t * hidden + i;
        got[k] = Fp8E4M3ToFloat(q[k]) * scale[t];
        if (scale[t] == 0.0f) {
          ASSERT_EQ(want[k], 0.0f) << "H=" << hidden << " scale 0 on a nonzero row " << t;
          continue;
        }
        const double step = Fp8Step(std::fabs(want[k]) / scale[t]) * scale[t];
        const double steps = std::fabs(static_cast<double>(got[k]) - want[k]) / step;
        worst_steps = std::max(worst_steps, steps);
        ASSERT_LE(steps, 1.0) << "H=" << hidden << " t=" << t << " i=" << i << " got " << got[k] << " want "
                              << want[k];
      }
    }
    testing::Report("rms_norm_fp8 dequantized H=" + std::to_string(hidden) + " (worst " +
                        std::to_string(worst_steps) + " FP8 steps)",
                    testing::CompareArrays(got, want, 1e-2));
  }
}

TEST_F(RmsNormFp8Test, RowAloneEqualsRowInBatch) {
  constexpr int64_t kTokens = 300, kHidden = 4096;
  const std::vector<float> x = ResidualRows(kTokens, kHidden, 300);
  DeviceArray<float> d_x(x), d_w(Weights(kHidden)), d_scale(kTokens), d_scale1(1);
  DeviceArray<uint8_t> d_q(kTokens * kHidden), d_q1(kHidden);
  DeviceArray<bf16_t> d_out(kTokens * OutStride(kHidden)), d_out1(kHidden);
  d_q.Poison();
  d_scale.Poison();
  d_out.Poison();
  ASSERT_TRUE(RmsNormQuantFp8(d_x.get(), XStride(kHidden), d_w.get(), kTokens, kHidden, kEps, d_out.get(),
                              OutStride(kHidden), d_q.get(), d_scale.get(), stream_)
                  .ok());
  Sync();
  const std::vector<uint8_t> q = d_q.Download();
  const std::vector<float> scale = d_scale.Download();
  const std::vector<bf16_t> out = d_out.Download();
  for (const int64_t row : {int64_t{0}, kZeroRow, kLargeRow, kOutlierRow, int64_t{137}, kTokens - 1}) {
    d_q1.Poison();
    d_scale1.Poison();
    d_out1.Poison();
    ASSERT_TRUE(RmsNormQuantFp8(d_x.get() + row * XStride(kHidden), XStride(kHidden), d_w.get(), 1, kHidden,
                                kEps, d_out1.get(), kHidden, d_q1.get(), d_scale1.get(), stream_)
                    .ok());
    Sync();
    EXPECT_EQ(
        testing::CountBitDifferences(d_q1.Download(), std::vector<uint8_t>(q.begin() + row * kHidden,
                                                                           q.begin() + (row + 1) * kHidden)),
        0)
        << "row " << row << ": q";
    EXPECT_EQ(testing::CountBitDifferences(d_scale1.Download(), std::vector<float>{scale[row]}), 0)
        << "row " << row << ": scale";
    const auto out_row = out.begin() + row * OutStride(kHidden);
    EXPECT_EQ(
        testing::CountBitDifferences(d_out1.Download(), std::vector<bf16_t>(out_row, out_row + kHidden)), 0)
        << "row " << row << ": out";
  }
}

// Argument checks happen on the host before any CUDA call, so this runs without a GPU. The pointers are
// host memory the op must reject without touching.
TEST(RmsNormFp8ArgsTest, RejectsUnsupportedArguments) {
  alignas(16) static float x[2 * 16400];
  alignas(16) static float w[16400];
  alignas(16) static bf16_t out[2 * 16400];
  alignas(16) static uint8_t q[2 * 16400];
  alignas(16) static float scale[2];
  auto call = [&](const float* px, int64_t x_stride, const float* pw, int64_t tokens, int64_t hidden,
                  bf16_t* pout, int64_t out_stride, uint8_t* pq, float* ps) {
    return RmsNormQuantFp8(px, x_stride, pw, tokens, hidden, kEps, pout, out_stride, pq, ps, nullptr).code();
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_TRUE(RmsNormQuantFp8Supports(256));
  EXPECT_TRUE(RmsNormQuantFp8Supports(16384));
  EXPECT_FALSE(RmsNormQuantFp8Supports(16392));  // more than 8 chunks of 8 per thread
  EXPECT_FALSE(RmsNormQuantFp8Supports(1004));   // not a multiple of 8
  EXPECT_FALSE(RmsNormQuantFp8Supports(0));
  EXPECT_EQ(call(x, 1004, w, 2, 1004, out, 1004, q, scale), kInvalid);
  EXPECT_EQ(call(x, 16392, w, 2, 16392, out, 16392, q, scale), kInvalid);
  EXPECT_EQ(call(x, 256, w, -1, 256, out, 256, q, scale), kInvalid);
  EXPECT_EQ(call(x, 260, w, 2, 256, out, 256, q, scale), kInvalid);  // x_stride not a multiple of 8
  EXPECT_EQ(call(x, 248, w, 2, 256, out, 256, q, scale), kInvalid);  // x_stride < hidden
  EXPECT_EQ(call(x, 256, w, 2, 256, out, 260, q, scale), kInvalid);  // out_stride not a multiple of 8
  EXPECT_EQ(call(x, 256, w, 2, 256, out, 248, q, scale), kInvalid);  // out_stride < hidden
  EXPECT_EQ(call(nullptr, 256, w, 2, 256, out, 256, q, scale), kInvalid);
  EXPECT_EQ(call(x, 256, nullptr, 2, 256, out, 256, q, scale), kInvalid);
  EXPECT_EQ(call(x, 256, w, 2, 256, out, 256, nullptr, scale), kInvalid);
  EXPECT_EQ(call(x, 256, w, 2, 256, out, 256, q, nullptr), kInvalid);
  EXPECT_EQ(call(x + 1, 256, w, 2, 256, out, 256, q, scale), kInvalid);  // x not 16-byte aligned
  EXPECT_EQ(call(x, 256, w + 2, 2, 256, out, 256, q, scale), kInvalid);  // weight not 16-byte aligned
  EXPECT_EQ(call(x, 256, w, 2, 256, out + 4, 256, q, scale), kInvalid);  // out not 16-byte aligned
  EXPECT_EQ(call(x, 256, w, 2, 256, out, 256, q + 4, scale), kInvalid);  // q not 8-byte aligned
  // No tokens: nothing to do, nothing launched; the shapes are still checked.
  EXPECT_EQ(call(nullptr, 256, nullptr, 0, 256, nullptr, 0, nullptr, nullptr), absl::StatusCode::kOk);
  EXPECT_EQ(call(nullptr, 1004, nullptr, 0, 1004, nullptr, 0, nullptr, nullptr), kInvalid);
}

// Llama-3-8B width, 16384 tokens: the fused op (with and without the bf16 copy) against the two passes.
// Bytes per token: fused 4H in + H + 4 out (+ 2H with out); two passes 4H + 2H, then 2H + H + 4. Reports
// only.
TEST_F(RmsNormFp8Test, ThroughputLlama8B) {
  constexpr int64_t kTokens = 16384, kHidden = 4096;
  DeviceArray<float> d_x(testing::RandomNormal(kTokens * kHidden, 400)), d_w(Weights(kHidden)),
      d_scale(kTokens);
  DeviceArray<bf16_t> d_out(kTokens * kHidden);
  DeviceArray<uint8_t> d_q(kTokens * kHidden);
  auto fused = [&] {
    return RmsNormQuantFp8(d_x.get(), kHidden, d_w.get(), kTokens, kHidden, kEps, nullptr, 0, d_q.get(),
                           d_scale.get(), stream_);
  };
  auto fused_out = [&] {
    return RmsNormQuantFp8(d_x.get(), kHidden, d_w.get(), kTokens, kHidden, kEps, d_out.get(), kHidden,
                           d_q.get(), d_scale.get(), stream_);
  };
  auto two_pass = [&] {
    const absl::Status st =
        RmsNorm(d_x.get(), kHidden, d_w.get(), kTokens, kHidden, kEps, d_out.get(), kHidden, stream_);
    if (!st.ok()) return st;
    return QuantizeFp8PerToken(d_out.get(), kHidden, kTokens, kHidden, d_q.get(), d_scale.get(), stream_);
  };
  const double h = static_cast<double>(kHidden), t = static_cast<double>(kTokens);
  const float ms_fused = testing::MedianMs(stream_, fused, 20);
  const float ms_fused_out = testing::MedianMs(stream_, fused_out, 20);
  const float ms_two_pass = testing::MedianMs(stream_, two_pass, 20);
  ASSERT_GT(ms_fused, 0.0f);
  ASSERT_GT(ms_fused_out, 0.0f);
  ASSERT_GT(ms_two_pass, 0.0f);
  testing::ReportBandwidth("rms_norm_fp8 fused 16384 x 4096", ms_fused, t * (5.0 * h + 4.0));
  testing::ReportBandwidth("rms_norm_fp8 fused + bf16 out 16384 x 4096", ms_fused_out, t * (7.0 * h + 4.0));
  testing::ReportBandwidth("rms_norm + quantize_fp8 two passes 16384 x 4096", ms_two_pass,
                           t * (9.0 * h + 4.0));
  std::cout << "[ measured ] rms_norm_fp8 speedup over two passes: " << ms_two_pass / ms_fused
            << "x (with out " << ms_two_pass / ms_fused_out << "x)" << std::endl;
}

}  // namespace
}  // namespace scored::kernels
