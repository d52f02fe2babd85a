// The row arithmetic of RMSNorm's vector path, shared by rms_norm.cu (RmsNorm, AddRmsNorm) and
// rms_norm_fp8.cu (RmsNormQuantFp8) so that the fused op's normalized values are bitwise RmsNorm's: one
// copy of the code, the same instruction sequence (private: included only by .cu files).
//
// Layout: a block of kRmsNormVecThreads threads normalizes one row of hidden_size = 8 * chunks elements.
// Thread i owns the 8-element chunks i, i + kRmsNormVecThreads, ..., at most kChunksPerThread of them, and
// keeps them in registers. All loads of the row are issued at once; the thread's sum of squares runs over
// its chunks in order (r ascending, then the 8 elements), BlockSum combines the threads in a fixed tree,
// inv_rms = rsqrtf(total / hidden_size + eps); each value becomes v * inv_rms * weight (two fp32
// products, in that order). The order depends only on hidden_size.
#ifndef SCORED_ENGINE_KERNELS_RMS_NORM_ROW_CUH_
#define SCORED_ENGINE_KERNELS_RMS_NORM_ROW_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/device_util.cuh"

namespace scored::kernels {

constexpr int kRmsNormVecThreads = 256;           // threads per block of the vector path
constexpr int kRmsNormVecChunk = 8;               // elements per vector access
constexpr int kRmsNormVecMaxChunksPerThread = 8;  // rows up to 8 * 8 * 256 = 16384 elements

// Loads 8 consecutive elements (16-byte aligned) as fp32.
__device__ __forceinline__ void Load8(const float* p, float (&v)[8]) {
  float lo[4], hi[4];
  Load16(p, lo);
  Load16(p + 4, hi);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = lo[j];
    v[j + 4] = hi[j];
  }
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float (&v)[8]) { Load16(p, v); }
__device__ __forceinline__ void Store8(float* p, const float (&v)[8]) {
  const float lo[4] = {v[0], v[1], v[2], v[3]};
  const float hi[4] = {v[4], v[5], v[6], v[7]};
  Store16(p, lo);
  Store16(p + 4, hi);
}
__device__ __forceinline__ void Store8(__nv_bfloat16* p, const float (&v)[8]) { Store16(p, v); }

// Normalizes one row in registers. On return v[r] holds x * inv_rms * weight (fp32, not yet rounded to
// the output type) for the thread's chunks c = threadIdx.x + r * kRmsNormVecThreads < chunks; other
// entries are unspecified. With kAddResidual, x_row is first added into res_row (fp32, updated in place)
// and the sum is taken over the sums. Every thread of the block must call it (BlockSum has barriers);
// scratch is 32 floats of shared memory, free again on return.
template <bool kAddResidual, int kChunksPerThread, typename XT>
__device__ __forceinline__ void RmsNormRowVec(const XT* x_row,                   // [hidden_size]
                                              float* res_row,                    // [hidden_size] or unused
                                              const float* __restrict__ weight,  // [hidden_size]
                                              int chunks, int64_t hidden_size, float eps,
                                              float* scratch,  // [32], shared
                                              float (&v)[kChunksPerThread][kRmsNormVecChunk]) {
#pragma unroll
  for (int r = 0; r < kChunksPerThread; ++r) {
    const int c = threadIdx.x + r * kRmsNormVecThreads;
    if (c < chunks) {
      Load8(x_row + c * kRmsNormVecChunk, v[r]);
      if constexpr (kAddResidual) {
        float res[kRmsNormVecChunk];
        Load8(res_row + c * kRmsNormVecChunk, res);
#pragma unroll
        for (int j = 0; j < kRmsNormVecChunk; ++j) v[r][j] += res[j];
      }
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int r = 0; r < kChunksPerThread; ++r) {
    const int c = threadIdx.x + r * kRmsNormVecThreads;
    if (c < chunks) {
      if constexpr (kAddResidual) Store8(res_row + c * kRmsNormVecChunk, v[r]);
#pragma unroll
      for (int j = 0; j < kRmsNormVecChunk; ++j) sum_sq += v[r][j] * v[r][j];
    }
  }
  const float total = BlockSum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(hidden_size) + eps);
#pragma unroll
  for (int r = 0; r < kChunksPerThread; ++r) {
    const int c = threadIdx.x + r * kRmsNormVecThreads;
    if (c < chunks) {
      float w[kRmsNormVecChunk];
      Load8(weight + c * kRmsNormVecChunk, w);
#pragma unroll
      for (int j = 0; j < kRmsNormVecChunk; ++j) v[r][j] = v[r][j] * inv_rms * w[j];
    }
  }
}

// Rounds 8 fp32 values to bf16 exactly as Store16 does (cvt.rn pairs, round-to-nearest-even), replaces
// v by the rounded values widened back to fp32 (exact) and returns the 8 bf16 bit patterns packed as
// Store16 would write them.
__device__ __forceinline__ uint4 RoundToBf16x8(float (&v)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    words[j] = *reinterpret_cast<const uint32_t*>(&pair);
    v[2 * j] = __uint_as_float(words[j] << 16);
    v[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_RMS_NORM_ROW_CUH_
