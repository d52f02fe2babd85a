// Mixture-of-experts combine. Contract: moe_combine.h.
#include <cstdint>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/moe_combine.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;

template <typename D>
__global__ void AccumulateKernel(const D* y, const int32_t* slots, int64_t top_k, const float* weights,
                                 int64_t hidden, float* acc) {
  const int64_t r = blockIdx.x;
  const int32_t slot = slots[r];
  const float w = weights[slot];
  const D* from = y + r * hidden;
  float* to = acc + (slot / top_k) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    to[i] = __fadd_rn(to[i], __fmul_rn(LoadAsFloat(from + i), w));
  }
}

// V consecutive elements of y widened to fp32: one 16-byte (fp32) or 8-byte (bf16) load where V is 4.
template <int V>
__device__ __forceinline__ void LoadWidened(const float* p, float* out) {
  if constexpr (V == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    out[0] = q.x, out[1] = q.y, out[2] = q.z, out[3] = q.w;
  } else {
    out[0] = *p;
  }
}
template <int V>
__device__ __forceinline__ void LoadWidened(const __nv_bfloat16* p, float* out) {
  if constexpr (V == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&q.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&q.y);
    out[0] = __low2float(a), out[1] = __high2float(a), out[2] = __low2float(b), out[3] = __high2float(b);
  } else {
    out[0] = __bfloat162float(*p);
  }
}

constexpr int kMaxGroupedTopK = 64;

__global__ void FinishKernel(const float* acc, const float* shared, const float* gate, int64_t gate_stride,
                             int64_t hidden, float* residual) {
  const int64_t t = blockIdx.x;
  float s = 0.0f;
  const bool gated = shared != nullptr && gate != nullptr;  // else an ungated shared expert, or none
  if (gated) s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[t * gate_stride])));
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    float o = acc[t * hidden + i];
    if (shared != nullptr) {
      o = __fadd_rn(o, gated ? __fmul_rn(s, shared[t * hidden + i]) : shared[t * hidden + i]);
    }
    residual[t * hidden + i] = __fadd_rn(residual[t * hidden + i], o);
  }
}

