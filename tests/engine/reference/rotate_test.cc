// ref::RotateRows (transform_config's online rotation) against a direct float64 evaluation: a 4x4 Hadamard
// matrix divides by sqrt(4) = 2 exactly, so a row of small integers rotates to exact values; the inverse
// undoes it; block-diagonal (head_dim) application rotates each block alone.
#include <gtest/gtest.h>

#include <vector>

#include "engine/reference/ops.h"

namespace scored::ref {
namespace {

// Sylvester's H4 (rows: ++++, +-+-, ++--, +--+).
const std::vector<double> kH4 = {1, 1, 1, 1, 1, -1, 1, -1, 1, 1, -1, -1, 1, -1, -1, 1};

TEST(RotateRowsTest, HadamardOfSmallIntegersIsExactAndInvertible) {
  std::vector<float> x = {1, 2, 3, 4};
  RotateRows(x.data(), 1, 4, kH4.data(), 4, /*inverse=*/false);
  // (x . H) / 2: column j of H4.
  EXPECT_EQ(x, (std::vector<float>{5, -1, -2, 0}));
  RotateRows(x.data(), 1, 4, kH4.data(), 4, /*inverse=*/true);  // H4 is orthogonal up to the scale
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
}

TEST(RotateRowsTest, BlocksRotateAlone) {
  std::vector<float> x = {1, 2, 3, 4, 0, 0, 0, 8};
  RotateRows(x.data(), 1, 8, kH4.data(), 4, /*inverse=*/false);
  EXPECT_EQ(x, (std::vector<float>{5, -1, -2, 0, 4, -4, -4, 4}));
}

}  // namespace
}  // namespace scored::ref
