// W8A8 per-token INT8 activation fake quantization. Contract: int8_quant.h.
//
// One block per row: pass 1 takes hi = max(x, 0) and -lo = max(-x, 0) (maxima: exact, order-independent),
// pass 2 quantize-dequantizes each element with explicit round-to-nearest fp32 operations (no contraction
// into FMAs, no reciprocal), which is what keeps fp32 mode bitwise equal to the CPU oracle.
#include <cfloat>
#include <cstdint>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/int8_quant.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;
constexpr float kQMin = -128.0f;
constexpr float kQMax = 127.0f;

// clamp as std::clamp does it (a NaN stays NaN).
__device__ __forceinline__ float Clamp(float v) { return v < kQMin ? kQMin : (v > kQMax ? kQMax : v); }

struct Params {
  float scale;
  float zero_point;
};

__device__ __forceinline__ Params TokenParams(float hi, float neg_lo, bool symmetric) {
  const float lo = -neg_lo;
  Params p;
  if (symmetric) {
    p.scale = __fdiv_rn(fmaxf(fabsf(lo), fabsf(hi)), 127.5f);
    p.zero_point = 0.0f;
  } else {
    p.scale = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
    const float z = __fsub_rn(kQMin, __fdiv_rn(lo, p.scale));  // before the eps replacement, as the library
    p.zero_point = isnan(z) ? 0.0f : rintf(Clamp(z));
  }
  if (p.scale == 0.0f) p.scale = FLT_EPSILON;
  return p;
}

// The row's (hi, -lo), both >= 0.
template <typename T>
__device__ __forceinline__ void RowRange(const T* row, int64_t n, float* scratch, float* hi, float* neg_lo) {
  float h = 0.0f, l = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = LoadAsFloat(row + i);
    h = fmaxf(h, v);
    l = fmaxf(l, -v);
  }
  *hi = BlockMax(h, scratch, 0.0f);
  *neg_lo = BlockMax(l, scratch, 0.0f);
}

// given_range: [num_tokens, 2] computed elsewhere (tensor parallelism), or nullptr to take it from the row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FakeQuantizeKernel(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features, bool symmetric,
                       const float* given_range) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * x_stride;
    float hi = 0.0f, neg_lo = 0.0f;
    if (given_range != nullptr) {
      hi = given_range[2 * t];
      neg_lo = given_range[2 * t + 1];
    } else {
      RowRange(row, in_features, scratch, &hi, &neg_lo);
    }
    const Params p = TokenParams(hi, neg_lo, symmetric);
    for (int64_t i = threadIdx.x; i < in_features; i += kThreads) {
      const float scaled = __fadd_rn(__fdiv_rn(LoadAsFloat(row + i), p.scale), p.zero_point);
      const float q = rintf(Clamp(scaled));
      StoreFromFloat(row + i, __fmul_rn(__fsub_rn(q, p.zero_point), p.scale));
    }
  }
}

// Symmetric only: q[t, i] = rint(clamp(x[t, i] / scale)) as int8, scale[t] = the token's scale.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeKernel(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                   const float* given_range, int8_t* q, float* scale) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const T* row = x + t * x_stride;
    float hi = 0.0f, neg_lo = 0.0f;
    if (given_range != nullptr) {
      hi = given_range[2 * t];
      neg_lo = given_range[2 * t + 1];
    } else {
      RowRange(row, in_features, scratch, &hi, &neg_lo);
    }
    const Params p = TokenParams(hi, neg_lo, /*symmetric=*/true);
    int8_t* q_row = q + t * in_features;
    for (int64_t i = threadIdx.x; i < in_features; i += kThreads) {
      q_row[i] = static_cast<int8_t>(rintf(Clamp(__fdiv_rn(LoadAsFloat(row + i), p.scale))));
    }
    if (threadIdx.x == 0) scale[t] = p.scale;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    RowRangeKernel(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features, float* range) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float hi = 0.0f, neg_lo = 0.0f;
    RowRange(x + t * x_stride, in_features, scratch, &hi, &neg_lo);
    if (threadIdx.x == 0) {
      range[2 * t] = hi;
      range[2 * t + 1] = neg_lo;
    }
  }
}

absl::Status CheckArgs(const void* x, int64_t x_stride, int64_t num_tokens, int64_t in_features) {
  if (num_tokens < 0 || in_features < 1 || x_stride < in_features) {
    return absl::InvalidArgumentError("int8 activation quantization: bad sizes");
  }
  if (num_tokens > 0 && x == nullptr)
    return absl::InvalidArgumentError("int8 activation quantization: null x");
  return absl::OkStatus();
}

unsigned Blocks(int64_t num_tokens) {
  return static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
}

}  // namespace

template <typename T>
absl::Status FakeQuantizeInt8PerToken(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                      bool symmetric, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok() || num_tokens == 0) return args;
  FakeQuantizeKernel<<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens,
                                                                  in_features, symmetric, nullptr);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status Int8RowRange(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features, float* range,
                          cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok() || num_tokens == 0) return args;
  if (range == nullptr) return absl::InvalidArgumentError("Int8RowRange: null range");
  RowRangeKernel<<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens, in_features,
                                                              range);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status FakeQuantizeInt8PerTokenWithRange(T* x, int64_t x_stride, int64_t num_tokens,
                                               int64_t in_features, bool symmetric, const float* range,
                                               cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok() || num_tokens == 0) return args;
  if (range == nullptr) return absl::InvalidArgumentError("FakeQuantizeInt8PerTokenWithRange: null range");
  FakeQuantizeKernel<<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens,
                                                                  in_features, symmetric, range);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status QuantizeInt8PerToken(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                  const float* range, int8_t* q, float* scale, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok() || num_tokens == 0) return args;
  if (q == nullptr || scale == nullptr)
    return absl::InvalidArgumentError("QuantizeInt8PerToken: null output");
  QuantizeKernel<<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens, in_features,
                                                              range, q, scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status QuantizeInt8PerToken<float>(const float*, int64_t, int64_t, int64_t, const float*,
                                                  int8_t*, float*, cudaStream_t);
template absl::Status QuantizeInt8PerToken<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t, const float*,
                                                   int8_t*, float*, cudaStream_t);
template absl::Status FakeQuantizeInt8PerToken<float>(float*, int64_t, int64_t, int64_t, bool, cudaStream_t);
template absl::Status FakeQuantizeInt8PerToken<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, bool,
                                                       cudaStream_t);
template absl::Status Int8RowRange<float>(const float*, int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status Int8RowRange<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status FakeQuantizeInt8PerTokenWithRange<float>(float*, int64_t, int64_t, int64_t, bool,
                                                               const float*, cudaStream_t);
template absl::Status FakeQuantizeInt8PerTokenWithRange<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, bool,
                                                                const float*, cudaStream_t);

}  // namespace scored::kernels
