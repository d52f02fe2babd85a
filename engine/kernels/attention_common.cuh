// Device helpers shared by the attention kernel families (private: included only by attention_*.cu).
//
// - PTX wrappers: mma.sync m16n8k16 (bf16 in, fp32 accumulate), ex2.approx (EnsureDynamicSmem, cp.async and
//   ldmatrix: kernel_support.cuh).
// - LocateBlock: a block's sequence, head and query tile (grid: query tiles in reverse order, heads, seqs).
// - The K/V tile loader of the mma.sync kernels: a two-stage cp.async ring, rows padded by kPad.
// - ScoreTransform (scale and soft cap in log2 units) and the causal / sliding-window mask, FirstKeyTile
//   (the first key tile a query tile needs under a window).
// - The online softmax of one thread's two rows of a 16-row mma tile, for both score conventions: scores
//   already in log2 units (ScaledScores: the 16-row kernel) or raw scores scaled inside the exponent
//   (RawScores: the 32-row and wgmma kernels, one FFMA + ex2 per score).
// - The final normalization and bf16 store of such a tile.
//
// Fragment layout (PTX ISA, mma.m16n8k16): lane = 4 g + t; a thread holds rows g (index 0, "a") and g + 8
// (index 1, "b") of a 16-row tile. An accumulator tile of 8-column blocks is float[n][4]: element e of
// block n sits in row (e < 2 ? a : b), column 8 n + 2 t + (e & 1). The wgmma m64nNk16 accumulator of a warp
// has the same layout, so its kernel uses these helpers too. Every helper does the arithmetic of the
// kernels it was lifted from in the same order (the engine's results are bitwise those of the kernels
// before the split).
#ifndef SCORED_ENGINE_KERNELS_ATTENTION_COMMON_CUH_
#define SCORED_ENGINE_KERNELS_ATTENTION_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/kernels/attention.h"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels::attention_internal {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row of the mma.sync kernels

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------- scores: scale, soft cap, mask

// What every tensor-core kernel does to a raw score x = q . k, in log2 units (log2e folded in so the
// softmax runs on exp2): without a cap, x * units with units = scale * log2e; with cap c, tanhf(x *
// cap_in) * units with cap_in = scale / c and units = c * log2e (tanh(x * scale / c) * c, the cap of
// attention.h; tanhf's error is ~2 ulp, far below the bf16 rounding of P). The raw-score kernels keep
// Transform(x) (x itself without a cap) as their score and multiply by units inside the exponent. The
// kernels are instantiated with and without the cap (kCap == cap_in > 0): the tanhf code and its registers
// stay out of the uncapped kernels.
struct ScoreTransform {
  float units;   // log2 units of one transformed score
  float cap_in;  // > 0: the cap is on, Transform(x) = tanhf(x * cap_in)
  template <bool kCap>
  __device__ __forceinline__ float Transform(float x) const {
    return kCap ? tanhf(x * cap_in) : x;
  }
};

// The transform of a checked shape: scale = shape.scale, or head_dim^-1/2 (as log2e / sqrt(head_dim), the
// value the kernels used before the scale was a parameter).
inline ScoreTransform MakeScoreTransform(const AttentionShape& shape) {
  const float scale = shape.scale > 0.0f ? shape.scale : 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  if (shape.softcap > 0.0f) return ScoreTransform{shape.softcap * kLog2e, scale / shape.softcap};
  const float units =
      shape.scale > 0.0f ? kLog2e * shape.scale : kLog2e / sqrtf(static_cast<float>(shape.head_dim));
  return ScoreTransform{units, 0.0f};
}

// The lowest key a query row may NOT see below it: keys key with WindowFloor(row) < key <= row take part
// (window 0: every key <= row; keys are >= 0, so -1 masks nothing).
__device__ __forceinline__ int WindowFloor(int row, int window) { return window > 0 ? row - window : -1; }

// The first key tile (of block_k keys) that query rows >= q0 need: the tiles wholly before the window of
// row q0 hold no key of any row of the tile (0 without a window).
__device__ __forceinline__ int FirstKeyTile(int q0, int window, int block_k) {
  return window > 0 ? max(0, q0 - window + 1) / block_k : 0;
}

// Whether the key tile [k0, k0 + block_k) holds a key that some row in [first_row, last_row] sees.
__device__ __forceinline__ bool TileInReach(int k0, int block_k, int first_row, int last_row, int window) {
  return k0 <= last_row && k0 + block_k - 1 > WindowFloor(first_row, window);
}

// Whether a key tile [k0, k0 + block_k) needs a mask for a 16-row tile whose first row is first_row: some
// key lies after the first row (causal; also keys >= len), or before the window of the last row.
__device__ __forceinline__ bool TileNeedsMask(int k0, int block_k, int first_row, int window) {
  return k0 + block_k - 1 > first_row || k0 <= WindowFloor(first_row + 15, window);
}

// ---------------------------------------------------------------- the block's query tile

// Where a block of a tensor-core kernel works. Grid: (query tiles, heads, sequences), query tiles in
// reverse launch order: the longest (last) tiles of a sequence start first, shortening the tail.
struct BlockWork {
  int head;
  int64_t start;  // the sequence's first token in the packed batch
  int len;        // the sequence's length
  int q0;         // the tile's first query row (local index)
  int kv_head;    // set only where LocateBlock returns true
};

// False when the block's tile starts past its sequence's end: the block has nothing to do.
__device__ __forceinline__ bool LocateBlock(const int32_t* cu_seqlens,  // [num_seqs + 1]
                                            const AttentionShape& shape, int block_q, BlockWork& w) {
  const int seq = blockIdx.z;
  w.head = blockIdx.y;
  w.start = cu_seqlens[seq];
  w.len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  w.q0 = (gridDim.x - 1 - blockIdx.x) * block_q;
  if (w.q0 >= w.len) return false;
  w.kv_head = w.head / (shape.num_heads / shape.num_kv_heads);
  return true;
}

// ---------------------------------------------------------------- K/V tiles of the mma.sync kernels

// Copies keys [tile * kBlockK, (tile + 1) * kBlockK) of one kv head into ring stage `stage` of k_s and
// v_s (each [2][kBlockK][kHeadDim + kPad]) with cp.async, 16 bytes per thread and copy, kThreads threads;
// keys >= len are zero-filled. Commits one cp.async group.
template <int kHeadDim, int kBlockK, int kThreads>
__device__ __forceinline__ void LoadKvTile(__nv_bfloat16* k_s, __nv_bfloat16* v_s,
                                           const __nv_bfloat16* k_head,  // [len, kv_stride] from key 0
                                           const __nv_bfloat16* v_head,  // [len, kv_stride] from key 0
                                           int64_t kv_stride, int len, int tile, int stage) {
  constexpr int kRow = kHeadDim + kPad;
  constexpr int kStage = kBlockK * kRow;
  constexpr int kCopiesPerRow = kHeadDim / 8;
  const int k0 = tile * kBlockK;
  for (int idx = threadIdx.x; idx < kBlockK * kCopiesPerRow; idx += kThreads) {
    const int j = idx / kCopiesPerRow;
    const int d = (idx - j * kCopiesPerRow) * 8;
    const bool valid = k0 + j < len;
    const int64_t off = valid ? static_cast<int64_t>(k0 + j) * kv_stride + d : 0;
    CopyAsync16(k_s + stage * kStage + j * kRow + d, k_head + off, valid ? 16 : 0);
    CopyAsync16(v_s + stage * kStage + j * kRow + d, v_head + off, valid ? 16 : 0);
  }
  CopyAsyncCommit();
}

// Step `tile` of the two-stage ring (tile in stage `stage` = tile & 1): starts the copy of tile + 1 into
// the other stage (when there is one), waits until tile's copies have landed, then a block barrier makes
// them visible.
template <int kHeadDim, int kBlockK, int kThreads>
__device__ __forceinline__ void AwaitKvTile(__nv_bfloat16* k_s, __nv_bfloat16* v_s,
                                            const __nv_bfloat16* k_head, const __nv_bfloat16* v_head,
                                            int64_t kv_stride, int len, int tile, int stage, int num_tiles) {
  if (tile + 1 < num_tiles) {
    LoadKvTile<kHeadDim, kBlockK, kThreads>(k_s, v_s, k_head, v_head, kv_stride, len, tile + 1, stage ^ 1);
    CopyAsyncWait<1>();
  } else {
    CopyAsyncWait<0>();
  }
  __syncthreads();
}

