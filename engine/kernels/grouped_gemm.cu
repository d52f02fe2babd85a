// Grouped expert GEMMs. Contract: grouped_gemm.h.
//
// One block computes a 128 x 128 tile of y (kBM rows of one expert x kBN output columns) with 8 warps in a
// 2 x 4 grid, each warp 64 x 32 (4 x 4 mma.sync m16n8k16 tiles, 64 fp32 accumulators a thread). The k loop
// walks 32-column tiles through a kStages-deep cp.async ring in shared memory (rows padded by 8 bf16, so
// the ldmatrix row addresses of a warp fall in distinct banks: 80-byte rows).
//
// Work: a 1-D grid of n_tiles x row-tile slots, row_tiles = rows / kBM + num_experts (>= sum_e ceil(count_e
// / kBM)); n tiles vary fastest, so the blocks of one expert run together and its weight stays in L2. Each
// block finds its (expert, row tile) from the device offsets with a block-wide scan of the experts' tile
// counts (a few hundred cycles against the tile's 64+ k steps); slots past the last tile exit.
//
// The int4 variant copies the packed words of a k tile (16 bytes a row) through the same ring, and after the
// tile's wait each thread decodes 16 weights of one row into a bf16 tile in shared memory (dequant.cu's
// arithmetic, shared through dequant_decode.cuh: PackedIntValue rounded to nearest even bf16), which the
// warps then read like the dense weight tile.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/base/dtype.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/dequant_decode.cuh"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/grouped_gemm.h"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels {
namespace {

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 32;
constexpr int kStages = 4;
constexpr int kThreads = 256;
constexpr int kLds = kBK + 8;  // bf16 elements per shared-memory row (80 bytes)
constexpr int kWarpM = 64;
constexpr int kWarpN = 32;
constexpr int kMTiles = kWarpM / 16;
constexpr int kNTiles = kWarpN / 8;
constexpr int kPackedWords = kBK / 8;  // int32 words of 4-bit weights per row of a k tile (16 bytes)

constexpr int kTileElems = kBM * kLds;  // one A (or B) stage, bf16 elements
constexpr int kDenseSmemBytes = kStages * 2 * kTileElems * 2;
constexpr int kInt4SmemBytes = kStages * kTileElems * 2 + kStages * kBN * kPackedWords * 4 + kBN * kLds * 2;
static_assert(kBM == kBN, "the A and B stages share one row count");

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------- the block's tile

struct TileWork {
  int expert;     // -1: nothing to do
  int row_begin;  // first row of the tile (global row index)
  int row_end;    // one past the expert's last row
};

// Finds the (expert, row tile) of row-tile slot `slot`: the experts' tile counts ceil(count_e / kBM) scanned
// in expert order, 256 experts per round (warp shuffles, then the warp totals). Every thread gets the answer.
__device__ TileWork FindTile(const int32_t* __restrict__ offsets, int num_experts, int slot) {
  __shared__ int warp_sums[kThreads / 32];
  __shared__ TileWork found;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) found.expert = -1;
  int before = 0;  // tiles of the experts of earlier rounds
  for (int base = 0; base < num_experts; base += kThreads) {
    const int e = base + threadIdx.x;
    int begin = 0, end = 0;
    if (e < num_experts) {
      begin = offsets[e];
      end = offsets[e + 1];
    }
    const int tiles = (end - begin + kBM - 1) / kBM;
    int incl = tiles;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int warp_before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      warp_before += w < warp ? warp_sums[w] : 0;
      total += warp_sums[w];
    }
    const int first = before + warp_before + incl - tiles;  // this expert's first slot
    if (tiles > 0 && slot >= first && slot < first + tiles) {
      found.expert = e;
      found.row_begin = begin + (slot - first) * kBM;
      found.row_end = end;
    }
    before += total;
    __syncthreads();           // warp_sums is rewritten next round; `found` is read below
    if (before > slot) break;  // uniform: every thread has the same `before`
  }
  return found;
}

// ---------------------------------------------------------------- tile loads

