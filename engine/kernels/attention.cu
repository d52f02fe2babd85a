// Causal GQA attention over a varlen batch. Contract: attention.h.
//
// Grid: (query tiles, heads, sequences); a block whose tile starts past its sequence's end exits at once.
// Both paths keep an online softmax per query row (running max m, running sum l, unnormalized output)
// and walk the key tiles [0, last query of the tile] in order, so the result of a token depends only on
// its own sequence.
//
// SIMT path (any T, head_dim <= 128): 4 warps x 4 query rows, 32-key tiles of K and V in shared memory
// as fp32 (K rows padded by one float: lanes read different rows of one column without bank conflicts).
// Lane j scores key j of the tile; lane c owns output dims c, c + 32, ...
//
// Tensor-core path (bf16, head_dim 32/64/128): 4 or 8 warps x 16 query rows, 64-key tiles. S = Q K^T and
// O += P V with mma.sync.m16n8k16 (bf16 in, fp32 accumulate); Q fragments stay in registers; K and V
// tiles arrive by cp.async in a two-stage ring, rows padded by 8 bf16 so each 8-lane ldmatrix phase
// hits 32 distinct banks; V fragments come from ldmatrix .trans. Fragment layouts follow the PTX ISA's
// mma.m16n8k16 description: lane = 4 g + t, A rows g and g + 8, columns 2t, 2t + 1 (+ 8); B column g, rows
// 2t, 2t + 1 (+ 8); C rows g / g + 8, columns 2t, 2t + 1. The S accumulator of two adjacent 8-key blocks is
// exactly P's A fragment. The 32-row variant (below, the default at head_dim 64 and 128) gives each warp two
// such 16-row tiles.
#include <cmath>
#include <mutex>
#include <set>
#include <utility>

#include "engine/kernels/attention.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

// Raises a kernel's dynamic shared-memory limit once per (kernel, device): the attribute belongs to the
// kernel's instance in one device's context, so a process that runs ranks on several GPUs must set it on
// each of them. Kept out of the launch path after the first call (and out of graph captures).
cudaError_t EnsureDynamicSmem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, device}) > 0) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.insert({kernel, device});
  return err;
}

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------- SIMT path

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

// ---------------------------------------------------------------- tensor-core path (bf16)

// Warps per block (16 query rows each): 8 at head_dim 128 (one block per SM at ~218 registers; a 64-key
// K/V tile then serves 128 queries, halving the tile traffic of 4 warps), 4 below (several blocks per SM).
template <int kHeadDim>
__host__ __device__ constexpr int MmaWarps() {
  return kHeadDim >= 128 ? 8 : 4;
}
template <int kHeadDim>
__host__ __device__ constexpr int MmaBlockQ() {
  return MmaWarps<kHeadDim>() * 16;
}
constexpr int kMmaBlockK = 64;
constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row

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