// B fragments of S = Q K^T from a K tile (rows kRow elements apart): matrices (chunk c, low 8), (c, high
// 8), (c + 1, low), (c + 1, high) of keys 8 n .. 8 n + 7. ldmatrix row addresses: lane L reads row
// mrow = L % 8 of matrix mat = L / 8.
template <int kRow>
__device__ __forceinline__ void LoadKFragments(uint32_t (&b)[4], const __nv_bfloat16* kt, int n, int c,
                                               int mat, int mrow) {
  LoadMatrixX4(b, kt + (n * 8 + mrow) * kRow + c * 16 + mat * 8);
}

// B fragments of O += P V from a V tile, transposed: keys 16 c + 0..7 and + 8..15 of dims 8 n .., then of
// dims 8 (n + 1) ...
template <int kRow>
__device__ __forceinline__ void LoadVFragments(uint32_t (&b)[4], const __nv_bfloat16* vt, int c, int n,
                                               int mat, int mrow) {
  LoadMatrixX4Trans(b, vt + (c * 16 + (mat & 1) * 8 + mrow) * kRow + (n + (mat >> 1)) * 8);
}

// ---------------------------------------------------------------- online softmax of a 16-row tile

// Scores already in log2 units (s * scale_log2 applied with the mask): p = exp2f(s - m).
struct ScaledScores {
  // What the exponent subtracts for running max m. A row with no valid key yet keeps m = -inf;
  // subtract 0 instead so exp2 gives 0, not NaN.
  __device__ __forceinline__ float Offset(float m) const { return m == -INFINITY ? 0.0f : m; }
  __device__ __forceinline__ float Exp(float x, float offset) const { return exp2f(x - offset); }
};

// Raw scores (the running max m is a raw score): p = 2^(s * scale_log2 - m * scale_log2), one FFMA and
// one ex2.approx per score.
struct RawScores {
  float scale_log2;
  // -m * scale_log2, or 0 for a row with no valid key yet (m = -inf) so ex2 gives 0, not NaN.
  __device__ __forceinline__ float Offset(float m) const { return m == -INFINITY ? 0.0f : -m * scale_log2; }
  __device__ __forceinline__ float Exp(float x, float offset) const {
    return FastExp2(fmaf(x, scale_log2, offset));
  }
};

// Masks (to -inf) the keys outside each row's reach in one thread's share of a score tile whose first key
// is k0: keys after the row (this also covers keys >= len) and, with a window, keys at or below
// WindowFloor(row). A tile that TileNeedsMask says is whole for the 16-row tile at first_row is left as is.
template <int kBlocks>
__device__ __forceinline__ void MaskScores(float (&s)[kBlocks][4], int k0, int first_row, int row_a,
                                           int row_b, int t, int window) {
  if (TileNeedsMask(k0, kBlocks * 8, first_row, window)) {
    const int lo_a = WindowFloor(row_a, window), lo_b = WindowFloor(row_b, window);
#pragma unroll
    for (int n = 0; n < kBlocks; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + n * 8 + 2 * t + (e & 1);
        const bool seen = e < 2 ? (key <= row_a && key > lo_a) : (key <= row_b && key > lo_b);
        if (!seen) s[n][e] = -INFINITY;
      }
    }
  }
}

// Folds 8-key block n of a score tile into this thread's row maxima (max_a: row a, max_b: row b).
template <int kBlocks>
__device__ __forceinline__ void FoldRowMax(const float (&s)[kBlocks][4], int n, float& max_a, float& max_b) {
  max_a = fmaxf(max_a, fmaxf(s[n][0], s[n][1]));
  max_b = fmaxf(max_b, fmaxf(s[n][2], s[n][3]));
}

