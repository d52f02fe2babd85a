// Online Hadamard rotations from the matrix's factors. Contract: hadamard_rotate.h.
// One thread block per tile of G = max(1, kTileElems / n) consecutive n-element blocks (of one row or of
// consecutive rows), widened to double in shared memory with coalesced loads (the forward's signs applied).
// The Walsh-Hadamard transform of every L-long chunk runs in radix-16 passes: a thread takes 16 elements
// 2^b apart, does four butterfly stages in registers and writes them back, so a 4096-chunk costs 3 passes
// over shared memory. Shared memory is XOR-swizzled (element e at e ^ ((e >> 4) & 15)) so that both the
// first pass's 16 consecutive elements per thread and the later strided passes hit distinct banks. The core
// stage (K > 1) is a small GEMM per block on FP64 tensor cores (mma.m8n8k4.f64: the +-1 products are exact
// and the sums double, like the scalar path's), writing the result straight back to global memory (its input
// stays in shared memory: the in-place update needs no second buffer); K = 1 writes back directly. Each
// block's start in x is computed once per tile (one 64-bit division per block, not per element); loads run
// kLoadBatch deep per thread.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/hadamard_rotate.h"

namespace scored::kernels {
namespace {

constexpr int kSmallThreads = 256;  // n < kBigN: several CTAs per SM
constexpr int kBigThreads = 1024;   // n >= kBigN: one CTA per SM (its shared memory), so more warps
constexpr int kBigN = 8192;
constexpr int kTileElems = 4096;
constexpr int kMaxBlocksPerCta = 256;
constexpr int kLoadBatch = 8;
constexpr int kMTiles = 4;

__device__ __forceinline__ double LoadAsDouble(const float* p) { return static_cast<double>(*p); }
__device__ __forceinline__ double LoadAsDouble(const __nv_bfloat16* p) {
  return static_cast<double>(__bfloat162float(*p));
}
// Round-to-nearest-even from double (to fp32 directly; to bf16 directly, not through fp32: no double
// rounding).
__device__ __forceinline__ void StoreFromDouble(float* p, double v) { *p = __double2float_rn(v); }
__device__ __forceinline__ void StoreFromDouble(__nv_bfloat16* p, double v) { *p = __double2bfloat16(v); }

// d = a . b + d on FP64 tensor cores: A 8x4 (row-major), B 4x8 (column-major), D 8x8. Per lane (group =
// lane / 4, quad = lane % 4): a = A[group][quad], b = B[quad][group], d = D[group][2 quad + {0, 1}].
__device__ __forceinline__ void Dmma(double& d0, double& d1, double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d0), "+d"(d1)
               : "d"(a), "d"(b));
}

__device__ __forceinline__ int Swizzle(int e) { return e ^ ((e >> 4) & 15); }

// The radix-2^bits transform of v[0 .. 2^bits) in registers (element m's bit i pairs with bit i flipped).
template <int kBits>
__device__ __forceinline__ void Butterflies(double* v) {
#pragma unroll
  for (int h = 1; h < (1 << kBits); h <<= 1) {
#pragma unroll
    for (int m = 0; m < (1 << kBits); ++m) {
      if ((m & h) == 0) {
        const double a = v[m], b = v[m + h];
        v[m] = a + b;
        v[m + h] = a - b;
      }
    }
  }
}

// One pass over bits [b, b + kBits) of every element index of the tile.
template <int kThreads, int kBits>
__device__ __forceinline__ void Pass(double* u, int tile, int b) {
  const int groups = tile >> kBits;
  for (int q = threadIdx.x; q < groups; q += kThreads) {
    const int base = ((q >> b) << (b + kBits)) | (q & ((1 << b) - 1));
    double v[1 << kBits];
#pragma unroll
    for (int m = 0; m < (1 << kBits); ++m) v[m] = u[Swizzle(base + (m << b))];
    Butterflies<kBits>(v);
#pragma unroll
    for (int m = 0; m < (1 << kBits); ++m) u[Swizzle(base + (m << b))] = v[m];
  }
}

// The tile's blocks: where block g of the tile starts in x, and e's block and offset (pow2 n: shifts).
struct TileIndex {
  int n, log_n;  // log_n >= 0 when n is a power of two, else -1
  __device__ __forceinline__ int Block(int e) const { return log_n >= 0 ? e >> log_n : e / n; }
  __device__ __forceinline__ int Offset(int e) const { return log_n >= 0 ? e & (n - 1) : e % n; }
};

template <int kThreads, typename T>
__global__ void __launch_bounds__(kThreads)
    RotateKernel(T* x, int64_t ld, int64_t blocks_per_row, int64_t total_blocks, int per_cta,
                 HadamardRotation r, int log_n, double inv_sqrt_n) {
  extern __shared__ double u[];
  __shared__ int64_t starts[kMaxBlocksPerCta];
  __shared__ uint8_t bits[kMaxHadamardCore * (kMaxHadamardCore / 8)];
  const int n = r.size, chunk = r.chunk, k = r.core_size, row_bytes = (k + 7) / 8;
  const TileIndex index{n, log_n};
  const int64_t first = static_cast<int64_t>(blockIdx.x) * per_cta;
  const int blocks = static_cast<int>(total_blocks - first < per_cta ? total_blocks - first : per_cta);
  const int tile = blocks * n;
  for (int g = threadIdx.x; g < blocks; g += kThreads) {
    const int64_t block = first + g;
    starts[g] = (block / blocks_per_row) * ld + (block % blocks_per_row) * n;
  }
  for (int i = threadIdx.x; i < k * row_bytes; i += kThreads) bits[i] = r.core_bits[i];
  __syncthreads();
  // kLoadBatch loads in flight per thread before their shared-memory stores.
  for (int e0 = threadIdx.x; e0 < tile; e0 += kThreads * kLoadBatch) {
    double v[kLoadBatch];
#pragma unroll
    for (int t = 0; t < kLoadBatch; ++t) {
      const int e = e0 + t * kThreads;
      if (e < tile) {
        const int i = index.Offset(e);
        const double a = LoadAsDouble(x + starts[index.Block(e)] + i);
        v[t] = (!r.inverse && r.signs[i] < 0) ? -a : a;
      }
    }
#pragma unroll
    for (int t = 0; t < kLoadBatch; ++t) {
      const int e = e0 + t * kThreads;
      if (e < tile) u[Swizzle(e)] = v[t];
    }
  }
  __syncthreads();
  const int log_chunk = __ffs(chunk) - 1;
  for (int b = 0; b < log_chunk; b += 4) {
    switch (log_chunk - b) {
      case 1:
        Pass<kThreads, 1>(u, tile, b);
        break;
      case 2:
        Pass<kThreads, 2>(u, tile, b);
        break;
      case 3:
        Pass<kThreads, 3>(u, tile, b);
        break;
      default:
        Pass<kThreads, 4>(u, tile, b);
        break;
    }
    __syncthreads();
  }
  if (k == 1) {  // the 1 x 1 core is a sign too
    const bool negate = bits[0] & 1;
    for (int e = threadIdx.x; e < tile; e += kThreads) {
      const int g = index.Block(e), i = index.Offset(e);
      const double y = u[Swizzle(e)];
      StoreFromDouble(x + starts[g] + i, (((r.inverse && r.signs[i] < 0) != negate) ? -y : y) * inv_sqrt_n);
    }
    return;
  }
  // Core: out[g] = A' . U[g] per block, A' the [K, K] core in this direction, U[g] the [K, L] transformed
  // chunks: FP64 tensor-core MMAs (exact products of +-1, double sums) over 8 x 8 tiles of out, kMTiles tiles
  // of rows per warp sharing each B fragment; K and L padded with zeros to the tile sizes.
  const int lane = threadIdx.x & 31, group = lane >> 2, quad = lane & 3;
  const int m_groups = (k + 8 * kMTiles - 1) / (8 * kMTiles), n_tiles = (chunk + 7) / 8,
            k_steps = (k + 3) / 4;
  for (int w = threadIdx.x >> 5; w < blocks * m_groups * n_tiles; w += kThreads / 32) {
    const int nt = w % n_tiles, rest = w / n_tiles;
    const int m0 = (rest % m_groups) * 8 * kMTiles, g = (rest / m_groups) * n;
    const int b_col = nt * 8 + group;
    double acc[kMTiles][2];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) acc[m][0] = acc[m][1] = 0.0;
    for (int ks = 0; ks < k_steps; ++ks) {
      const int c = ks * 4 + quad;
      const double b = (c < k && b_col < chunk) ? u[Swizzle(g + c * chunk + b_col)] : 0.0;
      const uint8_t* row = bits + c * row_bytes;
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        const int j = m0 + m * 8 + group;
        const double a = (c < k && j < k) ? (((row[j >> 3] >> (j & 7)) & 1) ? -1.0 : 1.0) : 0.0;
        Dmma(acc[m][0], acc[m][1], a, b);
      }
    }
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const int j = m0 + m * 8 + group;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = nt * 8 + quad * 2 + h;
        if (j < k && col < chunk) {
          const int o = j * chunk + col;
          const double y = (r.inverse && r.signs[o] < 0) ? -acc[m][h] : acc[m][h];
          StoreFromDouble(x + starts[rest / m_groups] + o, y * inv_sqrt_n);
        }
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> PackHadamardCore(const std::vector<int8_t>& core, int32_t k, bool inverse) {
  const int32_t row_bytes = (k + 7) / 8;
  std::vector<uint8_t> bits(static_cast<size_t>(k * row_bytes), 0);
  for (int32_t c = 0; c < k; ++c) {
    for (int32_t j = 0; j < k; ++j) {
      const int8_t s = inverse ? core[c * k + j] : core[j * k + c];
      if (s < 0) bits[c * row_bytes + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    }
  }
  return bits;
}

int64_t MaxHadamardRotationSize(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    return 0;
  }
  // Less the static tables (block starts, core bits); the launcher rounds n up to 16.
  bytes -= kMaxBlocksPerCta * 8 + kMaxHadamardCore * kMaxHadamardCore / 8;
  return bytes / static_cast<int64_t>(sizeof(double)) / 16 * 16;
}

template <typename T>
absl::Status HadamardRotate(T* x, int64_t ld, int64_t rows, int64_t width, const HadamardRotation& r,
                            cudaStream_t stream) {
  if (r.size < 1 || r.chunk < 1 || r.core_size < 1 || int64_t{r.chunk} * r.core_size != r.size ||
      (r.chunk & (r.chunk - 1)) != 0 || r.core_size > kMaxHadamardCore || r.signs == nullptr ||
      r.core_bits == nullptr) {
    return absl::InvalidArgumentError("Hadamard rotation: bad factors");
  }
  if (rows < 0 || width < 0 || width % r.size != 0 || ld < width || (rows > 0 && x == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("Hadamard rotation: bad shape (rows ", rows, ", width ",
                                                   width, ", ld ", ld, ", n ", r.size, ")"));
  }
  if (rows == 0 || width == 0) return absl::OkStatus();
  int device = 0;
  SCORED_CUDA_CHECK(cudaGetDevice(&device));
  if (r.size > MaxHadamardRotationSize(device)) {
    return absl::InvalidArgumentError(absl::StrCat("Hadamard rotation of size ", r.size,
                                                   " exceeds this device's shared memory (at most ",
                                                   MaxHadamardRotationSize(device), ")"));
  }
  const int64_t total_blocks = rows * (width / r.size);
  const int per_cta = r.size >= kTileElems ? 1 : std::min(kTileElems / r.size, kMaxBlocksPerCta);
  // Rounded up to 16 elements: the swizzle permutes within aligned groups of 16.
  const size_t smem = static_cast<size_t>((int64_t{per_cta} * r.size + 15) / 16 * 16) * sizeof(double);
  const bool big = r.size >= kBigN;
  auto* kernel = big ? RotateKernel<kBigThreads, typename DeviceType<T>::type>
                     : RotateKernel<kSmallThreads, typename DeviceType<T>::type>;
  if (smem > 48 * 1024) {
    SCORED_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int64_t ctas = (total_blocks + per_cta - 1) / per_cta;
  if (ctas > int64_t{0x7fffffff}) return absl::InvalidArgumentError("Hadamard rotation: too many rows");
  const int log_n = (r.size & (r.size - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(r.size)) : -1;
  kernel<<<static_cast<unsigned>(ctas), big ? kBigThreads : kSmallThreads, smem, stream>>>(
      ToDevice(x), ld, width / r.size, total_blocks, per_cta, r, log_n,
      1.0 / std::sqrt(static_cast<double>(r.size)));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status HadamardRotate<float>(float*, int64_t, int64_t, int64_t, const HadamardRotation&,
                                            cudaStream_t);
template absl::Status HadamardRotate<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, const HadamardRotation&,
                                             cudaStream_t);

}  // namespace scored::kernels
