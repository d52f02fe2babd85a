// Causal depthwise conv1d + SiLU of the Gated DeltaNet over a varlen batch. Contract: delta_net_conv.h.
//
// A 2-D grid: blockIdx.y strides over tokens, x-blocks and threads over the channels, one output element per
// thread and step. Each block finds its token's sequence start once (a binary search over cu_seqlens,
// uniform over the block); the kernel - 1 earlier rows a thread reads were read by the blocks of the tokens
// before it and hit L1/L2.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/delta_net_conv.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksX = 1024;
constexpr int64_t kMaxKernel = 64;

// First token of the sequence holding token t: cu_seqlens[s] for the largest s < num_seqs with
// cu_seqlens[s] <= t, clamped to [0, t] (so malformed offsets never move a read out of the arrays).
__device__ __forceinline__ int64_t SequenceStart(const int32_t* __restrict__ cu_seqlens, int64_t num_seqs,
                                                 int64_t t) {
  int64_t lo = 0, hi = num_seqs;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cu_seqlens[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t start = cu_seqlens[lo];
  return start < 0 ? 0 : (start > t ? t : start);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    Conv1dSiluKernel(const T* __restrict__ x,  // [num_tokens, x_stride]
                     int64_t x_stride,
                     const float* __restrict__ weight,        // [channels, kernel]
                     const int32_t* __restrict__ cu_seqlens,  // [num_seqs + 1]
                     int64_t num_seqs, int64_t num_tokens, int64_t channels, int kernel,
                     float* __restrict__ out) {  // [num_tokens, channels]
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const int64_t start = SequenceStart(cu_seqlens, num_seqs, t);
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < channels;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
      const float* w = weight + c * kernel;
      double acc = 0.0;
      for (int j = 0; j < kernel; ++j) {
        const int64_t src = t - (kernel - 1) + j;
        // Products of two fp32 values are exact in double: the sum is the oracle's, term for term.
        if (src >= start) {
          acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(w[j]),
                                         static_cast<double>(LoadAsFloat(x + src * x_stride + c))));
        }
      }
      const double y = static_cast<double>(static_cast<float>(acc));
      out[t * channels + c] = static_cast<float>(__ddiv_rn(y, __dadd_rn(1.0, exp(-y))));
    }
  }
}

}  // namespace

template <typename T>
absl::Status DeltaNetConv1dSilu(const T* x, int64_t x_stride, const float* weight, const int32_t* cu_seqlens,
                                int64_t num_seqs, int64_t num_tokens, int64_t channels, int64_t kernel,
                                float* out, cudaStream_t stream) {
  if (num_seqs < 0 || num_tokens < 0 || channels < 0) {
    return absl::InvalidArgumentError("DeltaNetConv1dSilu: need num_seqs, num_tokens, channels >= 0");
  }
  if (kernel < 1 || kernel > kMaxKernel) {
    return absl::InvalidArgumentError("DeltaNetConv1dSilu: kernel must be in [1, 64]");
  }
  if (x_stride < channels) return absl::InvalidArgumentError("DeltaNetConv1dSilu: x_stride < channels");
  if (num_tokens == 0 || channels == 0) return absl::OkStatus();
  if (num_seqs == 0) return absl::InvalidArgumentError("DeltaNetConv1dSilu: tokens but no sequence");
  if (x == nullptr || weight == nullptr || cu_seqlens == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("DeltaNetConv1dSilu: null pointer");
  }
  const int64_t bx = CeilDiv(channels, kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_tokens < kMaxBlocksY ? num_tokens : kMaxBlocksY));
  Conv1dSiluKernel<<<grid, kThreads, 0, stream>>>(ToDevice(x), x_stride, weight, cu_seqlens, num_seqs,
                                                  num_tokens, channels, static_cast<int>(kernel), out);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status DeltaNetConv1dSilu<float>(const float*, int64_t, const float*, const int32_t*, int64_t,
                                                int64_t, int64_t, int64_t, float*, cudaStream_t);
template absl::Status DeltaNetConv1dSilu<bf16_t>(const bf16_t*, int64_t, const float*, const int32_t*,
                                                 int64_t, int64_t, int64_t, int64_t, float*, cudaStream_t);

}  // namespace scored::kernels
