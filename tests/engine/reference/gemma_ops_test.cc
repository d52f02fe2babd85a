// The Gemma ops by hand: GeGLU with the tanh GELU, soft-capping, the (1 + weight) norm weight.
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

// torch.nn.functional.gelu(x, approximate="tanh") in float64, printed with repr():
//   gelu(1.0) = 0.8411919906082768, gelu(-1.0) = -0.15880800939172324,
//   gelu(3.0) = 2.996362607918227, gelu(0) = 0.
TEST(GeluTanh, KnownValues) {
  EXPECT_EQ(GeluTanh(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(GeluTanh(1.0f), 0.8411919906082768f);
  EXPECT_FLOAT_EQ(GeluTanh(-1.0f), -0.15880800939172324f);
  EXPECT_FLOAT_EQ(GeluTanh(3.0f), 2.996362607918227f);
  EXPECT_NEAR(GeluTanh(-8.0f), 0.0, 1e-12);  // the negative tail vanishes
  EXPECT_EQ(GeluTanh(20.0f), 20.0f);         // the positive tail is the identity
}

TEST(GeluTanhGlu, MultipliesByUpAndMayAlias) {
  std::vector<float> gate = {1.0f, -1.0f, 0.0f, 2.0f}, up = {2.0f, 3.0f, 5.0f, -1.0f};
  const std::vector<float> g = gate;
  GeluTanhGlu(gate.data(), up.data(), 2, 2, gate.data());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(gate[i], GeluTanh(g[i]) * up[i]) << i;
}

TEST(SoftCap, TanhTimesCap) {
  std::vector<float> x = {0.0f, 1.0f, -3.0f, 1000.0f};
  SoftCap(x.data(), 4, 30.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], std::tanh(1.0 / 30.0) * 30.0, 1e-6);
  EXPECT_NEAR(x[2], std::tanh(-3.0 / 30.0) * 30.0, 1e-6);
  EXPECT_EQ(x[3], 30.0f);  // saturates at the cap
}

TEST(OffsetNormWeight, AddsOne) {
  std::vector<float> w = {0.0f, -1.0f, 0.25f};
  OffsetNormWeight(w.data(), 3);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 0.0f, 1.25f}));
}

}  // namespace
}  // namespace scored::ref