__device__ __forceinline__ uint32_t LoadWord(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes == 0 writes zeros (rows past the sequence end).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LoadMatrixX4(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}

template <int kHeadDim>
__host__ __device__ constexpr int MmaSharedBytes() {
  return 2 /*K, V*/ * 2 /*stages*/ * kMmaBlockK * (kHeadDim + kPad) * 2 /*bytes*/;
}

// K and V tiles are copied with cp.async (16 bytes per thread and copy) into a two-stage ring: tile i+1
// loads while tile i is multiplied. Fragments come from shared memory through ldmatrix (K as is, V
// transposed), 4 matrices per instruction.
// Three blocks per SM (12 warps) for head_dim <= 64: more warps to hide the copy and exp latency. At
// head_dim 128 the accumulators need ~176+ registers (capping them lower spilled, per ptxas): one block.
template <int kHeadDim>
__host__ __device__ constexpr int MmaMinBlocks() {
  return kHeadDim >= 128 ? 1 : 3;
}

template <int kHeadDim>
__global__ void __launch_bounds__(MmaWarps<kHeadDim>() * 32, MmaMinBlocks<kHeadDim>())
    AttentionMmaKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                       const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ cu_seqlens,
                       const AttentionShape shape, float scale_log2, __nv_bfloat16* __restrict__ out) {
  constexpr int kDChunks = kHeadDim / 16;   // k-steps of S = Q K^T
  constexpr int kDBlocks = kHeadDim / 8;    // n-blocks of O
  constexpr int kKBlocks = kMmaBlockK / 8;  // n-blocks of S
  constexpr int kKChunks = kMmaBlockK / 16;
  constexpr int kRow = kHeadDim + kPad;  // shared row length, elements
  constexpr int kStage = kMmaBlockK * kRow;
  constexpr int kCopiesPerRow = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [2][kMmaBlockK][kRow]
  __nv_bfloat16* v_s = k_s + 2 * kStage;                            // [2][kMmaBlockK][kRow]

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  // Query tiles in reverse launch order: the longest (last) tiles start first, shortening the tail.
  constexpr int kWarps = MmaWarps<kHeadDim>();
  constexpr int kBlockQ = MmaBlockQ<kHeadDim>();
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockQ;
  if (q0 >= len) return;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_a = q0 + warp * 16 + g;  // query rows of this thread (local indices)
  const int row_b = row_a + 8;
  const int warp_last = min(q0 + warp * 16 + 15, len - 1);
  const __nv_bfloat16* k_head = k + start * shape.kv_stride + kv_head * kHeadDim;
  const __nv_bfloat16* v_head = v + start * shape.kv_stride + kv_head * kHeadDim;

  auto load_tile = [&](int tile, int stage) {
    const int k0 = tile * kMmaBlockK;
    for (int idx = threadIdx.x; idx < kMmaBlockK * kCopiesPerRow; idx += kWarps * 32) {
      const int j = idx / kCopiesPerRow;
      const int d = (idx - j * kCopiesPerRow) * 8;
      const bool valid = k0 + j < len;
      const int64_t off = valid ? static_cast<int64_t>(k0 + j) * shape.kv_stride + d : 0;
      CopyAsync16(k_s + stage * kStage + j * kRow + d, k_head + off, valid ? 16 : 0);
      CopyAsync16(v_s + stage * kStage + j * kRow + d, v_head + off, valid ? 16 : 0);
    }
    CopyAsyncCommit();
  };

  const int key_end = min(len, q0 + kBlockQ);
  const int num_tiles = (key_end + kMmaBlockK - 1) / kMmaBlockK;
  load_tile(0, 0);

  uint32_t qf[kDChunks][4];
  {
    const __nv_bfloat16* qa = q + (start + row_a) * shape.q_stride + head * kHeadDim;
    const __nv_bfloat16* qb = q + (start + row_b) * shape.q_stride + head * kHeadDim;
#pragma unroll
    for (int c = 0; c < kDChunks; ++c) {
      const int d = c * 16 + 2 * t;
      qf[c][0] = row_a < len ? LoadWord(qa + d) : 0u;
      qf[c][1] = row_b < len ? LoadWord(qb + d) : 0u;
      qf[c][2] = row_a < len ? LoadWord(qa + d + 8) : 0u;
      qf[c][3] = row_b < len ? LoadWord(qb + d + 8) : 0u;
    }
  }

  float o[kDBlocks][4];
#pragma unroll
  for (int n = 0; n < kDBlocks; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  // ldmatrix row addresses: lane L reads row L % 8 of matrix L / 8.
  const int mat = lane >> 3, mrow = lane & 7;

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < num_tiles) {
      load_tile(tile + 1, stage ^ 1);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();
    const int k0 = tile * kMmaBlockK;
    if (k0 <= warp_last) {  // else every key of this tile lies after this warp's queries
      const __nv_bfloat16* kt = k_s + stage * kStage;
      const __nv_bfloat16* vt = v_s + stage * kStage;
      float s[kKBlocks][4];
#pragma unroll
      for (int n = 0; n < kKBlocks; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < kDChunks; c += 2) {
          // Matrices: (chunk c, low 8), (c, high 8), (c + 1, low), (c + 1, high) of keys n*8 .. n*8+7.
          uint32_t b[4];
          LoadMatrixX4(b, kt + (n * 8 + mrow) * kRow + c * 16 + mat * 8);
          MmaBf16(s[n], qf[c][0], qf[c][1], qf[c][2], qf[c][3], b[0], b[1]);
          MmaBf16(s[n], qf[c + 1][0], qf[c + 1][1], qf[c + 1][2], qf[c + 1][3], b[2], b[3]);
        }
      }
      // Scale into log2 units and mask keys after the query (this also covers keys >= len). A tile whose
      // last key precedes the warp's first query needs no mask.
      const bool full_tile = k0 + kMmaBlockK - 1 <= q0 + warp * 16;
      float tile_max_a = -INFINITY, tile_max_b = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * t + (e & 1);
          const int qrow = e < 2 ? row_a : row_b;
          s[n][e] = (full_tile || key <= qrow) ? s[n][e] * scale_log2 : -INFINITY;
        }
        tile_max_a = fmaxf(tile_max_a, fmaxf(s[n][0], s[n][1]));
        tile_max_b = fmaxf(tile_max_b, fmaxf(s[n][2], s[n][3]));
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset <<= 1) {
        tile_max_a = fmaxf(tile_max_a, __shfl_xor_sync(0xffffffffu, tile_max_a, offset));
        tile_max_b = fmaxf(tile_max_b, __shfl_xor_sync(0xffffffffu, tile_max_b, offset));
      }
      const float new_a = fmaxf(m_a, tile_max_a), new_b = fmaxf(m_b, tile_max_b);
      // A row with no valid key yet keeps m = -inf; subtract 0 instead so exp2 gives 0, not NaN.
      const float use_a = new_a == -INFINITY ? 0.0f : new_a;
      const float use_b = new_b == -INFINITY ? 0.0f : new_b;
      const float alpha_a = exp2f(m_a - use_a), alpha_b = exp2f(m_b - use_b);
      m_a = new_a;
      m_b = new_b;
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int n = 0; n < kKBlocks; ++n) {
        s[n][0] = exp2f(s[n][0] - use_a);
        s[n][1] = exp2f(s[n][1] - use_a);
        s[n][2] = exp2f(s[n][2] - use_b);
        s[n][3] = exp2f(s[n][3] - use_b);
        sum_a += s[n][0] + s[n][1];
        sum_b += s[n][2] + s[n][3];
      }
      l_a = l_a * alpha_a + sum_a;
      l_b = l_b * alpha_b + sum_b;
#pragma unroll
      for (int n = 0; n < kDBlocks; ++n) {
        o[n][0] *= alpha_a;
        o[n][1] *= alpha_a;
        o[n][2] *= alpha_b;
        o[n][3] *= alpha_b;
      }
#pragma unroll
      for (int c = 0; c < kKChunks; ++c) {
        const uint32_t a0 = PackBf16(s[2 * c][0], s[2 * c][1]);
        const uint32_t a1 = PackBf16(s[2 * c][2], s[2 * c][3]);
        const uint32_t a2 = PackBf16(s[2 * c + 1][0], s[2 * c + 1][1]);
        const uint32_t a3 = PackBf16(s[2 * c + 1][2], s[2 * c + 1][3]);
#pragma unroll
        for (int n = 0; n < kDBlocks; n += 2) {
          // Matrices (transposed): keys c*16 + 0..7 and + 8..15 of dims n*8.., then of dims (n+1)*8...
          uint32_t b[4];
          LoadMatrixX4Trans(b, vt + (c * 16 + (mat & 1) * 8 + mrow) * kRow + (n + (mat >> 1)) * 8);
          MmaBf16(o[n], a0, a1, a2, a3, b[0], b[1]);
          MmaBf16(o[n + 1], a0, a1, a2, a3, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }
  // Row sums: each of the 4 threads of a row group holds a quarter of the columns.
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, offset);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, offset);
  }
  const int64_t out_stride = static_cast<int64_t>(shape.num_heads) * kHeadDim;
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
#pragma unroll
  for (int n = 0; n < kDBlocks; ++n) {
    const int d = head * kHeadDim + n * 8 + 2 * t;
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

// ---------------------------------------------------------------- tensor-core path, 32 rows per warp

// Each warp owns two 16-row tiles of queries (32 rows), so every K and V fragment loaded from shared
// memory feeds two mma instead of one; Q is staged in shared memory (cp.async, with the first K/V tile)
// and re-read per key tile through ldmatrix, which keeps the registers for the 2 x 16 x head_dim fp32
// output accumulators. 4 warps x 32 rows = 128 queries per block, kBlockK keys per tile, two-stage K/V
// ring as in the 16-row kernel. Softmax runs in raw score units: the running max m is a raw score and
// p = 2^(s * scale_log2 - m * scale_log2), one FFMA and one ex2 per score.
constexpr int kWideWarps = 4;
constexpr int kWideRowTiles = 2;
constexpr int kWideBlockQ = kWideWarps * kWideRowTiles * 16;

template <int kHeadDim, int kBlockK>
__host__ __device__ constexpr int WideSharedBytes() {
  return (kWideBlockQ + 2 /*K, V*/ * 2 /*stages*/ * kBlockK) * (kHeadDim + kPad) * 2 /*bytes*/;
}

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Blocks per SM: at head_dim 128 the 2 x 16 x 128 accumulators take the registers of two blocks (255
// each, a few bytes spilled); at 64 three fit.
template <int kHeadDim>
__host__ __device__ constexpr int WideMinBlocks() {
  return kHeadDim >= 128 ? 2 : 3;
}

template <int kHeadDim, int kBlockK>
__global__ void __launch_bounds__(kWideWarps * 32, WideMinBlocks<kHeadDim>())
    AttentionMmaWideKernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ cu_seqlens,
                           const AttentionShape shape, float scale_log2, __nv_bfloat16* __restrict__ out) {
  constexpr int kDChunks = kHeadDim / 16;
  constexpr int kDBlocks = kHeadDim / 8;
  constexpr int kKBlocks = kBlockK / 8;
  constexpr int kKChunks = kBlockK / 16;
  constexpr int kRow = kHeadDim + kPad;
  constexpr int kStage = kBlockK * kRow;
  constexpr int kCopiesPerRow = kHeadDim / 8;
  constexpr int kThreads = kWideWarps * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kWideBlockQ][kRow]
  __nv_bfloat16* k_s = q_s + kWideBlockQ * kRow;                    // [2][kBlockK][kRow]
  __nv_bfloat16* v_s = k_s + 2 * kStage;                            // [2][kBlockK][kRow]

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kWideBlockQ;  // longest tiles first
  if (q0 >= len) return;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int warp_q0 = q0 + warp * 32;  // first query row of this warp (local index)
  const int warp_last = min(warp_q0 + 31, len - 1);
  const __nv_bfloat16* k_head = k + start * shape.kv_stride + kv_head * kHeadDim;
  const __nv_bfloat16* v_head = v + start * shape.kv_stride + kv_head * kHeadDim;

  // Q tile: rows past the sequence end are zero-filled.
  {
    const __nv_bfloat16* q_head = q + start * shape.q_stride + head * kHeadDim;
    for (int idx = threadIdx.x; idx < kWideBlockQ * kCopiesPerRow; idx += kThreads) {
      const int r = idx / kCopiesPerRow;
      const int d = (idx - r * kCopiesPerRow) * 8;
      const bool valid = q0 + r < len;
      const int64_t off = valid ? static_cast<int64_t>(q0 + r) * shape.q_stride + d : 0;
      CopyAsync16(q_s + r * kRow + d, q_head + off, valid ? 16 : 0);
    }
  }
  auto load_tile = [&](int tile, int stage) {
    const int k0 = tile * kBlockK;
    for (int idx = threadIdx.x; idx < kBlockK * kCopiesPerRow; idx += kThreads) {
      const int j = idx / kCopiesPerRow;
      const int d = (idx - j * kCopiesPerRow) * 8;
      const bool valid = k0 + j < len;
      const int64_t off = valid ? static_cast<int64_t>(k0 + j) * shape.kv_stride + d : 0;
      CopyAsync16(k_s + stage * kStage + j * kRow + d, k_head + off, valid ? 16 : 0);
      CopyAsync16(v_s + stage * kStage + j * kRow + d, v_head + off, valid ? 16 : 0);
    }
    CopyAsyncCommit();
  };

  const int key_end = min(len, q0 + kWideBlockQ);
  const int num_tiles = (key_end + kBlockK - 1) / kBlockK;
  load_tile(0, 0);  // commits the Q copies too

  float o[kWideRowTiles][kDBlocks][4];
  float m[kWideRowTiles][2], l[kWideRowTiles][2];
#pragma unroll
  for (int rt = 0; rt < kWideRowTiles; ++rt) {
#pragma unroll
    for (int n = 0; n < kDBlocks; ++n) o[rt][n][0] = o[rt][n][1] = o[rt][n][2] = o[rt][n][3] = 0.0f;
    m[rt][0] = m[rt][1] = -INFINITY;
    l[rt][0] = l[rt][1] = 0.0f;
  }

  const int mat = lane >> 3, mrow = lane & 7;
  // ldmatrix row address of this lane in the Q tile for row tile rt (A fragment: matrices a0..a3 are
  // rows 0-7 / 8-15 of columns 0-7, then of columns 8-15).
  const __nv_bfloat16* q_lane = q_s + (warp * 32 + (mat & 1) * 8 + mrow) * kRow + (mat >> 1) * 8;

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < num_tiles) {
      load_tile(tile + 1, stage ^ 1);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();
    const int k0 = tile * kBlockK;
    if (k0 <= warp_last) {
      const __nv_bfloat16* kt = k_s + stage * kStage;
      const __nv_bfloat16* vt = v_s + stage * kStage;
      float s[kWideRowTiles][kKBlocks][4];
#pragma unroll
      for (int rt = 0; rt < kWideRowTiles; ++rt) {
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) s[rt][n][0] = s[rt][n][1] = s[rt][n][2] = s[rt][n][3] = 0.0f;
      }
#pragma unroll
      for (int c = 0; c < kDChunks; c += 2) {
        uint32_t a[kWideRowTiles][2][4];
#pragma unroll
        for (int rt = 0; rt < kWideRowTiles; ++rt) {
          LoadMatrixX4(a[rt][0], q_lane + rt * 16 * kRow + c * 16);
          LoadMatrixX4(a[rt][1], q_lane + rt * 16 * kRow + (c + 1) * 16);
        }
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) {
          uint32_t b[4];
          LoadMatrixX4(b, kt + (n * 8 + mrow) * kRow + c * 16 + mat * 8);
#pragma unroll
          for (int rt = 0; rt < kWideRowTiles; ++rt) {
            MmaBf16(s[rt][n], a[rt][0][0], a[rt][0][1], a[rt][0][2], a[rt][0][3], b[0], b[1]);
            MmaBf16(s[rt][n], a[rt][1][0], a[rt][1][1], a[rt][1][2], a[rt][1][3], b[2], b[3]);
          }
        }
      }
      uint32_t pa[kWideRowTiles][kKChunks][4];
