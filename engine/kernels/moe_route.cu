// Mixture-of-experts routing. Contract: moe_route.h.
#include <cmath>
#include <cstdint>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/moe_route.h"

namespace scored::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

// kPerLane: experts a lane holds (lane, lane + 32, ...), ceil(num_experts / 32) rounded up to 1, 2, 4, 8 or
// 32 (kMaxExperts / 32): a 128-expert router scans 4 slots a lane per top-k step, not 32 (measured on the
// Qwen3-30B-A3B shape at 16384 tokens: 0.112 -> 0.047 ms a layer). The slots past num_experts
// hold -1 and are never chosen (top_k <= num_experts valid ones are >= 0), so every kPerLane gives the same
// result.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    RouteKernel(const float* logits, int64_t stride, int64_t num_tokens, int num_experts, int top_k,
                bool renormalize, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= num_tokens) return;
  const float* l = logits + t * stride;
  float m = -INFINITY;
  for (int e = lane; e < num_experts; e += 32) m = fmaxf(m, l[e]);
  m = WarpMax(m);
  double sum = 0.0;
  for (int e = lane; e < num_experts; e += 32) sum += exp(static_cast<double>(l[e] - m));
  sum = WarpSum(sum);
  float p[kPerLane];  // lane's experts lane, lane + 32, ...
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < num_experts ? static_cast<float>(exp(static_cast<double>(l[e] - m)) / sum) : -1.0f;
  }
  uint32_t taken = 0;  // bit i: expert lane + 32 i chosen
  double top_sum = 0.0;
  for (int j = 0; j < top_k; ++j) {
    float best = -2.0f;
    int best_e = num_experts;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (!(taken >> i & 1u) && (p[i] > best || (p[i] == best && e < best_e))) {
        best = p[i];
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    if ((best_e & 31) == lane) taken |= 1u << (best_e >> 5);
    top_sum += static_cast<double>(best);
    if (lane == 0) {
      ids[t * top_k + j] = best_e;
      weights[t * top_k + j] = best;
    }
  }
  if (renormalize && lane == 0) {
    for (int j = 0; j < top_k; ++j) {
      weights[t * top_k + j] = static_cast<float>(static_cast<double>(weights[t * top_k + j]) / top_sum);
    }
  }
}

// The top two of (a1 >= a2) and (b1 >= b2), as a descending pair: the same multiset whatever the order.
__device__ __forceinline__ void MergeTopTwo(float& a1, float& a2, float b1, float b2) {
  const float hi = fmaxf(a1, b1);
  const float lo = fmaxf(fminf(a1, b1), fmaxf(a2, b2));
  a1 = hi;
  a2 = lo;
}