// x rows [row_begin, row_begin + kBM) (zeros past row_end), columns [k0, k0 + kBK) (zeros past k: a k that
// is a multiple of 8 but not of kBK ends in a partial tile), into an A stage.
__device__ __forceinline__ void LoadATile(__nv_bfloat16* a_s, const __nv_bfloat16* __restrict__ x,
                                          int64_t ldx, int64_t k, const TileWork& w, int k0) {
  // 128 rows x 4 chunks of 16 bytes: 2 per thread.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kThreads;
    const int row = c >> 2, chunk = c & 3;
    const int r = w.row_begin + row;
    const bool valid = r < w.row_end && k0 + chunk * 8 < k;
    const __nv_bfloat16* src = valid ? x + static_cast<int64_t>(r) * ldx + k0 + chunk * 8 : x;
    CopyAsync16(a_s + row * kLds + chunk * 8, src, valid ? 16 : 0);
  }
}

// W rows [n0, n0 + kBN) (zeros past n), columns [k0, k0 + kBK) (zeros past k), into a B stage.
__device__ __forceinline__ void LoadBTile(__nv_bfloat16* b_s, const __nv_bfloat16* __restrict__ wt, int64_t k,
                                          int n, int n0, int k0) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kThreads;
    const int row = c >> 2, chunk = c & 3;
    const bool valid = n0 + row < n && k0 + chunk * 8 < k;
    const __nv_bfloat16* src = valid ? wt + static_cast<int64_t>(n0 + row) * k + k0 + chunk * 8 : wt;
    CopyAsync16(b_s + row * kLds + chunk * 8, src, valid ? 16 : 0);
  }
}

// The packed words of W rows [n0, n0 + kBN), columns [k0, k0 + kBK): one 16-byte copy per row (threads
// 0..127).
__device__ __forceinline__ void LoadPackedTile(int32_t* p_s, const GroupedInt4Expert& ex, int64_t k, int n,
                                               int n0, int k0) {
  if (threadIdx.x >= kBN) return;
  const int row = threadIdx.x;
  const int o = n0 + row;
  const bool valid = o < n;
  const int32_t* src = ex.parts[0].packed;
  if (valid) {
    const bool second = o >= ex.split;
    const int64_t local = second ? o - ex.split : o;
    src = (second ? ex.parts[1].packed : ex.parts[0].packed) + local * (k / 8) + k0 / 8;
  }
  CopyAsync16(p_s + row * kPackedWords, src, valid ? 16 : 0);
}

// The scale and zero point (as the value subtracted from u) of W row n0 + threadIdx.x / 2 for the k tile at
// k0. Rows past n get scale 0 (their packed words are zeros, so the decoded tile row is zeros anyway).
struct RowQuant {
  float scale;
  int32_t zp;
};
__device__ __forceinline__ RowQuant LoadRowQuant(const GroupedInt4Expert& ex, const GroupedInt4Format& f,
                                                 int scale_cols, int n, int n0, int k0) {
  const int o = n0 + (threadIdx.x >> 1);
  RowQuant q{0.0f, 8};
  if (o >= n) return q;
  const bool second = o >= ex.split;
  const GroupedInt4Part& part = second ? ex.parts[1] : ex.parts[0];
  const int64_t local = second ? o - ex.split : o;
  const int64_t g = f.group_size > 0 ? k0 / f.group_size : 0;
  q.scale = FloatAt(part.scale, f.scale_dtype, local * scale_cols + g);
  if (!f.symmetric) {
    const uint32_t word = static_cast<uint32_t>(part.zero_point[(local >> 3) * scale_cols + g]);
    q.zp = static_cast<int32_t>((word >> ((local & 7) * 4)) & 0xfu);
  }
  return q;
}

