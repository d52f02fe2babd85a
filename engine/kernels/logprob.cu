// Log-softmax statistics of fp32 logits, one block per token. Contract: logprob.h.
//
// Pass 1: max and argmax. Pass 2: sum of exp (and the entropy term, and the rank count). Optional top-k:
// a 4-round 8-bit radix select over order-preserving integer keys finds the k-th largest key, then one
// ordered pass collects the candidates and a k x k rank sort orders them (k <= 1024: 2k comparisons per
// thread of the block). Candidate logprobs (a gather from the row at the given ids) and the min logprob reuse
// the row's lse; the min is taken in pass 1. Each thread walks its elements
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

// Pass 1 over one row: the max and the lowest index holding it; with want_min (uniform over the block) also
// the min, in *min_out for every thread.
__device__ MaxArg RowMaxArg(const float* row, int64_t n, float* scratch_v, int32_t* scratch_i,
                            bool want_min = false, float* min_out = nullptr) {
  MaxArg m{-INFINITY, INT32_MAX};
  float lowest = INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = row[i];
    if (v > m.value || (v == m.value && m.index == INT32_MAX)) m = {v, static_cast<int32_t>(i)};
    lowest = fminf(lowest, v);
  }
  if (want_min) *min_out = -BlockMax(-lowest, scratch_v, -INFINITY);
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
  for (int c = threadIdx.x; c < k; c += kThreads) {
    const int32_t id = sh.cand_id[c];
    const float v = sh.cand_value[c];
    int pos = 0;
    for (int j = 0; j < k; ++j) pos += Better(sh.cand_value[j], sh.cand_id[j], v, id) ? 1 : 0;
    out_ids[pos] = id;
    out_logprobs[pos] = static_cast<float>(static_cast<double>(v) - lse);
  }
  __syncthreads();
}

// candidate_logprobs[c] = float(double(row[ids[c]]) - lse), NaN for an id outside [0, n).
__device__ void RowGather(const float* row, int64_t n, double lse, const int32_t* ids,  // [num_candidates]
                          int num_candidates, float* candidate_logprobs) {              // [num_candidates]
  for (int c = threadIdx.x; c < num_candidates; c += kThreads) {
    const int32_t id = ids[c];
    candidate_logprobs[c] = id >= 0 && id < n ? static_cast<float>(static_cast<double>(row[id]) - lse)
                                              : __int_as_float(0x7fc00000);
  }
}

