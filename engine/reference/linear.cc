// Linear: y[t, o] = fp32(sum_{k ascending} double(x[t, k]) * double(w[o, k]) + double(bias[o])).
//
// Every fp32 x fp32 product is exact in double, so each output is one fixed sequence of double additions:
// the tiling below (tokens x outputs, with w packed k-major per panel so the output loop vectorizes), the
// split of tokens over threads, FMA use and the instruction set chosen at run time never change a value.
#include <algorithm>
#include <vector>

#include "engine/reference/multiversion.h"
#include "engine/reference/ops.h"
#include "engine/reference/thread_pool.h"

namespace scored::ref {
namespace {

constexpr int64_t kTileTokens = 4;
constexpr int64_t kTileOut = 16;

// panel[k * kTileOut + j] = w[(o0 + j) * in + k] for j < width; 0 for the padding columns.
void PackPanel(const float* w, int64_t o0, int64_t width, int64_t in_features, float* panel) {
  for (int64_t k = 0; k < in_features; ++k) {
    for (int64_t j = 0; j < kTileOut; ++j) {
      panel[k * kTileOut + j] = j < width ? w[(o0 + j) * in_features + k] : 0.0f;
    }
  }
}

SCORED_REF_MULTIVERSION
void LinearTokens(const float* x,     // [num_tokens, in_features]
                  const float* w,     // [out_features, in_features]
                  const float* bias,  // [out_features] or nullptr
                  int64_t t_begin, int64_t t_end, int64_t in_features, int64_t out_features,
                  float* y) {                        // [num_tokens, out_features]
  std::vector<float> panel(in_features * kTileOut);  // [in_features, kTileOut]
  for (int64_t o0 = 0; o0 < out_features; o0 += kTileOut) {
    const int64_t width = std::min(kTileOut, out_features - o0);
    PackPanel(w, o0, width, in_features, panel.data());
    const float* p = panel.data();
    for (int64_t t0 = t_begin; t0 < t_end; t0 += kTileTokens) {
      const int64_t rows = std::min(kTileTokens, t_end - t0);
      double acc[kTileTokens][kTileOut] = {};
      if (rows == kTileTokens) {
        const float* x0 = x + (t0 + 0) * in_features;
        const float* x1 = x + (t0 + 1) * in_features;
        const float* x2 = x + (t0 + 2) * in_features;
        const float* x3 = x + (t0 + 3) * in_features;
        for (int64_t k = 0; k < in_features; ++k) {
          const float* pk = p + k * kTileOut;
          const double a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k];
          for (int64_t j = 0; j < kTileOut; ++j) {
            const double b = pk[j];
            acc[0][j] += a0 * b;
            acc[1][j] += a1 * b;
            acc[2][j] += a2 * b;
            acc[3][j] += a3 * b;
          }
        }
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = x + (t0 + r) * in_features;
          for (int64_t k = 0; k < in_features; ++k) {
            const float* pk = p + k * kTileOut;
            const double a = xr[k];
            for (int64_t j = 0; j < kTileOut; ++j) acc[r][j] += a * static_cast<double>(pk[j]);
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* yr = y + (t0 + r) * out_features + o0;
        for (int64_t j = 0; j < width; ++j) {
          const double b = bias != nullptr ? static_cast<double>(bias[o0 + j]) : 0.0;
          yr[j] = static_cast<float>(acc[r][j] + b);
        }
      }
    }
  }
}

}  // namespace

void Linear(const float* x,     // [num_tokens, in_features]
            const float* w,     // [out_features, in_features]
            const float* bias,  // [out_features] or nullptr
            int64_t num_tokens, int64_t in_features, int64_t out_features,
            float* y,  // [num_tokens, out_features]
            ThreadPool* pool) {
  // Split whole token tiles over the threads.
  const int64_t num_tiles = (num_tokens + kTileTokens - 1) / kTileTokens;
  ParallelFor(
      pool, num_tiles,
      [&](int64_t tile_begin, int64_t tile_end) {
        LinearTokens(x, w, bias, tile_begin * kTileTokens, std::min(num_tokens, tile_end * kTileTokens),
                     in_features, out_features, y);
      },
      GrainFor(kTileTokens * in_features * out_features));
}

}  // namespace scored::ref