// A block per token: its slots sorted by row, then V floats per thread per step (4: vector loads and stores,
// hidden a multiple of 4 and every pointer 16-byte aligned; else 1), each element's adds in the contract's
// order.
template <int V, typename D>
__global__ void CombineGroupedFinishKernel(const D* __restrict__ y, const int32_t* __restrict__ slot_rows,
                                           const float* __restrict__ weights, int64_t top_k, int64_t hidden,
                                           const float* __restrict__ shared, const float* __restrict__ gate,
                                           int64_t gate_stride, bool accumulate,
                                           float* __restrict__ residual) {
  __shared__ int32_t rows[kMaxGroupedTopK];
  __shared__ float w[kMaxGroupedTopK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {  // the token's slots by ascending row (insertion sort of <= 64)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t row = slot_rows[t * top_k + j];
      const float weight = weights[t * top_k + j];
      int64_t i = j;
      for (; i > 0 && rows[i - 1] > row; --i) {
        rows[i] = rows[i - 1];
        w[i] = w[i - 1];
      }
      rows[i] = row;
      w[i] = weight;
    }
  }
  __syncthreads();
  float s = 0.0f;
  const bool gated = shared != nullptr && gate != nullptr;  // else an ungated shared expert, or none
  if (gated) s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[t * gate_stride])));
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < hidden;
       i += static_cast<int64_t>(kThreads) * V) {
    float sum[V];
#pragma unroll
    for (int v = 0; v < V; ++v) sum[v] = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      float in[V];
      LoadWidened<V>(y + rows[j] * hidden + i, in);
#pragma unroll
      for (int v = 0; v < V; ++v) sum[v] = __fadd_rn(sum[v], __fmul_rn(in[v], w[j]));
    }
    float* const to = residual + t * hidden + i;
    float out[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float o = sum[v];
      if (shared != nullptr) {
        const float y = shared[t * hidden + i + v];
        o = __fadd_rn(o, gated ? __fmul_rn(s, y) : y);
      }
      out[v] = o;
    }
    if constexpr (V == 4) {
      float4 r = accumulate ? *reinterpret_cast<const float4*>(to) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      r.x = __fadd_rn(r.x, out[0]);
      r.y = __fadd_rn(r.y, out[1]);
      r.z = __fadd_rn(r.z, out[2]);
      r.w = __fadd_rn(r.w, out[3]);
      *reinterpret_cast<float4*>(to) = r;
    } else {
      to[0] = __fadd_rn(accumulate ? to[0] : 0.0f, out[0]);
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

template <typename Y>
absl::Status MoeCombineGroupedFinish(const Y* y_in, const int32_t* slot_rows, const float* weights,
                                     int64_t num_tokens, int64_t top_k, int64_t hidden, const float* shared,
                                     const float* gate, int64_t gate_stride, bool accumulate, float* residual,
                                     cudaStream_t stream) {
  if (num_tokens < 0 || num_tokens > int64_t{0x7fffffff} || top_k < 1 || top_k > kMaxGroupedTopK ||
      hidden < 1) {
    return absl::InvalidArgumentError("MoE grouped combine and finish: bad shapes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(num_tokens);
  const auto* y = ToDevice(y_in);
  if (hidden % 4 == 0 && Aligned16(y) && Aligned16(residual) && (shared == nullptr || Aligned16(shared))) {
    CombineGroupedFinishKernel<4><<<blocks, kThreads, 0, stream>>>(
        y, slot_rows, weights, top_k, hidden, shared, gate, gate_stride, accumulate, residual);
  } else {
    CombineGroupedFinishKernel<1><<<blocks, kThreads, 0, stream>>>(
        y, slot_rows, weights, top_k, hidden, shared, gate, gate_stride, accumulate, residual);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename Y>
absl::Status MoeAccumulate(const Y* y, const int32_t* slots, int64_t rows, int64_t top_k,
                           const float* weights, int64_t hidden, float* acc, cudaStream_t stream) {
  if (rows < 0 || rows > int64_t{0x7fffffff} || top_k < 1 || hidden < 1) {
    return absl::InvalidArgumentError("MoE accumulate: bad shapes");
  }
  if (rows == 0) return absl::OkStatus();
  AccumulateKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(ToDevice(y), slots, top_k, weights,
                                                                         hidden, acc);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status MoeFinish(const float* acc, const float* shared, const float* gate, int64_t gate_stride,
                       int64_t num_tokens, int64_t hidden, float* residual, cudaStream_t stream) {
  if (num_tokens < 0 || num_tokens > int64_t{0x7fffffff} || hidden < 1) {
    return absl::InvalidArgumentError("MoE finish: bad shapes");
  }
  if (num_tokens == 0) return absl::OkStatus();
  FinishKernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(acc, shared, gate, gate_stride,
                                                                           hidden, residual);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status MoeAccumulate<float>(const float*, const int32_t*, int64_t, int64_t, const float*,
                                           int64_t, float*, cudaStream_t);
template absl::Status MoeAccumulate<bf16_t>(const bf16_t*, const int32_t*, int64_t, int64_t, const float*,
                                            int64_t, float*, cudaStream_t);
template absl::Status MoeCombineGroupedFinish<float>(const float*, const int32_t*, const float*, int64_t,
                                                     int64_t, int64_t, const float*, const float*, int64_t,
                                                     bool, float*, cudaStream_t);
template absl::Status MoeCombineGroupedFinish<bf16_t>(const bf16_t*, const int32_t*, const float*, int64_t,
                                                      int64_t, int64_t, const float*, const float*, int64_t,
                                                      bool, float*, cudaStream_t);

}  // namespace scored::kernels