template <bool kEntropy, bool kRank>
__global__ void __launch_bounds__(kThreads)
    ScoreLogitsKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                      int64_t ld,
                      const int32_t* __restrict__ targets,  // [num_tokens]
                      int64_t num_tokens, int64_t vocab_size, int top_k, int num_candidates,
                      LogprobOutputs out) {
  __shared__ float scratch_f[32];
  __shared__ int32_t scratch_i[32];
  __shared__ double scratch_d[32];
  __shared__ TopKShared topk_shared;
  const bool want_min = out.min_logprob != nullptr;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* row = logits + t * ld;
    const int32_t target = targets[t];
    const bool target_ok = target >= 0 && target < vocab_size;
    const float target_logit = target_ok ? row[target] : __int_as_float(0x7fc00000);
    float min_logit = 0.0f;
    const MaxArg m = RowMaxArg(row, vocab_size, scratch_f, scratch_i, want_min, &min_logit);
    const SumStats s = RowSums<kEntropy, kRank>(row, vocab_size, m.value, target_logit, scratch_d, scratch_i);
    const double log_sum = log(s.sum_exp);
    const double lse = static_cast<double>(m.value) + log_sum;
    if (threadIdx.x == 0) {
      out.logprob[t] = static_cast<double>(target_logit) - lse;
      out.greedy[t] = target_ok && m.index == target ? 1 : 0;
      if constexpr (kRank) out.rank[t] = 1 + s.greater;
      if constexpr (kEntropy) out.entropy[t] = static_cast<float>(log_sum - s.sum_exp_shifted / s.sum_exp);
      if (want_min) out.min_logprob[t] = static_cast<float>(static_cast<double>(min_logit) - lse);
    }
    if (num_candidates > 0) {
      RowGather(row, vocab_size, lse, out.candidate_ids + t * num_candidates, num_candidates,
                out.candidate_logprobs + t * num_candidates);
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
                       int64_t shard_size, int64_t vocab_offset, bool want_min,
                       LogitPartialStats* __restrict__ stats) {
  __shared__ float scratch_f[32];
  __shared__ int32_t scratch_i[32];
  __shared__ double scratch_d[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const float* row = logits + t * ld;
    const int64_t local = static_cast<int64_t>(targets[t]) - vocab_offset;
    const bool has_target = local >= 0 && local < shard_size;
    float min_logit = 0.0f;
    const MaxArg m = RowMaxArg(row, shard_size, scratch_f, scratch_i, want_min, &min_logit);
    const SumStats s = RowSums<true, false>(row, shard_size, m.value, 0.0f, scratch_d, scratch_i);
    if (threadIdx.x == 0) {
      LogitPartialStats r;
      r.max = m.value;
      r.argmax = static_cast<int32_t>(vocab_offset + m.index);
      r.sum_exp = s.sum_exp;
      r.sum_exp_shifted = s.sum_exp_shifted;
      r.target_logit = has_target ? row[local] : 0.0f;
      r.has_target = has_target ? 1 : 0;
      r.min = min_logit;
      stats[t] = r;
    }
  }
}

// M = max over shards (argmax ties to the lowest id), S and T (the entropy term) combined in shard order, and
// the min over shards.
struct Combined {
  float max;
  int32_t argmax;
  float target_logit;
  double sum;
  double shifted;
  float min;
};

__device__ Combined CombineToken(const LogitPartialStats* __restrict__ stats, int64_t num_shards,
                                 int64_t num_tokens, int64_t t) {
  Combined c{-INFINITY, INT32_MAX, __int_as_float(0x7fc00000), 0.0, 0.0, INFINITY};
  for (int64_t r = 0; r < num_shards; ++r) {
    const LogitPartialStats& s = stats[r * num_tokens + t];
    if (Better(s.max, s.argmax, c.max, c.argmax)) {
      c.max = s.max;
      c.argmax = s.argmax;
    }
    if (s.has_target) c.target_logit = s.target_logit;
    c.min = fminf(c.min, s.min);
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
                                   float* __restrict__ entropy,           // [num_tokens] or nullptr
                                   float* __restrict__ target_logit_out,  // [num_tokens] or nullptr
                                   float* __restrict__ min_logprob) {     // [num_tokens] or nullptr
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Combined c = CombineToken(stats, num_shards, num_tokens, t);
    const double log_sum = log(c.sum);
    const double lse = static_cast<double>(c.max) + log_sum;
    logprob[t] = static_cast<double>(c.target_logit) - lse;
    greedy[t] = c.argmax == targets[t] ? 1 : 0;
    if (entropy != nullptr) entropy[t] = static_cast<float>(log_sum - c.shifted / c.sum);
    if (target_logit_out != nullptr) target_logit_out[t] = c.target_logit;
    if (min_logprob != nullptr) min_logprob[t] = static_cast<float>(static_cast<double>(c.min) - lse);
  }
}

// values[e] = the logit of ids[e] when this shard holds it, else +0 (summed over the ranks next).
__global__ void ShardCandidateLogitsKernel(const float* __restrict__ logits,  // [num_tokens, ld]
                                           int64_t ld, int64_t num_tokens, int64_t shard_size,
                                           int64_t vocab_offset,
                                           const int32_t* __restrict__ ids,  // [num_tokens, num_candidates]
                                           int num_candidates,
                                           float* __restrict__ values) {  // [num_tokens, num_candidates]
  const int64_t total = num_tokens * num_candidates;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t local = static_cast<int64_t>(ids[e]) - vocab_offset;
    values[e] = local >= 0 && local < shard_size ? logits[(e / num_candidates) * ld + local] : 0.0f;
  }
}

