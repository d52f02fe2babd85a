// Causal GQA attention, SIMT kernel (fp32 arithmetic on CUDA cores): every dtype and head_dim, the path for
// T = float (the fidelity mode) and for bf16 inputs the tensor-core kernels cannot take. Contract of the
// op: attention.h; the dispatch that picks it: attention.cu.
//
// Formula, in the oracle's order (ref::CausalAttention): per query row, x[j] = (q . k[j]) * scale (fp32 dot
// over d ascending; scale = shape.scale or head_dim^-1/2), with a soft cap c x[j] = tanhf(x[j] / c) * c,
// for the keys j in reach (j <= row, own sequence, and row - window < j where window > 0); online softmax
// per 32-key tile (running max m, running sum l, expf), out = sum_j p[j] v[j] / l, one rounding to T at the
// end. Shapes: q [num_tokens, q_stride], k and v [num_tokens, kv_stride], out [num_tokens, num_heads *
// head_dim] (AttentionShape). dtypes: T in {float, bf16_t}, fp32 inside.
// Grid: (query tiles of 16, heads, sequences); a block whose tile starts past its sequence's end exits at
// once. 4 warps x 4 query rows; 32-key tiles of K and V in dynamic shared memory as fp32 (K rows padded by
// one float: lanes read different rows of one column without bank conflicts; 80 KiB at head_dim 256). Lane
// j scores key j of the tile; lane c owns output dims c, c + 32, ... (head_dim is a run-time value; the
// kernel is instantiated per ceil(head_dim / 32), the output registers of a lane). Key tiles
// [first tile of the window of the block's first query, last query of the block] are walked in order, a
// row skipping the tiles out of its reach, so a token's result depends only on its own sequence. Limits:
// head_dim a multiple of 8 in [8, 256]; no alignment beyond the element's.
#include <cmath>

