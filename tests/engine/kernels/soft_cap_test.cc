// Logit soft-capping vs ref::SoftCap (tanh in double, rounded once). The kernel's tanhf is within 2 fp32
// ulp of tanh (CUDA Programming Guide), |tanh| <= 1, times cap: kAbsTol = 1e-6 * cap (about 4 ulp of cap,
// allowing the division's and product's own roundings to fall differently). Columns past `cols` of each
// ld-wide row are left alone, bit for bit.
#include "engine/kernels/soft_cap.h"

#include <cmath>
#include <string>
#include <vector>

#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class SoftCapTest : public testing::GpuTest {};

TEST_F(SoftCapTest, MatchesReferenceAndKeepsPadding) {
  constexpr int64_t kRows = 37, kCols = 1000, kLd = 1024;
  for (const float cap : {30.0f, 3.0f, 50.0f}) {
    const std::vector<float> x = testing::RandomFloats(kRows * kLd, 71, -120.0f, 120.0f);
    std::vector<float> want = x;
    for (int64_t r = 0; r < kRows; ++r) ref::SoftCap(want.data() + r * kLd, kCols, cap);
    DeviceArray<float> d_x(x);
    ASSERT_TRUE(SoftCap(d_x.get(), kRows, kCols, kLd, cap, stream_).ok());
    Sync();
    const std::vector<float> got = d_x.Download();
    const std::string name = "softcap cap=" + std::to_string(cap);
    testing::Report(name, testing::CompareArrays(got, want));
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < kLd; ++j) {
        const int64_t e = r * kLd + j;
        if (j >= kCols) {
          ASSERT_EQ(got[e], x[e]) << name << " padding column " << j;
        } else {
          ASSERT_NEAR(got[e], want[e], 1e-6 * cap) << name << " at " << e;
          ASSERT_LT(std::fabs(got[e]), cap * (1.0f + 1e-6f)) << name;
        }
      }
    }
  }
}

TEST_F(SoftCapTest, RejectsBadArguments) {
  DeviceArray<float> d_x(std::vector<float>(16, 1.0f));
  EXPECT_FALSE(SoftCap(d_x.get(), 2, 8, 4, 30.0f, stream_).ok());  // ld < cols
  EXPECT_FALSE(SoftCap(d_x.get(), 2, 8, 8, 0.0f, stream_).ok());
  EXPECT_FALSE(SoftCap(d_x.get(), 2, 8, 8, -1.0f, stream_).ok());
  EXPECT_FALSE(SoftCap(nullptr, 2, 8, 8, 30.0f, stream_).ok());
  EXPECT_TRUE(SoftCap(nullptr, 0, 8, 8, 30.0f, stream_).ok());
}

}  // namespace
}  // namespace scored::kernels
