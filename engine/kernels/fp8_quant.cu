// W8A8 per-token FP8 activation quantization. Contract: fp8_quant.h.
//
// One block per row: pass 1 takes amax (a max: exact, order-independent), pass 2 divides, rounds with the
// project's exact converter (engine/base/dtype.h FloatToFp8E4M3, RNE + saturation) and writes.
// QuantizeFp8PerToken(WithAmax) on bf16 rows of up to kFastMaxVecs * kThreads * 8 columns (16-byte aligned,
// columns and stride multiples of 8: every W8A8 GEMM input of the engine) takes a fast path with the same
// arithmetic: each thread loads its 8-column vectors once with 16-byte loads, keeps them in registers for
// both passes and stores 8 codes at a time (the generic kernel re-reads the row and moves single elements);
// it converts with the hardware e4m3x2 instruction (FloatToFp8E4M3x2, device_util.cuh: the same codes).
#include <cstdint>
#include <type_traits>

#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/fp8_quant.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// given_amax: the rows' amax computed elsewhere (tensor parallelism), or nullptr to take it from the row.
template <bool kFake, typename T>
__global__ void __launch_bounds__(kThreads)
    Fp8PerTokenKernel(T* x,  // [num_tokens, x_stride]
                      int64_t x_stride, int64_t num_tokens, int64_t in_features,
                      const float* given_amax,  // [num_tokens]
                      uint8_t* q,               // [num_tokens, in_features]
                      float* scale) {           // [num_tokens]
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * x_stride;
    float amax = 0.0f;
    if (given_amax != nullptr) {
      amax = given_amax[t];
    } else {
      for (int64_t i = threadIdx.x; i < in_features; i += kThreads)
        amax = fmaxf(amax, fabsf(LoadAsFloat(row + i)));
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

constexpr int kFastMaxVecs = 8;  // per thread: rows up to 8 * 256 * 8 = 16384 columns

template <int kVecs>
__global__ void __launch_bounds__(kThreads)
    QuantizeBf16RowsKernel(const __nv_bfloat16* x,  // [num_tokens, x_stride]
                           int64_t x_stride, int64_t num_tokens, int64_t in_features,
                           const float* given_amax,  // [num_tokens]
                           uint8_t* q,               // [num_tokens, in_features]
                           float* scale) {           // [num_tokens]
  __shared__ float scratch[32];
  const int64_t vecs = in_features / 8;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const __nv_bfloat16* row = x + t * x_stride;
    float v[kVecs][8];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
      if (c < vecs) {
        Load16(row + c * 8, v[j]);
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[j][i]));
      }
    }
    amax = given_amax != nullptr ? given_amax[t] : BlockMax(amax, scratch, 0.0f);
    const float s = __fdiv_rn(amax, kFp8E4M3Max);
    if (threadIdx.x == 0) scale[t] = s;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * kThreads;
      if (c < vecs) {
        uint32_t words[2] = {0u, 0u};
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
          const uint32_t codes =
              s == 0.0f ? 0u : FloatToFp8E4M3x2(__fdiv_rn(v[j][i], s), __fdiv_rn(v[j][i + 1], s));
          words[i / 4] |= codes << (8 * (i % 4));
        }
        *reinterpret_cast<uint2*>(q + t * in_features + c * 8) = make_uint2(words[0], words[1]);
      }
    }
  }
}

// Launches the fast bf16 kernel when the shapes allow it (fast_path set true), else does nothing.
template <typename T>
absl::Status MaybeQuantizeFast(const T* x, int64_t x_stride, int64_t num_tokens, int64_t in_features,
                               const float* given_amax, uint8_t* q, float* scale, cudaStream_t stream,
                               bool* fast_path) {
  *fast_path = false;
  if constexpr (std::is_same_v<T, bf16_t>) {
    const int64_t vecs = in_features / 8;
    if (in_features % 8 != 0 || x_stride % 8 != 0 || vecs > int64_t{kFastMaxVecs} * kThreads ||
        reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(q) % 8 != 0) {
      return absl::OkStatus();
    }
    *fast_path = true;
    const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
    const __nv_bfloat16* dx = ToDevice(x);
    if (vecs <= kThreads) {
      QuantizeBf16RowsKernel<1>
          <<<blocks, kThreads, 0, stream>>>(dx, x_stride, num_tokens, in_features, given_amax, q, scale);
    } else if (vecs <= 2 * kThreads) {
      QuantizeBf16RowsKernel<2>
          <<<blocks, kThreads, 0, stream>>>(dx, x_stride, num_tokens, in_features, given_amax, q, scale);
    } else if (vecs <= 4 * kThreads) {
      QuantizeBf16RowsKernel<4>
          <<<blocks, kThreads, 0, stream>>>(dx, x_stride, num_tokens, in_features, given_amax, q, scale);
    } else {
      QuantizeBf16RowsKernel<8>
          <<<blocks, kThreads, 0, stream>>>(dx, x_stride, num_tokens, in_features, given_amax, q, scale);
    }
    SCORED_CUDA_CHECK_LAUNCH();
  }
  return absl::OkStatus();
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    RowAmaxKernel(const T* x,  // [num_tokens, x_stride]
                  int64_t x_stride, int64_t num_tokens, int64_t in_features,
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
    return absl::InvalidArgumentError(
        "Fp8PerToken: need num_tokens, in_features >= 0, x_stride >= in_features");
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
  if (q == nullptr || scale == nullptr)
    return absl::InvalidArgumentError("QuantizeFp8PerToken: null pointer");
  bool fast = false;
  const absl::Status launched =
      MaybeQuantizeFast(x, x_stride, num_tokens, in_features, nullptr, q, scale, stream, &fast);
  if (fast || !launched.ok()) return launched;
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
absl::Status QuantizeFp8PerTokenWithAmax(const T* x, int64_t x_stride, int64_t num_tokens,
                                         int64_t in_features, const float* amax, uint8_t* q, float* scale,
                                         cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, num_tokens, in_features);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (amax == nullptr || q == nullptr || scale == nullptr) {
    return absl::InvalidArgumentError("QuantizeFp8PerTokenWithAmax: null pointer");
  }
  bool fast = false;
  const absl::Status launched =
      MaybeQuantizeFast(x, x_stride, num_tokens, in_features, amax, q, scale, stream, &fast);
  if (fast || !launched.ok()) return launched;
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  // The kernel never writes x when kFake is false; the cast only shares one kernel body.
  Fp8PerTokenKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      const_cast<typename DeviceType<T>::type*>(ToDevice(x)), x_stride, num_tokens, in_features, amax, q,
      scale);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status QuantizeFp8PerTokenWithAmax<float>(const float*, int64_t, int64_t, int64_t,
                                                         const float*, uint8_t*, float*, cudaStream_t);
template absl::Status QuantizeFp8PerTokenWithAmax<bf16_t>(const bf16_t*, int64_t, int64_t, int64_t,
                                                          const float*, uint8_t*, float*, cudaStream_t);
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
template absl::Status FakeQuantizeFp8PerTokenWithAmax<bf16_t>(bf16_t*, int64_t, int64_t, int64_t,
                                                              const float*, cudaStream_t);

}  // namespace scored::kernels
