// Static per-tensor activation fake quantization. Contract: static_act_quant.h. Elementwise with explicit
// round-to-nearest fp32 operations (no FMA contraction, no reciprocal): what keeps fp32 mode bitwise equal to
// the CPU oracle.
#include <cmath>
#include <cstdint>

#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/static_act_quant.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <bool kInt8, typename T>
__global__ void __launch_bounds__(kThreads) StaticKernel(T* x, int64_t x_stride, int64_t num_tokens,
                                                         int64_t in_features, float scale, float zero_point) {
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * x_stride;
    for (int64_t i = threadIdx.x; i < in_features; i += kThreads) {
      const float v = LoadAsFloat(row + i);
      float out;
      if constexpr (kInt8) {
        const float scaled = __fadd_rn(__fdiv_rn(v, scale), zero_point);
        // clamp as std::clamp does it (a NaN stays NaN), then ties to even.
        const float q = rintf(scaled < -128.0f ? -128.0f : (scaled > 127.0f ? 127.0f : scaled));
        out = __fmul_rn(__fsub_rn(q, zero_point), scale);
      } else {
        const float scaled = __fdiv_rn(v, scale);
        const float clamped =
            scaled < -kFp8E4M3Max ? -kFp8E4M3Max : (scaled > kFp8E4M3Max ? kFp8E4M3Max : scaled);
        out = __fmul_rn(Fp8E4M3ToFloat(FloatToFp8E4M3(clamped)), scale);
      }
      StoreFromFloat(row + i, out);
    }
  }
}

absl::Status CheckArgs(const void* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                       float scale) {
  if (num_tokens < 0 || in_features < 1 || x_stride < in_features) {
    return absl::InvalidArgumentError("static activation quantization: bad sizes");
  }
  if (num_tokens > 0 && x == nullptr)
    return absl::InvalidArgumentError("static activation quantization: null x");
  if (!(std::isfinite(scale) && scale > 0.0f)) {
    return absl::InvalidArgumentError("static activation quantization: input_scale must be finite and > 0");
  }
  return absl::OkStatus();
}

unsigned Blocks(int64_t num_tokens) {
  return static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
}

}  // namespace

template <typename T>
absl::Status FakeQuantizeFp8Static(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                   float scale, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features, scale);
  if (!args.ok() || num_tokens == 0) return args;
  StaticKernel<false><<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens,
                                                                   in_features, scale, 0.0f);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status FakeQuantizeInt8Static(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                    float scale, float zero_point, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features, scale);
  if (!args.ok() || num_tokens == 0) return args;
  StaticKernel<true><<<Blocks(num_tokens), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens,
                                                                  in_features, scale, zero_point);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status FakeQuantizeFp8Static<float>(float*, int64_t, int64_t, int64_t, float, cudaStream_t);
template absl::Status FakeQuantizeFp8Static<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, float, cudaStream_t);
template absl::Status FakeQuantizeInt8Static<float>(float*, int64_t, int64_t, int64_t, float, float,
                                                    cudaStream_t);
template absl::Status FakeQuantizeInt8Static<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, float, float,
                                                     cudaStream_t);

}  // namespace scored::kernels