#pragma unroll
      for (int rt = 0; rt < kWideRowTiles; ++rt) {
        const int rt_q0 = warp_q0 + rt * 16;
        const int row_a = rt_q0 + g, row_b = row_a + 8;
        // Mask keys after the query (this also covers keys >= len); a tile whose last key precedes the
        // row tile's first query needs no mask.
        if (k0 + kBlockK - 1 > rt_q0) {
#pragma unroll
          for (int n = 0; n < kKBlocks; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + n * 8 + 2 * t + (e & 1);
              if (key > (e < 2 ? row_a : row_b)) s[rt][n][e] = -INFINITY;
            }
          }
        }
        float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) {
          max_a = fmaxf(max_a, fmaxf(s[rt][n][0], s[rt][n][1]));
          max_b = fmaxf(max_b, fmaxf(s[rt][n][2], s[rt][n][3]));
        }
#pragma unroll
        for (int offset = 1; offset < 4; offset <<= 1) {
          max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, offset));
          max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, offset));
        }
        const float new_a = fmaxf(m[rt][0], max_a), new_b = fmaxf(m[rt][1], max_b);
        // A row with no valid key yet keeps m = -inf; subtract 0 instead so ex2 gives 0, not NaN.
        const float neg_a = new_a == -INFINITY ? 0.0f : -new_a * scale_log2;
        const float neg_b = new_b == -INFINITY ? 0.0f : -new_b * scale_log2;
        const float alpha_a = FastExp2(fmaf(m[rt][0], scale_log2, neg_a));
        const float alpha_b = FastExp2(fmaf(m[rt][1], scale_log2, neg_b));
        m[rt][0] = new_a;
        m[rt][1] = new_b;
        float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
        for (int n = 0; n < kKBlocks; ++n) {
          s[rt][n][0] = FastExp2(fmaf(s[rt][n][0], scale_log2, neg_a));
          s[rt][n][1] = FastExp2(fmaf(s[rt][n][1], scale_log2, neg_a));
          s[rt][n][2] = FastExp2(fmaf(s[rt][n][2], scale_log2, neg_b));
          s[rt][n][3] = FastExp2(fmaf(s[rt][n][3], scale_log2, neg_b));
          sum_a += s[rt][n][0] + s[rt][n][1];
          sum_b += s[rt][n][2] + s[rt][n][3];
        }
        l[rt][0] = l[rt][0] * alpha_a + sum_a;
        l[rt][1] = l[rt][1] * alpha_b + sum_b;
#pragma unroll
        for (int n = 0; n < kDBlocks; ++n) {
          o[rt][n][0] *= alpha_a;
          o[rt][n][1] *= alpha_a;
          o[rt][n][2] *= alpha_b;
          o[rt][n][3] *= alpha_b;
        }
#pragma unroll
        for (int c = 0; c < kKChunks; ++c) {
          pa[rt][c][0] = PackBf16(s[rt][2 * c][0], s[rt][2 * c][1]);
          pa[rt][c][1] = PackBf16(s[rt][2 * c][2], s[rt][2 * c][3]);
          pa[rt][c][2] = PackBf16(s[rt][2 * c + 1][0], s[rt][2 * c + 1][1]);
          pa[rt][c][3] = PackBf16(s[rt][2 * c + 1][2], s[rt][2 * c + 1][3]);
        }
      }