// Thread t decodes columns [16 (t & 1), 16 (t & 1) + 16) of tile row t / 2 into the bf16 B tile.
__device__ __forceinline__ void DecodePackedTile(__nv_bfloat16* b_s, const int32_t* p_s, const RowQuant& q) {
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const uint2 words = *reinterpret_cast<const uint2*>(p_s + row * kPackedWords + half * 2);
  uint32_t out[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t word = j < 4 ? words.x : words.y;
    const int shift = (2 * j % 8) * 4;
    const int32_t u0 = static_cast<int32_t>((word >> shift) & 0xfu);
    const int32_t u1 = static_cast<int32_t>((word >> (shift + 4)) & 0xfu);
    const __nv_bfloat162 pair =
        __floats2bfloat162_rn(PackedIntValue(u0, q.zp, q.scale), PackedIntValue(u1, q.zp, q.scale));
    out[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  uint4* dst = reinterpret_cast<uint4*>(b_s + row * kLds + half * 16);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// ---------------------------------------------------------------- the mma steps and the store

// The warp's 64 x 32 products of one k tile: a_s [kBM][kLds], b_s [kBN][kLds].
__device__ __forceinline__ void MmaTile(float (&acc)[kMTiles][kNTiles][4], const __nv_bfloat16* a_s,
                                        const __nv_bfloat16* b_s, int warp_m, int warp_n) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int ks = 0; ks < kBK; ks += 16) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const int row = warp_m * kWarpM + mt * 16 + (lane & 15);
      LoadMatrixX4(a[mt], a_s + row * kLds + ks + (lane >> 4) * 8);
    }
    uint32_t b[kNTiles / 2][4];  // [pair of n8 blocks]: b0, b1 of the first block, b0, b1 of the second
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      const int row = warp_n * kWarpN + np * 16 + (lane & 7) + (lane >> 4) * 8;
      LoadMatrixX4(b[np], b_s + row * kLds + ks + ((lane >> 3) & 1) * 8);
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        MmaBf16(acc[mt][nt], a[mt], b[nt >> 1][(nt & 1) * 2], b[nt >> 1][(nt & 1) * 2 + 1]);
      }
    }
  }
}

__device__ __forceinline__ void StorePair(__nv_bfloat16* p, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
}
__device__ __forceinline__ void StorePair(float* p, float v0, float v1) {
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}

