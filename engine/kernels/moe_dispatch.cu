// Mixture-of-experts dispatch. Contract: moe_dispatch.h. Grouping: one block per expert scans every slot in
// order (coalesced; num_experts x num_slots reads, ~16 M for 128 experts at 16k tokens x top-8), counting,
// then placing its slots by a block-wide prefix sum of the matches (warp ballots), so the order is the
// slots' own.
#include <cstdint>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/moe_dispatch.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
    CountKernel(const int32_t* ids, int64_t num_slots, int32_t* counts) {
  __shared__ int warp_counts[kWarps];
  const int e = blockIdx.x;
  int count = 0;
  for (int64_t s = threadIdx.x; s < num_slots; s += kThreads) count += ids[s] == e;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) count += __shfl_xor_sync(0xffffffffu, count, offset);
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_counts[w];
    counts[e] = total;
  }
}

__global__ void __launch_bounds__(kThreads)
    PlaceKernel(const int32_t* ids, int64_t num_slots, const int32_t* counts, int32_t* sorted) {
  __shared__ int warp_counts[kWarps];
  __shared__ int64_t base;
  const int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    int64_t b = 0;
    for (int i = 0; i < e; ++i) b += counts[i];
    base = b;
  }
  __syncthreads();
  for (int64_t s0 = 0; s0 < num_slots; s0 += kThreads) {
    const int64_t s = s0 + threadIdx.x;
    const bool match = s < num_slots && ids[s] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (match) sorted[base + before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
    __syncthreads();  // warp_counts is rewritten next round; base moves
    if (threadIdx.x == 0) base += total;
    __syncthreads();
  }
}

// 16-byte vectors (rows and the leading dimension multiples of 16 bytes): the grouped path gathers every
// slot's row at once (131072 rows of 4 KiB at 16k tokens x top-8), so the copy runs at full width.
__global__ void GatherKernelVec16(const uint4* src, int64_t ld_vec, const int32_t* slots, int64_t top_k,
                                  int64_t width_vec, uint4* dst) {
  const int64_t r = blockIdx.x;
  const uint4* from = src + (slots[r] / top_k) * ld_vec;
  uint4* to = dst + r * width_vec;
  for (int64_t i = threadIdx.x; i < width_vec; i += blockDim.x) to[i] = from[i];
}

template <typename T>
__global__ void GatherKernel(const T* src, int64_t ld, const int32_t* slots, int64_t top_k, int64_t width,
                             T* dst) {
  const int64_t r = blockIdx.x;
  const T* from = src + (slots[r] / top_k) * ld;
  T* to = dst + r * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) to[i] = from[i];
}

// One block: the exclusive scan of the counts, kThreads experts per round (warp shuffles, then the warp
// totals in warp order).
__global__ void __launch_bounds__(kThreads)
    OffsetsKernel(const int32_t* counts, int64_t num_experts, int32_t* offsets) {
  __shared__ int warp_sums[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int before = 0;
  for (int64_t base = 0; base < num_experts; base += kThreads) {
    const int64_t e = base + threadIdx.x;
    const int count = e < num_experts ? counts[e] : 0;
    int incl = count;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int warp_before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      warp_before += w < warp ? warp_sums[w] : 0;
      total += warp_sums[w];
    }
    if (e < num_experts) offsets[e] = before + warp_before + incl - count;
    before += total;
    __syncthreads();  // warp_sums is rewritten next round
  }
  if (threadIdx.x == 0) offsets[num_experts] = before;
}

__global__ void SlotRowsKernel(const int32_t* sorted_slots, int64_t num_slots, int32_t* slot_rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < num_slots) slot_rows[sorted_slots[r]] = static_cast<int32_t>(r);
}

}  // namespace

absl::Status MoeGroupByExpert(const int32_t* expert_ids, int64_t num_slots, int64_t num_experts,
                              int32_t* counts, int32_t* sorted_slots, cudaStream_t stream) {
  if (num_slots < 0 || num_slots > int64_t{0x7fffffff} || num_experts < 1 || num_experts > 65535) {
    return absl::InvalidArgumentError("MoE grouping: bad shapes");
  }
  const unsigned blocks = static_cast<unsigned>(num_experts);
  CountKernel<<<blocks, kThreads, 0, stream>>>(expert_ids, num_slots, counts);
  SCORED_CUDA_CHECK_LAUNCH();
  if (num_slots == 0) return absl::OkStatus();
  PlaceKernel<<<blocks, kThreads, 0, stream>>>(expert_ids, num_slots, counts, sorted_slots);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeGatherRows(const T* src, int64_t ld, const int32_t* slots, int64_t rows, int64_t top_k,
                           int64_t width, T* dst, cudaStream_t stream) {
  if (rows < 0 || top_k < 1 || width < 1 || ld < width || rows > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError("MoE gather: bad shapes");
  }
  if (rows == 0) return absl::OkStatus();
  if ((width * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
      (ld * static_cast<int64_t>(sizeof(T))) % 16 == 0 && IsAligned(src, 16) && IsAligned(dst, 16)) {
    constexpr int64_t kPerVec = 16 / static_cast<int64_t>(sizeof(T));
    GatherKernelVec16<<<static_cast<unsigned>(rows), 256, 0, stream>>>(
        reinterpret_cast<const uint4*>(src), ld / kPerVec, slots, top_k, width / kPerVec,
        reinterpret_cast<uint4*>(dst));
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  }
  GatherKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(ToDevice(src), ld, slots, top_k, width,
                                                                ToDevice(dst));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status MoeGroupedRows(const int32_t* counts, int64_t num_experts, const int32_t* sorted_slots,
                            int64_t num_slots, int32_t* offsets, int32_t* slot_rows, cudaStream_t stream) {
  if (num_slots < 0 || num_slots > int64_t{0x7fffffff} || num_experts < 1 || num_experts > 65535) {
    return absl::InvalidArgumentError("MoE grouped rows: bad shapes");
  }
  OffsetsKernel<<<1, kThreads, 0, stream>>>(counts, num_experts, offsets);
  SCORED_CUDA_CHECK_LAUNCH();
  if (num_slots == 0) return absl::OkStatus();
  SlotRowsKernel<<<static_cast<unsigned>((num_slots + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      sorted_slots, num_slots, slot_rows);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status MoeGatherRows<float>(const float*, int64_t, const int32_t*, int64_t, int64_t, int64_t,
                                           float*, cudaStream_t);
template absl::Status MoeGatherRows<bf16_t>(const bf16_t*, int64_t, const int32_t*, int64_t, int64_t, int64_t,
                                            bf16_t*, cudaStream_t);

}  // namespace scored::kernels