#pragma unroll
      for (int c = 0; c < kKChunks; ++c) {
#pragma unroll
        for (int n = 0; n < kDBlocks; n += 2) {
          uint32_t b[4];
          LoadMatrixX4Trans(b, vt + (c * 16 + (mat & 1) * 8 + mrow) * kRow + (n + (mat >> 1)) * 8);
#pragma unroll
          for (int rt = 0; rt < kWideRowTiles; ++rt) {
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
  for (int rt = 0; rt < kWideRowTiles; ++rt) {
    float la = l[rt][0], lb = l[rt][1];
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      la += __shfl_xor_sync(0xffffffffu, la, offset);
      lb += __shfl_xor_sync(0xffffffffu, lb, offset);
    }
    const int row_a = warp_q0 + rt * 16 + g, row_b = row_a + 8;
    const float inv_a = 1.0f / la, inv_b = 1.0f / lb;
#pragma unroll
    for (int n = 0; n < kDBlocks; ++n) {
      const int d = head * kHeadDim + n * 8 + 2 * t;
      if (row_a < len) {
        *reinterpret_cast<uint32_t*>(out + (start + row_a) * out_stride + d) =
            PackBf16(o[rt][n][0] * inv_a, o[rt][n][1] * inv_a);
      }
      if (row_b < len) {
        *reinterpret_cast<uint32_t*>(out + (start + row_b) * out_stride + d) =
            PackBf16(o[rt][n][2] * inv_b, o[rt][n][3] * inv_b);
      }
    }
  }
}

// ---------------------------------------------------------------- Hopper path (sm_90a, head_dim 128)

// Two warpgroups per block, 64 query rows each (128 queries per block), 128-key tiles. S = Q K^T is one
// wgmma.m64n128k16 chain per warpgroup with Q and K both read from shared memory; O += P V takes P from
// registers (the S accumulator of keys 16c .. 16c + 15 is exactly the A fragment of k-step c, as for
// mma.sync) and V from shared memory, transposed (N-major). Q, K and V tiles sit in shared memory in the
// 128-byte swizzled K-major layout wgmma reads: a 128-row tile is two 64-column halves; inside a half,
// row r is 128 bytes at r * 128 and its 16-byte chunk c lives at chunk c ^ (r % 8). The same bytes are the
// N-major (dims contiguous) 128-byte swizzled layout of V: 8-key groups 1024 bytes apart (stride byte
// offset), the two 64-dim halves kHopperHalfBytes apart (leading byte offset).
// Loads are cp.async into a three-stage K/V ring: tile i + 2 starts loading once tile i + 1 has landed,
// into the stage of tile i - 1, whose last reader (P.V of tile i - 1) every thread has awaited before the
// one barrier per tile (the copies go out right after the two products below). Per warpgroup, S of tile
// i + 1 and P.V of tile i are issued back to back and only the S is awaited, so the tensor cores run P.V
// while the softmax of tile i + 1 runs. O is rescaled only when some row's maximum moved (alpha != 1).
constexpr int kHopperHeadDim = 128;
constexpr int kHopperBlockQ = 128;
constexpr int kHopperBlockK = 128;
constexpr int kHopperThreads = 256;
constexpr int kHopperStages = 3;
constexpr int kHopperHalfBytes = 128 * 128;             // one 64-column half of a 128-row tile
constexpr int kHopperTileBytes = 2 * kHopperHalfBytes;  // a 128 x 128 bf16 tile
constexpr int kHopperSmem = (1 + 2 * kHopperStages) * kHopperTileBytes + 1024;  // + room to align to 1024
static_assert(kHopperSmem <= 227 * 1024, "Hopper attention tiles exceed shared memory");

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte units),
// 128-byte swizzle (mode 1 in bits 62-63). Base offset 0: tiles start on 1024-byte boundaries.
__device__ __forceinline__ uint64_t WgmmaDesc(uint32_t smem_address, uint32_t leading_bytes,
                                              uint32_t stride_bytes) {
  return static_cast<uint64_t>((smem_address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void WgmmaWaitAll() { WgmmaWait<0>(); }

// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous wgmma.
__device__ __forceinline__ void FenceOperands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define SCORED_WGMMA_ACC8(b)                                                                      \
  "+f"(d[b + 0]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), \
      "+f"(d[b + 6]), "+f"(d[b + 7])
#define SCORED_WGMMA_ACC64                                                                  \
  SCORED_WGMMA_ACC8(0), SCORED_WGMMA_ACC8(8), SCORED_WGMMA_ACC8(16), SCORED_WGMMA_ACC8(24), \
      SCORED_WGMMA_ACC8(32), SCORED_WGMMA_ACC8(40), SCORED_WGMMA_ACC8(48), SCORED_WGMMA_ACC8(56)
#define SCORED_WGMMA_D64                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d[64 x 128 per warpgroup] (+)= A[64 x 16] * B[16 x 128]: A and B K-major in shared memory.
// accumulate == 0 overwrites d.
__device__ __forceinline__ void WgmmaSS(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SCORED_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : SCORED_WGMMA_ACC64
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#endif
}

// d[64 x 128 per warpgroup] += A[64 x 16] * B[16 x 128]: A from registers (mma.sync A-fragment layout),
// B N-major in shared memory (imm-trans-b = 1).
__device__ __forceinline__ void WgmmaRS(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SCORED_WGMMA_D64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : SCORED_WGMMA_ACC64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
#endif
}

#undef SCORED_WGMMA_D64
#undef SCORED_WGMMA_ACC64
#undef SCORED_WGMMA_ACC8

__device__ __forceinline__ void CopyAsync16To(uint32_t smem_address, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address), "l"(src),
               "r"(src_bytes));
}

// Copies rows [0, 128) of a [rows, 128] bf16 tile (row stride `stride` elements) into the swizzled
// layout at `tile`; rows >= valid_rows are zero-filled. 16 consecutive threads copy one 256-byte row.
__device__ __forceinline__ void LoadSwizzledTile(uint32_t tile,
                                                 const __nv_bfloat16* src,  // [valid_rows, stride]
                                                 int64_t stride, int valid_rows) {
#pragma unroll
  for (int i = 0; i < kHopperBlockK * 16 / kHopperThreads; ++i) {
    const int idx = threadIdx.x + i * kHopperThreads;
    const int r = idx >> 4, c = idx & 15;
    const bool valid = r < valid_rows;
    const uint32_t dst = tile + (c >> 3) * kHopperHalfBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4);
    CopyAsync16To(dst, src + (valid ? static_cast<int64_t>(r) * stride + c * 8 : 0), valid ? 16 : 0);
  }
}

