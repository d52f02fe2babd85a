// Log-softmax statistics of fp32 logits, one block per token. Contract: logprob.h.
//
// Pass 1: max and argmax. Pass 2: sum of exp (and the entropy term, and the rank count). Optional top-k:
// a 4-round 8-bit radix select over order-preserving integer keys finds the k-th largest key, then one
// ordered pass collects the candidates and a k x k rank sort orders them. Each thread walks its elements
// in ascending index order (i = tid, tid + kThreads, ...); the block combines threads in a fixed tree.
// Rows are read 2 + (top_k ? 5 : 0) times; after the first pass they usually come from L2. A one-pass
// variant (per-thread running max, sums rebased in double when it grows) measured slower on an H200
// (0.80 vs 0.62 ms for 2048 x 128256): early on most warps have a lane whose max grows, and the whole
// warp waits for its double-precision rebase.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/logprob.h"
#include "engine/kernels/max_arg.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 65535;

// Pass 1 over one row: the max and the lowest index holding it.
__device__ MaxArg RowMaxArg(const float* row, int64_t n, float* scratch_v, int32_t* scratch_i) {
  MaxArg m{-INFINITY, INT32_MAX};
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = row[i];
    if (v > m.value || (v == m.value && m.index == INT32_MAX)) m = {v, static_cast<int32_t>(i)};
  }
  return BlockMaxArg(m, scratch_v, scratch_i);
}

struct SumStats {
  double sum_exp;
  double sum_exp_shifted;
  int32_t greater;
};

// Pass 2: sum exp(x - m) (fp32 exp, double sums), sum exp(x - m)(x - m), #{x > threshold}.
template <bool kEntropy, bool kRank>
__device__ SumStats RowSums(const float* row, int64_t n, float m, float threshold, double* scratch_d,
                            int32_t* scratch_i) {
  double s = 0.0, se = 0.0;
  int32_t greater = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float x = row[i];
    const float d = x - m;
    const float e = expf(d);
    s += static_cast<double>(e);
    if constexpr (kEntropy) se += static_cast<double>(e) * static_cast<double>(d);
    if constexpr (kRank) greater += x > threshold ? 1 : 0;
  }
  SumStats out;
  out.sum_exp = BlockSum(s, scratch_d);
  out.sum_exp_shifted = kEntropy ? BlockSum(se, scratch_d) : 0.0;
  out.greater = kRank ? BlockSum(greater, scratch_i) : 0;
  return out;
}

// Order-preserving key: larger float -> larger key; +0 and -0 share a key.
__device__ __forceinline__ uint32_t Key(float x) {
  const uint32_t u = x == 0.0f ? 0u : __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct TopKShared {
  int32_t hist[256];
  int32_t warp_counts[kWarps];
  int32_t select_bin;
  int32_t select_remaining;
  int32_t gt_count;
  int32_t cand_id[kMaxTopK];
  float cand_value[kMaxTopK];
};

// Writes the top k (ids, x - lse) of the row, ordered by descending value, ties by lower id.
__device__ void RowTopK(const float* row, int64_t n, int k, double lse, TopKShared& sh,
                        int32_t* out_ids,       // [k]
                        float* out_logprobs) {  // [k]
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = Key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = 0;
      int bin = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + sh.hist[b] >= remaining) {
          bin = b;
          break;
        }
        cum += sh.hist[b];
      }
      sh.select_bin = bin;
      sh.select_remaining = remaining - cum;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.select_bin) << shift;
    mask |= 255u << shift;
    remaining = sh.select_remaining;
    __syncthreads();
  }
  // prefix is the k-th largest key; take every key above it and the `remaining` lowest ids equal to it.
  const uint32_t threshold = prefix;
  const int num_gt = k - remaining;
  if (threadIdx.x == 0) sh.gt_count = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int eq_taken = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const float x = i < n ? row[i] : 0.0f;
    const uint32_t key = i < n ? Key(x) : 0u;
    const bool gt = i < n && key > threshold;
    const bool eq = i < n && key == threshold;
    if (gt) {
      const int slot = atomicAdd(&sh.gt_count, 1);
      sh.cand_id[slot] = static_cast<int32_t>(i);
      sh.cand_value[slot] = x;
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) sh.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    // Between the two barriers gt_count and warp_counts are stable: every thread sees the same values
    // and takes the same exit decision.
    const int gt_found = sh.gt_count;
    int before = 0, chunk_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? sh.warp_counts[w] : 0;
      chunk_total += sh.warp_counts[w];
    }
    if (eq) {
      const int rank = eq_taken + before + __popc(ballot & ((1u << lane) - 1u));
      if (rank < remaining) {
        sh.cand_id[num_gt + rank] = static_cast<int32_t>(i);
        sh.cand_value[num_gt + rank] = x;
      }
    }
    eq_taken += chunk_total;
    __syncthreads();
    if (eq_taken >= remaining && gt_found >= num_gt) break;
  }
  if (threadIdx.x < k) {
    const int32_t id = sh.cand_id[threadIdx.x];
    const float v = sh.cand_value[threadIdx.x];
    int pos = 0;
    for (int j = 0; j < k; ++j) pos += Better(sh.cand_value[j], sh.cand_id[j], v, id) ? 1 : 0;
    out_ids[pos] = id;
    out_logprobs[pos] = static_cast<float>(static_cast<double>(v) - lse);
  }
  __syncthreads();
}

