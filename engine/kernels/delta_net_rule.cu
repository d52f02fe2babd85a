// The gated delta rule, recurrent form, over a varlen batch. Contract: delta_net_rule.h.
//
// Block (sequence s, v head h), 4 * v_pad threads (v_pad = v_dim rounded up to 8, so a warp holds 8 whole
// columns): thread (j = tid / 4, p = tid % 4) owns column j of the state, rows i = 4 r + p for r < kRows.
// Rows past k_dim and columns past v_dim see zero k / q / v (their shared-memory slots are zeroed once and
// never copied to), so their state stays 0 and they need no predicates; only the store is masked.
//
// Shared memory, two buffers of kChunk tokens each (one applied while the next is copied):
//   k [kChunk][4][kRows + 4], q likewise: element i of a token at [i % 4][i / 4], so thread p reads its rows
//       as kRows / 4 float4s; the +4 pad puts the 4 p-rows in different banks (a conflict-free LDS.128
//       where lanes of one p broadcast);
//   v [kChunk][v_pad]; exp(g) [kChunk]; beta [kChunk].
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/delta_net_rule.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/kernel_support.cuh"

namespace scored::kernels {
namespace {

constexpr int kParts = 4;   // threads per state column
constexpr int kChunk = 16;  // tokens staged per shared-memory buffer
constexpr int kMaxDim = 128;
constexpr int kMaxThreads = kParts * kMaxDim;

__host__ __device__ constexpr int PartStride(int rows) { return rows + 4; }
// Floats of one buffer.
__host__ __device__ constexpr int BufferFloats(int rows, int v_pad) {
  return kChunk * (2 * kParts * PartStride(rows) + v_pad + 2);
}

template <int kRows>
__global__ void __launch_bounds__(kMaxThreads)
    GatedDeltaRuleRecurrentKernel(const float* __restrict__ q,  // [num_tokens, qkv_stride]
                                  const float* __restrict__ k,  // [num_tokens, qkv_stride]
                                  const float* __restrict__ v,  // [num_tokens, qkv_stride]
                                  int64_t qkv_stride,
                                  const float* __restrict__ g,             // [num_tokens, num_v_heads]
                                  const float* __restrict__ beta,          // [num_tokens, num_v_heads]
                                  const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                                  int64_t num_tokens, int num_k_heads, int num_v_heads, int k_dim, int v_dim,
                                  int v_pad,
                                  float* __restrict__ out) {  // [num_tokens, num_v_heads, v_dim]
  constexpr int kStride = PartStride(kRows);
  constexpr int kTokenKq = kParts * kStride;  // floats of one token's k (or q)
  extern __shared__ float4 smem_vec[];
  float* smem = reinterpret_cast<float*>(smem_vec);
  const int buffer_floats = BufferFloats(kRows, v_pad);

  const int h = static_cast<int>(blockIdx.x % static_cast<unsigned>(num_v_heads));
  const int64_t seq = blockIdx.x / static_cast<unsigned>(num_v_heads);
  const int kh = h / (num_v_heads / num_k_heads);
  int64_t start = cu_seqlens[seq], end = cu_seqlens[seq + 1];
  start = start < 0 ? 0 : (start > num_tokens ? num_tokens : start);
  end = end < start ? start : (end > num_tokens ? num_tokens : end);

  const int tid = threadIdx.x;
  const int p = tid & (kParts - 1);
  const int j = tid / kParts;
  for (int e = tid; e < 2 * buffer_floats; e += blockDim.x) smem[e] = 0.0f;
  __syncthreads();
  const int64_t len = end - start;
  if (len == 0) return;

  const float* k_head = k + kh * k_dim;
  const float* q_head = q + kh * k_dim;
  const float* v_head = v + h * v_dim;
  const int width = 2 * k_dim + v_dim;
  // Copies tokens [t0, t0 + n) into `buffer` (q, k, v by cp.async; exp(g) and beta are written by the
  // caller, see below) as one cp.async group.
  auto issue = [&](int64_t t0, int n, float* buffer) {
    float* ks = buffer;
    float* qs = buffer + kChunk * kTokenKq;
    float* vs = buffer + 2 * kChunk * kTokenKq;
    for (int tt = 0; tt < n; ++tt) {
      const int64_t row = (t0 + tt) * qkv_stride;
      for (int e = tid; e < width; e += blockDim.x) {
        if (e < k_dim) {
          CopyAsync4(ks + tt * kTokenKq + (e & 3) * kStride + (e >> 2), k_head + row + e);
        } else if (e < 2 * k_dim) {
          const int i = e - k_dim;
          CopyAsync4(qs + tt * kTokenKq + (i & 3) * kStride + (i >> 2), q_head + row + i);
        } else {
          CopyAsync4(vs + tt * v_pad + (e - 2 * k_dim), v_head + row + (e - 2 * k_dim));
        }
      }
    }
    CopyAsyncCommit();
  };
  auto decay_of = [](float log_decay) { return static_cast<float>(exp(static_cast<double>(log_decay))); };
  const int64_t num_chunks = (len + kChunk - 1) / kChunk;

  {  // Prologue: chunk 0 into buffer 0.
    const int n0 = len < kChunk ? static_cast<int>(len) : kChunk;
    issue(start, n0, smem);
    float* decay_s = smem + 2 * kChunk * kTokenKq + kChunk * v_pad;
    if (tid < n0) {
      decay_s[tid] = decay_of(g[(start + tid) * num_v_heads + h]);
      decay_s[kChunk + tid] = beta[(start + tid) * num_v_heads + h];
    }
    CopyAsyncWait<0>();
    __syncthreads();
  }

  float state[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) state[r] = 0.0f;

  for (int64_t c = 0; c < num_chunks; ++c) {
    const float* cur = smem + (c & 1) * buffer_floats;
    float* next = smem + ((c + 1) & 1) * buffer_floats;
    const int64_t t0 = start + c * kChunk;
    const int n = end - t0 < kChunk ? static_cast<int>(end - t0) : kChunk;
    const int64_t t1 = t0 + kChunk;
    const int n1 = t1 >= end ? 0 : (end - t1 < kChunk ? static_cast<int>(end - t1) : kChunk);
    // The next chunk: its q / k / v in flight during this chunk's tokens, its g / beta loaded into registers
    // now and written after them (buffer `next` was last read before the previous barrier).
    if (n1 > 0) issue(t1, n1, next);
    float g_next = 0.0f, beta_next = 0.0f;
    if (tid < n1) {
      g_next = g[(t1 + tid) * num_v_heads + h];
      beta_next = beta[(t1 + tid) * num_v_heads + h];
    }

    const float* decay_s = cur + 2 * kChunk * kTokenKq + kChunk * v_pad;
    for (int tt = 0; tt < n; ++tt) {
      const float* ks = cur + tt * kTokenKq + p * kStride;
      const float* qs = cur + kChunk * kTokenKq + tt * kTokenKq + p * kStride;
      const float vj = cur[2 * kChunk * kTokenKq + tt * v_pad + j];
      const float decay = decay_s[tt];
      const float b = decay_s[kChunk + tt];
      // kv = S^T k of the state before the decay; exp(g) is applied to the sum (S^T k is linear in S).
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m = 0; m < kRows / 4; ++m) {
        const float4 kk = *reinterpret_cast<const float4*>(ks + 4 * m);
        acc[0] = fmaf(state[4 * m], kk.x, acc[0]);
        acc[1] = fmaf(state[4 * m + 1], kk.y, acc[1]);
        acc[2] = fmaf(state[4 * m + 2], kk.z, acc[2]);
        acc[3] = fmaf(state[4 * m + 3], kk.w, acc[3]);
      }
      float kv = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      kv += __shfl_xor_sync(0xffffffffu, kv, 1);
      kv += __shfl_xor_sync(0xffffffffu, kv, 2);
      const float delta = b * (vj - decay * kv);
      float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m = 0; m < kRows / 4; ++m) {
        const float4 kk = *reinterpret_cast<const float4*>(ks + 4 * m);
        const float4 qq = *reinterpret_cast<const float4*>(qs + 4 * m);
        state[4 * m] = fmaf(kk.x, delta, state[4 * m] * decay);
        state[4 * m + 1] = fmaf(kk.y, delta, state[4 * m + 1] * decay);
        state[4 * m + 2] = fmaf(kk.z, delta, state[4 * m + 2] * decay);
        state[4 * m + 3] = fmaf(kk.w, delta, state[4 * m + 3] * decay);
        o[0] = fmaf(state[4 * m], qq.x, o[0]);
        o[1] = fmaf(state[4 * m + 1], qq.y, o[1]);
        o[2] = fmaf(state[4 * m + 2], qq.z, o[2]);
        o[3] = fmaf(state[4 * m + 3], qq.w, o[3]);
      }
      float ot = (o[0] + o[1]) + (o[2] + o[3]);
      ot += __shfl_xor_sync(0xffffffffu, ot, 1);
      ot += __shfl_xor_sync(0xffffffffu, ot, 2);
      if (p == 0 && j < v_dim) out[((t0 + tt) * num_v_heads + h) * v_dim + j] = ot;
    }

