// Causal GQA attention, tensor-core kernels (mma.sync m16n8k16, bf16 in, fp32 accumulate): 16 or 32 query
// rows per warp. Contract of the op: attention.h; the dispatch that picks a kernel: attention.cu.
//
// Formula: per query row, S = Q K^T times the scale (attention.h; with a soft cap, tanh(S * scale / cap) *
// cap) over the keys in reach of the row (causal, own sequence, and the window where there is one), online
// softmax per key tile (running max m, running sum l, unnormalized O += P V), out = O / l. P is
// rounded to bf16 before P V, as flash-attention does; one rounding of O / l to bf16 at the end.
// Shapes: q [num_tokens, q_stride], k and v [num_tokens, kv_stride], out [num_tokens, num_heads *
// head_dim] (AttentionShape). dtypes: bf16 in and out, fp32 accumulation and softmax.
// Grid: (query tiles, heads, sequences), query tiles in reverse launch order (the longest, last tiles start
// first, shortening the tail); a block whose tile starts past its sequence's end exits at once. Key tiles
// [FirstKeyTile, last query of the block] are walked in order (with a window, the tiles wholly before the
// window of the block's first query are never loaded; a warp also skips the loaded tiles out of its rows'
// reach), so a token's result depends only on its own sequence.
// K and V tiles arrive by cp.async in a two-stage ring (tile i + 1 loads while tile i is multiplied), rows
// padded by 8 bf16 so each 8-lane ldmatrix phase hits 32 distinct banks; K fragments come from ldmatrix,
// V fragments from ldmatrix .trans. The S accumulator of two adjacent 8-key blocks is exactly P's A
// fragment (attention_common.cuh).
//
// 16 rows per warp (AttentionMma16RowsKernel; head_dim 32, 64, 96, 128): 4 warps (8 at head_dim 128) x 16
// rows, 64-key tiles, Q fragments in registers; scores capped and scaled into log2 units with the mask, p =
// exp2f(s - m). Limits: q and out 4-byte aligned with q_stride even, k and v 16-byte aligned with kv_stride %
// 8 == 0.
//
// 32 rows per warp (AttentionMma32RowsKernel; head_dim 64, 96, 128; 32- or 64-key tiles): each warp owns
// two 16-row tiles, so every K and V fragment loaded from shared memory feeds two mma instead of one; Q is
// staged in shared memory (cp.async, with the first K/V tile) and re-read per key tile through ldmatrix,
// which keeps the registers for the 2 x 16 x head_dim fp32 output accumulators. 4 warps x 32 rows = 128
// queries per block. At head_dim 256 the same kernel runs one 16-row tile per warp (16 x 256 accumulators
// are already 128 registers a thread, as in flash-attention 2's head_dim 256) and 8 warps, still 128
// queries per block: 135 KiB of shared memory with 32-key tiles, 198 KiB with 64 (one block per SM).
// Softmax in raw score units (ScoreTransform): m is a (capped) raw score and p = 2^(s * units - m * units),
// one FFMA and one ex2 per score. Limits: those of the 16-row kernel, and q 16-byte aligned with q_stride %
// 8 == 0 (16-byte Q copies).
#include <cmath>