template <bool kEntropy, bool kRank>
__global__ void __launch_bounds__(kThreads)
    ScoreLogitsKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                      int64_t ld,
                      const int32_t* __restrict__ targets,  // [num_tokens]
                      int64_t num_tokens, int64_t vocab_size, int top_k, LogprobOutputs out) {
  __shared__ float scratch_f[32];
  __shared__ int32_t scratch_i[32];
  __shared__ double scratch_d[32];
  __shared__ TopKShared topk_shared;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* row = logits + t * ld;
    const int32_t target = targets[t];
    const bool target_ok = target >= 0 && target < vocab_size;
    const float target_logit = target_ok ? row[target] : __int_as_float(0x7fc00000);
    const MaxArg m = RowMaxArg(row, vocab_size, scratch_f, scratch_i);
    const SumStats s = RowSums<kEntropy, kRank>(row, vocab_size, m.value, target_logit, scratch_d, scratch_i);
    const double log_sum = log(s.sum_exp);
    const double lse = static_cast<double>(m.value) + log_sum;
    if (threadIdx.x == 0) {
      out.logprob[t] = static_cast<double>(target_logit) - lse;
      out.greedy[t] = target_ok && m.index == target ? 1 : 0;
      if constexpr (kRank) out.rank[t] = 1 + s.greater;
      if constexpr (kEntropy) out.entropy[t] = static_cast<float>(log_sum - s.sum_exp_shifted / s.sum_exp);
    }
    if (top_k > 0) {
      RowTopK(row, vocab_size, top_k, lse, topk_shared, out.top_k_ids + t * top_k,
              out.top_k_logprobs + t * top_k);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    PartialStatsKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                       int64_t ld, const int32_t* __restrict__ targets, int64_t num_tokens,
                       int64_t shard_size, int64_t vocab_offset, LogitPartialStats* __restrict__ stats) {
  __shared__ float scratch_f[32];
  __shared__ int32_t scratch_i[32];
  __shared__ double scratch_d[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* row = logits + t * ld;
    const int64_t local = static_cast<int64_t>(targets[t]) - vocab_offset;
    const bool has_target = local >= 0 && local < shard_size;
    const MaxArg m = RowMaxArg(row, shard_size, scratch_f, scratch_i);
    const SumStats s = RowSums<true, false>(row, shard_size, m.value, 0.0f, scratch_d, scratch_i);
    if (threadIdx.x == 0) {
      LogitPartialStats r;
      r.max = m.value;
      r.argmax = static_cast<int32_t>(vocab_offset + m.index);
      r.sum_exp = s.sum_exp;
      r.sum_exp_shifted = s.sum_exp_shifted;
      r.target_logit = has_target ? row[local] : 0.0f;
      r.has_target = has_target ? 1 : 0;
      stats[t] = r;
    }
  }
}

// M = max over shards (argmax ties to the lowest id), S and T (the entropy term) combined in shard order.
struct Combined {
  float max;
  int32_t argmax;
  float target_logit;
  double sum;
  double shifted;
};

__device__ Combined CombineToken(const LogitPartialStats* __restrict__ stats, int64_t num_shards,
                                 int64_t num_tokens, int64_t t) {
  Combined c{-INFINITY, INT32_MAX, __int_as_float(0x7fc00000), 0.0, 0.0};
  for (int64_t r = 0; r < num_shards; ++r) {
    const LogitPartialStats& s = stats[r * num_tokens + t];
    if (Better(s.max, s.argmax, c.max, c.argmax)) {
      c.max = s.max;
      c.argmax = s.argmax;
    }
    if (s.has_target) c.target_logit = s.target_logit;
  }
  for (int64_t r = 0; r < num_shards; ++r) {
    const LogitPartialStats& s = stats[r * num_tokens + t];
    const double delta = static_cast<double>(s.max) - static_cast<double>(c.max);
    const double w = exp(delta);
    c.sum += s.sum_exp * w;
    c.shifted += w * (s.sum_exp_shifted + delta * s.sum_exp);
  }
  return c;
}

__global__ void CombineStatsKernel(const LogitPartialStats* __restrict__ stats,  // [num_shards, num_tokens]
                                   int64_t num_shards, int64_t num_tokens,
                                   const int32_t* __restrict__ targets,  // [num_tokens]
                                   double* __restrict__ logprob, uint8_t* __restrict__ greedy,
                                   float* __restrict__ entropy,             // [num_tokens] or nullptr
                                   float* __restrict__ target_logit_out) {  // [num_tokens] or nullptr
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Combined c = CombineToken(stats, num_shards, num_tokens, t);
    const double log_sum = log(c.sum);
    logprob[t] = static_cast<double>(c.target_logit) - (static_cast<double>(c.max) + log_sum);
    greedy[t] = c.argmax == targets[t] ? 1 : 0;
    if (entropy != nullptr) entropy[t] = static_cast<float>(log_sum - c.shifted / c.sum);
    if (target_logit_out != nullptr) target_logit_out[t] = c.target_logit;
  }
}

