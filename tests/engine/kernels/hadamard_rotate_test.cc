// Online Hadamard rotations from the matrix's factors vs the oracle's dense float64 product
// (ref::RotateRows), forward and inverse, on every factor shape: one Walsh-Hadamard transform (K = 1), a
// Kronecker core (K = 12, 28), no structure (L = 1), per block of a wider row with a leading dimension.
// Both sum exactly-rounded double terms, in different orders: fp32 results agree to an ulp of fp32 (and are
// equal on all but a handful of elements); bf16 results (the kernel rounds double to bf16 once, as
// compressed-tensors does; the oracle's fp32 result is rounded again) agree to a bf16 ulp, equal on >= 99.9%.
#include "engine/kernels/hadamard_rotate.h"

#include <cmath>

#include "engine/model/hadamard_factors.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"
#include "tests/engine/model/hadamard_matrices.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class HadamardRotateTest : public testing::GpuTest {};

using testing_hadamard::Structured;

struct Case {
  int64_t core_size, chunk, rows, blocks;  // blocks: n-element blocks per row
};

TEST_F(HadamardRotateTest, MatchesDenseFloat64Product) {
  // Tiles of many blocks (n < 4096, a tile spanning rows and ending mid-row), one block (n >= 4096), radix
  // passes of 1-4 bits, the core stage with and without a partial last tile of core rows.
  constexpr int64_t kPad = 8;
  for (const Case& c : {Case{1, 8, 37, 5}, Case{1, 64, 9, 3}, Case{1, 2048, 9, 3}, Case{1, 4096, 3, 2},
                        Case{12, 16, 9, 3}, Case{28, 64, 9, 3}, Case{20, 1, 9, 3}, Case{224, 64, 2, 1}}) {
    const int64_t kRows = c.rows;
    const int64_t n = c.core_size * c.chunk, width = c.blocks * n, ld = width + kPad;
    const std::vector<double> t = Structured(c.core_size, c.chunk, static_cast<uint32_t>(n));
    const TensorView view = testing_hadamard::F64View(t, n, "t");
    auto factors = FactorHadamard(view);
    ASSERT_TRUE(factors.ok()) << factors.status();
    ASSERT_EQ(factors->chunk, c.chunk);
    DeviceArray<int8_t> signs(factors->signs);
    for (bool inverse : {false, true}) {
      DeviceArray<uint8_t> core(PackHadamardCore(factors->core, static_cast<int32_t>(c.core_size), inverse));
      SCOPED_TRACE(::testing::Message() << "K " << c.core_size << " L " << c.chunk << " inverse " << inverse);
      HadamardRotation r;
      r.size = static_cast<int32_t>(n);
      r.chunk = static_cast<int32_t>(c.chunk);
      r.core_size = static_cast<int32_t>(c.core_size);
      r.signs = signs.get();
      r.core_bits = core.get();
      r.inverse = inverse;
      const std::vector<float> x =
          testing::RoundedToBf16(testing::RandomNormal(kRows * ld, static_cast<uint32_t>(n + inverse)));
      std::vector<float> want(kRows * width);
      for (int64_t row = 0; row < kRows; ++row) {
        for (int64_t i = 0; i < width; ++i) want[row * width + i] = x[row * ld + i];
      }
      ref::RotateRows(want.data(), kRows, width, t.data(), n, inverse);

      DeviceArray<float> d32(x);
      DeviceArray<bf16_t> d16(testing::ToBf16(x));
      ASSERT_TRUE(HadamardRotate(d32.get(), ld, kRows, width, r, stream_).ok());
      ASSERT_TRUE(HadamardRotate(d16.get(), ld, kRows, width, r, stream_).ok());
      Sync();
      const std::vector<float> got32 = d32.Download();
      const std::vector<float> got16 = testing::FromBf16(d16.Download());
      int64_t differ32 = 0, differ16 = 0;
      for (int64_t row = 0; row < kRows; ++row) {
        for (int64_t i = 0; i < ld; ++i) {
          const float g32 = got32[row * ld + i], g16 = got16[row * ld + i];
          if (i >= width) {  // past the rotated columns: untouched
            ASSERT_EQ(g32, x[row * ld + i]);
            ASSERT_EQ(g16, x[row * ld + i]);
            continue;
          }
          const float w = want[row * width + i];
          differ32 += g32 != w;
          ASSERT_LE(std::fabs(g32 - w), std::ldexp(std::fabs(w), -23)) << row << "," << i;
          const float w16 = testing::RoundedToBf16({w})[0];
          differ16 += g16 != w16;
          ASSERT_LE(std::fabs(g16 - w16), std::ldexp(std::fabs(w16), -7)) << row << "," << i;
        }
      }
      EXPECT_LE(differ32, kRows * width / 1000 + 1);
      EXPECT_LE(differ16, kRows * width / 1000 + 1);
    }
  }
}

TEST_F(HadamardRotateTest, RefusesBadShapes) {
  DeviceArray<int8_t> signs(std::vector<int8_t>(64, 1));
  DeviceArray<uint8_t> core(std::vector<uint8_t>(1, 0));
  DeviceArray<float> x(std::vector<float>(128, 1.0f));
  HadamardRotation r;
  r.size = 64;
  r.chunk = 64;
  r.core_size = 1;
  r.signs = signs.get();
  r.core_bits = core.get();
  EXPECT_EQ(HadamardRotate(x.get(), 100, 1, 100, r, stream_).code(), absl::StatusCode::kInvalidArgument);
  r.chunk = 48;
  EXPECT_EQ(HadamardRotate(x.get(), 128, 1, 128, r, stream_).code(), absl::StatusCode::kInvalidArgument);
  int32_t big = 64;  // a power of two past the device's shared memory: refused, not launched
  while (big <= MaxHadamardRotationSize(0)) big *= 2;
  r.size = big;
  r.chunk = big;
  EXPECT_EQ(HadamardRotate(x.get(), r.size, 1, r.size, r, stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scored::kernels
