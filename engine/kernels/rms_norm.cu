// RMSNorm and residual-add + RMSNorm. Contract: rms_norm.h.
//
// Vector path (hidden_size a multiple of 8 and at most 8 * 8 * kThreads, row strides multiples of 8,
// 16-byte aligned pointers; the engine's activations qualify): one resident wave of blocks strides
// over tokens, one block per token at a time. Thread i owns the 8-element chunks i, i + kThreads, ... of
// the row and keeps them in registers: all loads of the row are issued at once, the sum of squares runs
// over the thread's chunks in order, then BlockSum; the row is never re-read. The order depends only on
// hidden_size. The row arithmetic lives in rms_norm_row.cuh, shared with RmsNormQuantFp8 (rms_norm_fp8.cu),
// which must stay bitwise equal to RmsNorm<float, bf16_t> here.
//
// Scalar path otherwise: one block of kThreads per token. Pass 1 (optionally adding x into the fp32 residual)
// accumulates the sum of squares per thread in index order i = tid, tid + kThreads, ...; BlockSum combines
// the threads in a fixed tree. Pass 2 re-reads the row (each thread the elements it wrote itself, so no
// barrier is needed; the row is in L1/L2) and writes the normalized values.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rms_norm_row.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = kRmsNormVecThreads;  // also the scalar path's block
constexpr int kChunk = kRmsNormVecChunk;
constexpr int64_t kMaxBlocks = 65535;

template <bool kAddResidual, typename XT, typename OutT>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const XT* x,  // [num_tokens, x_stride]
                                                          int64_t x_stride,
                                                          float* residual,  // [num_tokens, hidden_size]
                                                          const float* __restrict__ weight,  // [hidden_size]
                                                          int64_t num_tokens, int64_t hidden_size, float eps,
                                                          OutT* out,  // [num_tokens, out_stride]
                                                          int64_t out_stride) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const XT* x_row = x + t * x_stride;
    float* res_row = kAddResidual ? residual + t * hidden_size : nullptr;
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < hidden_size; i += kThreads) {
      float v = LoadAsFloat(x_row + i);
      if constexpr (kAddResidual) {
        v += res_row[i];
        res_row[i] = v;
      }
      sum_sq += v * v;
    }
    const float total = BlockSum(sum_sq, scratch);
    const float inv_rms = rsqrtf(total / static_cast<float>(hidden_size) + eps);
    OutT* out_row = out + t * out_stride;
    for (int64_t i = threadIdx.x; i < hidden_size; i += kThreads) {
      const float v = kAddResidual ? res_row[i] : LoadAsFloat(x_row + i);
      StoreFromFloat(out_row + i, v * inv_rms * weight[i]);
    }
  }
}

template <bool kAddResidual, int kChunksPerThread, typename XT, typename OutT>
__global__ void __launch_bounds__(kThreads)
    RmsNormVecKernel(const XT* x,  // [num_tokens, x_stride]
                     int64_t x_stride,
                     float* residual,                   // [num_tokens, hidden_size]
                     const float* __restrict__ weight,  // [hidden_size]
                     int64_t num_tokens, int64_t hidden_size, float eps,
                     OutT* out,  // [num_tokens, out_stride]
                     int64_t out_stride) {
  __shared__ float scratch[32];
  const int chunks = static_cast<int>(hidden_size / kChunk);
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float v[kChunksPerThread][kChunk];  // the thread's chunks of row t
    RmsNormRowVec<kAddResidual>(x + t * x_stride, kAddResidual ? residual + t * hidden_size : nullptr, weight,
                                chunks, hidden_size, eps, scratch, v);
    OutT* out_row = out + t * out_stride;
#pragma unroll
    for (int r = 0; r < kChunksPerThread; ++r) {
      const int c = threadIdx.x + r * kThreads;
      if (c < chunks) Store8(out_row + c * kChunk, v[r]);
    }
  }
}