__global__ void __launch_bounds__(kThreads)
    ShardTopKKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                    int64_t ld, int64_t num_tokens, int64_t shard_size, int64_t vocab_offset, int top_k,
                    int32_t* __restrict__ ids,   // [num_tokens, stride]
                    float* __restrict__ values,  // [num_tokens, stride]
                    int64_t stride) {
  __shared__ TopKShared topk_shared;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    // lse 0: RowTopK writes float(double(x) - 0) = x, the raw logit.
    RowTopK(logits + t * ld, shard_size, top_k, 0.0, topk_shared, ids + t * stride, values + t * stride);
    if (threadIdx.x < top_k) ids[t * stride + threadIdx.x] += static_cast<int32_t>(vocab_offset);
    __syncthreads();
  }
}

// One block per token: candidate c's place is the number of candidates before it in (logit desc, id asc).
__global__ void __launch_bounds__(kThreads)
    MergeTopKKernel(const int32_t* __restrict__ ids, const float* __restrict__ values, int64_t stride,
                    const LogitPartialStats* __restrict__ stats, int64_t num_shards, int64_t num_tokens,
                    int top_k, int32_t* __restrict__ top_ids, float* __restrict__ top_logprobs) {
  __shared__ int32_t cand_id[kThreads];
  __shared__ float cand_value[kThreads];
  const int count = static_cast<int>(num_shards) * top_k;  // <= 8 * 64 = kThreads
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    if (threadIdx.x < count) {
      const int r = threadIdx.x / top_k, j = threadIdx.x % top_k;
      const int64_t at = (r * num_tokens + t) * stride + j;
      cand_id[threadIdx.x] = ids[at];
      cand_value[threadIdx.x] = values[at];
    }
    __syncthreads();
    if (threadIdx.x < count) {
      const int32_t id = cand_id[threadIdx.x];
      const float v = cand_value[threadIdx.x];
      int place = 0;
      for (int c = 0; c < count; ++c) place += Better(cand_value[c], cand_id[c], v, id) ? 1 : 0;
      if (place < top_k) {
        const Combined comb = CombineToken(stats, num_shards, num_tokens, t);
        const double lse = static_cast<double>(comb.max) + log(comb.sum);
        top_ids[t * top_k + place] = id;
        top_logprobs[t * top_k + place] = static_cast<float>(static_cast<double>(v) - lse);
      }
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads)
    CountAboveKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                     int64_t ld, int64_t num_tokens, int64_t shard_size,
                     const float* __restrict__ threshold,  // [num_tokens]
                     int32_t base,
                     int32_t* __restrict__ count) {  // [num_tokens]
  __shared__ int32_t scratch_i[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* row = logits + t * ld;
    const float limit = threshold[t];
    int32_t greater = 0;
    for (int64_t i = threadIdx.x; i < shard_size; i += kThreads) greater += row[i] > limit ? 1 : 0;
    greater = BlockSum(greater, scratch_i);
    if (threadIdx.x == 0) count[t] = base + greater;
  }
}

}  // namespace

