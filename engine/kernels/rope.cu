// Rotary position embedding, in place. Contract: rope.h.
// fp32 results equal ref::Rope bit for bit (same cos/sin rounding, same operation order, no FMA).
//
// Vector path (half a multiple of the 16-byte vector, token_stride too, x 16-byte aligned; the engine's
// fused QKV buffer qualifies): one resident wave of blocks (SM count x occupancy) strides over tokens. For
// each token a thread owns up to kUnroll chunks (h, i0 .. i0 + kVec - 1) and issues all of their 16-byte
// loads (x[i0..] and x[i0 + half..]) first; then threads < half compute cos/sin into shared memory while the
// loads are in flight; after a barrier the chunks are rotated and stored.
// Scalar path otherwise: one block per token; each thread owns pairs (h, i) and rotates
// (x[i], x[i + half]). Either way cos/sin are computed once per (token, i) into shared memory and reused
// by every head, and every element sees the same operations, so both paths give identical results.
//
// Table path (RopeWithTable): cos/sin come from a table that RopeCosSinTable fills with the same CosSin
// code, so the values, and with the same _rn rotation every output, are identical to the paths above.
// Vector table path (same alignment conditions): the [num_tokens x num_heads x half / kVec] 16-byte chunks
// are one flat index space; a resident wave of blocks strides over it, kTableUnroll * kTableThreads
// consecutive chunks per block step. Each thread first issues, for its kTableUnroll chunks, the two
// 16-byte loads of x (x[i0..], x[i0 + half..]) and the 2 * kVec cos/sin floats of table[position][i0..]
// (64 bytes for bf16), then rotates and stores. No shared memory and no barrier: the per-token sincos and
// __syncthreads of the inv_freq path are gone from the critical path. Adjacent lanes take adjacent chunks
// of one head, so x accesses are coalesced and lanes of different heads of one token read the same table
// bytes. Index math is 32-bit when num_tokens * token_stride < 2^32 (the engine: 32768 x 6144).
// Scalar table path otherwise: a flat grid-stride over (token, head, pair); always for interleaved pairs
// (RopeInterleavedWithTable: DeepSeek's rope_interleave, a 64-wide rotary part of 576-wide MLA heads).
// A position outside [0, num_positions) skips the table read and writes NaN to that token's pairs.
//
// Predicted time: bytes / 4.0 TB/s (H200 copy rate); the table (1 MiB for 2048 positions x 64 pairs) stays
// in L2. Llama-3-8B, 40 of 48 heads rotated, head_dim 128, bf16, read + write:
//   16384 tokens: 2 x 16384 x 40 x 128 x 2 B = 0.336 GB -> ~0.084 ms
//   32768 tokens: 0.671 GB -> ~0.168 ms (the inv_freq vector path measured 0.28 ms).
#include <string>

#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/rope.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kMaxHalfDim = 512;

constexpr int kVecThreads = 128;
constexpr int kUnroll = 4;  // chunks per thread per pass: 40 heads x 64 pairs / 8 = 320 < 4 * 128

__device__ __forceinline__ void CosSin(float pos, float inv_freq, float* c, float* s) {
  const float angle = __fmul_rn(pos, inv_freq);
  // sin/cos in double, rounded once: the correctly rounded fp32 value (as ref::Rope), at a cost of
  // num_tokens * head_dim / 2 double evaluations per call.
  double sd, cd;
  sincos(static_cast<double>(angle), &sd, &cd);
  *s = static_cast<float>(sd);
  *c = static_cast<float>(cd);
}