    if (tid < n1) {
      float* next_decay = next + 2 * kChunk * kTokenKq + kChunk * v_pad;
      next_decay[tid] = decay_of(g_next);
      next_decay[kChunk + tid] = beta_next;
    }
    CopyAsyncWait<0>();
    __syncthreads();
  }
}

template <int kRows>
absl::Status LaunchRecurrent(const float* q, const float* k, const float* v, int64_t qkv_stride,
                             const float* g, const float* beta, const int32_t* cu_seqlens, int64_t num_seqs,
                             int64_t num_tokens, int num_k_heads, int num_v_heads, int k_dim, int v_dim,
                             float* out, cudaStream_t stream) {
  const int v_pad = (v_dim + 7) / 8 * 8;
  const auto kernel = GatedDeltaRuleRecurrentKernel<kRows>;
  // The attribute is set once per (kernel, device), so at the largest size this instance ever asks for.
  constexpr int kMaxSmem = 2 * BufferFloats(kRows, kMaxDim) * static_cast<int>(sizeof(float));
  SCORED_CUDA_CHECK(EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kMaxSmem));
  const int smem = 2 * BufferFloats(kRows, v_pad) * static_cast<int>(sizeof(float));
  const unsigned blocks = static_cast<unsigned>(num_seqs * num_v_heads);
  kernel<<<blocks, kParts * v_pad, smem, stream>>>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_tokens,
                                                   num_k_heads, num_v_heads, k_dim, v_dim, v_pad, out);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> CheckGatedDeltaRuleArgs(const char* name, const float* q, const float* k, const float* v,
                                             int64_t qkv_stride, const float* g, const float* beta,
                                             const int32_t* cu_seqlens, int64_t num_seqs, int64_t num_tokens,
                                             int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                                             int64_t v_dim, const float* out) {
  const auto invalid = [name](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
  };
  if (num_seqs < 0 || num_tokens < 0 || num_k_heads < 1 || num_v_heads < 1) {
    return invalid("need num_seqs, num_tokens >= 0 and num_k_heads, num_v_heads >= 1");
  }
  if (num_v_heads % num_k_heads != 0) return invalid("num_v_heads must be a multiple of num_k_heads");
  if (k_dim < 1 || k_dim > kMaxDim || v_dim < 1 || v_dim > kMaxDim) {
    return invalid("k_dim and v_dim must be in [1, 128]");
  }
  // Rows must hold the heads each pointer's columns are read at.
  if (qkv_stride < num_k_heads * k_dim || qkv_stride < num_v_heads * v_dim) {
    return invalid("qkv_stride too small for the heads");
  }
  // The chunked form launches a block per 64 state columns of a head.
  if (num_seqs * num_v_heads * ((v_dim + 63) / 64) >= (int64_t{1} << 31)) {
    return invalid("num_seqs * num_v_heads * ceil(v_dim / 64) must be < 2^31");
  }
  if (num_tokens == 0) return false;
  if (num_seqs == 0) return invalid("tokens but no sequence");
  if (q == nullptr || k == nullptr || v == nullptr || g == nullptr || beta == nullptr ||
      cu_seqlens == nullptr || out == nullptr) {
    return invalid("null pointer");
  }
  return true;
}

absl::Status GatedDeltaRule(const float* q, const float* k, const float* v, int64_t qkv_stride,
                            const float* g, const float* beta, const int32_t* cu_seqlens, int64_t num_seqs,
                            int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                            int64_t v_dim, float* out, cudaStream_t stream) {
  SCORED_ASSIGN_OR_RETURN(
      const bool work,
      CheckGatedDeltaRuleArgs("GatedDeltaRule", q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs,
                              num_tokens, num_k_heads, num_v_heads, k_dim, v_dim, out));
  if (!work) return absl::OkStatus();
  const int nk = static_cast<int>(num_k_heads), nv = static_cast<int>(num_v_heads);
  const int dk = static_cast<int>(k_dim), dv = static_cast<int>(v_dim);
  if (k_dim <= 16) {
    return LaunchRecurrent<4>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                              out, stream);
  }
  if (k_dim <= 32) {
    return LaunchRecurrent<8>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                              out, stream);
  }
  if (k_dim <= 64) {
    return LaunchRecurrent<16>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                               out, stream);
  }
  return LaunchRecurrent<32>(q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, dk, dv,
                             out, stream);
}

}  // namespace scored::kernels
