// RMSNorm + per-token FP8 quantization in one pass. Contract: rms_norm_fp8.h.
//
// One resident wave of blocks of kRmsNormVecThreads strides over tokens, one block per token at a time,
// as RmsNorm's vector path does. The row stays in registers from load to codes: RmsNormRowVec
// (rms_norm_row.cuh, RmsNorm's own code) loads it and normalizes it in fp32; each thread rounds its values
// to bf16 exactly as RmsNorm's Store16 does (and writes them when `out` is given), takes the max of |bf16
// value| over its chunks; BlockMax gives the row's amax (a max: exact, order-independent, so equal to the
// quantizer's); then the quantizer's arithmetic: scale = __fdiv_rn(amax, 448), code =
// FloatToFp8E4M3(__fdiv_rn(value, scale)), 8 codes per 8-byte store.
#include <cstdint>

#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/rms_norm_fp8.h"
#include "engine/kernels/rms_norm_row.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = kRmsNormVecThreads;
constexpr int kChunk = kRmsNormVecChunk;

template <int kChunksPerThread>
__global__ void __launch_bounds__(kThreads)
    RmsNormQuantFp8Kernel(const float* x,  // [num_tokens, x_stride]
                          int64_t x_stride,
                          const float* __restrict__ weight,  // [hidden_size]
                          int64_t num_tokens, int64_t hidden_size, float eps,
                          __nv_bfloat16* out,  // [num_tokens, out_stride]
                          int64_t out_stride,
                          uint8_t* q,      // [num_tokens, hidden_size]
                          float* scale) {  // [num_tokens]
  __shared__ float scratch[32];
  const int chunks = static_cast<int>(hidden_size / kChunk);
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float v[kChunksPerThread][kChunk];  // the thread's chunks of row t
    RmsNormRowVec<false>(x + t * x_stride, nullptr, weight, chunks, hidden_size, eps, scratch, v);
    float amax = 0.0f;
#pragma unroll
    for (int r = 0; r < kChunksPerThread; ++r) {
      const int c = threadIdx.x + r * kThreads;
      if (c < chunks) {
        const uint4 packed = RoundToBf16x8(v[r]);
        if (out != nullptr) *reinterpret_cast<uint4*>(out + t * out_stride + c * kChunk) = packed;
#pragma unroll
        for (int j = 0; j < kChunk; ++j) amax = fmaxf(amax, fabsf(v[r][j]));
      }
    }
    amax = BlockMax(amax, scratch, 0.0f);
    const float s = __fdiv_rn(amax, kFp8E4M3Max);
    if (threadIdx.x == 0) scale[t] = s;
    uint8_t* q_row = q + t * hidden_size;
#pragma unroll
    for (int r = 0; r < kChunksPerThread; ++r) {
      const int c = threadIdx.x + r * kThreads;
      if (c < chunks) {
        uint32_t words[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const uint32_t code = s == 0.0f ? 0u : FloatToFp8E4M3(__fdiv_rn(v[r][j], s));
          words[j / 4] |= code << (8 * (j % 4));
        }
        *reinterpret_cast<uint2*>(q_row + c * kChunk) = make_uint2(words[0], words[1]);
      }
    }
  }
}

absl::Status CheckArgs(const float* x, int64_t x_stride, const float* weight, int64_t num_tokens,
                       int64_t hidden_size, const bf16_t* out, int64_t out_stride, const uint8_t* q,
                       const float* scale) {
  if (num_tokens < 0) return absl::InvalidArgumentError("RmsNormQuantFp8: num_tokens < 0");
  if (!RmsNormQuantFp8Supports(hidden_size)) {
    return absl::InvalidArgumentError("RmsNormQuantFp8: hidden_size must be a multiple of 8 in [8, 16384]");
  }
  if (x_stride < hidden_size || x_stride % kChunk != 0) {
    return absl::InvalidArgumentError("RmsNormQuantFp8: x_stride must be >= hidden_size and a multiple of 8");
  }
  if (out != nullptr && (out_stride < hidden_size || out_stride % kChunk != 0)) {
    return absl::InvalidArgumentError(
        "RmsNormQuantFp8: out_stride must be >= hidden_size and a multiple of 8");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (x == nullptr || weight == nullptr || q == nullptr || scale == nullptr) {
    return absl::InvalidArgumentError("RmsNormQuantFp8: null pointer");
  }
  if (!IsAligned(x, 16) || !IsAligned(weight, 16) || !IsAligned(out, 16) || !IsAligned(q, 8)) {
    return absl::InvalidArgumentError("RmsNormQuantFp8: x, weight, out need 16-byte and q 8-byte alignment");
  }
  return absl::OkStatus();
}

}  // namespace

bool RmsNormQuantFp8Supports(int64_t hidden_size) {
  return hidden_size >= kChunk && hidden_size % kChunk == 0 &&
         hidden_size / kChunk <= int64_t{kRmsNormVecMaxChunksPerThread} * kThreads;
}

absl::Status RmsNormQuantFp8(const float* x, int64_t x_stride, const float* weight, int64_t num_tokens,
                             int64_t hidden_size, float eps, bf16_t* out, int64_t out_stride, uint8_t* q,
                             float* scale, cudaStream_t stream) {
  const absl::Status args =
      CheckArgs(x, x_stride, weight, num_tokens, hidden_size, out, out_stride, q, scale);
  if (!args.ok() || num_tokens == 0) return args;
  __nv_bfloat16* const dout = ToDevice(out);
  // One resident wave of blocks (SM count x occupancy of the instance launched), as RmsNorm.
  auto launch = [&](auto kernel) -> absl::Status {
    unsigned blocks = 1;
    SCORED_CUDA_CHECK(ResidentGrid(kernel, kThreads, num_tokens, &blocks));
    kernel<<<blocks, kThreads, 0, stream>>>(x, x_stride, weight, num_tokens, hidden_size, eps, dout,
                                            out_stride, q, scale);
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  };
  const int64_t chunks = hidden_size / kChunk;
  return chunks <= kThreads       ? launch(RmsNormQuantFp8Kernel<1>)
         : chunks <= 2 * kThreads ? launch(RmsNormQuantFp8Kernel<2>)
         : chunks <= 4 * kThreads ? launch(RmsNormQuantFp8Kernel<4>)
                                  : launch(RmsNormQuantFp8Kernel<8>);
}

}  // namespace scored::kernels