// Launches the vector path if the arguments allow it; *launched says whether it did.
template <bool kAddResidual, typename XT, typename OutT>
absl::Status TryLaunchVec(const XT* x, int64_t x_stride, float* residual, const float* weight,
                          int64_t num_tokens, int64_t hidden_size, float eps, OutT* out, int64_t out_stride,
                          cudaStream_t stream, bool* launched) {
  *launched = false;
  const int64_t chunks = hidden_size / kChunk;
  const bool shape_ok = hidden_size % kChunk == 0 && x_stride % kChunk == 0 && out_stride % kChunk == 0 &&
                        chunks <= kRmsNormVecMaxChunksPerThread * kThreads;
  if (!shape_ok || !IsAligned(x, 16) || !IsAligned(weight, 16) || !IsAligned(out, 16) ||
      (kAddResidual && !IsAligned(residual, 16))) {
    return absl::OkStatus();
  }
  const auto dx = ToDevice(x);
  const auto dout = ToDevice(out);
  // One resident wave of blocks (SM count x occupancy of the instance launched).
  auto launch = [&](auto kernel) -> absl::Status {
    unsigned blocks = 1;
    SCORED_CUDA_CHECK(ResidentGrid(kernel, kThreads, num_tokens, &blocks));
    kernel<<<blocks, kThreads, 0, stream>>>(dx, x_stride, residual, weight, num_tokens, hidden_size, eps,
                                            dout, out_stride);
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  };
  using DX = typename DeviceType<XT>::type;
  using DOut = typename DeviceType<OutT>::type;
  const absl::Status st = chunks <= kThreads       ? launch(RmsNormVecKernel<kAddResidual, 1, DX, DOut>)
                          : chunks <= 2 * kThreads ? launch(RmsNormVecKernel<kAddResidual, 2, DX, DOut>)
                          : chunks <= 4 * kThreads ? launch(RmsNormVecKernel<kAddResidual, 4, DX, DOut>)
                                                   : launch(RmsNormVecKernel<kAddResidual, 8, DX, DOut>);
  if (!st.ok()) return st;
  *launched = true;
  return absl::OkStatus();
}

absl::Status CheckArgs(const void* x, int64_t x_stride, const float* weight, int64_t num_tokens,
                       int64_t hidden_size, const void* out, int64_t out_stride) {
  if (num_tokens < 0 || hidden_size < 1) {
    return absl::InvalidArgumentError("RmsNorm: need num_tokens >= 0 and hidden_size >= 1");
  }
  if (x_stride < hidden_size || out_stride < hidden_size) {
    return absl::InvalidArgumentError("RmsNorm: row strides must be >= hidden_size");
  }
  if (num_tokens > 0 && (x == nullptr || weight == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError("RmsNorm: null pointer");
  }
  return absl::OkStatus();
}

}  // namespace

template <typename XT, typename OutT>
absl::Status RmsNorm(const XT* x, int64_t x_stride, const float* weight, int64_t num_tokens,
                     int64_t hidden_size, float eps, OutT* out, int64_t out_stride, cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, weight, num_tokens, hidden_size, out, out_stride);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  bool launched = false;
  const absl::Status vec = TryLaunchVec<false>(x, x_stride, static_cast<float*>(nullptr), weight, num_tokens,
                                               hidden_size, eps, out, out_stride, stream, &launched);
  if (!vec.ok() || launched) return vec;
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  RmsNormKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(x), x_stride, nullptr, weight, num_tokens, hidden_size, eps, ToDevice(out), out_stride);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename XT, typename OutT>
absl::Status AddRmsNorm(const XT* x, int64_t x_stride, float* residual, const float* weight,
                        int64_t num_tokens, int64_t hidden_size, float eps, OutT* out, int64_t out_stride,
                        cudaStream_t stream) {
  const absl::Status args = CheckArgs(x, x_stride, weight, num_tokens, hidden_size, out, out_stride);
  if (!args.ok()) return args;
  if (num_tokens == 0) return absl::OkStatus();
  if (residual == nullptr) return absl::InvalidArgumentError("AddRmsNorm: null residual");
  bool launched = false;
  const absl::Status vec = TryLaunchVec<true>(x, x_stride, residual, weight, num_tokens, hidden_size, eps,
                                              out, out_stride, stream, &launched);
  if (!vec.ok() || launched) return vec;
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  RmsNormKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(x), x_stride, residual, weight, num_tokens, hidden_size, eps, ToDevice(out), out_stride);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

#define SCORED_INSTANTIATE_RMS_NORM(XT, OutT)                                                               \
  template absl::Status RmsNorm<XT, OutT>(const XT*, int64_t, const float*, int64_t, int64_t, float, OutT*, \
                                          int64_t, cudaStream_t);                                           \
  template absl::Status AddRmsNorm<XT, OutT>(const XT*, int64_t, float*, const float*, int64_t, int64_t,    \
                                             float, OutT*, int64_t, cudaStream_t);
SCORED_INSTANTIATE_RMS_NORM(float, float)
SCORED_INSTANTIATE_RMS_NORM(float, bf16_t)
SCORED_INSTANTIATE_RMS_NORM(bf16_t, float)
SCORED_INSTANTIATE_RMS_NORM(bf16_t, bf16_t)
#undef SCORED_INSTANTIATE_RMS_NORM

}  // namespace scored::kernels
