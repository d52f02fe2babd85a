// Causal GQA attention, SIMT kernel (fp32 arithmetic on CUDA cores): every dtype and head_dim, the path for
// T = float (the fidelity mode) and for bf16 inputs the tensor-core kernels cannot take. Contract of the
// op: attention.h; the dispatch that picks it: attention.cu.
//
// Formula: per query row, score[j] = (q . k[j]) * head_dim^-1/2 for keys j up to the row (causal, own
// sequence), online softmax per 32-key tile (running max m, running sum l, expf), out = sum_j p[j] v[j] / l,
// one rounding to T at the end. Shapes: q [num_tokens, q_stride], k and v [num_tokens, kv_stride], out
// [num_tokens, num_heads * head_dim] (AttentionShape). dtypes: T in {float, bf16_t}, fp32 inside.
// Grid: (query tiles of 16, heads, sequences); a block whose tile starts past its sequence's end exits at
// once. 4 warps x 4 query rows; 32-key tiles of K and V in shared memory as fp32 (K rows padded by one
// float: lanes read different rows of one column without bank conflicts). Lane j scores key j of the tile;
// lane c owns output dims c, c + 32, ... Key tiles [0, last query of the block] are walked in order, so a
// token's result depends only on its own sequence. Limits: head_dim in {8, 16, 32, 64, 128}; no alignment
// beyond the element's.
#include <cmath>

#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels::attention_internal {
namespace {

constexpr int kSimtWarps = 4;
constexpr int kSimtRowsPerWarp = 4;
constexpr int kSimtBlockQ = kSimtWarps * kSimtRowsPerWarp;
constexpr int kSimtBlockK = 32;

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kSimtWarps * 32)
    AttentionSimtKernel(const T* __restrict__ q,  // [num_tokens, q_stride]
                        const T* __restrict__ k,  // [num_tokens, kv_stride]
                        const T* __restrict__ v,  // [num_tokens, kv_stride]
                        const int32_t* __restrict__ cu_seqlens, const AttentionShape shape, float scale,
                        T* __restrict__ out) {  // [num_tokens, nh * hd]
  constexpr int kPerLane = (kHeadDim + 31) / 32;
  __shared__ float q_s[kSimtBlockQ][kHeadDim];
  __shared__ float k_s[kSimtBlockK][kHeadDim + 1];
  __shared__ float v_s[kSimtBlockK][kHeadDim];

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  const int q0 = blockIdx.x * kSimtBlockQ;
  if (q0 >= len) return;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int idx = threadIdx.x; idx < kSimtBlockQ * kHeadDim; idx += blockDim.x) {
    const int r = idx / kHeadDim, d = idx - r * kHeadDim;
    const int qi = q0 + r;
    q_s[r][d] = qi < len ? LoadAsFloat(q + (start + qi) * shape.q_stride + head * kHeadDim + d) : 0.0f;
  }

  float m[kSimtRowsPerWarp], l[kSimtRowsPerWarp], acc[kSimtRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kSimtRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[r][c] = 0.0f;
  }

  const int key_end = min(len, q0 + kSimtBlockQ);
  for (int k0 = 0; k0 < key_end; k0 += kSimtBlockK) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kSimtBlockK * kHeadDim; idx += blockDim.x) {
      const int j = idx / kHeadDim, d = idx - j * kHeadDim;
      const int kj = k0 + j;
      const int64_t off = (start + kj) * shape.kv_stride + kv_head * kHeadDim + d;
      k_s[j][d] = kj < len ? LoadAsFloat(k + off) : 0.0f;
      v_s[j][d] = kj < len ? LoadAsFloat(v + off) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kSimtRowsPerWarp; ++r) {
      const int row = warp * kSimtRowsPerWarp + r;
      const int qi = q0 + row;
      if (qi >= len || k0 > qi) continue;  // warp-uniform
      const int kj = k0 + lane;
      float s = -INFINITY;
      if (kj <= qi) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < kHeadDim; ++d) dot += q_s[row][d] * k_s[lane][d];
        s = dot * scale;
      }
      const float m_new = fmaxf(m[r], WarpMax(s));  // finite: key k0 <= qi is always valid
      const float p = expf(s - m_new);
      const float alpha = expf(m[r] - m_new);
      l[r] = l[r] * alpha + WarpSum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= alpha;
      const int jmax = min(kSimtBlockK, qi - k0 + 1);
      for (int j = 0; j < jmax; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < kHeadDim) acc[r][c] += pj * v_s[j][d];
        }
      }
    }
  }
  using DevT = T;
#pragma unroll
  for (int r = 0; r < kSimtRowsPerWarp; ++r) {
    const int qi = q0 + warp * kSimtRowsPerWarp + r;
    if (qi >= len) continue;
    DevT* dst = out + (start + qi) * static_cast<int64_t>(shape.num_heads) * kHeadDim + head * kHeadDim;
    const float inv_l = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < kHeadDim) StoreFromFloat(dst + d, acc[r][c] * inv_l);
    }
  }
}

template <int kHeadDim, typename T>
absl::Status LaunchSimtHeadDim(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                               const AttentionShape& s, T* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kSimtBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale = 1.0f / sqrtf(static_cast<float>(kHeadDim));
  AttentionSimtKernel<kHeadDim><<<grid, kSimtWarps * 32, 0, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v),
                                                                      cu_seqlens, s, scale, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status LaunchSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                        const AttentionShape& s, T* out, cudaStream_t stream) {
  switch (s.head_dim) {
    case 8:
      return LaunchSimtHeadDim<8>(q, k, v, cu_seqlens, s, out, stream);
    case 16:
      return LaunchSimtHeadDim<16>(q, k, v, cu_seqlens, s, out, stream);
    case 32:
      return LaunchSimtHeadDim<32>(q, k, v, cu_seqlens, s, out, stream);
    case 64:
      return LaunchSimtHeadDim<64>(q, k, v, cu_seqlens, s, out, stream);
    default:
      return LaunchSimtHeadDim<128>(q, k, v, cu_seqlens, s, out, stream);
  }
}

template absl::Status LaunchSimt<float>(const float*, const float*, const float*, const int32_t*,
                                        const AttentionShape&, float*, cudaStream_t);
template absl::Status LaunchSimt<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                         const AttentionShape&, bf16_t*, cudaStream_t);

}  // namespace scored::kernels::attention_internal
