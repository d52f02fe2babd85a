// The gated delta rule, chunked form, over a varlen batch. Contract: delta_net_rule.h
// (GatedDeltaRuleChunked).
//
// Block (sequence s, v head h, v tile vt): the state columns [64 vt, 64 vt + 64) of head h (a column of the
// state evolves from its own column of v alone, so tiles are independent; the chunk-local k work is
// repeated per tile). 8 warps; every product below is a warp tile of 16 x 8 outputs on mma.sync m16n8k8
// TF32 (DeltaRuleMath::kTf32x3: three products per term, hi*hi + hi*lo + lo*hi, of the operands split as
// hi = tf32(x), lo = tf32(x - hi): fp32-accurate), reading both operands from shared memory.
//
// Per chunk of C = 64 tokens (t0 .. t0 + n; rows past n hold zero k, q, v, beta and g, so they add
// nothing and leave the chunk's last decay that of its last token), with G the double cumulative sum of g
// within the chunk and S the state [k_dim, tile] carried from the previous chunk (0 at the sequence's
// start), the steps of transformers' torch_chunk_gated_delta_rule:
//   A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)  for j < i, else 0
//   T = (I + A)^-1                                (blockwise forward substitution, fp32)
//   W = T diag(beta exp(G)) K;  U = T diag(beta) V
//   V' = U - W S
//   P[i][j] = (q_i . k_j) exp(G_i - G_j)  for j <= i, else 0
//   O = diag(exp(G)) Q S + P V'                   -> out rows t0 .. t0 + n
//   S = exp(G_last) S + (diag(exp(G_last - G)) K)^T V'
// exp(G_i - G_j) is expf of the double difference (absolute error <= ~3e-8 wherever it matters); the
// per-token factors exp(G), exp(G_last - G) are double exps rounded once.
//
// Shared memory (floats), row strides chosen so every fragment load of the mma is free of bank conflicts
// except the two transposed reads of K (2-way):
//   K, Q, W [64][dkp + 4];  V, U [64][bvp + 8];  S [dkp][bvp + 8];  A, T [64][68];
//   per token: G (double), beta, beta exp(G), exp(G), exp(G_last - G).
// At k_dim 128 and a 64-column tile: 206.5 KiB, one block per SM.
#include <cmath>
#include <cstdint>