// One block per token: the combined lse once, then every candidate's logit (summed over ranks) minus it.
__global__ void __launch_bounds__(kThreads)
    FinishCandidatesKernel(const LogitPartialStats* __restrict__ stats, int64_t num_shards,
                           int64_t num_tokens, int64_t vocab_size,
                           const int32_t* __restrict__ ids,  // [num_tokens, num_candidates]
                           int num_candidates,
                           float* __restrict__ values) {  // [num_tokens, num_candidates], in place
  __shared__ double lse_shared;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    if (threadIdx.x == 0) {
      const Combined comb = CombineToken(stats, num_shards, num_tokens, t);
      lse_shared = static_cast<double>(comb.max) + log(comb.sum);
    }
    __syncthreads();
    const double lse = lse_shared;
    for (int c = threadIdx.x; c < num_candidates; c += kThreads) {
      const int64_t e = t * num_candidates + c;
      const int32_t id = ids[e];
      values[e] = id >= 0 && id < vocab_size ? static_cast<float>(static_cast<double>(values[e]) - lse)
                                             : __int_as_float(0x7fc00000);
    }
    __syncthreads();
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
    for (int j = threadIdx.x; j < top_k; j += kThreads)
      ids[t * stride + j] += static_cast<int32_t>(vocab_offset);
    __syncthreads();
  }
}