// DeepSeek-V3's router (moe_route.h). kPerLane as RouteKernel's; a slot past num_experts, or of a dropped
// group, is not usable and never chosen.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    SigmoidRouteKernel(const float* logits, int64_t stride, int64_t num_tokens, int num_experts, int top_k,
                       SigmoidRouting routing, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= num_tokens) return;
  const float* l = logits + t * stride;
  float s[kPerLane], c[kPerLane];  // lane's experts lane, lane + 32, ...
  uint32_t usable = 0;             // bit i: expert lane + 32 i may be chosen
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    s[i] = 0.0f;
    c[i] = -INFINITY;
    if (e < num_experts) {
      s[i] = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(l[e]))));
      c[i] = routing.correction_bias != nullptr ? __fadd_rn(s[i], routing.correction_bias[e]) : s[i];
      usable |= 1u << i;
    }
  }
  const int groups = static_cast<int>(routing.num_groups);
  if (groups > 1) {
    const int group_size = num_experts / groups;
    float score = -INFINITY;  // lane g < groups: group g's score
    for (int g = 0; g < groups; ++g) {
      float first = -INFINITY, second = -INFINITY;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        if ((usable >> i & 1u) && e / group_size == g) MergeTopTwo(first, second, c[i], -INFINITY);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other1 = __shfl_xor_sync(0xffffffffu, first, offset);
        const float other2 = __shfl_xor_sync(0xffffffffu, second, offset);
        MergeTopTwo(first, second, other1, other2);
      }
      if (lane == g) score = __fadd_rn(first, second);
    }
    uint32_t kept = 0;  // bit g: group g kept
    for (int j = 0; j < routing.topk_groups; ++j) {
      float best = -INFINITY;
      int best_g = groups;
      if (lane < groups && !(kept >> lane & 1u)) {
        best = score;
        best_g = lane;
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const int other_g = __shfl_xor_sync(0xffffffffu, best_g, offset);
        if (other > best || (other == best && other_g < best_g)) {
          best = other;
          best_g = other_g;
        }
      }
      kept |= 1u << best_g;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if ((usable >> i & 1u) && !(kept >> (e / group_size) & 1u)) usable &= ~(1u << i);
    }
  }
  double top_sum = 0.0;
  for (int j = 0; j < top_k; ++j) {
    float best = -INFINITY;
    int best_e = num_experts;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if ((usable >> i & 1u) && (best_e == num_experts || c[i] > best || (c[i] == best && e < best_e))) {
        best = c[i];
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other_e != num_experts &&
          (best_e == num_experts || other > best || (other == best && other_e < best_e))) {
        best = other;
        best_e = other_e;
      }
    }
    float mine = 0.0f;  // the chosen expert's unbiased score, from its lane
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i == best_e) {
        mine = s[i];
        usable &= ~(1u << i);
      }
    }
    const float chosen = __shfl_sync(0xffffffffu, mine, best_e & 31);
    top_sum += static_cast<double>(chosen);
    if (lane == 0) {
      ids[t * top_k + j] = best_e;
      weights[t * top_k + j] = chosen;
    }
  }
  if (lane == 0) {
    const float denominator = __fadd_rn(static_cast<float>(top_sum), routing.renorm_epsilon);
    for (int j = 0; j < top_k; ++j) {
      float w = weights[t * top_k + j];
      if (routing.renormalize) w = __fdiv_rn(w, denominator);
      weights[t * top_k + j] = __fmul_rn(w, routing.scaling_factor);
    }
  }
}

}  // namespace

absl::Status MoeRouteSigmoid(const float* router_logits, int64_t logits_stride, int64_t num_tokens,
                             int64_t num_experts, int64_t top_k, const SigmoidRouting& routing,
                             int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  const int64_t groups = routing.num_groups;
  const bool groups_ok = groups >= 1 && groups <= kMaxRouterGroups && num_experts % groups == 0 &&
                         (groups == 1 || num_experts / groups >= 2) && routing.topk_groups >= 1 &&
                         routing.topk_groups <= groups;
  if (num_tokens < 0 || num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || !groups_ok ||
      top_k > (groups == 1 ? num_experts : routing.topk_groups * (num_experts / groups)) ||
      logits_stride < num_experts) {
    return absl::InvalidArgumentError("MoE sigmoid routing: bad shapes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  const int64_t blocks = (num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
        router_logits, logits_stride, num_tokens, static_cast<int>(num_experts), static_cast<int>(top_k),
        routing, expert_ids, expert_weights);
  };
  if (num_experts <= 32) {
    launch(SigmoidRouteKernel<1>);
  } else if (num_experts <= 64) {
    launch(SigmoidRouteKernel<2>);
  } else if (num_experts <= 128) {
    launch(SigmoidRouteKernel<4>);
  } else if (num_experts <= 256) {
    launch(SigmoidRouteKernel<8>);
  } else {
    launch(SigmoidRouteKernel<32>);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status MoeRoute(const float* router_logits, int64_t logits_stride, int64_t num_tokens,
                      int64_t num_experts, int64_t top_k, bool renormalize, int32_t* expert_ids,
                      float* expert_weights, cudaStream_t stream) {
  if (num_tokens < 0 || num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || top_k > num_experts ||
      logits_stride < num_experts) {
    return absl::InvalidArgumentError("MoE routing: bad shapes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  const int64_t blocks = (num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
        router_logits, logits_stride, num_tokens, static_cast<int>(num_experts), static_cast<int>(top_k),
        renormalize, expert_ids, expert_weights);
  };
  static_assert(kMaxExperts == 32 * 32, "RouteKernel's widest lane holds 32 experts");
  if (num_experts <= 32) {
    launch(RouteKernel<1>);
  } else if (num_experts <= 64) {
    launch(RouteKernel<2>);
  } else if (num_experts <= 128) {
    launch(RouteKernel<4>);
  } else if (num_experts <= 256) {
    launch(RouteKernel<8>);
  } else {
    launch(RouteKernel<32>);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels
