// Q against its reference R, one block per token: the fused tiled pass and the shard combine. Contract:
// baseline_compare.h.
//
// Each thread reads kPerThread columns of a tile (column base + j * kThreads + tid: coalesced), keeps its own
// running (max, lowest id) of each row for the argmaxes, and the tile's maxima go through shared memory
// (one barrier per tile: the two halves of tile_max alternate, so tile k + 2 writes a half every thread
// finished reading before tile k + 1's barrier). Rows are read once.
#include <cmath>

#include "engine/base/status_macros.h"
#include "engine/kernels/baseline_compare.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/max_arg.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = static_cast<int>(kCompareTile / kThreads);
constexpr int64_t kMaxBlocks = 65535;
static_assert(kPerThread * kThreads == kCompareTile, "a tile is kPerThread columns per thread");

// Running sums of one row pair, relative to the block's running maxima m_r / m_q.
struct RunningSums {
  double r = 0.0;      // sum exp(l_R - m_r)
  double q = 0.0;      // sum exp(l_Q - m_q)
  double cross = 0.0;  // sum exp(l_R - m_r) (l_R - l_Q)
};

// The new maximum after a tile whose own maximum is tile_max; rescales the sums (of which `a` and `b`, when
// not null, are relative to `running`) when it grows. Block-uniform: every thread holds the same values.
__device__ __forceinline__ float Rebase(float running, float tile_max, double* a, double* b) {
  if (!(tile_max > running)) return running;
  if (running != -INFINITY) {
    const double f = exp(static_cast<double>(running) - static_cast<double>(tile_max));
    *a *= f;
    if (b != nullptr) *b *= f;
  }
  return tile_max;
}

__device__ BaselinePartialStats CompareRow(const float* __restrict__ r_row, const float* __restrict__ q_row,
                                           int64_t n, float (&tile_max)[2][2][kWarps], float* scratch_f,
                                           int32_t* scratch_i, double* scratch_d) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  MaxArg arg_r{-INFINITY, INT32_MAX}, arg_q{-INFINITY, INT32_MAX};
  float m_r = -INFINITY, m_q = -INFINITY;
  RunningSums s;
  int half = 0;
  for (int64_t base = 0; base < n; base += kCompareTile) {
    float xr[kPerThread], xq[kPerThread];
    float tr = -INFINITY, tq = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = base + j * kThreads + threadIdx.x;
      xr[j] = i < n ? r_row[i] : -INFINITY;
      xq[j] = i < n ? q_row[i] : -INFINITY;
      tr = fmaxf(tr, xr[j]);
      tq = fmaxf(tq, xq[j]);
      // Ascending columns per thread: strictly larger keeps the lowest id of the thread's maximum.
      if (i < n && (xr[j] > arg_r.value || arg_r.index == INT32_MAX))
        arg_r = {xr[j], static_cast<int32_t>(i)};
      if (i < n && (xq[j] > arg_q.value || arg_q.index == INT32_MAX))
        arg_q = {xq[j], static_cast<int32_t>(i)};
    }
    tr = WarpMax(tr);
    tq = WarpMax(tq);
    if (lane == 0) {
      tile_max[half][0][warp] = tr;
      tile_max[half][1][warp] = tq;
    }
    __syncthreads();
    tr = -INFINITY;
    tq = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      tr = fmaxf(tr, tile_max[half][0][w]);
      tq = fmaxf(tq, tile_max[half][1][w]);
    }
    half ^= 1;
    m_r = Rebase(m_r, tr, &s.r, &s.cross);
    m_q = Rebase(m_q, tq, &s.q, nullptr);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (base + j * kThreads + threadIdx.x >= n) continue;
      const float e_r = expf(xr[j] - m_r);
      s.r += static_cast<double>(e_r);
      s.q += static_cast<double>(expf(xq[j] - m_q));
      s.cross += static_cast<double>(e_r) * (static_cast<double>(xr[j]) - static_cast<double>(xq[j]));
    }
  }
  BaselinePartialStats out;
  arg_r = BlockMaxArg(arg_r, scratch_f, scratch_i);
  arg_q = BlockMaxArg(arg_q, scratch_f, scratch_i);
  out.max_r = m_r;
  out.argmax_r = arg_r.index;
  out.max_q = m_q;
  out.argmax_q = arg_q.index;
  out.sum_r = BlockSum(s.r, scratch_d);
  out.sum_q = BlockSum(s.q, scratch_d);
  out.cross = BlockSum(s.cross, scratch_d);
  return out;
}

__global__ void __launch_bounds__(kThreads)
    PartialsKernel(const float* __restrict__ ref_logits, int64_t ref_ld, const float* __restrict__ logits,
                   int64_t ld, const int32_t* __restrict__ targets, int64_t num_tokens, int64_t shard_size,
                   int64_t vocab_offset, BaselinePartialStats* __restrict__ stats) {
  __shared__ float tile_max[2][2][kWarps];
  __shared__ float scratch_f[32];
  __shared__ int32_t scratch_i[32];
  __shared__ double scratch_d[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* r_row = ref_logits + t * ref_ld;
    BaselinePartialStats p =
        CompareRow(r_row, logits + t * ld, shard_size, tile_max, scratch_f, scratch_i, scratch_d);
    if (threadIdx.x == 0) {
      const int64_t local = static_cast<int64_t>(targets[t]) - vocab_offset;
      const bool has_target = local >= 0 && local < shard_size;
      p.argmax_r += static_cast<int32_t>(vocab_offset);
      p.argmax_q += static_cast<int32_t>(vocab_offset);
      p.target_logit_r = has_target ? r_row[local] : 0.0f;
      p.has_target = has_target ? 1 : 0;
      stats[t] = p;
    }
  }
}

// The global (max, argmax) of one model over the shards, ties to the lowest id (shards ascend in id).
__device__ __forceinline__ void TakeMax(float max, int32_t argmax, float* best, int32_t* best_id) {
  if (Better(max, argmax, *best, *best_id)) {
    *best = max;
    *best_id = argmax;
  }
}

__global__ void CombineKernel(const BaselinePartialStats* __restrict__ stats, int64_t num_shards,
                              int64_t num_tokens, const int32_t* __restrict__ targets, BaselineOutputs out) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float m_r = -INFINITY, m_q = -INFINITY, target_logit = __int_as_float(0x7fc00000);
    int32_t arg_r = INT32_MAX, arg_q = INT32_MAX;
    for (int64_t r = 0; r < num_shards; ++r) {
      const BaselinePartialStats& p = stats[r * num_tokens + t];
      TakeMax(p.max_r, p.argmax_r, &m_r, &arg_r);
      TakeMax(p.max_q, p.argmax_q, &m_q, &arg_q);
      if (p.has_target) target_logit = p.target_logit_r;
    }
    double s_r = 0.0, s_q = 0.0, cross = 0.0;
    for (int64_t r = 0; r < num_shards; ++r) {
      const BaselinePartialStats& p = stats[r * num_tokens + t];
      const double w_r = exp(static_cast<double>(p.max_r) - static_cast<double>(m_r));
      s_r += p.sum_r * w_r;
      cross += p.cross * w_r;
      s_q += p.sum_q * exp(static_cast<double>(p.max_q) - static_cast<double>(m_q));
    }
    const double kld = cross / s_r - (static_cast<double>(m_r) - static_cast<double>(m_q)) - log(s_r / s_q);
    out.kld[t] = kld < 0.0 ? 0.0 : kld;  // NaN stays NaN (the engine reports non-finite results)
    out.ref_logprob[t] = static_cast<double>(target_logit) - (static_cast<double>(m_r) + log(s_r));
    out.ref_greedy[t] = arg_r == targets[t] ? 1 : 0;
    out.same_top[t] = arg_r == arg_q ? 1 : 0;
  }
}

}  // namespace

absl::Status ComputeBaselinePartials(const float* ref_logits, int64_t ref_ld, const float* logits, int64_t ld,
                                     const int32_t* targets, int64_t num_tokens, int64_t shard_size,
                                     int64_t vocab_offset, BaselinePartialStats* stats, cudaStream_t stream) {
  if (num_tokens < 0 || shard_size < 1 || ld < shard_size || ref_ld < shard_size || vocab_offset < 0 ||
      vocab_offset + shard_size > INT32_MAX) {
    return absl::InvalidArgumentError("ComputeBaselinePartials: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (ref_logits == nullptr || logits == nullptr || targets == nullptr || stats == nullptr) {
    return absl::InvalidArgumentError("ComputeBaselinePartials: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  PartialsKernel<<<blocks, kThreads, 0, stream>>>(ref_logits, ref_ld, logits, ld, targets, num_tokens,
                                                  shard_size, vocab_offset, stats);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CombineBaselinePartials(const BaselinePartialStats* stats, int64_t num_shards,
                                     int64_t num_tokens, const int32_t* targets,
                                     const BaselineOutputs& outputs, cudaStream_t stream) {
  if (num_shards < 1 || num_tokens < 0)
    return absl::InvalidArgumentError("CombineBaselinePartials: bad sizes");
  if (num_tokens == 0) return absl::OkStatus();
  if (stats == nullptr || targets == nullptr || outputs.ref_logprob == nullptr || outputs.kld == nullptr ||
      outputs.ref_greedy == nullptr || outputs.same_top == nullptr) {
    return absl::InvalidArgumentError("CombineBaselinePartials: null pointer");
  }
  const int64_t blocks = CeilDiv(num_tokens, 256);
  CombineKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), 256, 0, stream>>>(
      stats, num_shards, num_tokens, targets, outputs);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CompareWithBaseline(const float* ref_logits, int64_t ref_ld, const float* logits, int64_t ld,
                                 const int32_t* targets, int64_t num_tokens, int64_t vocab_size,
                                 BaselinePartialStats* stats, const BaselineOutputs& outputs,
                                 cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(ComputeBaselinePartials(ref_logits, ref_ld, logits, ld, targets, num_tokens,
                                                 vocab_size, 0, stats, stream));
  return CombineBaselinePartials(stats, 1, num_tokens, targets, outputs, stream);
}

}  // namespace scored::kernels
