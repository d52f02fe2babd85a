// W8A8 per-token FP8 activation quantization. Contract: fp8_quant.h.
//
// One block per row: pass 1 takes amax (a max: exact, order-independent), pass 2 divides, rounds with the
// project's exact converter (engine/base/dtype.h FloatToFp8E4M3, RNE + saturation) and writes.
#include "engine/kernels/fp8_quant.h"

#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// given_amax: the rows' amax computed elsewhere (tensor parallelism), or nullptr to take it from the row.
template <bool kFake, typename T>
__global__ void __launch_bounds__(kThreads) Fp8PerTokenKernel(T* x,  // [num_tokens, x_stride]
                                                              int64_t x_stride, int64_t num_tokens,
                                                              int64_t in_features,
                                                              const float* given_amax,  // [num_tokens]
                                                              uint8_t* q,      // [num_tokens, in_features]
                                                              float* scale) {  // [num_tokens]
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * x_stride;
    float amax = 0.0f;
    if (given_amax != nullptr) {
      amax = given_amax[t];
    } else {
      for (int64_t i = threadIdx.x; i < in_features; i += kThreads) amax = fmaxf(amax, fabsf(LoadAsFloat(row + i)));
      amax = BlockMax(amax, scratch, 0.0f);
    }
    const float s = __fdiv_rn(amax, kFp8E4M3Max);
    if (!kFake && threadIdx.x == 0) scale[t] = s;
    for (int64_t i = threadIdx.x; i < in_features; i += kThreads) {
      const uint8_t code = s == 0.0f ? uint8_t{0} : FloatToFp8E4M3(__fdiv_rn(LoadAsFloat(row + i), s));
      if constexpr (kFake) {
        StoreFromFloat(row + i, __fmul_rn(Fp8E4M3ToFloat(code), s));
      } else {
        q[t * in_features + i] = code;
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) RowAmaxKernel(const T* x,  // [num_tokens, x_stride]
                                                          int64_t x_stride, int64_t num_tokens,
                                                          int64_t in_features,
                                                          float* amax) {  // [num_tokens]
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const T* row = x + t * x_stride;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < in_features; i += kThreads) m = fmaxf(m, fabsf(LoadAsFloat(row + i)));
    m = BlockMax(m, scratch, 0.0f);
    if (threadIdx.x == 0) amax[t] = m;
  }
}

absl::Status CheckArgs(const void* x, int64_t x_stride, int64_t num_tokens, int64_t in_features) {
  if (num_tokens < 0 || in_features < 0 || x_stride < in_features) {
    return absl::InvalidArgumentError("Fp8PerToken: need num_tokens, in_features >= 0, x_stride >= in_features");
  }
  if (num_tokens > 0 && x == nullptr) return absl::InvalidArgumentError("Fp8PerToken: null pointer");
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status QuantizeFp8PerToken(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                 uint8_t* q, float* scale, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (q == nullptr || scale == nullptr) return absl::InvalidArgumentError("QuantizeFp8PerToken: null pointer");
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  // The kernel never writes x when kFake is false; the cast only shares one kernel body.
  Fp8PerTokenKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      const_cast<typename DeviceType<T>::type*>(ToDevice(x)), x_stride, num_tokens, in_features, nullptr, q,
      scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status FakeQuantizeFp8PerToken(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                     cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  Fp8PerTokenKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(x), x_stride, num_tokens, in_features, nullptr, nullptr, nullptr);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status Fp8RowAmax(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features, float* amax,
                        cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (amax == nullptr) return absl::InvalidArgumentError("Fp8RowAmax: null pointer");
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  RowAmaxKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(ToDevice(x), x_stride, num_tokens,
                                                                         in_features, amax);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status FakeQuantizeFp8PerTokenWithAmax(T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                             const float* amax, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (amax == nullptr) return absl::InvalidArgumentError("FakeQuantizeFp8PerTokenWithAmax: null pointer");
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  Fp8PerTokenKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(x), x_stride, num_tokens, in_features, amax, nullptr, nullptr);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status QuantizeFp8PerTokenWithAmax(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                                         const float* amax, uint8_t* q, float* scale, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (amax == nullptr || q == nullptr || scale == nullptr) {
    return absl::InvalidArgumentError("QuantizeFp8PerTokenWithAmax: null pointer");
  }
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  // The kernel never writes x when kFake is false; the cast only shares one kernel body.
  Fp8PerTokenKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      const_cast<typename DeviceType<T>::type*>(ToDevice(x)), x_stride, num_tokens, in_features, amax, q, scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status QuantizeFp8PerTokenWithAmax<float>(const float*, int64_t, int64_t, int64_t, const float*,
                                                         uint8_t*, float*, cudaStream_t);
template absl::Status QuantizeFp8PerTokenWithAmax<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t, const float*,
                                                          uint8_t*, float*, cudaStream_t);
template absl::Status QuantizeFp8PerToken<float>(const float*, int64_t, int64_t, int64_t, uint8_t*, float*,
                                                 cudaStream_t);
template absl::Status QuantizeFp8PerToken<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t, uint8_t*, float*,
                                                  cudaStream_t);
template absl::Status FakeQuantizeFp8PerToken<float>(float*, int64_t, int64_t, int64_t, cudaStream_t);
template absl::Status FakeQuantizeFp8PerToken<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, cudaStream_t);
template absl::Status Fp8RowAmax<float>(const float*, int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status Fp8RowAmax<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status FakeQuantizeFp8PerTokenWithAmax<float>(float*, int64_t, int64_t, int64_t, const float*,
                                                             cudaStream_t);
template absl::Status FakeQuantizeFp8PerTokenWithAmax<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, const float*,
                                                              cudaStream_t);

}  // namespace scored::kernels