template <typename T>
__global__ void __launch_bounds__(kVecThreads)
    RopeVecKernel(T* x,  // [num_tokens, token_stride]
                  int64_t token_stride,
                  const int32_t* __restrict__ positions,  // [num_tokens]
                  const float* __restrict__ inv_freq,     // [half]
                  int64_t num_tokens, int64_t num_heads, int64_t half) {
  constexpr int kVec = Vec16<T>::kSize;
  __shared__ float cos_s[kMaxHalfDim];
  __shared__ float sin_s[kMaxHalfDim];
  const int chunks_per_head = static_cast<int>(half / kVec);
  const int chunks = static_cast<int>(num_heads) * chunks_per_head;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    T* row = x + t * token_stride;
    for (int c0 = 0; c0 < chunks; c0 += kUnroll * kVecThreads) {
      float a[kUnroll][kVec], b[kUnroll][kVec];
      T* base[kUnroll];
      int i0[kUnroll];
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        const int c = c0 + r * kVecThreads + static_cast<int>(threadIdx.x);
        base[r] = nullptr;
        i0[r] = 0;
        if (c < chunks) {
          const int h = c / chunks_per_head;
          i0[r] = (c - h * chunks_per_head) * kVec;
          base[r] = row + static_cast<int64_t>(h) * 2 * half + i0[r];
          Load16(base[r], a[r]);
          Load16(base[r] + half, b[r]);
        }
      }
      if (c0 == 0) {
        const float pos = static_cast<float>(positions[t]);
        for (int64_t i = threadIdx.x; i < half; i += kVecThreads)
          CosSin(pos, inv_freq[i], &cos_s[i], &sin_s[i]);
        __syncthreads();
      }
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        if (base[r] != nullptr) {
          float lo[kVec], hi[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const float c = cos_s[i0[r] + j], s = sin_s[i0[r] + j];
            // Explicit _rn operations: no fused multiply-add, so fp32 results match the reference's order.
            lo[j] = __fsub_rn(__fmul_rn(a[r][j], c), __fmul_rn(b[r][j], s));
            hi[j] = __fadd_rn(__fmul_rn(b[r][j], c), __fmul_rn(a[r][j], s));
          }
          Store16(base[r], lo);
          Store16(base[r] + half, hi);
        }
      }
    }
    __syncthreads();  // cos_s / sin_s are rewritten for the next token
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(T* x,  // [num_tokens, token_stride]
                                                       int64_t token_stride,
                                                       const int32_t* __restrict__ positions,  // [num_tokens]
                                                       const float* __restrict__ inv_freq,     // [half]
                                                       int64_t num_tokens, int64_t num_heads, int64_t half) {
  __shared__ float cos_s[kMaxHalfDim];
  __shared__ float sin_s[kMaxHalfDim];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = threadIdx.x; i < half; i += kThreads) CosSin(pos, inv_freq[i], &cos_s[i], &sin_s[i]);
    __syncthreads();
    T* row = x + t * token_stride;
    const int64_t pairs = num_heads * half;
    for (int64_t p = threadIdx.x; p < pairs; p += kThreads) {
      const int64_t h = p / half;
      const int64_t i = p - h * half;
      T* v = row + h * 2 * half;
      const float a = LoadAsFloat(v + i);
      const float b = LoadAsFloat(v + i + half);
      const float c = cos_s[i], s = sin_s[i];
      // Explicit _rn operations: no fused multiply-add, so fp32 results match the reference's order.
      StoreFromFloat(v + i, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
      StoreFromFloat(v + i + half, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
    __syncthreads();
  }
}

constexpr int kTableThreads = 256;
// Chunks per thread per step: 8 x 16 B of x in flight per thread, as SwiGlu's vector path (measured there);
// not tuned here. bf16: 128 registers, so 2 blocks (16 warps) per SM, ~64 KiB of x in flight per SM.
constexpr int kTableUnroll = 4;
constexpr int kCosSinThreads = 256;
constexpr int64_t kMaxCosSinBlocks = 4096;

__global__ void __launch_bounds__(kCosSinThreads)
    RopeCosSinTableKernel(const float* __restrict__ inv_freq,  // [half]
                          int64_t num_positions, int64_t half, float scaling,
                          float* __restrict__ table) {  // [num_positions, half, 2]
  const int64_t n = num_positions * half;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kCosSinThreads) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * kCosSinThreads) {
    const int64_t p = k / half;
    // fp32(p) as the per-call kernels compute fp32(positions[t]) from the int32 position.
    float c, s;
    CosSin(static_cast<float>(static_cast<int32_t>(p)), inv_freq[k - p * half], &c, &s);
    // Times the attention scaling in fp32 (exact for 1), as ref::Rope.
    table[2 * k] = __fmul_rn(c, scaling);
    table[2 * k + 1] = __fmul_rn(s, scaling);
  }
}

// 16 bytes of x as kVec fp32 values and back (bf16: exact widening, RNE narrowing), as Load16 / Store16.
__device__ __forceinline__ void Widen(const uint4& w, float (&v)[4]) {
  v[0] = __uint_as_float(w.x);
  v[1] = __uint_as_float(w.y);
  v[2] = __uint_as_float(w.z);
  v[3] = __uint_as_float(w.w);
}
__device__ __forceinline__ void Widen(const uint4& w, float (&v)[8]) { Bf16x8ToFloat(w, v); }

__device__ __forceinline__ bool InTable(int32_t position, int64_t num_positions) {
  return position >= 0 && static_cast<int64_t>(position) < num_positions;
}

