// Causal GQA attention, Hopper kernels (sm_90a: wgmma.mma_async, head_dim 128 and 256). Contract of the op:
// attention.h; the dispatch that picks them (compute capability 9.0 device, library built for sm_90a, the
// 32-row mma.sync kernel's alignment): attention.cu. The head_dim-256 kernel (AttentionWgmma256Kernel, at
// the end) is this one with 64-key tiles; its comment says what differs.
//
// Formula: per query row, S = Q K^T times the scale (with a soft cap, tanh(S * scale / cap) * cap) over the
// keys in reach of the row (causal, own sequence, the window where there is one), online softmax per
// 128-key tile in raw score units (ScoreTransform: p = 2^(s * units - m * units), one FFMA + ex2 per score),
// O += P V with P rounded to bf16, out = O / l rounded once to bf16: the arithmetic of the 32-row mma.sync
// kernel (attention_mma.cu), same rounding points. With a window the key tiles wholly before the window of
// the block's first query are never loaded (FirstKeyTile).
// Shapes: q [num_tokens, q_stride], k and v [num_tokens, kv_stride], out [num_tokens, num_heads * 128]
// (AttentionShape). dtypes: bf16 in and out, fp32 accumulation and softmax.
// Grid: (query tiles of 128, heads, sequences), longest tiles first; 256 threads, one block per SM (225 KiB
// of dynamic shared memory). Limits: head_dim 128 (256: the second kernel); q, k, v 16-byte aligned with
// q_stride % 8 == 0 and kv_stride % 8 == 0, out 4-byte aligned. Built only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); compiled for another target the kernel traps, and WgmmaAvailable() (which
// checks the kernel's binary version and the device) keeps it from being chosen.
#include <cmath>

