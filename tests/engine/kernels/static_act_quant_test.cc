// Static per-tensor activation fake quantization vs the CPU oracle (ref::FakeQuantizeFp8Static,
// ref::FakeQuantizeInt8Span with the stored scale and zero point): the same fp32 operations in the same
// order, so fp32 results are bit-exact; bf16 rows are the oracle's results on the same (bf16) inputs rounded
// to bf16. Inputs reach past the clamps (x / scale beyond +-448 and beyond the int8 range) and sit on exact
// halves.
#include "engine/kernels/static_act_quant.h"

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class StaticActQuantTest : public testing::GpuTest {};

constexpr int64_t kTokens = 7, kIn = 300, kStride = 320;

std::vector<float> Inputs() {
  std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(kTokens * kStride, 91, 2.0f));
  x[3] = 500.0f;  // past both clamps
  x[4] = -500.0f;
  for (int64_t i = 0; i < 64; ++i) x[kStride + i] = 0.25f * static_cast<float>(i) - 8.0f;  // halves at 0.5
  return x;
}

std::vector<float> Dense(const std::vector<float>& x) {
  std::vector<float> d(kTokens * kIn);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kIn; ++i) d[t * kIn + i] = x[t * kStride + i];
  }
  return d;
}

TEST_F(StaticActQuantTest, Fp8AndInt8BitExact) {
  struct Case {
    bool int8;
    float scale, zero_point;
  };
  for (const Case& c :
       {Case{false, 0.0078125f, 0.0f}, Case{false, 0.00885009765625f, 0.0f}, Case{true, 0.5f, 0.0f},
        Case{true, 0.03076171875f, 5.0f}, Case{true, 1.5703125f, -2.0f}}) {
    SCOPED_TRACE(::testing::Message()
                 << (c.int8 ? "int8" : "fp8") << " scale " << c.scale << " zp " << c.zero_point);
    const std::vector<float> x = Inputs();
    std::vector<float> want = Dense(x);
    if (c.int8) {
      ref::FakeQuantizeInt8Span(want.data(), static_cast<int64_t>(want.size()), {c.scale, c.zero_point});
    } else {
      ref::FakeQuantizeFp8Static(want.data(), static_cast<int64_t>(want.size()), c.scale);
    }
    DeviceArray<float> d32(x);
    DeviceArray<bf16_t> d16(testing::ToBf16(x));
    if (c.int8) {
      ASSERT_TRUE(
          FakeQuantizeInt8Static(d32.get(), kStride, kTokens, kIn, c.scale, c.zero_point, stream_).ok());
      ASSERT_TRUE(
          FakeQuantizeInt8Static(d16.get(), kStride, kTokens, kIn, c.scale, c.zero_point, stream_).ok());
    } else {
      ASSERT_TRUE(FakeQuantizeFp8Static(d32.get(), kStride, kTokens, kIn, c.scale, stream_).ok());
      ASSERT_TRUE(FakeQuantizeFp8Static(d16.get(), kStride, kTokens, kIn, c.scale, stream_).ok());
    }
    Sync();
    const std::vector<float> got = Dense(d32.Download());
    EXPECT_EQ(testing::CountBitDifferences(got, want), 0);
    EXPECT_EQ(
        testing::CountBitDifferences(Dense(testing::FromBf16(d16.Download())), testing::RoundedToBf16(want)),
        0);
    int moved = 0;
    for (size_t i = 0; i < got.size(); ++i) moved += got[i] != Dense(x)[i] ? 1 : 0;
    EXPECT_GT(moved, static_cast<int>(got.size()) / 4);  // the quantization did something
  }
}

TEST_F(StaticActQuantTest, RefusesBadArguments) {
  DeviceArray<float> x(16);
  EXPECT_FALSE(FakeQuantizeFp8Static<float>(x.get(), 4, 1, 8, 1.0f, stream_).ok());          // stride < in
  EXPECT_FALSE(FakeQuantizeFp8Static<float>(x.get(), 8, 1, 8, 0.0f, stream_).ok());          // scale 0
  EXPECT_FALSE(FakeQuantizeInt8Static<float>(x.get(), 8, 1, 8, -1.0f, 0.0f, stream_).ok());  // scale < 0
  EXPECT_FALSE(FakeQuantizeInt8Static<float>(nullptr, 8, 1, 8, 1.0f, 0.0f, stream_).ok());
}

}  // namespace
}  // namespace scored::kernels
