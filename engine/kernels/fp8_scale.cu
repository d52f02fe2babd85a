// Per-token x per-channel scaling of an FP8 GEMM's output in place. Contract: fp8_scale.h.
//
// Each thread scales 16 bytes (8 bf16 or 4 fp32 values of one row: out_features is a multiple of 8), in a
// grid-stride loop; memory-bound (one read, one write).
#include <cuda_bf16.h>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/fp8_scale.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename D>
__global__ void __launch_bounds__(kThreads) ScaleKernel(D* y,  // [num_tokens, out_features]
                                                        int64_t num_tokens, int64_t out_features,
                                                        const float* x_scale,    // [num_tokens]
                                                        const float* w_scale) {  // [out_features]
  constexpr int kPer = 16 / sizeof(D);
  const int64_t vectors = num_tokens * out_features / kPer;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t first = v * kPer;
    const int64_t t = first / out_features, o = first % out_features;
    const float xs = x_scale[t];
    uint4 bits = reinterpret_cast<const uint4*>(y)[v];
    D* vals = reinterpret_cast<D*>(&bits);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      StoreFromFloat(vals + i, __fmul_rn(LoadAsFloat(vals + i), __fmul_rn(xs, w_scale[o + i])));
    }
    reinterpret_cast<uint4*>(y)[v] = bits;
  }
}

// acc += y * (x_scale[t] * w_scale[o]) (scales null: acc += y), 4 floats per thread and step.
__global__ void __launch_bounds__(kThreads) AddScaledKernel(const float* y,  // [num_tokens, out_features]
                                                            int64_t num_tokens, int64_t out_features,
                                                            const float* x_scale,  // [num_tokens] or null
                                                            const float* w_scale,  // [out_features] or null
                                                            float* acc) {  // [num_tokens, out_features]
  const int64_t vectors = num_tokens * out_features / 4;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t first = v * 4;
    const float4 yv = reinterpret_cast<const float4*>(y)[v];
    float4 av = reinterpret_cast<const float4*>(acc)[v];
    float ys[4] = {yv.x, yv.y, yv.z, yv.w};
    if (x_scale != nullptr) {
      const int64_t t = first / out_features, o = first % out_features;
      const float xs = x_scale[t];
#pragma unroll
      for (int i = 0; i < 4; ++i) ys[i] = __fmul_rn(ys[i], __fmul_rn(xs, w_scale[o + i]));
    }
    av.x = __fadd_rn(av.x, ys[0]);
    av.y = __fadd_rn(av.y, ys[1]);
    av.z = __fadd_rn(av.z, ys[2]);
    av.w = __fadd_rn(av.w, ys[3]);
    reinterpret_cast<float4*>(acc)[v] = av;
  }
}

}  // namespace

absl::Status AddFp8Scaled(const float* y, int64_t num_tokens, int64_t out_features, const float* x_scale,
                          const float* w_scale, float* acc, cudaStream_t stream) {
  if (num_tokens < 0 || out_features <= 0 || out_features % 8 != 0) {
    return absl::InvalidArgumentError(
        "AddFp8Scaled: need num_tokens >= 0 and out_features a positive multiple of 8");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (y == nullptr || acc == nullptr || (x_scale == nullptr) != (w_scale == nullptr)) {
    return absl::InvalidArgumentError("AddFp8Scaled: null y / acc, or only one scale vector");
  }
  if (reinterpret_cast<uintptr_t>(y) % 16 != 0 || reinterpret_cast<uintptr_t>(acc) % 16 != 0) {
    return absl::InvalidArgumentError("AddFp8Scaled: y and acc must be 16-byte aligned");
  }
  const int64_t needed = (num_tokens * out_features / 4 + kThreads - 1) / kThreads;
  const int64_t blocks = needed < kMaxBlocks ? needed : kMaxBlocks;
  AddScaledKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(y, num_tokens, out_features,
                                                                          x_scale, w_scale, acc);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status ApplyFp8Scales(T* y, int64_t num_tokens, int64_t out_features, const float* x_scale,
                            const float* w_scale, cudaStream_t stream) {
  if (num_tokens < 0 || out_features <= 0 || out_features % 8 != 0) {
    return absl::InvalidArgumentError(
        "ApplyFp8Scales: need num_tokens >= 0 and out_features a positive multiple of 8");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (y == nullptr || x_scale == nullptr || w_scale == nullptr) {
    return absl::InvalidArgumentError("ApplyFp8Scales: null pointer");
  }
  if (reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return absl::InvalidArgumentError("ApplyFp8Scales: y not 16-byte aligned");
  constexpr int64_t kPer = 16 / static_cast<int64_t>(sizeof(T));
  const int64_t vectors = num_tokens * out_features / kPer;
  const int64_t needed = (vectors + kThreads - 1) / kThreads;
  const int64_t blocks = needed < kMaxBlocks ? needed : kMaxBlocks;
  ScaleKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(ToDevice(y), num_tokens, out_features,
                                                                      x_scale, w_scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status ApplyFp8Scales<float>(float*, int64_t, int64_t, const float*, const float*,
                                            cudaStream_t);
template absl::Status ApplyFp8Scales<bf16_t>(bf16_t*, int64_t, int64_t, const float*, const float*,
                                             cudaStream_t);

}  // namespace scored::kernels