absl::Status ScoreLogits(const float* logits, int64_t ld, const int32_t* targets, int64_t num_tokens,
                         int64_t vocab_size, const LogprobOptions& options, const LogprobOutputs& outputs,
                         cudaStream_t stream) {
  if (num_tokens < 0 || vocab_size < 1 || vocab_size > INT32_MAX || ld < vocab_size) {
    return absl::InvalidArgumentError(
        "ScoreLogits: need num_tokens >= 0, 1 <= vocab_size < 2^31, ld >= vocab_size");
  }
  if (options.top_k < 0 || options.top_k > kMaxTopK || options.top_k > vocab_size) {
    return absl::InvalidArgumentError("ScoreLogits: top_k outside [0, min(64, vocab_size)]");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || targets == nullptr || outputs.logprob == nullptr || outputs.greedy == nullptr ||
      (options.want_rank && outputs.rank == nullptr) ||
      (options.want_entropy && outputs.entropy == nullptr) ||
      (options.top_k > 0 && (outputs.top_k_ids == nullptr || outputs.top_k_logprobs == nullptr))) {
    return absl::InvalidArgumentError("ScoreLogits: null input or requested output");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  const int top_k = options.top_k;
  if (options.want_entropy && options.want_rank) {
    ScoreLogitsKernel<true, true>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, outputs);
  } else if (options.want_entropy) {
    ScoreLogitsKernel<true, false>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, outputs);
  } else if (options.want_rank) {
    ScoreLogitsKernel<false, true>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, outputs);
  } else {
    ScoreLogitsKernel<false, false>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, outputs);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status ComputeLogitPartialStats(const float* logits, int64_t ld, const int32_t* targets,
                                      int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                                      LogitPartialStats* stats, cudaStream_t stream) {
  if (num_tokens < 0 || shard_size < 1 || shard_size > INT32_MAX || ld < shard_size || vocab_offset < 0 ||
      vocab_offset + shard_size > INT32_MAX) {
    return absl::InvalidArgumentError("ComputeLogitPartialStats: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || targets == nullptr || stats == nullptr) {
    return absl::InvalidArgumentError("ComputeLogitPartialStats: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  PartialStatsKernel<<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, shard_size,
                                                      vocab_offset, stats);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CombineLogitPartialStats(const LogitPartialStats* stats, int64_t num_shards, int64_t num_tokens,
                                      const int32_t* targets, double* logprob, uint8_t* greedy,
                                      cudaStream_t stream, float* entropy, float* target_logit) {
  if (num_shards < 1 || num_tokens < 0)
    return absl::InvalidArgumentError("CombineLogitPartialStats: bad sizes");
  if (num_tokens == 0) return absl::OkStatus();
  if (stats == nullptr || targets == nullptr || logprob == nullptr || greedy == nullptr) {
    return absl::InvalidArgumentError("CombineLogitPartialStats: null pointer");
  }
  const int64_t blocks = CeilDiv(num_tokens, 256);
  CombineStatsKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), 256, 0, stream>>>(
      stats, num_shards, num_tokens, targets, logprob, greedy, entropy, target_logit);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status ShardTopK(const float* logits, int64_t ld, int64_t num_tokens, int64_t shard_size,
                       int64_t vocab_offset, int32_t top_k, int32_t* ids, float* values, int64_t ids_stride,
                       cudaStream_t stream) {
  if (num_tokens < 0 || shard_size < 1 || ld < shard_size || vocab_offset < 0 || top_k < 1 ||
      top_k > kMaxTopK || top_k > shard_size || ids_stride < top_k || vocab_offset + shard_size > INT32_MAX) {
    return absl::InvalidArgumentError("ShardTopK: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || ids == nullptr || values == nullptr) {
    return absl::InvalidArgumentError("ShardTopK: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  ShardTopKKernel<<<blocks, kThreads, 0, stream>>>(logits, ld, num_tokens, shard_size, vocab_offset, top_k,
                                                   ids, values, ids_stride);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status MergeShardTopK(const int32_t* ids, const float* values, int64_t ids_stride,
                            const LogitPartialStats* stats, int64_t num_shards, int64_t num_tokens,
                            int32_t top_k, int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (num_shards < 1 || num_tokens < 0 || top_k < 1 || top_k > kMaxTopK || ids_stride < top_k ||
      num_shards * top_k > kThreads) {
    return absl::InvalidArgumentError("MergeShardTopK: bad sizes (num_shards * top_k must be <= 512)");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (ids == nullptr || values == nullptr || stats == nullptr || top_ids == nullptr ||
      top_logprobs == nullptr) {
    return absl::InvalidArgumentError("MergeShardTopK: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  MergeTopKKernel<<<blocks, kThreads, 0, stream>>>(ids, values, ids_stride, stats, num_shards, num_tokens,
                                                   top_k, top_ids, top_logprobs);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CountLogitsAbove(const float* logits, int64_t ld, int64_t num_tokens, int64_t shard_size,
                              const float* threshold, int32_t base, int32_t* count, cudaStream_t stream) {
  if (num_tokens < 0 || shard_size < 1 || ld < shard_size) {
    return absl::InvalidArgumentError("CountLogitsAbove: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || threshold == nullptr || count == nullptr) {
    return absl::InvalidArgumentError("CountLogitsAbove: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  CountAboveKernel<<<blocks, kThreads, 0, stream>>>(logits, ld, num_tokens, shard_size, threshold, base,
                                                    count);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels
