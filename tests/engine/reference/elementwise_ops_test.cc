// Embedding, RmsNorm, SwiGlu and gpt-oss's clamped SwiGLU by hand, and the thread pool's coverage of a range.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(Embedding, CopiesRowsAndRejectsBadIds) {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};  // 3 rows of 2
  const int32_t tokens[] = {2, 0, 2};
  std::vector<float> out(6, NAN);
  ASSERT_TRUE(Embedding(table.data(), tokens, 3, 3, 2, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21}));
  const int32_t bad[] = {1, 3};
  const absl::Status status = Embedding(table.data(), bad, 2, 3, 2, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("position 1"), std::string::npos) << status;
  const int32_t negative[] = {-1};
  EXPECT_EQ(Embedding(table.data(), negative, 1, 3, 2, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RmsNorm, HandComputed) {
  // x = (3, 4): mean square 12.5; 3 / sqrt(12.5) = 0.848528137423857, 4 / sqrt(12.5) = 1.131370849898476.
  std::vector<float> x = {3, 4, -3, -4};
  const float weight[] = {1.0f, 2.0f};
  RmsNorm(x.data(), weight, 2, 2, 0.0, x.data());  // in place
  EXPECT_FLOAT_EQ(x[0], 0.848528137423857f);
  EXPECT_FLOAT_EQ(x[1], 2.0f * 1.131370849898476f);
  EXPECT_FLOAT_EQ(x[2], -0.848528137423857f);
  EXPECT_FLOAT_EQ(x[3], -2.0f * 1.131370849898476f);
  // eps enters under the root: x = (1, 1), eps = 3 -> 1 / sqrt(4) = 0.5.
  const std::vector<float> ones = {1, 1};
  std::vector<float> out(2);
  const float unit[] = {1, 1};
  RmsNorm(ones.data(), unit, 1, 2, 3.0, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 0.5f}));
}

TEST(SwiGlu, HandComputed) {
  // silu(1) = 1 / (1 + e^-1) = 0.7310585786300049; silu(-1) = -0.2689414213699951; silu(0) = 0.
  const std::vector<float> gate = {1, -1, 0, 20};
  const std::vector<float> up = {2, 3, 5, 1};
  std::vector<float> out(4);
  SwiGlu(gate.data(), up.data(), 1, 4, out.data());
  EXPECT_FLOAT_EQ(out[0], 2 * 0.7310585786300049f);
  EXPECT_FLOAT_EQ(out[1], 3 * -0.2689414213699951f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_FLOAT_EQ(out[3], 20.0f);
}

// gpt-oss's clamped SwiGLU: gate clamped from above at 7 only, up to [-7, 7], (up + 1) * g * sigmoid(1.702
// g).
TEST(ClampedSwiGlu, HandComputedAndClamped) {
  const std::vector<float> gate = {0.0f, 1.0f, -2.0f, 9.0f, -30.0f, 7.0f};
  const std::vector<float> up = {3.0f, -1.0f, 0.5f, 10.0f, -9.0f, -7.5f};
  std::vector<float> out(gate.size());
  ClampedSwiGlu(gate.data(), up.data(), 1, static_cast<int64_t>(gate.size()), out.data());
  auto expected = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::max(-7.0, std::min(u, 7.0));
    return (u + 1) * g / (1 + std::exp(-static_cast<double>(static_cast<float>(g) * 1.702f)));
  };
  for (size_t i = 0; i < gate.size(); ++i) {
    EXPECT_NEAR(out[i], expected(gate[i], up[i]), 1e-6 * (1 + std::fabs(expected(gate[i], up[i])))) << i;
  }
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);                         // up = -1: (up + 1) = 0
  EXPECT_FLOAT_EQ(out[3] / 8.0f, out[5] / -6.0f);  // both gates clamp to 7; up 10 -> 7 and -7.5 -> -7
  EXPECT_NEAR(out[4], 0.0f, 1e-19f);               // -6 * -30 * sigmoid(-51): the lower side is not clamped
  // In place (out aliases gate), as the engine calls it.
  std::vector<float> g = gate;
  ClampedSwiGlu(g.data(), up.data(), 2, 3, g.data());
  EXPECT_EQ(g, out);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 3) << threads << " " << n << " " << i;
    }
  }
}

}  // namespace
}  // namespace scored::ref