__global__ void __launch_bounds__(kHopperThreads, 1)
    AttentionWgmmaKernel(const __nv_bfloat16* __restrict__ q,     // [num_tokens, q_stride]
                         const __nv_bfloat16* __restrict__ k,     // [num_tokens, kv_stride]
                         const __nv_bfloat16* __restrict__ v,     // [num_tokens, kv_stride]
                         const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                         const AttentionShape shape, float scale_log2,
                         __nv_bfloat16* __restrict__ out) {  // [num_tokens, nh * 128]
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t smem_base = (SharedAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_tile = smem_base;
  // Stage s: K at 1 + 2 s, V at 2 + 2 s (in tiles).
  auto k_tile = [&](int stage) { return smem_base + (1 + 2 * stage) * kHopperTileBytes; };
  auto v_tile = [&](int stage) { return smem_base + (2 + 2 * stage) * kHopperTileBytes; };

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - cu_seqlens[seq];
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kHopperBlockQ;  // longest tiles first
  if (q0 >= len) return;
  const int kv_head = head / (shape.num_heads / shape.num_kv_heads);
  const int warpgroup = threadIdx.x >> 7;
  const int warp_in_group = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = q0 + warpgroup * 64 + warp_in_group * 16;  // first query row of this warp (local)
  const int row_a = warp_row0 + g, row_b = row_a + 8;
  const __nv_bfloat16* k_head = k + start * shape.kv_stride + kv_head * kHopperHeadDim;
  const __nv_bfloat16* v_head = v + start * shape.kv_stride + kv_head * kHopperHeadDim;
  const int num_tiles = (min(len, q0 + kHopperBlockQ) + kHopperBlockK - 1) / kHopperBlockK;

  LoadSwizzledTile(q_tile, q + (start + q0) * shape.q_stride + head * kHopperHeadDim, shape.q_stride,
                   len - q0);
  auto load_kv = [&](int tile) {
    const int k0 = tile * kHopperBlockK;
    const int stage = tile % kHopperStages;
    LoadSwizzledTile(k_tile(stage), k_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride,
                     len - k0);
    LoadSwizzledTile(v_tile(stage), v_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride,
                     len - k0);
  };
  load_kv(0);
  CopyAsyncCommit();
  if (num_tiles > 1) load_kv(1);
  CopyAsyncCommit();

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const uint32_t q_rows = q_tile + warpgroup * 64 * 128;  // this warpgroup's 64 rows of each half
  float s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.0f;
  // S = Q K^T of one tile into s (issued, not awaited; the caller fences first).
  auto issue_scores = [&](int stage) {
    FenceOperands(s);
#pragma unroll
    for (int kk = 0; kk < kHopperHeadDim / 16; ++kk) {
      const uint32_t offset = (kk >> 2) * kHopperHalfBytes + (kk & 3) * 32;
      WgmmaSS(s, WgmmaDesc(q_rows + offset, 16, 1024), WgmmaDesc(k_tile(stage) + offset, 16, 1024), kk > 0);
    }
    WgmmaCommit();
  };

  CopyAsyncWait<1>();  // Q and tile 0 have landed; tile 1 may still be in flight
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
  __syncthreads();
  WgmmaFence();
  issue_scores(0);
  WgmmaWaitAll();
  FenceOperands(s);

  // Iteration `tile` starts with S of tile in s and P.V of tile - 1 possibly still running. It turns s
  // into P, waits for that P.V, rescales O, then (after the barrier that makes tile + 1 visible and frees
  // the stage of tile - 1 for tile + 2) issues S of tile + 1 and P.V of tile, and waits only for the S:
  // the P.V runs on while the next iteration's softmax does.
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kHopperStages;
    const int k0 = tile * kHopperBlockK;

    // s[4 i + e]: row (e < 2 ? row_a : row_b), key k0 + 8 i + 2 t + (e & 1). Mask keys after the query
    // (this also covers keys >= len); a tile whose last key precedes the warp's first row needs none.
    if (k0 + kHopperBlockK - 1 > warp_row0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + i * 8 + 2 * t + (e & 1);
          if (key > (e < 2 ? row_a : row_b)) s[4 * i + e] = -INFINITY;
        }
      }
    }
    float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      max_a = fmaxf(max_a, fmaxf(s[4 * i], s[4 * i + 1]));
      max_b = fmaxf(max_b, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, offset));
      max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, offset));
    }
    const float new_a = fmaxf(m_a, max_a), new_b = fmaxf(m_b, max_b);
    // A row with no valid key yet keeps m = -inf; subtract 0 instead so ex2 gives 0, not NaN.
    const float neg_a = new_a == -INFINITY ? 0.0f : -new_a * scale_log2;
    const float neg_b = new_b == -INFINITY ? 0.0f : -new_b * scale_log2;
    const float alpha_a = FastExp2(fmaf(m_a, scale_log2, neg_a));
    const float alpha_b = FastExp2(fmaf(m_b, scale_log2, neg_b));
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      s[4 * i] = FastExp2(fmaf(s[4 * i], scale_log2, neg_a));
      s[4 * i + 1] = FastExp2(fmaf(s[4 * i + 1], scale_log2, neg_a));
      s[4 * i + 2] = FastExp2(fmaf(s[4 * i + 2], scale_log2, neg_b));
      s[4 * i + 3] = FastExp2(fmaf(s[4 * i + 3], scale_log2, neg_b));
      sum_a += s[4 * i] + s[4 * i + 1];
      sum_b += s[4 * i + 2] + s[4 * i + 3];
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
    WgmmaWaitAll();  // P.V of tile - 1: its P registers are free and O is final
    FenceOperands(o);
    uint32_t p[kHopperBlockK / 16][4];
#pragma unroll
    for (int c = 0; c < kHopperBlockK / 16; ++c) {
      p[c][0] = PackBf16(s[8 * c], s[8 * c + 1]);
      p[c][1] = PackBf16(s[8 * c + 2], s[8 * c + 3]);
      p[c][2] = PackBf16(s[8 * c + 4], s[8 * c + 5]);
      p[c][3] = PackBf16(s[8 * c + 6], s[8 * c + 7]);
    }
    // Once the running maxima settle, alpha is exactly 1 for every row of the warp: skip the multiply
    // (x * 1 == x, so the result is the same bit for bit).
    if (__any_sync(0xffffffffu, alpha_a != 1.0f || alpha_b != 1.0f)) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        o[4 * i] *= alpha_a;
        o[4 * i + 1] *= alpha_a;
        o[4 * i + 2] *= alpha_b;
        o[4 * i + 3] *= alpha_b;
      }
    }
    WgmmaFence();  // O, P (and s, below) were written by ordinary instructions
    FenceOperands(o);
    const bool more = tile + 1 < num_tiles;  // uniform over the block
    if (more) {
      CopyAsyncWait<0>();  // tile + 1 has landed
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();  // every thread is past P.V of tile - 1: its stage takes tile + 2
      issue_scores((tile + 1) % kHopperStages);
    }
