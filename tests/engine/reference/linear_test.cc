// Linear: a hand case, and bitwise agreement with the contract's ordered double sum on random shapes that
// exercise every tile remainder, for any thread count.
#include <random>
#include <vector>

#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"
#include "gtest/gtest.h"

namespace scored::ref {
namespace {

TEST(Linear, HandComputed) {
  const std::vector<float> x = {1,  2, 3,      // token 0
                                -1, 0, 0.5f};  // token 1
  const std::vector<float> w = {1,    0, 0,    // out 0
                                0.5f, 1, -1};  // out 1
  const std::vector<float> bias = {10, -10};
  std::vector<float> y(4, NAN);
  Linear(x.data(), w.data(), bias.data(), 2, 3, 2, y.data());
  EXPECT_EQ(y, (std::vector<float>{11, -10 + 0.5f + 2 - 3, 9, -10 - 0.5f - 0.5f}));
  Linear(x.data(), w.data(), nullptr, 2, 3, 2, y.data());
  EXPECT_EQ(y, (std::vector<float>{1, -0.5f, -1, -1}));
}

// The contract, literally: fp32(sum over ascending k of double products + double(bias)).
std::vector<float> Direct(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                          int64_t n, int64_t in, int64_t out) {
  std::vector<float> y(n * out);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(x[t * in + k]) * w[o * in + k];
      y[t * out + o] = static_cast<float>(acc + (bias ? static_cast<double>(bias[o]) : 0.0));
    }
  }
  return y;
}

TEST(Linear, BitwiseEqualsOrderedDoubleSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Shape {
    int64_t n, in, out;
  };
  for (const Shape& s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{4, 16, 16}, Shape{9, 64, 172},
                         Shape{17, 172, 64}, Shape{33, 100, 513}}) {
    std::vector<float> x(s.n * s.in), w(s.out * s.in), bias(s.out);
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
      const std::vector<float> expected = Direct(x, w, b, s.n, s.in, s.out);
      std::vector<float> y(s.n * s.out, NAN);
      Linear(x.data(), w.data(), b, s.n, s.in, s.out, y.data());
      EXPECT_EQ(y, expected) << s.n << "x" << s.in << "x" << s.out;
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> yp(s.n * s.out, NAN);
        Linear(x.data(), w.data(), b, s.n, s.in, s.out, yp.data(), &pool);
        EXPECT_EQ(yp, expected) << s.n << "x" << s.in << "x" << s.out << " threads " << threads;
      }
    }
  }
}

}  // namespace
}  // namespace scored::ref