#include "engine/kernels/attention_common.cuh"
#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels::attention_internal {
namespace {

// ---------------------------------------------------------------- 16 rows per warp

// Warps per block (16 query rows each): 8 at head_dim 128 (one block per SM at ~218 registers; a 64-key
// K/V tile then serves 128 queries, halving the tile traffic of 4 warps), 4 below (several blocks per SM).
template <int kHeadDim>
__host__ __device__ constexpr int Mma16Warps() {
  return kHeadDim >= 128 ? 8 : 4;
}
template <int kHeadDim>
__host__ __device__ constexpr int Mma16BlockQ() {
  return Mma16Warps<kHeadDim>() * 16;
}
constexpr int kMma16BlockK = 64;

template <int kHeadDim>
__host__ __device__ constexpr int Mma16SharedBytes() {
  return 2 /*K, V*/ * 2 /*stages*/ * kMma16BlockK * (kHeadDim + kPad) * 2 /*bytes*/;
}

// Three blocks per SM (12 warps) for head_dim <= 64: more warps to hide the copy and exp latency. At
// head_dim 128 the accumulators need ~176+ registers (capping them lower spilled, per ptxas): one block.
// At 96 (48 accumulators, 24 Q registers) two blocks leave the compiler its 255 registers.
template <int kHeadDim>
__host__ __device__ constexpr int Mma16MinBlocks() {
  return kHeadDim >= 128 ? 1 : (kHeadDim >= 96 ? 2 : 3);
}

__device__ __forceinline__ uint32_t LoadWord(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <int kHeadDim, bool kCap>
__global__ void __launch_bounds__(Mma16Warps<kHeadDim>() * 32, Mma16MinBlocks<kHeadDim>())
    AttentionMma16RowsKernel(const __nv_bfloat16* __restrict__ q,     // [num_tokens, q_stride]
                             const __nv_bfloat16* __restrict__ k,     // [num_tokens, kv_stride]
                             const __nv_bfloat16* __restrict__ v,     // [num_tokens, kv_stride]
                             const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                             const AttentionShape shape, const ScoreTransform st,
                             __nv_bfloat16* __restrict__ out) {  // [num_tokens, nh * hd]
  constexpr int kWarps = Mma16Warps<kHeadDim>();
  constexpr int kBlockQ = Mma16BlockQ<kHeadDim>();
  constexpr int kDChunks = kHeadDim / 16;     // k-steps of S = Q K^T
  constexpr int kDBlocks = kHeadDim / 8;      // n-blocks of O
  constexpr int kKBlocks = kMma16BlockK / 8;  // n-blocks of S
  constexpr int kKChunks = kMma16BlockK / 16;
  constexpr int kRow = kHeadDim + kPad;  // shared row length, elements
  constexpr int kStage = kMma16BlockK * kRow;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [2][kMma16BlockK][kRow]
  __nv_bfloat16* v_s = k_s + 2 * kStage;                            // [2][kMma16BlockK][kRow]

  BlockWork w;
  if (!LocateBlock(cu_seqlens, shape, kBlockQ, w)) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_a = w.q0 + warp * 16 + g;  // query rows of this thread (local indices)
  const int row_b = row_a + 8;
  const int warp_first = w.q0 + warp * 16;
  const int warp_last = min(warp_first + 15, w.len - 1);
  const int window = shape.window;
  const int lo_a = WindowFloor(row_a, window), lo_b = WindowFloor(row_b, window);
  const __nv_bfloat16* k_head = k + w.start * shape.kv_stride + w.kv_head * kHeadDim;
  const __nv_bfloat16* v_head = v + w.start * shape.kv_stride + w.kv_head * kHeadDim;

  const int key_end = min(w.len, w.q0 + kBlockQ);
  const int num_tiles = (key_end + kMma16BlockK - 1) / kMma16BlockK;
  const int first_tile = FirstKeyTile(w.q0, window, kMma16BlockK);
  LoadKvTile<kHeadDim, kMma16BlockK, kWarps * 32>(k_s, v_s, k_head, v_head, shape.kv_stride, w.len,
                                                  first_tile, first_tile & 1);

  uint32_t qf[kDChunks][4];
  {
    const __nv_bfloat16* qa = q + (w.start + row_a) * shape.q_stride + w.head * kHeadDim;
    const __nv_bfloat16* qb = q + (w.start + row_b) * shape.q_stride + w.head * kHeadDim;
#pragma unroll
    for (int c = 0; c < kDChunks; ++c) {
      const int d = c * 16 + 2 * t;
      qf[c][0] = row_a < w.len ? LoadWord(qa + d) : 0u;
      qf[c][1] = row_b < w.len ? LoadWord(qb + d) : 0u;
      qf[c][2] = row_a < w.len ? LoadWord(qa + d + 8) : 0u;
      qf[c][3] = row_b < w.len ? LoadWord(qb + d + 8) : 0u;
    }
  }

  float o[kDBlocks][4];
#pragma unroll
  for (int n = 0; n < kDBlocks; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // ldmatrix row addresses: lane L reads row L % 8 of matrix L / 8.
  const int mat = lane >> 3, mrow = lane & 7;

  for (int tile = first_tile; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    AwaitKvTile<kHeadDim, kMma16BlockK, kWarps * 32>(k_s, v_s, k_head, v_head, shape.kv_stride, w.len, tile,
                                                     stage, num_tiles);
    const int k0 = tile * kMma16BlockK;
    // Else every key of this tile lies after this warp's queries or before their window.
    if (TileInReach(k0, kMma16BlockK, warp_first, warp_last, window)) {
      const __nv_bfloat16* kt = k_s + stage * kStage;
      const __nv_bfloat16* vt = v_s + stage * kStage;
      float s[kKBlocks][4];
#pragma unroll
      for (int n = 0; n < kKBlocks; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < kDChunks; c += 2) {
          uint32_t b[4];
          LoadKFragments<kRow>(b, kt, n, c, mat, mrow);
          MmaBf16(s[n], qf[c][0], qf[c][1], qf[c][2], qf[c][3], b[0], b[1]);
          MmaBf16(s[n], qf[c + 1][0], qf[c + 1][1], qf[c + 1][2], qf[c + 1][3], b[2], b[3]);
        }
      }
      // Cap, scale into log2 units and mask keys after the query (this also covers keys >= len) or before
      // its window. A tile whose keys all lie in reach of every row of the warp needs no mask.
      const bool full_tile = !TileNeedsMask(k0, kMma16BlockK, warp_first, window);
      float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * t + (e & 1);
          const bool seen = e < 2 ? (key <= row_a && key > lo_a) : (key <= row_b && key > lo_b);
          s[n][e] = (full_tile || seen) ? st.template Transform<kCap>(s[n][e]) * st.units : -INFINITY;
        }
        FoldRowMax(s, n, max_a, max_b);
      }
      float alpha[2];
      SoftmaxStep(ScaledScores{}, max_a, max_b, s, m, l, alpha);
      RescaleRows(o, alpha);
#pragma unroll
      for (int c = 0; c < kKChunks; ++c) {
        uint32_t a[4];
        PackProbabilities(a, s, c);
#pragma unroll
        for (int n = 0; n < kDBlocks; n += 2) {
          uint32_t b[4];
          LoadVFragments<kRow>(b, vt, c, n, mat, mrow);
          MmaBf16(o[n], a[0], a[1], a[2], a[3], b[0], b[1]);
          MmaBf16(o[n + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }
  SumOverRowGroup(l[0], l[1]);
  StoreNormalizedRows(o, l[0], l[1], row_a, w.len, t, w.start,
                      static_cast<int64_t>(shape.num_heads) * kHeadDim, w.head * kHeadDim, out);
}

// ---------------------------------------------------------------- 32 rows per warp

// 16-row tiles per warp and warps per block: 2 x 4 up to head_dim 128, 1 x 8 at 256 (see the file comment).
// Either way 128 queries per block.
template <int kHeadDim>
__host__ __device__ constexpr int Mma32RowTiles() {
  return kHeadDim >= 256 ? 1 : 2;
}
template <int kHeadDim>
__host__ __device__ constexpr int Mma32Warps() {
  return kHeadDim >= 256 ? 8 : 4;
}
constexpr int kMma32BlockQ = 128;
static_assert(Mma32RowTiles<128>() * Mma32Warps<128>() * 16 == kMma32BlockQ &&
                  Mma32RowTiles<256>() * Mma32Warps<256>() * 16 == kMma32BlockQ,
              "the staged-Q kernel's block is 128 queries");

template <int kHeadDim, int kBlockK>
__host__ __device__ constexpr int Mma32SharedBytes() {
  return (kMma32BlockQ + 2 /*K, V*/ * 2 /*stages*/ * kBlockK) * (kHeadDim + kPad) * 2 /*bytes*/;
}

// Blocks per SM: at head_dim 128 the 2 x 16 x 128 accumulators take the registers of two blocks (255
// each, a few bytes spilled); at 96 two as well; at 64 three fit; at 256 (8 warps, 198 KiB) one.
template <int kHeadDim>
__host__ __device__ constexpr int Mma32MinBlocks() {
  return kHeadDim >= 256 ? 1 : (kHeadDim >= 96 ? 2 : 3);
}

template <int kHeadDim, int kBlockK, bool kCap>
__global__ void __launch_bounds__(Mma32Warps<kHeadDim>() * 32, Mma32MinBlocks<kHeadDim>())
    AttentionMma32RowsKernel(const __nv_bfloat16* __restrict__ q,     // [num_tokens, q_stride]
                             const __nv_bfloat16* __restrict__ k,     // [num_tokens, kv_stride]
                             const __nv_bfloat16* __restrict__ v,     // [num_tokens, kv_stride]
                             const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                             const AttentionShape shape, const ScoreTransform st,
                             __nv_bfloat16* __restrict__ out) {  // [num_tokens, nh * hd]
  constexpr int kMma32RowTiles = Mma32RowTiles<kHeadDim>();
  constexpr int kRowsPerWarp = kMma32RowTiles * 16;
  constexpr int kDChunks = kHeadDim / 16;
  constexpr int kDBlocks = kHeadDim / 8;
  constexpr int kKBlocks = kBlockK / 8;
  constexpr int kKChunks = kBlockK / 16;
  constexpr int kRow = kHeadDim + kPad;
  constexpr int kStage = kBlockK * kRow;
  constexpr int kCopiesPerRow = kHeadDim / 8;
  constexpr int kThreads = Mma32Warps<kHeadDim>() * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kMma32BlockQ][kRow]
  __nv_bfloat16* k_s = q_s + kMma32BlockQ * kRow;                   // [2][kBlockK][kRow]
  __nv_bfloat16* v_s = k_s + 2 * kStage;                            // [2][kBlockK][kRow]

  BlockWork w;
  if (!LocateBlock(cu_seqlens, shape, kMma32BlockQ, w)) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int warp_q0 = w.q0 + warp * kRowsPerWarp;  // first query row of this warp (local index)
  const int warp_last = min(warp_q0 + kRowsPerWarp - 1, w.len - 1);
  const int window = shape.window;
  const __nv_bfloat16* k_head = k + w.start * shape.kv_stride + w.kv_head * kHeadDim;
  const __nv_bfloat16* v_head = v + w.start * shape.kv_stride + w.kv_head * kHeadDim;

  // Q tile: rows past the sequence end are zero-filled.
  {
    const __nv_bfloat16* q_head = q + w.start * shape.q_stride + w.head * kHeadDim;
    for (int idx = threadIdx.x; idx < kMma32BlockQ * kCopiesPerRow; idx += kThreads) {
      const int r = idx / kCopiesPerRow;
      const int d = (idx - r * kCopiesPerRow) * 8;
      const bool valid = w.q0 + r < w.len;
      const int64_t off = valid ? static_cast<int64_t>(w.q0 + r) * shape.q_stride + d : 0;
      CopyAsync16(q_s + r * kRow + d, q_head + off, valid ? 16 : 0);
    }
  }

  const int key_end = min(w.len, w.q0 + kMma32BlockQ);
  const int num_tiles = (key_end + kBlockK - 1) / kBlockK;
  const int first_tile = FirstKeyTile(w.q0, window, kBlockK);
  // Commits the Q copies too.
  LoadKvTile<kHeadDim, kBlockK, kThreads>(k_s, v_s, k_head, v_head, shape.kv_stride, w.len, first_tile,
                                          first_tile & 1);

  float o[kMma32RowTiles][kDBlocks][4];
  float m[kMma32RowTiles][2], l[kMma32RowTiles][2];
#pragma unroll
  for (int rt = 0; rt < kMma32RowTiles; ++rt) {
#pragma unroll
    for (int n = 0; n < kDBlocks; ++n) o[rt][n][0] = o[rt][n][1] = o[rt][n][2] = o[rt][n][3] = 0.0f;
    m[rt][0] = m[rt][1] = -INFINITY;
    l[rt][0] = l[rt][1] = 0.0f;
  }

  const int mat = lane >> 3, mrow = lane & 7;
  // ldmatrix row address of this lane in the Q tile for row tile rt (A fragment: matrices a0..a3 are
  // rows 0-7 / 8-15 of columns 0-7, then of columns 8-15).
  const __nv_bfloat16* q_lane = q_s + (warp * kRowsPerWarp + (mat & 1) * 8 + mrow) * kRow + (mat >> 1) * 8;

  for (int tile = first_tile; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    AwaitKvTile<kHeadDim, kBlockK, kThreads>(k_s, v_s, k_head, v_head, shape.kv_stride, w.len, tile, stage,
                                             num_tiles);
    const int k0 = tile * kBlockK;
    if (TileInReach(k0, kBlockK, warp_q0, warp_last, window)) {
      const __nv_bfloat16* kt = k_s + stage * kStage;
      const __nv_bfloat16* vt = v_s + stage * kStage;
      float s[kMma32RowTiles][kKBlocks][4];
#pragma unroll
      for (int rt = 0; rt < kMma32RowTiles; ++rt) {
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) s[rt][n][0] = s[rt][n][1] = s[rt][n][2] = s[rt][n][3] = 0.0f;
      }
#pragma unroll
      for (int c = 0; c < kDChunks; c += 2) {
        uint32_t a[kMma32RowTiles][2][4];
#pragma unroll
        for (int rt = 0; rt < kMma32RowTiles; ++rt) {
          LoadMatrixX4(a[rt][0], q_lane + rt * 16 * kRow + c * 16);
          LoadMatrixX4(a[rt][1], q_lane + rt * 16 * kRow + (c + 1) * 16);
        }
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) {
          uint32_t b[4];
          LoadKFragments<kRow>(b, kt, n, c, mat, mrow);
#pragma unroll
          for (int rt = 0; rt < kMma32RowTiles; ++rt) {
            MmaBf16(s[rt][n], a[rt][0][0], a[rt][0][1], a[rt][0][2], a[rt][0][3], b[0], b[1]);
            MmaBf16(s[rt][n], a[rt][1][0], a[rt][1][1], a[rt][1][2], a[rt][1][3], b[2], b[3]);
          }
        }
      }
      uint32_t pa[kMma32RowTiles][kKChunks][4];
#pragma unroll
      for (int rt = 0; rt < kMma32RowTiles; ++rt) {
        const int rt_q0 = warp_q0 + rt * 16;
        const int row_a = rt_q0 + g, row_b = row_a + 8;
        float alpha[2];
        MaskedSoftmaxStepRaw<kCap>(st, window, k0, rt_q0, row_a, row_b, t, s[rt], m[rt], l[rt], alpha);
        RescaleRows(o[rt], alpha);
#pragma unroll
        for (int c = 0; c < kKChunks; ++c) PackProbabilities(pa[rt][c], s[rt], c);
      }
#pragma unroll
      for (int c = 0; c < kKChunks; ++c) {
#pragma unroll
        for (int n = 0; n < kDBlocks; n += 2) {
          uint32_t b[4];
          LoadVFragments<kRow>(b, vt, c, n, mat, mrow);
#pragma unroll
          for (int rt = 0; rt < kMma32RowTiles; ++rt) {
            MmaBf16(o[rt][n], pa[rt][c][0], pa[rt][c][1], pa[rt][c][2], pa[rt][c][3], b[0], b[1]);
            MmaBf16(o[rt][n + 1], pa[rt][c][0], pa[rt][c][1], pa[rt][c][2], pa[rt][c][3], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }
  const int64_t out_stride = static_cast<int64_t>(shape.num_heads) * kHeadDim;
#pragma unroll
  for (int rt = 0; rt < kMma32RowTiles; ++rt) {
    float la = l[rt][0], lb = l[rt][1];
    SumOverRowGroup(la, lb);
    StoreNormalizedRows(o[rt], la, lb, warp_q0 + rt * 16 + g, w.len, t, w.start, out_stride,
                        w.head * kHeadDim, out);
  }
}

template <int kHeadDim, bool kCap>
absl::Status LaunchMma16RowsCap(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                                const AttentionShape& s, const ScoreTransform& st, bf16_t* out,
                                cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, Mma16BlockQ<kHeadDim>())),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  constexpr int kSmem = Mma16SharedBytes<kHeadDim>();
  auto* kernel = AttentionMma16RowsKernel<kHeadDim, kCap>;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kSmem));
  kernel<<<grid, Mma16Warps<kHeadDim>() * 32, kSmem, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v),
                                                               cu_seqlens, s, st, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <int kHeadDim, int kBlockK, bool kCap>
absl::Status LaunchMma32RowsCap(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                                const AttentionShape& s, const ScoreTransform& st, bf16_t* out,
                                cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kMma32BlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  constexpr int kSmem = Mma32SharedBytes<kHeadDim, kBlockK>();
  auto* kernel = AttentionMma32RowsKernel<kHeadDim, kBlockK, kCap>;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kSmem));
  kernel<<<grid, Mma32Warps<kHeadDim>() * 32, kSmem, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v),
                                                               cu_seqlens, s, st, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

template <int kHeadDim>
absl::Status LaunchMma16Rows(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                             const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const ScoreTransform st = MakeScoreTransform(s);
  return st.cap_in > 0.0f ? LaunchMma16RowsCap<kHeadDim, true>(q, k, v, cu_seqlens, s, st, out, stream)
                          : LaunchMma16RowsCap<kHeadDim, false>(q, k, v, cu_seqlens, s, st, out, stream);
}

bool Mma32RowsFits(int head_dim, int block_k) {
  // Shared memory grows linearly with the row length: (128 + 4 block_k) rows of head_dim + kPad bf16.
  const int bytes = (kMma32BlockQ + 4 * block_k) * (head_dim + kPad) * 2;
  static_assert(Mma32SharedBytes<256, 64>() == (kMma32BlockQ + 4 * 64) * (256 + kPad) * 2, "Mma32RowsFits");
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return bytes <= optin;
}

template <int kHeadDim, int kBlockK>
absl::Status LaunchMma32Rows(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                             const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const ScoreTransform st = MakeScoreTransform(s);
  return st.cap_in > 0.0f
             ? LaunchMma32RowsCap<kHeadDim, kBlockK, true>(q, k, v, cu_seqlens, s, st, out, stream)
             : LaunchMma32RowsCap<kHeadDim, kBlockK, false>(q, k, v, cu_seqlens, s, st, out, stream);
}

template absl::Status LaunchMma16Rows<32>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                          const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma16Rows<64>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                          const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma16Rows<96>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                          const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma16Rows<128>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                           const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<64, 32>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<64, 64>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<96, 32>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<96, 64>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<256, 32>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                               const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<256, 64>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                               const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<128, 32>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                               const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status LaunchMma32Rows<128, 64>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                               const AttentionShape&, bf16_t*, cudaStream_t);

}  // namespace scored::kernels::attention_internal