#include "engine/kernels/attention_common.cuh"
#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels::attention_internal {
namespace {

constexpr int kSimtWarps = 4;
constexpr int kSimtRowsPerWarp = 4;
constexpr int kSimtBlockQ = kSimtWarps * kSimtRowsPerWarp;
constexpr int kSimtBlockK = 32;

// Shared memory of one block at head_dim hd: Q [16][hd], K [32][hd + 1], V [32][hd] fp32.
int SimtSharedBytes(int hd) {
  return (kSimtBlockQ * hd + kSimtBlockK * (hd + 1) + kSimtBlockK * hd) * static_cast<int>(sizeof(float));
}

template <int kPerLane, typename T>
__global__ void __launch_bounds__(kSimtWarps * 32)
    AttentionSimtKernel(const T* __restrict__ q,  // [num_tokens, q_stride]
                        const T* __restrict__ k,  // [num_tokens, kv_stride]
                        const T* __restrict__ v,  // [num_tokens, kv_stride]
                        const int32_t* __restrict__ cu_seqlens, const AttentionShape shape, float scale,
                        T* __restrict__ out) {  // [num_tokens, nh * hd]
  const int hd = shape.head_dim;                // <= 32 * kPerLane
  extern __shared__ float simt_smem[];
  float* q_s = simt_smem;                     // [kSimtBlockQ][hd]
  float* k_s = q_s + kSimtBlockQ * hd;        // [kSimtBlockK][hd + 1]
  float* v_s = k_s + kSimtBlockK * (hd + 1);  // [kSimtBlockK][hd]

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  const int q0 = blockIdx.x * kSimtBlockQ;
  if (q0 >= len) return;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int window = shape.window;
  const float softcap = shape.softcap;

  // Tiles are copied a row per warp (no division by the run-time head_dim), lanes along the row.
  for (int r = warp; r < kSimtBlockQ; r += kSimtWarps) {
    const int qi = q0 + r;
    const T* src = q + (qi < len ? (start + qi) * shape.q_stride + head * hd : 0);
    for (int d = lane; d < hd; d += 32) q_s[r * hd + d] = qi < len ? LoadAsFloat(src + d) : 0.0f;
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
  // With a window, the tiles wholly before the window of row q0 hold no key of any row of the block.
  const int key_begin = window > 0 ? max(0, q0 - window + 1) / kSimtBlockK * kSimtBlockK : 0;
  for (int k0 = key_begin; k0 < key_end; k0 += kSimtBlockK) {
    __syncthreads();
    for (int j = warp; j < kSimtBlockK; j += kSimtWarps) {
      const int kj = k0 + j;
      const int64_t off = kj < len ? (start + kj) * shape.kv_stride + kv_head * hd : 0;
      for (int d = lane; d < hd; d += 32) {
        k_s[j * (hd + 1) + d] = kj < len ? LoadAsFloat(k + off + d) : 0.0f;
        v_s[j * hd + d] = kj < len ? LoadAsFloat(v + off + d) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kSimtRowsPerWarp; ++r) {
      const int row = warp * kSimtRowsPerWarp + r;
      const int qi = q0 + row;
      // Keys in reach of row qi: (lo, qi]. Warp-uniform skip of a tile with none of them, so every tile a
      // row takes holds a valid key and m stays finite.
      const int lo = window > 0 ? qi - window : -1;
      if (qi >= len || k0 > qi || k0 + kSimtBlockK - 1 <= lo) continue;
      const int kj = k0 + lane;
      float s = -INFINITY;
      if (kj <= qi && kj > lo) {
        const float* qr = q_s + row * hd;
        const float* kr = k_s + lane * (hd + 1);
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        s = dot * scale;
        if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
      }
      const float m_new = fmaxf(m[r], WarpMax(s));  // finite: the tile holds a key in reach
      const float p = expf(s - m_new);
      const float alpha = expf(m[r] - m_new);
      l[r] = l[r] * alpha + WarpSum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= alpha;
      const int jmin = lo < k0 ? 0 : lo + 1 - k0;  // (lo + 1 - k0 could overflow for a huge window)
      const int jmax = min(kSimtBlockK, qi - k0 + 1);
      for (int j = jmin; j < jmax; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float* vr = v_s + j * hd;
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < hd) acc[r][c] += pj * vr[d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kSimtRowsPerWarp; ++r) {
    const int qi = q0 + warp * kSimtRowsPerWarp + r;
    if (qi >= len) continue;
    T* dst = out + (start + qi) * static_cast<int64_t>(shape.num_heads) * hd + head * hd;
    const float inv_l = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) StoreFromFloat(dst + d, acc[r][c] * inv_l);
    }
  }
}

template <int kPerLane, typename T>
absl::Status LaunchSimtPerLane(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                               const AttentionShape& s, T* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kSimtBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / sqrtf(static_cast<float>(s.head_dim));
  const int smem = SimtSharedBytes(s.head_dim);
  auto* kernel = AttentionSimtKernel<kPerLane, typename DeviceType<T>::type>;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), SimtSharedBytes(32 * kPerLane)));
  kernel<<<grid, kSimtWarps * 32, smem, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v), cu_seqlens, s, scale,
                                                  ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status LaunchSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                        const AttentionShape& s, T* out, cudaStream_t stream) {
  switch ((s.head_dim + 31) / 32) {
    case 1:
      return LaunchSimtPerLane<1>(q, k, v, cu_seqlens, s, out, stream);
    case 2:
      return LaunchSimtPerLane<2>(q, k, v, cu_seqlens, s, out, stream);
    case 3:
      return LaunchSimtPerLane<3>(q, k, v, cu_seqlens, s, out, stream);
    case 4:
      return LaunchSimtPerLane<4>(q, k, v, cu_seqlens, s, out, stream);
    case 5:
      return LaunchSimtPerLane<5>(q, k, v, cu_seqlens, s, out, stream);
    case 6:
      return LaunchSimtPerLane<6>(q, k, v, cu_seqlens, s, out, stream);
    case 7:
      return LaunchSimtPerLane<7>(q, k, v, cu_seqlens, s, out, stream);
    default:
      return LaunchSimtPerLane<8>(q, k, v, cu_seqlens, s, out, stream);
  }
}

template absl::Status LaunchSimt<float>(const float*, const float*, const float*, const int32_t*,
                                        const AttentionShape&, float*, cudaStream_t);
template absl::Status LaunchSimt<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                         const AttentionShape&, bf16_t*, cudaStream_t);

}  // namespace scored::kernels::attention_internal