#pragma unroll
    for (int c = 0; c < kHopperBlockK / 16; ++c) {
      // Keys 16 c .. 16 c + 15: two 8-key groups (1024 bytes each) into the tile.
      WgmmaRS(o, p[c], WgmmaDesc(v_tile(stage) + c * 2048, kHopperHalfBytes, 1024));
    }
    WgmmaCommit();
    // The copies of tile + 2 go out after the tensor cores have work; their stage (that of tile - 1) is
    // read by neither of the two products just issued.
    if (more) {
      if (tile + 2 < num_tiles) load_kv(tile + 2);
      CopyAsyncCommit();
    }
    WgmmaWait<1>();  // S of tile + 1 (when issued); P.V of tile may still run
    FenceOperands(s);
  }
  WgmmaWaitAll();
  FenceOperands(o);

  // o[4 i + e]: row (e < 2 ? row_a : row_b), dims 8 i + 2 t + (e & 1). Row sums: the 4 threads of a row
  // group each hold a quarter of the keys.
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, offset);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, offset);
  }
  const int64_t out_stride = static_cast<int64_t>(shape.num_heads) * kHopperHeadDim;
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int d = head * kHopperHeadDim + i * 8 + 2 * t;
    if (row_a < len) {
      *reinterpret_cast<uint32_t*>(out + (start + row_a) * out_stride + d) =
          PackBf16(o[4 * i] * inv_a, o[4 * i + 1] * inv_a);
    }
    if (row_b < len) {
      *reinterpret_cast<uint32_t*>(out + (start + row_b) * out_stride + d) =
          PackBf16(o[4 * i + 2] * inv_b, o[4 * i + 3] * inv_b);
    }
  }
#endif
}

absl::Status CheckShape(const void* q, const void* k, const void* v, const int32_t* cu_seqlens,
                        const AttentionShape& s, const void* out) {
  if (s.num_tokens < 0 || s.num_seqs < 0 || s.max_seqlen < 0 || s.num_heads < 1 || s.num_kv_heads < 1 ||
      s.num_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        "CausalAttention: bad sizes (num_heads must be a multiple of num_kv_heads)");
  }
  const int d = s.head_dim;
  if (d != 8 && d != 16 && d != 32 && d != 64 && d != 128) {
    return absl::InvalidArgumentError("CausalAttention: head_dim must be 8, 16, 32, 64 or 128");
  }
  if (s.q_stride < static_cast<int64_t>(s.num_heads) * d ||
      s.kv_stride < static_cast<int64_t>(s.num_kv_heads) * d) {
    return absl::InvalidArgumentError("CausalAttention: strides smaller than a token's heads");
  }
  if (s.num_tokens > 0 &&
      (q == nullptr || k == nullptr || v == nullptr || cu_seqlens == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError("CausalAttention: null pointer");
  }
  if (s.num_seqs > 65535) return absl::InvalidArgumentError("CausalAttention: more than 65535 sequences");
  return absl::OkStatus();
}

template <int kHeadDim, typename T>
absl::Status LaunchSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                        const AttentionShape& s, T* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kSimtBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale = 1.0f / sqrtf(static_cast<float>(kHeadDim));
  AttentionSimtKernel<kHeadDim><<<grid, kSimtWarps * 32, 0, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v),
                                                                      cu_seqlens, s, scale, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status DispatchSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                          const AttentionShape& s, T* out, cudaStream_t stream) {
  switch (s.head_dim) {
    case 8:
      return LaunchSimt<8>(q, k, v, cu_seqlens, s, out, stream);
    case 16:
      return LaunchSimt<16>(q, k, v, cu_seqlens, s, out, stream);
    case 32:
      return LaunchSimt<32>(q, k, v, cu_seqlens, s, out, stream);
    case 64:
      return LaunchSimt<64>(q, k, v, cu_seqlens, s, out, stream);
    default:
      return LaunchSimt<128>(q, k, v, cu_seqlens, s, out, stream);
  }
}

template <int kHeadDim>
absl::Status LaunchMma(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                       const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, MmaBlockQ<kHeadDim>())),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(kHeadDim));
  constexpr int kSmem = MmaSharedBytes<kHeadDim>();
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(AttentionMmaKernel<kHeadDim>), kSmem));
  AttentionMmaKernel<kHeadDim><<<grid, MmaWarps<kHeadDim>() * 32, kSmem, stream>>>(
      ToDevice(q), ToDevice(k), ToDevice(v), cu_seqlens, s, scale_log2, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <int kHeadDim, int kBlockK>
absl::Status LaunchMmaWide(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                           const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kWideBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(kHeadDim));
  constexpr int kSmem = WideSharedBytes<kHeadDim, kBlockK>();
  SCORED_CUDA_CHECK(
      EnsureDynamicSmem(reinterpret_cast<const void*>(AttentionMmaWideKernel<kHeadDim, kBlockK>), kSmem));
  AttentionMmaWideKernel<kHeadDim, kBlockK><<<grid, kWideWarps * 32, kSmem, stream>>>(
      ToDevice(q), ToDevice(k), ToDevice(v), cu_seqlens, s, scale_log2, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

// The Hopper kernel runs on compute capability 9.0 devices, when this library carries its sm_90a code
// (CMAKE_CUDA_ARCHITECTURES 90a-real; without it the kernel compiles to nothing and is never chosen).
bool HopperAvailable() {
  static const bool compiled = [] {
    cudaFuncAttributes attributes;
    return cudaFuncGetAttributes(&attributes, AttentionWgmmaKernel) == cudaSuccess &&
           attributes.binaryVersion == 90;
  }();
  if (!compiled) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0;
}

absl::Status LaunchWgmma(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                         const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kHopperBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(kHopperHeadDim));
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(AttentionWgmmaKernel), kHopperSmem));
  AttentionWgmmaKernel<<<grid, kHopperThreads, kHopperSmem, stream>>>(
      ToDevice(q), ToDevice(k), ToDevice(v), cu_seqlens, s, scale_log2, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

bool MmaAligned(const void* q, const void* k, const void* v, const void* out, const AttentionShape& s) {
  return IsAligned(q, 4) && IsAligned(k, 16) && IsAligned(v, 16) && IsAligned(out, 4) &&
         s.q_stride % 2 == 0 && s.kv_stride % 8 == 0;
}

// The 32-row kernel also copies the Q tile with 16-byte cp.async: q 16-byte aligned, q_stride % 8 == 0.
bool WideAligned(const void* q, const void* k, const void* v, const void* out, const AttentionShape& s) {
  return MmaAligned(q, k, v, out, s) && IsAligned(q, 16) && s.q_stride % 8 == 0;
}

}  // namespace