#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/delta_net_rule.h"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels {
namespace {

constexpr int kC = 64;  // tokens per chunk
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxDim = 128;
constexpr int kVTile = 64;   // state columns per block
constexpr int kTs = kC + 4;  // row stride of A and T

struct Layout {
  int dkp, bvp;                       // k_dim rounded up to 16, the tile's columns rounded up to 8
  int ks, vs;                         // row strides of K / Q / W and of V / U / S
  int g, beta, beta_eg, eg, elast;    // per-token arrays (g: doubles)
  int k, q, w, v, u, s, a, t, total;  // float offsets
};

__host__ __device__ inline Layout MakeLayout(int k_dim, int tile) {
  Layout l;
  l.dkp = (k_dim + 15) / 16 * 16;  // the state's rows are m16 tiles
  l.bvp = (tile + 7) / 8 * 8;
  l.ks = l.dkp + 4;
  l.vs = l.bvp + 8;
  l.g = 0;  // kC doubles
  l.beta = 2 * kC;
  l.beta_eg = l.beta + kC;
  l.eg = l.beta_eg + kC;
  l.elast = l.eg + kC;
  l.k = l.elast + kC;
  l.q = l.k + kC * l.ks;
  l.w = l.q + kC * l.ks;
  l.v = l.w + kC * l.ks;
  l.u = l.v + kC * l.vs;
  l.s = l.u + kC * l.vs;
  l.a = l.s + l.dkp * l.vs;
  l.t = l.a + kC * kTs;
  l.total = l.t + kC * kTs;
  return l;
}

// Tokens of the chunk starting at t0 (at most kC).
__device__ __forceinline__ int Rows(int64_t t0, int64_t end) {
  return end - t0 < kC ? static_cast<int>(end - t0) : kC;
}

__device__ __forceinline__ uint32_t ToTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void MmaTf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc[j] (the warp's 16 x 8 tiles at rows m0, columns n0 + 8 j, j < kStrip; those at or past `cols` are
// skipped) += sum over k in [k_begin, k_end) (multiples of 8) of a(m, k) b(k, n). The A fragment is loaded
// and split once per k step for the strip's tiles, whose accumulators are independent chains. Lane
// (gr = lane / 4, tg = lane % 4) holds outputs (m0 + gr, n + 2 tg + {0, 1}) in acc[j][0..1] and
// (m0 + gr + 8, ...) in acc[j][2..3] (the PTX fragment layout of m16n8k8).
constexpr int kStrip = 4;

template <bool kSplit, typename FA, typename FB>
__device__ __forceinline__ void StripMma(float (&acc)[kStrip][4], int m0, int n0, int cols, int k_begin,
                                         int k_end, FA a, FB b) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, tg = lane & 3;
  for (int k0 = k_begin; k0 < k_end; k0 += 8) {
    const float af[4] = {a(m0 + gr, k0 + tg), a(m0 + gr + 8, k0 + tg), a(m0 + gr, k0 + tg + 4),
                         a(m0 + gr + 8, k0 + tg + 4)};
    uint32_t ah[4], al[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ah[i] = ToTf32(af[i]);
      if constexpr (kSplit) al[i] = ToTf32(af[i] - __uint_as_float(ah[i]));
    }
#pragma unroll
    for (int j = 0; j < kStrip; ++j) {
      const int n = n0 + 8 * j;
      if (n >= cols) break;
      const float bf[2] = {b(k0 + tg, n + gr), b(k0 + tg + 4, n + gr)};
      uint32_t bh[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) bh[i] = ToTf32(bf[i]);
      if constexpr (kSplit) {
        uint32_t bl[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) bl[i] = ToTf32(bf[i] - __uint_as_float(bh[i]));
        MmaTf32(acc[j], al, bh);
        MmaTf32(acc[j], ah, bl);
      }
      MmaTf32(acc[j], ah, bh);
    }
  }
}

// Strips of 16 x (8 kStrip) outputs over out[m][n] for m < rows (a multiple of 16), n < cols (of 8),
// round-robin over the block's warps; `body(m0, n0)` computes one (StripMma, then its epilogue).
template <typename Body>
__device__ __forceinline__ void ForEachStrip(int rows, int cols, Body body) {
  const int warp = threadIdx.x >> 5;
  const int strips_n = (cols + 8 * kStrip - 1) / (8 * kStrip), strips = rows / 16 * strips_n;
  for (int strip = warp; strip < strips; strip += kWarps)
    body(strip / strips_n * 16, strip % strips_n * 8 * kStrip);
}

// Calls epi(m, n, value) for every output of a strip's accumulators inside `cols`.
template <typename Epi>
__device__ __forceinline__ void StripEpilogue(const float (&acc)[kStrip][4], int m0, int n0, int cols,
                                              Epi epi) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, tg = lane & 3;
#pragma unroll
  for (int j = 0; j < kStrip; ++j) {
    const int n = n0 + 8 * j + 2 * tg;
    if (n0 + 8 * j >= cols) break;
#pragma unroll
    for (int r = 0; r < 4; ++r) epi(m0 + gr + (r >> 1) * 8, n + (r & 1), acc[j][r]);
  }
}

// out[m][n] = epi(m, n, sum over k in krange(m0, n0) of a(m, k) b(k, n)) for m < rows, n < cols; krange
// bounds the sum of a strip (an empty range: the epilogue sees 0).
template <bool kSplit, typename KRange, typename FA, typename FB, typename Epi>
__device__ __forceinline__ void BlockGemm(int rows, int cols, KRange krange, FA a, FB b, Epi epi) {
  ForEachStrip(rows, cols, [&](int m0, int n0) {
    int kb = 0, ke = 0;
    krange(m0, n0, &kb, &ke);
    float acc[kStrip][4] = {};
    StripMma<kSplit>(acc, m0, n0, cols, kb, ke, a, b);
    StripEpilogue(acc, m0, n0, cols, epi);
  });
}