// One block per token: candidate (r, j)'s place is j plus, for every other shard, the length of the prefix
// of its sorted list that comes before the candidate in (logit desc, id asc) (a binary search).
__global__ void __launch_bounds__(kThreads)
    MergeTopKKernel(const int32_t* __restrict__ ids, const float* __restrict__ values, int64_t stride,
                    const LogitPartialStats* __restrict__ stats, int64_t num_shards, int64_t num_tokens,
                    int top_k, int32_t* __restrict__ top_ids, float* __restrict__ top_logprobs) {
  __shared__ double lse_shared;
  const int count = static_cast<int>(num_shards) * top_k;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    if (threadIdx.x == 0) {
      const Combined comb = CombineToken(stats, num_shards, num_tokens, t);
      lse_shared = static_cast<double>(comb.max) + log(comb.sum);
    }
    __syncthreads();
    const double lse = lse_shared;
    for (int c = threadIdx.x; c < count; c += kThreads) {
      const int r = c / top_k, j = c % top_k;
      const int64_t at = (r * num_tokens + t) * stride + j;
      const int32_t id = ids[at];
      const float v = values[at];
      int place = j;
      for (int64_t s = 0; s < num_shards && place < top_k; ++s) {
        if (s == r) continue;
        const int64_t base = (s * num_tokens + t) * stride;
        int lo = 0, hi = top_k;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (Better(values[base + mid], ids[base + mid], v, id)) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        place += lo;
      }
      if (place < top_k) {
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
    return absl::InvalidArgumentError("ScoreLogits: top_k outside [0, min(kMaxTopK, vocab_size)]");
  }
  if (options.num_candidates < 0 || options.num_candidates > kMaxCandidates) {
    return absl::InvalidArgumentError("ScoreLogits: num_candidates outside [0, kMaxCandidates]");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || targets == nullptr || outputs.logprob == nullptr || outputs.greedy == nullptr ||
      (options.want_rank && outputs.rank == nullptr) ||
      (options.want_entropy && outputs.entropy == nullptr) ||
      (options.top_k > 0 && (outputs.top_k_ids == nullptr || outputs.top_k_logprobs == nullptr)) ||
      (options.num_candidates > 0 &&
       (outputs.candidate_ids == nullptr || outputs.candidate_logprobs == nullptr)) ||
      (options.want_min_logprob && outputs.min_logprob == nullptr)) {
    return absl::InvalidArgumentError("ScoreLogits: null input or requested output");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  const int top_k = options.top_k, c = options.num_candidates;
  LogprobOutputs out = outputs;
  if (!options.want_min_logprob) out.min_logprob = nullptr;  // the kernel's flag
  if (options.want_entropy && options.want_rank) {
    ScoreLogitsKernel<true, true>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, c, out);
  } else if (options.want_entropy) {
    ScoreLogitsKernel<true, false>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, c, out);
  } else if (options.want_rank) {
    ScoreLogitsKernel<false, true>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, c, out);
  } else {
    ScoreLogitsKernel<false, false>
        <<<blocks, kThreads, 0, stream>>>(logits, ld, targets, num_tokens, vocab_size, top_k, c, out);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status ComputeLogitPartialStats(const float* logits, int64_t ld, const int32_t* targets,
                                      int64_t num_tokens, int64_t shard_size, int64_t vocab_offset,
                                      LogitPartialStats* stats, cudaStream_t stream, bool want_min) {
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
                                                      vocab_offset, want_min, stats);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status CombineLogitPartialStats(const LogitPartialStats* stats, int64_t num_shards, int64_t num_tokens,
                                      const int32_t* targets, double* logprob, uint8_t* greedy,
                                      cudaStream_t stream, float* entropy, float* target_logit,
                                      float* min_logprob) {
  if (num_shards < 1 || num_tokens < 0)
    return absl::InvalidArgumentError("CombineLogitPartialStats: bad sizes");
  if (num_tokens == 0) return absl::OkStatus();
  if (stats == nullptr || targets == nullptr || logprob == nullptr || greedy == nullptr) {
    return absl::InvalidArgumentError("CombineLogitPartialStats: null pointer");
  }
  const int64_t blocks = CeilDiv(num_tokens, 256);
  CombineStatsKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), 256, 0, stream>>>(
      stats, num_shards, num_tokens, targets, logprob, greedy, entropy, target_logit, min_logprob);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status ShardCandidateLogits(const float* logits, int64_t ld, int64_t num_tokens, int64_t shard_size,
                                  int64_t vocab_offset, const int32_t* ids, int32_t num_candidates,
                                  float* values, cudaStream_t stream) {
  if (num_tokens < 0 || shard_size < 1 || ld < shard_size || vocab_offset < 0 || num_candidates < 1 ||
      num_candidates > kMaxCandidates) {
    return absl::InvalidArgumentError("ShardCandidateLogits: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (logits == nullptr || ids == nullptr || values == nullptr) {
    return absl::InvalidArgumentError("ShardCandidateLogits: null pointer");
  }
  const int64_t blocks = CeilDiv(num_tokens * num_candidates, 256);
  ShardCandidateLogitsKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), 256, 0,
                               stream>>>(logits, ld, num_tokens, shard_size, vocab_offset, ids,
                                         num_candidates, values);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status FinishCandidateLogprobs(const LogitPartialStats* stats, int64_t num_shards, int64_t num_tokens,
                                     int64_t vocab_size, const int32_t* ids, int32_t num_candidates,
                                     float* values, cudaStream_t stream) {
  if (num_shards < 1 || num_tokens < 0 || vocab_size < 1 || num_candidates < 1 ||
      num_candidates > kMaxCandidates) {
    return absl::InvalidArgumentError("FinishCandidateLogprobs: bad sizes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (stats == nullptr || ids == nullptr || values == nullptr) {
    return absl::InvalidArgumentError("FinishCandidateLogprobs: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  FinishCandidatesKernel<<<blocks, kThreads, 0, stream>>>(stats, num_shards, num_tokens, vocab_size, ids,
                                                          num_candidates, values);
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
  if (num_shards < 1 || num_tokens < 0 || top_k < 1 || top_k > kMaxTopK || ids_stride < top_k) {
    return absl::InvalidArgumentError("MergeShardTopK: bad sizes");
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