template <typename OutT>
__device__ __forceinline__ void StoreTile(const float (&acc)[kMTiles][kNTiles][4], OutT* __restrict__ y,
                                          int64_t ldy, const TileWork& w, int n, int n0, int warp_m,
                                          int warp_n) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = w.row_begin + warp_m * kWarpM + mt * 16 + g + half * 8;
      if (r >= w.row_end) continue;
      OutT* row = y + static_cast<int64_t>(r) * ldy;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int col = n0 + warp_n * kWarpN + nt * 8 + 2 * t;
        if (col < n) StorePair(row + col, acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------- kernels

struct Args {
  const __nv_bfloat16* x;
  const int32_t* offsets;
  int num_experts;
  int n, n_tiles;
  int64_t k, ldx, ldy;
};

template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    GroupedGemmKernel(const Args args, const bf16_t* const* __restrict__ weights, OutT* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int n0 = (blockIdx.x % args.n_tiles) * kBN;
  const TileWork w = FindTile(args.offsets, args.num_experts, blockIdx.x / args.n_tiles);
  if (w.expert < 0) return;
  __nv_bfloat16* a_s = reinterpret_cast<__nv_bfloat16*>(smem);  // [kStages][kBM][kLds]
  __nv_bfloat16* b_s = a_s + kStages * kTileElems;              // [kStages][kBN][kLds]
  const __nv_bfloat16* wt = reinterpret_cast<const __nv_bfloat16*>(weights[w.expert]);
  const int warp = threadIdx.x >> 5, warp_m = warp >> 2, warp_n = warp & 3;
  const int k_tiles = static_cast<int>((args.k + kBK - 1) / kBK);
  float acc[kMTiles][kNTiles][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      LoadATile(a_s + s * kTileElems, args.x, args.ldx, args.k, w, s * kBK);
      LoadBTile(b_s + s * kTileElems, wt, args.k, args.n, n0, s * kBK);
    }
    CopyAsyncCommit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    CopyAsyncWait<kStages - 2>();
    __syncthreads();  // tile kt visible to all; every warp is done with the stage refilled below
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      const int s = next % kStages;
      LoadATile(a_s + s * kTileElems, args.x, args.ldx, args.k, w, next * kBK);
      LoadBTile(b_s + s * kTileElems, wt, args.k, args.n, n0, next * kBK);
    }
    CopyAsyncCommit();
    const int s = kt % kStages;
    MmaTile(acc, a_s + s * kTileElems, b_s + s * kTileElems, warp_m, warp_n);
  }
  StoreTile(acc, y, args.ldy, w, args.n, n0, warp_m, warp_n);
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    GroupedGemmInt4Kernel(const Args args, const GroupedInt4Expert* __restrict__ experts,
                          const GroupedInt4Format format, OutT* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int n0 = (blockIdx.x % args.n_tiles) * kBN;
  const TileWork w = FindTile(args.offsets, args.num_experts, blockIdx.x / args.n_tiles);
  if (w.expert < 0) return;
  __nv_bfloat16* a_s = reinterpret_cast<__nv_bfloat16*>(smem);            // [kStages][kBM][kLds]
  int32_t* p_s = reinterpret_cast<int32_t*>(a_s + kStages * kTileElems);  // [kStages][kBN][kPackedWords]
  __nv_bfloat16* b_s = reinterpret_cast<__nv_bfloat16*>(p_s + kStages * kBN * kPackedWords);  // [kBN][kLds]
  const GroupedInt4Expert& ex = experts[w.expert];  // read through L1 (no local copy)
  const int scale_cols = format.group_size > 0 ? static_cast<int>(args.k / format.group_size) : 1;
  const int warp = threadIdx.x >> 5, warp_m = warp >> 2, warp_n = warp & 3;
  const int k_tiles = static_cast<int>((args.k + kBK - 1) / kBK);
  float acc[kMTiles][kNTiles][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      LoadATile(a_s + s * kTileElems, args.x, args.ldx, args.k, w, s * kBK);
      LoadPackedTile(p_s + s * kBN * kPackedWords, ex, args.k, args.n, n0, s * kBK);
    }
    CopyAsyncCommit();
  }
  RowQuant q = LoadRowQuant(ex, format, scale_cols, args.n, n0, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
    CopyAsyncWait<kStages - 2>();
    __syncthreads();  // tile kt visible; every warp is done with b_s and the stage refilled below
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      const int s = next % kStages;
      LoadATile(a_s + s * kTileElems, args.x, args.ldx, args.k, w, next * kBK);
      LoadPackedTile(p_s + s * kBN * kPackedWords, ex, args.k, args.n, n0, next * kBK);
    }
    CopyAsyncCommit();
    const int s = kt % kStages;
    DecodePackedTile(b_s, p_s + s * kBN * kPackedWords, q);
    // The next tile's scale (a new group only every group_size / kBK tiles; the loads overlap the mma).
    if (kt + 1 < k_tiles) q = LoadRowQuant(ex, format, scale_cols, args.n, n0, (kt + 1) * kBK);
    __syncthreads();  // the decoded tile is complete
    MmaTile(acc, a_s + s * kTileElems, b_s, warp_m, warp_n);
  }
  StoreTile(acc, y, args.ldy, w, args.n, n0, warp_m, warp_n);
}

template <typename OutT>
absl::Status CheckShape(const bf16_t* x, const int32_t* offsets, const GroupedGemmShape& s, const OutT* y,
                        bool int4) {
  if (x == nullptr || offsets == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("GroupedGemm: null pointer");
  }
  if (!GroupedGemmSupports(s.n, s.k, int4)) {
    return absl::InvalidArgumentError(int4 ? "GroupedGemmInt4: n must be a multiple of 8 and k of 32"
                                           : "GroupedGemm: n and k must be positive multiples of 8");
  }
  if (s.num_experts < 1 || s.num_experts > 65535 || s.rows < 0 || s.rows > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError("GroupedGemm: bad expert or row count");
  }
  if (s.ldx < s.k || s.ldx % 8 != 0 || s.ldy < s.n || s.ldy % 2 != 0 || !IsAligned(x, 16) ||
      !IsAligned(y, 8)) {
    return absl::InvalidArgumentError("GroupedGemm: bad leading dimension or alignment");
  }
  return absl::OkStatus();
}

Args MakeArgs(const bf16_t* x, const int32_t* offsets, const GroupedGemmShape& s) {
  Args a;
  a.x = ToDevice(x);
  a.offsets = offsets;
  a.num_experts = static_cast<int>(s.num_experts);
  a.n = static_cast<int>(s.n);
  a.n_tiles = static_cast<int>(CeilDiv(s.n, kBN));
  a.k = s.k;
  a.ldx = s.ldx;
  a.ldy = s.ldy;
  return a;
}

// Row-tile slots: sum_e ceil(count_e / kBM) <= sum_e (count_e / kBM + 1) <= rows / kBM + num_experts.
int64_t GridBlocks(const GroupedGemmShape& s) { return (s.rows / kBM + s.num_experts) * CeilDiv(s.n, kBN); }

}  // namespace

bool GroupedGemmSupports(int64_t n, int64_t k, bool int4) {
  return n > 0 && k > 0 && n % 8 == 0 && k % (int4 ? 32 : 8) == 0 && n <= int64_t{0x7fffffff} &&
         k <= int64_t{0x7fffffff};
}

template <typename OutT>
absl::Status GroupedGemm(const bf16_t* x, const int32_t* offsets, const bf16_t* const* weights,
                         const GroupedGemmShape& shape, OutT* y, cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShape(x, offsets, shape, y, false));
  if (weights == nullptr) return absl::InvalidArgumentError("GroupedGemm: null weight table");
  if (shape.rows == 0) return absl::OkStatus();
  const int64_t blocks = GridBlocks(shape);
  if (blocks > int64_t{0x7fffffff}) return absl::InvalidArgumentError("GroupedGemm: grid too large");
  const auto kernel = GroupedGemmKernel<typename DeviceType<OutT>::type>;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kDenseSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), kThreads, kDenseSmemBytes, stream>>>(MakeArgs(x, offsets, shape),
                                                                               weights, ToDevice(y));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename OutT>
absl::Status GroupedGemmInt4(const bf16_t* x, const int32_t* offsets, const GroupedInt4Expert* experts,
                             const GroupedInt4Format& format, const GroupedGemmShape& shape, OutT* y,
                             cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShape(x, offsets, shape, y, true));
  if (experts == nullptr) return absl::InvalidArgumentError("GroupedGemmInt4: null expert table");
  const int64_t g = format.group_size;
  if (!(g == 0 || ((g == 32 || g == 64 || g == 128) && shape.k % g == 0))) {
    return absl::InvalidArgumentError("GroupedGemmInt4: group_size must be 32, 64, 128 (dividing k) or 0");
  }
  if (format.scale_dtype != DType::kF32 && format.scale_dtype != DType::kF16 &&
      format.scale_dtype != DType::kBF16) {
    return absl::InvalidArgumentError("GroupedGemmInt4: scales must be F32, F16 or BF16");
  }
  if (shape.rows == 0) return absl::OkStatus();
  const int64_t blocks = GridBlocks(shape);
  if (blocks > int64_t{0x7fffffff}) return absl::InvalidArgumentError("GroupedGemmInt4: grid too large");
  const auto kernel = GroupedGemmInt4Kernel<typename DeviceType<OutT>::type>;
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kInt4SmemBytes));
  kernel<<<static_cast<unsigned>(blocks), kThreads, kInt4SmemBytes, stream>>>(MakeArgs(x, offsets, shape),
                                                                              experts, format, ToDevice(y));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status GroupedGemm<bf16_t>(const bf16_t*, const int32_t*, const bf16_t* const*,
                                          const GroupedGemmShape&, bf16_t*, cudaStream_t);
template absl::Status GroupedGemm<float>(const bf16_t*, const int32_t*, const bf16_t* const*,
                                         const GroupedGemmShape&, float*, cudaStream_t);
template absl::Status GroupedGemmInt4<bf16_t>(const bf16_t*, const int32_t*, const GroupedInt4Expert*,
                                              const GroupedInt4Format&, const GroupedGemmShape&, bf16_t*,
                                              cudaStream_t);
template absl::Status GroupedGemmInt4<float>(const bf16_t*, const int32_t*, const GroupedInt4Expert*,
                                             const GroupedInt4Format&, const GroupedGemmShape&, float*,
                                             cudaStream_t);

}  // namespace scored::kernels