#include "engine/kernels/attention_common.cuh"
#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels::attention_internal {
namespace {

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
//
// The constants and helpers below are referenced only by the sm_90a bodies of the kernels (and some of the
// constants by the host code): a multi-architecture build (the release list, cmake/CudaArchitectures.cmake)
// compiles them unused for every other target.
#pragma nv_diag_suppress 177
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

// A warpgroup's m64n128 fp32 accumulator, one thread's share: the mma.sync accumulator layout of 16 8-column
// blocks (attention_common.cuh), element [i][e] is the instruction's register 4 i + e.
using Accumulator = float[16][4];

// The m64n64 accumulator of the head_dim-256 kernel's scores (8 8-column blocks, same layout).
using Accumulator64 = float[8][4];

// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous wgmma.
template <int kBlocks>
__device__ __forceinline__ void FenceOperands(float (&d)[kBlocks][4]) {
#pragma unroll
  for (int i = 0; i < kBlocks; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

#define SCORED_WGMMA_ACC8(i)                                                                        \
  "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]), "+f"(d[i + 1][0]), "+f"(d[i + 1][1]), \
      "+f"(d[i + 1][2]), "+f"(d[i + 1][3])
#define SCORED_WGMMA_ACC64                                                                \
  SCORED_WGMMA_ACC8(0), SCORED_WGMMA_ACC8(2), SCORED_WGMMA_ACC8(4), SCORED_WGMMA_ACC8(6), \
      SCORED_WGMMA_ACC8(8), SCORED_WGMMA_ACC8(10), SCORED_WGMMA_ACC8(12), SCORED_WGMMA_ACC8(14)
#define SCORED_WGMMA_D64                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d[64 x 128 per warpgroup] (+)= A[64 x 16] * B[16 x 128]: A and B K-major in shared memory.
// accumulate == 0 overwrites d.
__device__ __forceinline__ void WgmmaSS(Accumulator& d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
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
__device__ __forceinline__ void WgmmaRS(Accumulator& d, const uint32_t (&a)[4], uint64_t desc_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SCORED_WGMMA_D64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : SCORED_WGMMA_ACC64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
#endif
}

#define SCORED_WGMMA_ACC32 \
  SCORED_WGMMA_ACC8(0), SCORED_WGMMA_ACC8(2), SCORED_WGMMA_ACC8(4), SCORED_WGMMA_ACC8(6)
#define SCORED_WGMMA_D32                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// d[64 x 64 per warpgroup] (+)= A[64 x 16] * B[16 x 64]: A and B K-major in shared memory (the head_dim-256
// kernel's scores of a 64-key tile). accumulate == 0 overwrites d.
__device__ __forceinline__ void WgmmaSS64(Accumulator64& d, uint64_t desc_a, uint64_t desc_b,
                                          int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SCORED_WGMMA_D32
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : SCORED_WGMMA_ACC32
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#endif
}

#undef SCORED_WGMMA_D32
#undef SCORED_WGMMA_ACC32
#undef SCORED_WGMMA_D64
#undef SCORED_WGMMA_ACC64
#undef SCORED_WGMMA_ACC8

__device__ __forceinline__ void CopyAsync16To(uint32_t smem_address, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address), "l"(src),
               "r"(src_bytes));
}

// Copies rows [0, kRows) of a [rows, kDims] bf16 tile (row stride `stride` elements) into the swizzled
// layout at `tile`: kDims / 64 column blocks of kRows * 128 bytes; rows >= valid_rows are zero-filled.
// kDims / 8 consecutive threads copy one row.
template <int kRows, int kDims>
__device__ __forceinline__ void LoadSwizzledTile(uint32_t tile,
                                                 const __nv_bfloat16* src,  // [valid_rows, stride]
                                                 int64_t stride, int valid_rows) {
  constexpr int kChunks = kDims / 8;  // 16-byte chunks of a row
  static_assert(kRows * kChunks % kHopperThreads == 0, "whole copy rounds");
#pragma unroll
  for (int i = 0; i < kRows * kChunks / kHopperThreads; ++i) {
    const int idx = threadIdx.x + i * kHopperThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = r < valid_rows;
    const uint32_t dst = tile + (c >> 3) * (kRows * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
    CopyAsync16To(dst, src + (valid ? static_cast<int64_t>(r) * stride + c * 8 : 0), valid ? 16 : 0);
  }
}

template <bool kCap>
__global__ void __launch_bounds__(kHopperThreads, 1)
    AttentionWgmmaKernel(const __nv_bfloat16* __restrict__ q,     // [num_tokens, q_stride]
                         const __nv_bfloat16* __restrict__ k,     // [num_tokens, kv_stride]
                         const __nv_bfloat16* __restrict__ v,     // [num_tokens, kv_stride]
                         const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                         const AttentionShape shape, const ScoreTransform st,
                         __nv_bfloat16* __restrict__ out) {  // [num_tokens, nh * 128]
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t smem_base = (SharedAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_tile = smem_base;
  // Stage s: K at 1 + 2 s, V at 2 + 2 s (in tiles).
  auto k_tile = [&](int stage) { return smem_base + (1 + 2 * stage) * kHopperTileBytes; };
  auto v_tile = [&](int stage) { return smem_base + (2 + 2 * stage) * kHopperTileBytes; };

  BlockWork w;
  if (!LocateBlock(cu_seqlens, shape, kHopperBlockQ, w)) return;
  const int warpgroup = threadIdx.x >> 7;
  const int warp_in_group = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = w.q0 + warpgroup * 64 + warp_in_group * 16;  // first query row of this warp (local)
  const int row_a = warp_row0 + g, row_b = row_a + 8;
  const __nv_bfloat16* k_head = k + w.start * shape.kv_stride + w.kv_head * kHopperHeadDim;
  const __nv_bfloat16* v_head = v + w.start * shape.kv_stride + w.kv_head * kHopperHeadDim;
  const int num_tiles = (min(w.len, w.q0 + kHopperBlockQ) + kHopperBlockK - 1) / kHopperBlockK;
  const int first_tile = FirstKeyTile(w.q0, shape.window, kHopperBlockK);

  LoadSwizzledTile<kHopperBlockQ, kHopperHeadDim>(
      q_tile, q + (w.start + w.q0) * shape.q_stride + w.head * kHopperHeadDim, shape.q_stride, w.len - w.q0);
  auto load_kv = [&](int tile) {
    const int k0 = tile * kHopperBlockK;
    const int stage = tile % kHopperStages;
    LoadSwizzledTile<kHopperBlockK, kHopperHeadDim>(
        k_tile(stage), k_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride, w.len - k0);
    LoadSwizzledTile<kHopperBlockK, kHopperHeadDim>(
        v_tile(stage), v_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride, w.len - k0);
  };
  load_kv(first_tile);
  CopyAsyncCommit();
  if (first_tile + 1 < num_tiles) load_kv(first_tile + 1);
  CopyAsyncCommit();

  Accumulator o;
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const uint32_t q_rows = q_tile + warpgroup * 64 * 128;  // this warpgroup's 64 rows of each half
  Accumulator s;
#pragma unroll
  for (int i = 0; i < 16; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
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

  CopyAsyncWait<1>();  // Q and the first tile have landed; the second may still be in flight
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
  __syncthreads();
  WgmmaFence();
  issue_scores(first_tile % kHopperStages);
  WgmmaWaitAll();
  FenceOperands(s);

  // Iteration `tile` starts with S of tile in s and P.V of tile - 1 possibly still running. It turns s
  // into P, waits for that P.V, rescales O, then (after the barrier that makes tile + 1 visible and frees
  // the stage of tile - 1 for tile + 2) issues S of tile + 1 and P.V of tile, and waits only for the S:
  // the P.V runs on while the next iteration's softmax does.
  for (int tile = first_tile; tile < num_tiles; ++tile) {
    const int stage = tile % kHopperStages;
    const int k0 = tile * kHopperBlockK;

    // s[i][e]: row (e < 2 ? row_a : row_b), key k0 + 8 i + 2 t + (e & 1).
    float alpha[2];
    MaskedSoftmaxStepRaw<kCap>(st, shape.window, k0, warp_row0, row_a, row_b, t, s, m, l, alpha);
    WgmmaWaitAll();  // P.V of tile - 1: its P registers are free and O is final
    FenceOperands(o);
    uint32_t p[kHopperBlockK / 16][4];
#pragma unroll
    for (int c = 0; c < kHopperBlockK / 16; ++c) PackProbabilities(p[c], s, c);
    // Once the running maxima settle, alpha is exactly 1 for every row of the warp: skip the multiply
    // (x * 1 == x, so the result is the same bit for bit).
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) RescaleRows(o, alpha);
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

  // o[i][e]: row (e < 2 ? row_a : row_b), dims 8 i + 2 t + (e & 1).
  SumOverRowGroup(l[0], l[1]);
  StoreNormalizedRows(o, l[0], l[1], row_a, w.len, t, w.start,
                      static_cast<int64_t>(shape.num_heads) * kHopperHeadDim, w.head * kHopperHeadDim, out);
#else
  __trap();  // not built for sm_90a: WgmmaAvailable() never lets a launch reach this
#endif
}

// ---------------------------------------------------------------- head_dim 256

// The head_dim-256 kernel: the same two warpgroups x 64 query rows and the same arithmetic, with 64-key
// tiles. Per warpgroup, S = Q K^T of a tile is one wgmma.m64n64k16 chain (16 k-steps over the head dim) and
// O += P V two m64n128k16 chains (dims 0-127 into o_lo, 128-255 into o_hi: 128 fp32 accumulators a thread,
// 32 for S, 16 for P). Shared memory (225 KiB, one block per SM): Q 128 x 256 (64 KiB), K in two stages and
// V in three (32 KiB each), all in the 128-byte swizzled layout of 64-column blocks (rows x 128 bytes each).
// The pipeline is the head_dim-128 kernel's: at the barrier of iteration i, S of tile i has completed
// (its K stage takes tile i + 2) and P.V of tile i - 1 has (its V stage takes tile i + 2); K(i + 1) and
// V(i), read by the products issued next, sit in the other stages.
constexpr int kWideHeadDim = 256;
constexpr int kWideBlockK = 64;
constexpr int kWideKStages = 2;
constexpr int kWideVStages = 3;
constexpr int kWideQBytes = kHopperBlockQ * kWideHeadDim * 2;  // 64 KiB
constexpr int kWideKvBytes = kWideBlockK * kWideHeadDim * 2;   // 32 KiB: one K or V tile
constexpr int kWideQColumnBytes = kHopperBlockQ * 128;         // one 64-column block of the Q tile
constexpr int kWideKvColumnBytes = kWideBlockK * 128;          // one 64-column block of a K or V tile
constexpr int kWideSmem = kWideQBytes + (kWideKStages + kWideVStages) * kWideKvBytes + 1024;  // + alignment
static_assert(kWideSmem <= 227 * 1024, "Hopper head_dim-256 attention tiles exceed shared memory");
#pragma nv_diag_default 177

template <bool kCap>
__global__ void __launch_bounds__(kHopperThreads, 1)
    AttentionWgmma256Kernel(const __nv_bfloat16* __restrict__ q,     // [num_tokens, q_stride]
                            const __nv_bfloat16* __restrict__ k,     // [num_tokens, kv_stride]
                            const __nv_bfloat16* __restrict__ v,     // [num_tokens, kv_stride]
                            const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                            const AttentionShape shape, const ScoreTransform st,
                            __nv_bfloat16* __restrict__ out) {  // [num_tokens, nh * 256]
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t smem_base = (SharedAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_tile = smem_base;
  auto k_tile = [&](int tile) { return smem_base + kWideQBytes + (tile % kWideKStages) * kWideKvBytes; };
  auto v_tile = [&](int tile) {
    return smem_base + kWideQBytes + (kWideKStages + tile % kWideVStages) * kWideKvBytes;
  };

  BlockWork w;
  if (!LocateBlock(cu_seqlens, shape, kHopperBlockQ, w)) return;
  const int warpgroup = threadIdx.x >> 7;
  const int warp_in_group = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = w.q0 + warpgroup * 64 + warp_in_group * 16;  // first query row of this warp (local)
  const int row_a = warp_row0 + g, row_b = row_a + 8;
  const __nv_bfloat16* k_head = k + w.start * shape.kv_stride + w.kv_head * kWideHeadDim;
  const __nv_bfloat16* v_head = v + w.start * shape.kv_stride + w.kv_head * kWideHeadDim;
  const int num_tiles = (min(w.len, w.q0 + kHopperBlockQ) + kWideBlockK - 1) / kWideBlockK;
  const int first_tile = FirstKeyTile(w.q0, shape.window, kWideBlockK);

  LoadSwizzledTile<kHopperBlockQ, kWideHeadDim>(
      q_tile, q + (w.start + w.q0) * shape.q_stride + w.head * kWideHeadDim, shape.q_stride, w.len - w.q0);
  auto load_kv = [&](int tile) {
    const int k0 = tile * kWideBlockK;
    LoadSwizzledTile<kWideBlockK, kWideHeadDim>(
        k_tile(tile), k_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride, w.len - k0);
    LoadSwizzledTile<kWideBlockK, kWideHeadDim>(
        v_tile(tile), v_head + static_cast<int64_t>(k0) * shape.kv_stride, shape.kv_stride, w.len - k0);
  };
  load_kv(first_tile);
  CopyAsyncCommit();
  if (first_tile + 1 < num_tiles) load_kv(first_tile + 1);
  CopyAsyncCommit();

  Accumulator o_lo, o_hi;  // dims 0-127, 128-255
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    o_lo[i][0] = o_lo[i][1] = o_lo[i][2] = o_lo[i][3] = 0.0f;
    o_hi[i][0] = o_hi[i][1] = o_hi[i][2] = o_hi[i][3] = 0.0f;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const uint32_t q_rows = q_tile + warpgroup * 64 * 128;  // this warpgroup's 64 rows of each column block
  Accumulator64 s;
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
  // S = Q K^T of one tile into s (issued, not awaited; the caller fences first). k-step kk reads 16 dims:
  // column block kk / 4, bytes 32 (kk % 4) into each 128-byte row.
  auto issue_scores = [&](int tile) {
    FenceOperands(s);
    const uint32_t kt = k_tile(tile);
#pragma unroll
    for (int kk = 0; kk < kWideHeadDim / 16; ++kk) {
      const uint32_t in_row = (kk & 3) * 32;
      WgmmaSS64(s, WgmmaDesc(q_rows + (kk >> 2) * kWideQColumnBytes + in_row, 16, 1024),
                WgmmaDesc(kt + (kk >> 2) * kWideKvColumnBytes + in_row, 16, 1024), kk > 0);
    }
    WgmmaCommit();
  };

  CopyAsyncWait<1>();  // Q and the first tile have landed; the second may still be in flight
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
  __syncthreads();
  WgmmaFence();
  issue_scores(first_tile);
  WgmmaWaitAll();
  FenceOperands(s);

  // As the head_dim-128 kernel's loop: softmax of tile, wait for P.V of tile - 1, rescale O, barrier, S of
  // tile + 1 and P.V of tile issued, copies of tile + 2, wait for the S only.
  for (int tile = first_tile; tile < num_tiles; ++tile) {
    float alpha[2];
    MaskedSoftmaxStepRaw<kCap>(st, shape.window, tile * kWideBlockK, warp_row0, row_a, row_b, t, s, m, l,
                               alpha);
    WgmmaWaitAll();  // P.V of tile - 1: its P registers are free and O is final
    FenceOperands(o_lo);
    FenceOperands(o_hi);
    uint32_t p[kWideBlockK / 16][4];
#pragma unroll
    for (int c = 0; c < kWideBlockK / 16; ++c) PackProbabilities(p[c], s, c);
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
      RescaleRows(o_lo, alpha);
      RescaleRows(o_hi, alpha);
    }
    WgmmaFence();  // O, P (and s, below) were written by ordinary instructions
    FenceOperands(o_lo);
    FenceOperands(o_hi);
    const bool more = tile + 1 < num_tiles;  // uniform over the block
    if (more) {
      CopyAsyncWait<0>();  // tile + 1 has landed
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();  // every thread is past S of tile and P.V of tile - 1: their stages take tile + 2
      issue_scores(tile + 1);
    }
    const uint32_t vt = v_tile(tile);
#pragma unroll
    for (int c = 0; c < kWideBlockK / 16; ++c) {
      // Keys 16 c .. 16 c + 15 (two 8-key groups of 1024 bytes) of dims 0-127 (column blocks 0, 1) and
      // 128-255 (blocks 2, 3).
      WgmmaRS(o_lo, p[c], WgmmaDesc(vt + c * 2048, kWideKvColumnBytes, 1024));
      WgmmaRS(o_hi, p[c], WgmmaDesc(vt + 2 * kWideKvColumnBytes + c * 2048, kWideKvColumnBytes, 1024));
    }
    WgmmaCommit();
    if (more) {
      if (tile + 2 < num_tiles) load_kv(tile + 2);
      CopyAsyncCommit();
    }
    WgmmaWait<1>();  // S of tile + 1 (when issued); P.V of tile may still run
    FenceOperands(s);
  }
  WgmmaWaitAll();
  FenceOperands(o_lo);
  FenceOperands(o_hi);

  SumOverRowGroup(l[0], l[1]);
  const int64_t out_stride = static_cast<int64_t>(shape.num_heads) * kWideHeadDim;
  StoreNormalizedRows(o_lo, l[0], l[1], row_a, w.len, t, w.start, out_stride, w.head * kWideHeadDim, out);
  StoreNormalizedRows(o_hi, l[0], l[1], row_a, w.len, t, w.start, out_stride, w.head * kWideHeadDim + 128,
                      out);
#else
  __trap();  // not built for sm_90a: WgmmaAvailable() never lets a launch reach this
#endif
}

}  // namespace

// The kernel runs on compute capability 9.0 devices, when the code loaded is its sm_90a cubin
// (CMAKE_CUDA_ARCHITECTURES with 90a-real). Any other loaded code traps and is never chosen: another
// target's cubin, or the compute_80 PTX JIT-compiled for an H100 (binaryVersion 90 but ptxVersion 80: a
// release build under CUDA_FORCE_PTX_JIT=1).
bool WgmmaAvailable() {
  static const bool compiled = ModuleIsSm90a(reinterpret_cast<const void*>(AttentionWgmmaKernel<false>));
  if (!compiled) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return DeviceIsSm90(device);
}

namespace {

template <bool kCap>
absl::Status LaunchWgmmaCap(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                            const AttentionShape& s, const ScoreTransform& st, bf16_t* out,
                            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(s.max_seqlen, kHopperBlockQ)),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(s.num_seqs));
  const bool wide = s.head_dim == kWideHeadDim;
  auto* kernel = wide ? AttentionWgmma256Kernel<kCap> : AttentionWgmmaKernel<kCap>;
  const int smem = wide ? kWideSmem : kHopperSmem;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), smem));
  kernel<<<grid, kHopperThreads, smem, stream>>>(ToDevice(q), ToDevice(k), ToDevice(v), cu_seqlens, s, st,
                                                 ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchWgmma(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                         const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  const ScoreTransform st = MakeScoreTransform(s);
  return st.cap_in > 0.0f ? LaunchWgmmaCap<true>(q, k, v, cu_seqlens, s, st, out, stream)
                          : LaunchWgmmaCap<false>(q, k, v, cu_seqlens, s, st, out, stream);
}

}  // namespace scored::kernels::attention_internal