// Online softmax step over one score tile. max_a, max_b: this thread's maxima of the tile's rows (FoldRowMax
// over every block); each of the 4 threads of a row group holds a quarter of the keys, so the row maxima
// are reduced over them first. Then the new running maxima m, p = exp of each score in place, l = l *
// alpha + sum(p). Returns in alpha the factor by which each row's output accumulators must be rescaled.
template <typename Units, int kBlocks>
__device__ __forceinline__ void SoftmaxStep(const Units& units, float max_a, float max_b,
                                            float (&s)[kBlocks][4], float (&m)[2], float (&l)[2],
                                            float (&alpha)[2]) {
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, offset));
    max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, offset));
  }
  const float new_a = fmaxf(m[0], max_a), new_b = fmaxf(m[1], max_b);
  const float off_a = units.Offset(new_a);
  const float off_b = units.Offset(new_b);
  alpha[0] = units.Exp(m[0], off_a);
  alpha[1] = units.Exp(m[1], off_b);
  m[0] = new_a;
  m[1] = new_b;
  float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
  for (int n = 0; n < kBlocks; ++n) {
    s[n][0] = units.Exp(s[n][0], off_a);
    s[n][1] = units.Exp(s[n][1], off_a);
    s[n][2] = units.Exp(s[n][2], off_b);
    s[n][3] = units.Exp(s[n][3], off_b);
    sum_a += s[n][0] + s[n][1];
    sum_b += s[n][2] + s[n][3];
  }
  l[0] = l[0] * alpha[0] + sum_a;
  l[1] = l[1] * alpha[1] + sum_b;
}

// The raw-score kernels' step (32-row and wgmma): soft cap (ScoreTransform::Transform, before the mask so a
// masked score stays -inf), mask (MaskScores), row maxima, online softmax (as SoftmaxStep) in the
// transform's units.
template <bool kCap, int kBlocks>
__device__ __forceinline__ void MaskedSoftmaxStepRaw(const ScoreTransform& st, int window, int k0,
                                                     int first_row, int row_a, int row_b, int t,
                                                     float (&s)[kBlocks][4], float (&m)[2], float (&l)[2],
                                                     float (&alpha)[2]) {
  if constexpr (kCap) {
#pragma unroll
    for (int n = 0; n < kBlocks; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = st.Transform<true>(s[n][e]);
    }
  }
  MaskScores(s, k0, first_row, row_a, row_b, t, window);
  float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
  for (int n = 0; n < kBlocks; ++n) FoldRowMax(s, n, max_a, max_b);
  SoftmaxStep(RawScores{st.units}, max_a, max_b, s, m, l, alpha);
}

// Rescales one thread's share of an output tile by its rows' alpha.
template <int kBlocks>
__device__ __forceinline__ void RescaleRows(float (&o)[kBlocks][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < kBlocks; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

// P's A fragment for keys 16 c .. 16 c + 15, rounded to bf16: the S accumulators of the two 8-key
// blocks 2 c and 2 c + 1 are exactly that fragment.
template <int kBlocks>
__device__ __forceinline__ void PackProbabilities(uint32_t (&a)[4], const float (&p)[kBlocks][4], int c) {
  a[0] = PackBf16(p[2 * c][0], p[2 * c][1]);
  a[1] = PackBf16(p[2 * c][2], p[2 * c][3]);
  a[2] = PackBf16(p[2 * c + 1][0], p[2 * c + 1][1]);
  a[3] = PackBf16(p[2 * c + 1][2], p[2 * c + 1][3]);
}

// Sums each row's l over the 4 threads of its row group (each holds a quarter of the row's keys).
__device__ __forceinline__ void SumOverRowGroup(float& l_a, float& l_b) {
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, offset);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, offset);
  }
}

// Divides one thread's share of a 16-row output tile by its rows' sums l (SumOverRowGroup) and stores it as
// bf16: rows row_a and row_b = row_a + 8 (local indices of the sequence that starts at token `start`; stored
// when < len), at out[(start + row) * out_stride + col0 + 8 n + 2 t] and the column after.
template <int kBlocks>
__device__ __forceinline__ void StoreNormalizedRows(const float (&o)[kBlocks][4], float l_a, float l_b,
                                                    int row_a, int len, int t, int64_t start,
                                                    int64_t out_stride, int col0, __nv_bfloat16* out) {
  const int row_b = row_a + 8;
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
#pragma unroll
  for (int n = 0; n < kBlocks; ++n) {
    const int d = col0 + n * 8 + 2 * t;
    if (row_a < len) {
      *reinterpret_cast<uint32_t*>(out + (start + row_a) * out_stride + d) =
          PackBf16(o[n][0] * inv_a, o[n][1] * inv_a);
    }
    if (row_b < len) {
      *reinterpret_cast<uint32_t*>(out + (start + row_b) * out_stride + d) =
          PackBf16(o[n][2] * inv_b, o[n][3] * inv_b);
    }
  }
}

}  // namespace scored::kernels::attention_internal

#endif  // SCORED_ENGINE_KERNELS_ATTENTION_COMMON_CUH_