// Issues the copies of rows [t0, t0 + n) of a [., qkv_stride] fp32 array, columns [0, width), into dst
// [kC][stride], zeros past row n and in columns [width, width_pad): cp.async, 16 bytes at a time where
// `vec4` (the host checked the alignment: delta_net_rule.h's pointers 16-byte aligned, qkv_stride, k_dim
// and v_dim multiples of 4), else 4. The caller commits and waits.
__device__ __forceinline__ void IssueRows(float* dst, int stride, const float* src, int64_t qkv_stride,
                                          int64_t t0, int n, int width, int width_pad, bool vec4) {
  if (vec4) {
    const int per_row = width_pad / 4;
    for (int e = threadIdx.x; e < kC * per_row; e += kThreads) {
      const int t = e / per_row, i = 4 * (e % per_row);
      const bool in = t < n && i < width;
      CopyAsync16(dst + t * stride + i, in ? src + (t0 + t) * qkv_stride + i : src, in ? 16 : 0);
    }
    return;
  }
  for (int e = threadIdx.x; e < kC * width_pad; e += kThreads) {
    const int t = e / width_pad, i = e % width_pad;
    if (t < n && i < width) {
      CopyAsync4(dst + t * stride + i, src + (t0 + t) * qkv_stride + i);
    } else {
      dst[t * stride + i] = 0.0f;
    }
  }
}

// The chunk's g and beta (zeros past n), then the per-token factors: G = the inclusive cumulative sum of g
// in double (warp 0: two tokens per lane, a shuffle scan of the lanes' pairs; the order depends only on
// the position), beta, beta exp(G), exp(G), exp(G_last - G). Ends with a barrier.
__device__ void LoadFactors(const Layout& L, float* smem, const float* g, const float* beta, int64_t t0,
                            int n, int h, int num_v_heads) {
  const int tid = threadIdx.x;
  double* gd = reinterpret_cast<double*>(smem + L.g);
  if (tid < 32) {
    const int t = 2 * tid;
    const double g0 = t < n ? static_cast<double>(g[(t0 + t) * num_v_heads + h]) : 0.0;
    const double g1 = t + 1 < n ? static_cast<double>(g[(t0 + t + 1) * num_v_heads + h]) : 0.0;
    double pair = g0 + g1;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const double up = __shfl_up_sync(0xffffffffu, pair, d);
      if (tid >= d) pair += up;
    }
    const double before = pair - (g0 + g1);
    const double last = __shfl_sync(0xffffffffu, pair, 31);
    const double cum[2] = {before + g0, pair};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tt = t + r;
      const float b = tt < n ? beta[(t0 + tt) * num_v_heads + h] : 0.0f;
      const double eg = exp(cum[r]);
      gd[tt] = cum[r];
      smem[L.beta + tt] = b;
      smem[L.eg + tt] = static_cast<float>(eg);
      smem[L.beta_eg + tt] = static_cast<float>(static_cast<double>(b) * eg);
      smem[L.elast + tt] = static_cast<float>(exp(last - cum[r]));
    }
  }
  __syncthreads();
}

// T = (I + A)^-1 of the strictly lower A, in 16 x 16 blocks: the four diagonal blocks first, one warp
// each, lane c its column (T[r][c] = -sum_{c <= j < r} A[r][j] T[j][c] reads only its own column), then the
// block rows 1..3 below them in turn: X = A[rows of block b][16 j ..) T (the blocks above), into `scratch`
// [16][kTs], then T[block b][block j] = -T[b][b] X. 8 barriers instead of 63 for a row-by-row solve.
__device__ void InvertUnitLower(const float* a, float* t, float* scratch) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int e = tid; e < kC * kC; e += kThreads) t[(e / kC) * kTs + e % kC] = e / kC == e % kC ? 1.0f : 0.0f;
  __syncthreads();
  if (warp < kC / 16 && lane < 16) {
    const int o = 16 * warp, c = o + lane;
    for (int r = c + 1; r < o + 16; ++r) {
      float s = 0.0f;
      for (int j = c; j < r; ++j) s = fmaf(a[r * kTs + j], t[j * kTs + c], s);
      t[r * kTs + c] = -s;
    }
  }
  __syncthreads();
  for (int b = 1; b < kC / 16; ++b) {
    const int o = 16 * b;
    for (int e = tid; e < 16 * o; e += kThreads) {  // X[r][c], c < o
      const int r = e / o, c = e % o;
      float s = 0.0f;
      for (int kk = c; kk < o; ++kk) s = fmaf(a[(o + r) * kTs + kk], t[kk * kTs + c], s);
      scratch[r * kTs + c] = s;
    }
    __syncthreads();
    for (int e = tid; e < 16 * o; e += kThreads) {  // T[o + r][c] = -sum_{m <= r} T[o + r][o + m] X[m][c]
      const int r = e / o, c = e % o;
      float s = 0.0f;
      for (int m = 0; m <= r; ++m) s = fmaf(t[(o + r) * kTs + o + m], scratch[m * kTs + c], s);
      t[(o + r) * kTs + c] = -s;
    }
    __syncthreads();
  }
}

