// Per-token x per-channel scaling of an FP8 GEMM's output in place. Contract: fp8_scale.h.
//
// Each thread scales 16 bytes (8 bf16 or 4 fp32 values of one row: out_features is a multiple of 8), in a
// grid-stride loop; memory-bound (one read, one write).
#include "engine/kernels/fp8_scale.h"

#include <cuda_bf16.h>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

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

}  // namespace

template <typename T>
absl::Status ApplyFp8Scales(T* y, int64_t num_tokens, int64_t out_features, const float* x_scale,
                            const float* w_scale, cudaStream_t stream) {
  if (num_tokens < 0 || out_features <= 0 || out_features % 8 != 0) {
    return absl::InvalidArgumentError("ApplyFp8Scales: need num_tokens >= 0 and out_features a positive multiple of 8");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (y == nullptr || x_scale == nullptr || w_scale == nullptr) {
    return absl::InvalidArgumentError("ApplyFp8Scales: null pointer");
  }
  if (reinterpret_cast<uintptr_t>(y) % 16 != 0) return absl::InvalidArgumentError("ApplyFp8Scales: y not 16-byte aligned");
  constexpr int64_t kPer = 16 / static_cast<int64_t>(sizeof(T));
  const int64_t vectors = num_tokens * out_features / kPer;
  const int64_t needed = (vectors + kThreads - 1) / kThreads;
  const int64_t blocks = needed < kMaxBlocks ? needed : kMaxBlocks;
  ScaleKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(ToDevice(y), num_tokens, out_features,
                                                                      x_scale, w_scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status ApplyFp8Scales<float>(float*, int64_t, int64_t, const float*, const float*, cudaStream_t);
template absl::Status ApplyFp8Scales<bf16_t>(bf16_t*, int64_t, int64_t, const float*, const float*, cudaStream_t);

}  // namespace scored::kernels