absl::Status CausalAttentionWith(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                 const int32_t* cu_seqlens, const AttentionShape& shape, bf16_t* out,
                                 cudaStream_t stream) {
  const absl::Status st = CheckShape(q, k, v, cu_seqlens, shape, out);
  if (!st.ok()) return st;
  if (shape.num_tokens == 0 || shape.num_seqs == 0 || shape.max_seqlen == 0) return absl::OkStatus();
  if (kernel == AttentionKernel::kAuto) return CausalAttention(q, k, v, cu_seqlens, shape, out, stream);
  if (kernel == AttentionKernel::kSimt) return DispatchSimt(q, k, v, cu_seqlens, shape, out, stream);
  const bool aligned = MmaAligned(q, k, v, out, shape);
  const bool wide_ok = WideAligned(q, k, v, out, shape);
  switch (kernel) {
    case AttentionKernel::kMma16Rows:
      if (aligned && shape.head_dim == 128) return LaunchMma<128>(q, k, v, cu_seqlens, shape, out, stream);
      if (aligned && shape.head_dim == 64) return LaunchMma<64>(q, k, v, cu_seqlens, shape, out, stream);
      if (aligned && shape.head_dim == 32) return LaunchMma<32>(q, k, v, cu_seqlens, shape, out, stream);
      break;
    case AttentionKernel::kMma32RowsK32:
      if (wide_ok && shape.head_dim == 128)
        return LaunchMmaWide<128, 32>(q, k, v, cu_seqlens, shape, out, stream);
      if (wide_ok && shape.head_dim == 64)
        return LaunchMmaWide<64, 32>(q, k, v, cu_seqlens, shape, out, stream);
      break;
    case AttentionKernel::kMma32RowsK64:
      if (wide_ok && shape.head_dim == 128)
        return LaunchMmaWide<128, 64>(q, k, v, cu_seqlens, shape, out, stream);
      if (wide_ok && shape.head_dim == 64)
        return LaunchMmaWide<64, 64>(q, k, v, cu_seqlens, shape, out, stream);
      break;
    case AttentionKernel::kWgmma:
      if (wide_ok && shape.head_dim == 128 && HopperAvailable()) {
        return LaunchWgmma(q, k, v, cu_seqlens, shape, out, stream);
      }
      break;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      "CausalAttentionWith: this kernel does not support the shape or alignment");
}

template <typename T>
absl::Status CausalAttentionSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                                 const AttentionShape& shape, T* out, cudaStream_t stream) {
  const absl::Status st = CheckShape(q, k, v, cu_seqlens, shape, out);
  if (!st.ok()) return st;
  if (shape.num_tokens == 0 || shape.num_seqs == 0 || shape.max_seqlen == 0) return absl::OkStatus();
  return DispatchSimt(q, k, v, cu_seqlens, shape, out, stream);
}

template <typename T>
absl::Status CausalAttention(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                             const AttentionShape& shape, T* out, cudaStream_t stream) {
  const absl::Status st = CheckShape(q, k, v, cu_seqlens, shape, out);
  if (!st.ok()) return st;
  if (shape.num_tokens == 0 || shape.num_seqs == 0 || shape.max_seqlen == 0) return absl::OkStatus();
  if constexpr (sizeof(T) == 2) {
    // head_dim 128 and 64: the 32-row kernel with 64-key tiles (measured on an H200, 8 x 2048 tokens, 32
    // heads, 8 kv heads: 277 against 205 TFLOP/s for the 16-row kernel at 128, 237 against 191 at 64); it
    // also needs q 16-byte aligned.
    if (WideAligned(q, k, v, out, shape)) {
      if (shape.head_dim == 128 && HopperAvailable()) {
        return LaunchWgmma(q, k, v, cu_seqlens, shape, out, stream);
      }
      if (shape.head_dim == 128) return LaunchMmaWide<128, 64>(q, k, v, cu_seqlens, shape, out, stream);
      if (shape.head_dim == 64) return LaunchMmaWide<64, 64>(q, k, v, cu_seqlens, shape, out, stream);
    }
    if (MmaAligned(q, k, v, out, shape)) {
      switch (shape.head_dim) {
        case 32:
          return LaunchMma<32>(q, k, v, cu_seqlens, shape, out, stream);
        case 64:
          return LaunchMma<64>(q, k, v, cu_seqlens, shape, out, stream);
        case 128:
          return LaunchMma<128>(q, k, v, cu_seqlens, shape, out, stream);
        default:
          break;
      }
    }
  }
  return DispatchSimt(q, k, v, cu_seqlens, shape, out, stream);
}

template absl::Status CausalAttention<float>(const float*, const float*, const float*, const int32_t*,
                                             const AttentionShape&, float*, cudaStream_t);
template absl::Status CausalAttention<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status CausalAttentionSimt<float>(const float*, const float*, const float*, const int32_t*,
                                                 const AttentionShape&, float*, cudaStream_t);
template absl::Status CausalAttentionSimt<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                                  const AttentionShape&, bf16_t*, cudaStream_t);

}  // namespace scored::kernels