template <bool kSplit>
__global__ void __launch_bounds__(kThreads)
    GatedDeltaRuleChunkKernel(const float* __restrict__ q, const float* __restrict__ k,
                              const float* __restrict__ v, int64_t qkv_stride, const float* __restrict__ g,
                              const float* __restrict__ beta, const int32_t* __restrict__ cu_seqlens,
                              int64_t num_tokens, int num_k_heads, int num_v_heads, int k_dim, int v_dim,
                              int num_tiles, bool vec4, float* __restrict__ out) {
  extern __shared__ float4 smem_vec[];
  float* smem = reinterpret_cast<float*>(smem_vec);
  const int vt = static_cast<int>(blockIdx.x % static_cast<unsigned>(num_tiles));
  const int h = static_cast<int>(blockIdx.x / static_cast<unsigned>(num_tiles) % num_v_heads);
  const int64_t seq = blockIdx.x / static_cast<unsigned>(num_tiles) / num_v_heads;
  const int kh = h / (num_v_heads / num_k_heads);
  int64_t start = cu_seqlens[seq], end = cu_seqlens[seq + 1];
  start = start < 0 ? 0 : (start > num_tokens ? num_tokens : start);
  end = end < start ? start : (end > num_tokens ? num_tokens : end);
  if (end == start) return;
  const int v0 = vt * kVTile;
  const int tile = v_dim - v0 < kVTile ? v_dim - v0 : kVTile;
  const Layout L = MakeLayout(k_dim, tile);
  float *sk = smem + L.k, *sq = smem + L.q, *sw = smem + L.w, *sv = smem + L.v, *su = smem + L.u;
  float *ss = smem + L.s, *sa = smem + L.a, *st = smem + L.t;
  const double* gd = reinterpret_cast<const double*>(smem + L.g);
  const float *f_beta = smem + L.beta, *f_beta_eg = smem + L.beta_eg, *f_eg = smem + L.eg;
  const float* f_elast = smem + L.elast;
  const int ks = L.ks, vs = L.vs, dkp = L.dkp, bvp = L.bvp;

  for (int e = threadIdx.x; e < dkp * vs; e += kThreads) ss[e] = 0.0f;

  // Lower-triangular sums: a tile of rows m0.. needs columns (or tokens) below m0 + 16 only.
  const auto lower_k = [](int m0, int, int* b, int* e) {
    *b = 0;
    *e = m0 + 16;
  };
  const auto full_k = [](int kmax) {
    return [kmax](int, int, int* b, int* e) {
      *b = 0;
      *e = kmax;
    };
  };
  const auto on_or_below_diagonal = [](int m0, int n0, int* b, int* e, int kmax) {
    *b = 0;
    *e = n0 <= m0 + 15 ? kmax : 0;
  };

  // Chunk c + 1's rows are copied while chunk c finishes: V once U is formed, Q once O is out, K once S is
  // updated (each buffer's last reader); its g / beta at its start.
  const float* k_head = k + kh * k_dim;
  const float* q_head = q + kh * k_dim;
  const float* v_tile = v + h * v_dim + v0;
  auto issue_k = [&](int64_t c0) {
    IssueRows(sk, ks, k_head, qkv_stride, c0, Rows(c0, end), k_dim, dkp, vec4);
    CopyAsyncCommit();
  };
  auto issue_q = [&](int64_t c0) {
    IssueRows(sq, ks, q_head, qkv_stride, c0, Rows(c0, end), k_dim, dkp, vec4);
    CopyAsyncCommit();
  };
  auto issue_v = [&](int64_t c0) {
    IssueRows(sv, vs, v_tile, qkv_stride, c0, Rows(c0, end), tile, bvp, vec4);
    CopyAsyncCommit();
  };
  issue_k(start);
  issue_q(start);
  issue_v(start);

  for (int64_t t0 = start; t0 < end; t0 += kC) {
    const int n = Rows(t0, end);
    const bool more = t0 + kC < end;
    LoadFactors(L, smem, g, beta, t0, n, h, num_v_heads);
    CopyAsyncWait<0>();
    __syncthreads();
    // A = beta_i (k_i . k_j) exp(G_i - G_j), strictly lower.
    BlockGemm<kSplit>(
        kC, kC, [&](int m0, int n0, int* b, int* e) { on_or_below_diagonal(m0, n0, b, e, dkp); },
        [&](int m, int kk) { return sk[m * ks + kk]; }, [&](int kk, int c) { return sk[c * ks + kk]; },
        [&](int i, int j, float x) {
          sa[i * kTs + j] = j < i ? f_beta[i] * x * expf(static_cast<float>(gd[i] - gd[j])) : 0.0f;
        });
    __syncthreads();
    InvertUnitLower(sa, st, sw);
    // W = T diag(beta exp(G)) K, U = T diag(beta) V (T is lower triangular).
    BlockGemm<kSplit>(
        kC, dkp, lower_k, [&](int m, int kk) { return st[m * kTs + kk] * f_beta_eg[kk]; },
        [&](int kk, int c) { return sk[kk * ks + c]; }, [&](int i, int j, float x) { sw[i * ks + j] = x; });
    BlockGemm<kSplit>(
        kC, bvp, lower_k, [&](int m, int kk) { return st[m * kTs + kk] * f_beta[kk]; },
        [&](int kk, int c) { return sv[kk * vs + c]; }, [&](int i, int j, float x) { su[i * vs + j] = x; });
    __syncthreads();
    if (more) issue_v(t0 + kC);
    // V' = U - W S (in place in U); P = (q_i . k_j) exp(G_i - G_j) on and below the diagonal (into A).
    BlockGemm<kSplit>(
        kC, bvp, full_k(dkp), [&](int m, int kk) { return sw[m * ks + kk]; },
        [&](int kk, int c) { return ss[kk * vs + c]; }, [&](int i, int j, float x) { su[i * vs + j] -= x; });
    BlockGemm<kSplit>(
        kC, kC, [&](int m0, int n0, int* b, int* e) { on_or_below_diagonal(m0, n0, b, e, dkp); },
        [&](int m, int kk) { return sq[m * ks + kk]; }, [&](int kk, int c) { return sk[c * ks + kk]; },
        [&](int i, int j, float x) {
          sa[i * kTs + j] = j <= i ? x * expf(static_cast<float>(gd[i] - gd[j])) : 0.0f;
        });
    __syncthreads();
    // O = diag(exp(G)) Q S + P V'.
    ForEachStrip(kC, bvp, [&](int m0, int n0) {
      float inter[kStrip][4] = {}, intra[kStrip][4] = {};
      StripMma<kSplit>(
          inter, m0, n0, bvp, 0, dkp, [&](int m, int kk) { return sq[m * ks + kk]; },
          [&](int kk, int c) { return ss[kk * vs + c]; });
      StripMma<kSplit>(
          intra, m0, n0, bvp, 0, m0 + 16, [&](int m, int kk) { return sa[m * kTs + kk]; },
          [&](int kk, int c) { return su[kk * vs + c]; });
#pragma unroll
      for (int j = 0; j < kStrip; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
          inter[j][r] = fmaf(f_eg[m0 + (threadIdx.x & 31) / 4 + (r >> 1) * 8], inter[j][r], intra[j][r]);
      }
      StripEpilogue(inter, m0, n0, bvp, [&](int i, int jj, float x) {
        if (i < n && jj < tile) out[((t0 + i) * num_v_heads + h) * static_cast<int64_t>(v_dim) + v0 + jj] = x;
      });
    });
    __syncthreads();
    if (more) issue_q(t0 + kC);
    // S = exp(G_last) S + (diag(exp(G_last - G)) K)^T V'.
    const float decay_last = static_cast<float>(exp(gd[kC - 1]));
    BlockGemm<kSplit>(
        dkp, bvp, full_k(kC), [&](int m, int tt) { return sk[tt * ks + m] * f_elast[tt]; },
        [&](int tt, int c) { return su[tt * vs + c]; },
        [&](int i, int j, float x) { ss[i * vs + j] = fmaf(decay_last, ss[i * vs + j], x); });
    __syncthreads();
    if (more) issue_k(t0 + kC);
  }
}

template <bool kSplit>
absl::Status LaunchChunked(const float* q, const float* k, const float* v, int64_t qkv_stride, const float* g,
                           const float* beta, const int32_t* cu_seqlens, int64_t num_seqs, int64_t num_tokens,
                           int num_k_heads, int num_v_heads, int k_dim, int v_dim, float* out,
                           cudaStream_t stream) {
  const auto kernel = GatedDeltaRuleChunkKernel<kSplit>;
  const int max_smem = MakeLayout(kMaxDim, kVTile).total * static_cast<int>(sizeof(float));
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), max_smem));
  const int num_tiles = (v_dim + kVTile - 1) / kVTile;
  const int tile = v_dim < kVTile ? v_dim : kVTile;
  const int smem = MakeLayout(k_dim, tile).total * static_cast<int>(sizeof(float));
  const unsigned blocks = static_cast<unsigned>(num_seqs * num_v_heads * num_tiles);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec4 =
      aligned(q) && aligned(k) && aligned(v) && qkv_stride % 4 == 0 && k_dim % 4 == 0 && v_dim % 4 == 0;
  kernel<<<blocks, kThreads, smem, stream>>>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_tokens,
                                             num_k_heads, num_v_heads, k_dim, v_dim, num_tiles, vec4, out);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

absl::Status GatedDeltaRuleChunked(const float* q, const float* k, const float* v, int64_t qkv_stride,
                                   const float* g, const float* beta, const int32_t* cu_seqlens,
                                   int64_t num_seqs, int64_t num_tokens, int64_t num_k_heads,
                                   int64_t num_v_heads, int64_t k_dim, int64_t v_dim, DeltaRuleMath math,
                                   float* out, cudaStream_t stream) {
  SCORED_ASSIGN_OR_RETURN(
      const bool work,
      CheckGatedDeltaRuleArgs("GatedDeltaRuleChunked", q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs,
                              num_tokens, num_k_heads, num_v_heads, k_dim, v_dim, out));
  if (!work) return absl::OkStatus();
  const int nk = static_cast<int>(num_k_heads), nv = static_cast<int>(num_v_heads);
  const int dk = static_cast<int>(k_dim), dv = static_cast<int>(v_dim);
  if (math == DeltaRuleMath::kTf32x3) {
    return LaunchChunked<true>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                               out, stream);
  }
  return LaunchChunked<false>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                              out, stream);
}

}  // namespace scored::kernels