// Index: uint32_t when num_tokens * token_stride < 2^32 (then every element offset, and every chunk index
// plus one grid step, fits), else int64_t.
template <typename Index, typename D>
__global__ void __launch_bounds__(kTableThreads)
    RopeTableVecKernel(D* x,  // [num_tokens, token_stride]
                       Index token_stride,
                       const int32_t* __restrict__ positions,  // [num_tokens]
                       const float* __restrict__ table,        // [num_positions, half, 2]
                       int64_t num_positions, Index half,
                       Index head_stride,      // elements between heads (head_dim)
                       Index chunks_per_head,  // half / kVec
                       Index row_chunks,       // num_heads * chunks_per_head
                       Index num_chunks) {     // num_tokens * row_chunks
  constexpr int kVec = Vec16<D>::kSize;
  constexpr int kTab = 2 * kVec / 4;  // float4 loads of (cos, sin) per chunk
  constexpr Index kPerBlock = static_cast<Index>(kTableThreads) * kTableUnroll;
  const Index step = static_cast<Index>(gridDim.x) * kPerBlock;
  for (Index v0 = static_cast<Index>(blockIdx.x) * kPerBlock + threadIdx.x; v0 < num_chunks; v0 += step) {
    uint4 a_bits[kTableUnroll], b_bits[kTableUnroll];
    float4 cs[kTableUnroll][kTab];
    Index offset[kTableUnroll];
    bool valid[kTableUnroll];
#pragma unroll
    for (int r = 0; r < kTableUnroll; ++r) {
      const Index v = v0 + static_cast<Index>(r) * kTableThreads;
      valid[r] = false;
      offset[r] = 0;
      if (v < num_chunks) {
        const Index t = v / row_chunks;
        const Index rem = v - t * row_chunks;
        const Index h = rem / chunks_per_head;
        const Index i0 = (rem - h * chunks_per_head) * kVec;
        offset[r] = t * token_stride + h * head_stride + i0;
        a_bits[r] = *reinterpret_cast<const uint4*>(x + offset[r]);
        b_bits[r] = *reinterpret_cast<const uint4*>(x + offset[r] + half);
        const int32_t position = positions[t];
        valid[r] = InTable(position, num_positions);
        if (valid[r]) {
          const float4* tab =
              reinterpret_cast<const float4*>(table + (static_cast<int64_t>(position) * half + i0) * 2);
#pragma unroll
          for (int k = 0; k < kTab; ++k) cs[r][k] = __ldg(tab + k);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kTableUnroll; ++r) {
      const Index v = v0 + static_cast<Index>(r) * kTableThreads;
      if (v < num_chunks) {
        float a[kVec], b[kVec], lo[kVec], hi[kVec];
        Widen(a_bits[r], a);
        Widen(b_bits[r], b);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float4& w = cs[r][j / 2];
          const float c = (j % 2 == 0) ? w.x : w.z;
          const float s = (j % 2 == 0) ? w.y : w.w;
          // Explicit _rn operations: no fused multiply-add, the same operations as the inv_freq path.
          lo[j] = valid[r] ? __fsub_rn(__fmul_rn(a[j], c), __fmul_rn(b[j], s)) : __int_as_float(0x7fffffff);
          hi[j] = valid[r] ? __fadd_rn(__fmul_rn(b[j], c), __fmul_rn(a[j], s)) : __int_as_float(0x7fffffff);
        }
        Store16(x + offset[r], lo);
        Store16(x + offset[r] + half, hi);
      }
    }
  }
}

template <typename D>
__global__ void __launch_bounds__(kThreads)
    RopeTableKernel(D* x,  // [num_tokens, token_stride]
                    int64_t token_stride,
                    const int32_t* __restrict__ positions,  // [num_tokens]
                    const float* __restrict__ table,        // [num_positions, half, 2]
                    int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t half,
                    int64_t head_stride, bool interleaved) {
  // Pair i is (v[i * lo_step], v[i * lo_step + hi_offset]).
  const int64_t lo_step = interleaved ? 2 : 1, hi_offset = interleaved ? 1 : half;
  const int64_t row_pairs = num_heads * half;
  const int64_t pairs = num_tokens * row_pairs;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < pairs;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = k / row_pairs;
    const int64_t rem = k - t * row_pairs;
    const int64_t h = rem / half;
    const int64_t i = rem - h * half;
    D* lo = x + t * token_stride + h * head_stride + i * lo_step;
    D* hi = lo + hi_offset;
    const int32_t position = positions[t];
    if (!InTable(position, num_positions)) {
      StoreFromFloat(lo, __int_as_float(0x7fffffff));
      StoreFromFloat(hi, __int_as_float(0x7fffffff));
      continue;
    }
    const float a = LoadAsFloat(lo);
    const float b = LoadAsFloat(hi);
    const int64_t e = (static_cast<int64_t>(position) * half + i) * 2;
    const float c = table[e], s = table[e + 1];
    // Explicit _rn operations: no fused multiply-add, the same operations as the inv_freq path.
    StoreFromFloat(lo, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    StoreFromFloat(hi, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
  }
}

template <typename Index, typename D>
absl::Status LaunchTableVec(D* x, int64_t token_stride, const int32_t* positions, const float* table,
                            int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t half,
                            int64_t head_stride, cudaStream_t stream) {
  constexpr int64_t kVec = Vec16<D>::kSize;
  const int64_t chunks_per_head = half / kVec;
  const int64_t row_chunks = num_heads * chunks_per_head;
  const int64_t num_chunks = num_tokens * row_chunks;
  unsigned blocks = 1;
  SCORED_CUDA_CHECK(ResidentGrid(RopeTableVecKernel<Index, D>, kTableThreads,
                                 CeilDiv(num_chunks, int64_t{kTableThreads} * kTableUnroll), &blocks));
  RopeTableVecKernel<Index, D><<<blocks, kTableThreads, 0, stream>>>(
      x, static_cast<Index>(token_stride), positions, table, num_positions, static_cast<Index>(half),
      static_cast<Index>(head_stride), static_cast<Index>(chunks_per_head), static_cast<Index>(row_chunks),
      static_cast<Index>(num_chunks));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CheckShapes(const char* op, int64_t token_stride, int64_t num_tokens, int64_t num_heads,
                         int64_t head_dim) {
  if (num_tokens < 0 || num_heads < 0 || head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > kMaxHalfDim) {
    return absl::InvalidArgumentError(std::string(op) +
                                      ": need num_tokens, num_heads >= 0 and an even head_dim in [2, 1024]");
  }
  if (token_stride < num_heads * head_dim) {
    return absl::InvalidArgumentError(std::string(op) + ": token_stride < num_heads * head_dim");
  }
  return absl::OkStatus();
}

absl::Status CheckTableArgs(const char* op, const void* x, int64_t token_stride, const int32_t* positions,
                            const float* table, int64_t num_positions, int64_t num_tokens, int64_t num_heads,
                            int64_t head_dim, int64_t rotary_dim) {
  SCORED_RETURN_IF_ERROR(CheckShapes(op, token_stride, num_tokens, num_heads, head_dim));
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    return absl::InvalidArgumentError(std::string(op) + ": rotary_dim must be even, in [2, head_dim]");
  }
  if (num_positions < 0) return absl::InvalidArgumentError(std::string(op) + ": num_positions < 0");
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || (table == nullptr && num_positions > 0)) {
    return absl::InvalidArgumentError(std::string(op) + ": null pointer");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchTableScalar(T* x, int64_t token_stride, const int32_t* positions, const float* table,
                               int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                               int64_t half, bool interleaved, cudaStream_t stream) {
  unsigned blocks = 1;
  SCORED_CUDA_CHECK(ResidentGrid(RopeTableKernel<typename DeviceType<T>::type>, kThreads,
                                 CeilDiv(num_tokens * num_heads * half, kThreads), &blocks));
  RopeTableKernel<<<blocks, kThreads, 0, stream>>>(ToDevice(x), token_stride, positions, table, num_positions,
                                                   num_tokens, num_heads, half, head_dim, interleaved);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

absl::Status RopeCosSinTable(const float* inv_freq, int64_t num_positions, int64_t half, float* table,
                             cudaStream_t stream) {
  return RopeCosSinTable(inv_freq, num_positions, half, 1.0f, table, stream);
}

absl::Status RopeCosSinTable(const float* inv_freq, int64_t num_positions, int64_t half, float scaling,
                             float* table, cudaStream_t stream) {
  if (num_positions < 0 || num_positions > (int64_t{1} << 31) || half < 1) {
    return absl::InvalidArgumentError("RopeCosSinTable: need 0 <= num_positions <= 2^31 and half >= 1");
  }
  if (num_positions == 0) return absl::OkStatus();
  if (inv_freq == nullptr || table == nullptr)
    return absl::InvalidArgumentError("RopeCosSinTable: null pointer");
  const int64_t blocks = CeilDiv(num_positions * half, kCosSinThreads);
  RopeCosSinTableKernel<<<static_cast<unsigned>(blocks < kMaxCosSinBlocks ? blocks : kMaxCosSinBlocks),
                          kCosSinThreads, 0, stream>>>(inv_freq, num_positions, half, scaling, table);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status RopeWithTable(T* x, int64_t token_stride, const int32_t* positions, const float* table,
                           int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                           cudaStream_t stream) {
  return RopeWithTable(x, token_stride, positions, table, num_positions, num_tokens, num_heads, head_dim,
                       head_dim, stream);
}

template <typename T>
absl::Status RopeWithTable(T* x, int64_t token_stride, const int32_t* positions, const float* table,
                           int64_t num_positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                           int64_t rotary_dim, cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckTableArgs("RopeWithTable", x, token_stride, positions, table, num_positions,
                                        num_tokens, num_heads, head_dim, rotary_dim));
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  const int64_t half = rotary_dim / 2;
  constexpr int kVec = Vec16<T>::kSize;
  if (half % kVec == 0 && head_dim % kVec == 0 && token_stride % kVec == 0 && IsAligned(x, 16) &&
      IsAligned(table, 16)) {
    // num_tokens * token_stride < 2^32 bounds every element offset; chunk indices are smaller still, so
    // index + one grid step (a few hundred thousand) cannot wrap either.
    if (num_tokens <= (int64_t{1} << 32) / token_stride - 1) {
      return LaunchTableVec<uint32_t>(ToDevice(x), token_stride, positions, table, num_positions, num_tokens,
                                      num_heads, half, head_dim, stream);
    }
    return LaunchTableVec<int64_t>(ToDevice(x), token_stride, positions, table, num_positions, num_tokens,
                                   num_heads, half, head_dim, stream);
  }
  return LaunchTableScalar(x, token_stride, positions, table, num_positions, num_tokens, num_heads, head_dim,
                           half, /*interleaved=*/false, stream);
}

template <typename T>
absl::Status RopeInterleavedWithTable(T* x, int64_t token_stride, const int32_t* positions,
                                      const float* table, int64_t num_positions, int64_t num_tokens,
                                      int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
                                      cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckTableArgs("RopeInterleavedWithTable", x, token_stride, positions, table,
                                        num_positions, num_tokens, num_heads, head_dim, rotary_dim));
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  return LaunchTableScalar(x, token_stride, positions, table, num_positions, num_tokens, num_heads, head_dim,
                           rotary_dim / 2, /*interleaved=*/true, stream);
}

template <typename T>
absl::Status Rope(T* x, int64_t token_stride, const int32_t* positions, const float* inv_freq,
                  int64_t num_tokens, int64_t num_heads, int64_t head_dim, cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShapes("Rope", token_stride, num_tokens, num_heads, head_dim));
  if (num_tokens == 0 || num_heads == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || inv_freq == nullptr) {
    return absl::InvalidArgumentError("Rope: null pointer");
  }
  const int64_t half = head_dim / 2;
  constexpr int kVec = Vec16<T>::kSize;
  if (half % kVec == 0 && token_stride % kVec == 0 && IsAligned(x, 16) &&
      num_heads * half / kVec <= (1 << 30)) {
    unsigned blocks = 1;
    SCORED_CUDA_CHECK(
        ResidentGrid(RopeVecKernel<typename DeviceType<T>::type>, kVecThreads, num_tokens, &blocks));
    RopeVecKernel<<<blocks, kVecThreads, 0, stream>>>(ToDevice(x), token_stride, positions, inv_freq,
                                                      num_tokens, num_heads, half);
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  }
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  RopeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(x), token_stride, positions, inv_freq, num_tokens, num_heads, head_dim / 2);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status Rope<float>(float*, int64_t, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                  cudaStream_t);
template absl::Status Rope<bf16_t>(bf16_t*, int64_t, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                   cudaStream_t);
template absl::Status RopeWithTable<float>(float*, int64_t, const int32_t*, const float*, int64_t, int64_t,
                                           int64_t, int64_t, cudaStream_t);
template absl::Status RopeWithTable<bf16_t>(bf16_t*, int64_t, const int32_t*, const float*, int64_t, int64_t,
                                            int64_t, int64_t, cudaStream_t);
template absl::Status RopeWithTable<float>(float*, int64_t, const int32_t*, const float*, int64_t, int64_t,
                                           int64_t, int64_t, int64_t, cudaStream_t);
template absl::Status RopeWithTable<bf16_t>(bf16_t*, int64_t, const int32_t*, const float*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, cudaStream_t);
template absl::Status RopeInterleavedWithTable<float>(float*, int64_t, const int32_t*, const float*, int64_t,
                                                      int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template absl::Status RopeInterleavedWithTable<bf16_t>(bf16_t*, int64_t, const int32_t*, const float*,
                                                       int64_t, int64_t, int64_t, int64_t, int64_t,
                                                       cudaStream_t);

}  // namespace scored::kernels
