// Mixture-of-experts dispatch. Contract: moe_dispatch.h. Grouping, stable and without atomics, in three
// launches over chunks of kGroupChunk slots, a warp per chunk:
//   ChunkCountKernel  each chunk's count per expert (warp match: the lowest lane of each expert present in a
//                     round of 32 slots adds the round's matches to the warp's counters in shared memory);
//   ChunkBaseKernel   one block: every expert's total (counts), their exclusive scan (offsets) and, in
//                     place, each (chunk, expert)'s first grouped position: the experts before it in full,
//                     then the chunks before it;
//   ChunkPlaceKernel  each chunk again, each slot at its chunk's base plus the matches before it in the
//                     chunk (the lanes below it in its round, then the rounds before).
// A slot's position is fully determined by expert_ids. (Replaced a block per expert that scanned all slots
// in 256-slot rounds with three barriers each: ~0.3 ms at 128 experts x 131072 slots, by this estimate.)
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/moe_dispatch.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroupChunk = static_cast<int>(kMoeGroupChunkSlots);  // slots per warp chunk
constexpr int kBaseThreads = 1024;

int64_t GroupChunks(int64_t num_slots) { return (num_slots + kGroupChunk - 1) / kGroupChunk; }

// Warp w of block b: chunk b * kWarps + w, its slots' counts per expert into chunk_counts[chunk, :].
// Shared memory: kWarps x num_experts int32 counters.
__global__ void __launch_bounds__(kThreads)
    ChunkCountKernel(const int32_t* __restrict__ ids, int64_t num_slots, int num_experts,
                     int32_t* __restrict__ chunk_counts) {
  extern __shared__ int32_t warp_counters[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t* const mine = warp_counters + warp * num_experts;
  for (int e = lane; e < num_experts; e += 32) mine[e] = 0;
  __syncwarp();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t begin = chunk * kGroupChunk;
  if (begin >= num_slots) return;  // warp-uniform
  const int64_t end = begin + kGroupChunk < num_slots ? begin + kGroupChunk : num_slots;
  for (int64_t s0 = begin; s0 < end; s0 += 32) {
    const int64_t s = s0 + lane;
    int e = s < end ? ids[s] : -1;
    if (e >= num_experts) e = -1;  // not an expert: not grouped
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    __syncwarp();
  }
  int32_t* const out = chunk_counts + chunk * num_experts;
  for (int e = lane; e < num_experts; e += 32) out[e] = mine[e];
}

// One block of kBaseThreads: thread i takes expert e = i % num_experts and part p = i / num_experts of the
// chunks (parts = kBaseThreads / num_experts, contiguous ranges; experts beyond kBaseThreads loop). Pass 1:
// each part's sum; then per expert the exclusive prefix over its parts and its total (counts), an exclusive
// scan of the totals over the experts; pass 2: chunk_counts[c, e] becomes the expert's base + the part's
// prefix + the chunks before c in the part.
__global__ void __launch_bounds__(kBaseThreads)
    ChunkBaseKernel(int64_t chunks, int num_experts, int32_t* __restrict__ chunk_counts,
                    int32_t* __restrict__ counts, int32_t* __restrict__ offsets) {
  __shared__ int32_t part_sums[kBaseThreads];
  __shared__ int32_t expert_base[kBaseThreads];  // the round's totals, then their exclusive scan
  __shared__ int32_t round_base;
  const int per_round = num_experts < kBaseThreads ? num_experts : kBaseThreads;
  const int parts = kBaseThreads / per_round;
  const int64_t per_part = (chunks + parts - 1) / parts;
  if (threadIdx.x == 0) round_base = 0;
  for (int e0 = 0; e0 < num_experts; e0 += per_round) {
    const int local = static_cast<int>(threadIdx.x) % per_round,
              p = static_cast<int>(threadIdx.x) / per_round;
    const int e = e0 + local;
    const bool active = p < parts && e < num_experts;
    const int64_t c_begin = p * per_part;
    const int64_t c_end = c_begin + per_part < chunks ? c_begin + per_part : chunks;
    int32_t sum = 0;
    if (active) {  // batches of 8 independent loads
      for (int64_t c = c_begin; c < c_end; c += 8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) sum += c + j < c_end ? chunk_counts[(c + j) * num_experts + e] : 0;
      }
    }
    part_sums[threadIdx.x] = sum;
    __syncthreads();
    if (p == 0 && e < num_experts) {  // per expert of the round: its parts' exclusive prefixes, its total
      int32_t before = 0;
      for (int q = 0; q < parts; ++q) {
        const int32_t v = part_sums[q * per_round + local];
        part_sums[q * per_round + local] = before;
        before += v;
      }
      counts[e] = before;
      expert_base[local] = before;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the totals' exclusive scan over the experts
      int32_t base = round_base;
      for (int l = 0; l < per_round && e0 + l < num_experts; ++l) {
        const int32_t total = expert_base[l];
        expert_base[l] = base;
        if (offsets != nullptr) offsets[e0 + l] = base;
        base += total;
      }
      round_base = base;
    }
    __syncthreads();
    if (active) {
      int32_t at = expert_base[local] + part_sums[threadIdx.x];
      for (int64_t c = c_begin; c < c_end; c += 8) {  // 8 loads, then their 8 stores
        int32_t v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = c + j < c_end ? chunk_counts[(c + j) * num_experts + e] : 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (c + j < c_end) chunk_counts[(c + j) * num_experts + e] = at;
          at += v[j];
        }
      }
    }
    __syncthreads();  // part_sums / expert_base are rewritten next round
  }
  if (threadIdx.x == 0 && offsets != nullptr) offsets[num_experts] = round_base;
}

// As ChunkCountKernel, each slot placed: sorted[base of (chunk, e) + matches before it in the chunk].
__global__ void __launch_bounds__(kThreads)
    ChunkPlaceKernel(const int32_t* __restrict__ ids, int64_t num_slots, int num_experts,
                     const int32_t* __restrict__ chunk_base, int32_t* __restrict__ sorted) {
  extern __shared__ int32_t warp_counters[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t* const mine = warp_counters + warp * num_experts;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t begin = chunk * kGroupChunk;
  if (begin >= num_slots) return;  // warp-uniform
  const int32_t* const base = chunk_base + chunk * num_experts;
  for (int e = lane; e < num_experts; e += 32) mine[e] = base[e];
  __syncwarp();
  const int64_t end = begin + kGroupChunk < num_slots ? begin + kGroupChunk : num_slots;
  for (int64_t s0 = begin; s0 < end; s0 += 32) {
    const int64_t s = s0 + lane;
    int e = s < end ? ids[s] : -1;
    if (e >= num_experts) e = -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) sorted[mine[e] + __popc(peers & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
    __syncwarp();  // every lane has read mine[e] before its leader moves it
    if (e >= 0 && lane == __ffs(peers) - 1) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// 16-byte vectors (rows and the leading dimension multiples of 16 bytes): the grouped path gathers every
// slot's row at once (131072 rows of 4 KiB at 16k tokens x top-8). A warp per row, kGatherRowsPerBlock rows a
// block; each lane loads up to kGatherVecs vectors (a warp's load covers 512 contiguous bytes) before it
// stores them, so a thread keeps several loads in flight (a block per row with one vector a thread was bound
// by the blocks' start-up: 2.2 TB/s).
constexpr int kGatherRowsPerBlock = 8;
constexpr int kGatherVecs = 8;

__global__ void __launch_bounds__(32 * kGatherRowsPerBlock)
    GatherKernelVec16(const uint4* __restrict__ src, int64_t ld_vec, const int32_t* __restrict__ slots,
                      int64_t top_k, int64_t rows, int64_t width_vec, uint4* __restrict__ dst) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGatherRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint4* from = src + (slots[r] / top_k) * ld_vec;
  uint4* to = dst + r * width_vec;
  for (int64_t i0 = 0; i0 < width_vec; i0 += 32 * kGatherVecs) {
    uint4 v[kGatherVecs];
#pragma unroll
    for (int j = 0; j < kGatherVecs; ++j) {
      const int64_t i = i0 + j * 32 + lane;
      if (i < width_vec) v[j] = from[i];
    }
#pragma unroll
    for (int j = 0; j < kGatherVecs; ++j) {
      const int64_t i = i0 + j * 32 + lane;
      if (i < width_vec) to[i] = v[j];
    }
  }
}

template <typename T>
__global__ void GatherKernel(const T* src, int64_t ld, const int32_t* slots, int64_t top_k, int64_t width,
                             T* dst) {
  const int64_t r = blockIdx.x;
  const T* from = src + (slots[r] / top_k) * ld;
  T* to = dst + r * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) to[i] = from[i];
}

__global__ void SlotRowsKernel(const int32_t* sorted_slots, const int32_t* grouped, int64_t num_slots,
                               int32_t* slot_rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < num_slots && r < *grouped) slot_rows[sorted_slots[r]] = static_cast<int32_t>(r);
}

}  // namespace

int64_t MoeGroupByExpertWorkspaceBytes(int64_t num_slots, int64_t num_experts) {
  return GroupChunks(num_slots) * num_experts * static_cast<int64_t>(sizeof(int32_t));
}

absl::Status MoeGroupByExpert(const int32_t* expert_ids, int64_t num_slots, int64_t num_experts,
                              int32_t* counts, int32_t* sorted_slots, int32_t* offsets, void* workspace,
                              int64_t workspace_bytes, cudaStream_t stream) {
  if (num_slots < 0 || num_slots > int64_t{0x7fffffff} || num_experts < 1 || num_experts > 65535) {
    return absl::InvalidArgumentError("MoE grouping: bad shapes");
  }
  const int64_t need = MoeGroupByExpertWorkspaceBytes(num_slots, num_experts);
  const size_t counter_bytes = static_cast<size_t>(kWarps) * num_experts * sizeof(int32_t);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr) || counter_bytes > 48 * 1024) {
    return absl::InvalidArgumentError(absl::StrCat("MoE grouping: workspace of ", workspace_bytes,
                                                   " bytes, needs ", need, " (", num_experts, " experts)"));
  }
  if (num_slots == 0) {
    SCORED_CUDA_CHECK(cudaMemsetAsync(counts, 0, num_experts * sizeof(int32_t), stream));
    if (offsets != nullptr) {
      SCORED_CUDA_CHECK(cudaMemsetAsync(offsets, 0, (num_experts + 1) * sizeof(int32_t), stream));
    }
    return absl::OkStatus();
  }
  const int64_t chunks = GroupChunks(num_slots);
  const unsigned blocks = static_cast<unsigned>((chunks + kWarps - 1) / kWarps);
  int32_t* const chunk_counts = static_cast<int32_t*>(workspace);
  const int experts = static_cast<int>(num_experts);
  ChunkCountKernel<<<blocks, kThreads, counter_bytes, stream>>>(expert_ids, num_slots, experts, chunk_counts);
  SCORED_CUDA_CHECK_LAUNCH();
  ChunkBaseKernel<<<1, kBaseThreads, 0, stream>>>(chunks, experts, chunk_counts, counts, offsets);
  SCORED_CUDA_CHECK_LAUNCH();
  ChunkPlaceKernel<<<blocks, kThreads, counter_bytes, stream>>>(expert_ids, num_slots, experts, chunk_counts,
                                                                sorted_slots);
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
    const auto blocks = static_cast<unsigned>((rows + kGatherRowsPerBlock - 1) / kGatherRowsPerBlock);
    GatherKernelVec16<<<blocks, 32 * kGatherRowsPerBlock, 0, stream>>>(
        reinterpret_cast<const uint4*>(src), ld / kPerVec, slots, top_k, rows, width / kPerVec,
        reinterpret_cast<uint4*>(dst));
    SCORED_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  }
  GatherKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(ToDevice(src), ld, slots, top_k, width,
                                                                ToDevice(dst));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status MoeGroupedRows(const int32_t* offsets, int64_t num_experts, const int32_t* sorted_slots,
                            int64_t num_slots, int32_t* slot_rows, cudaStream_t stream) {
  if (num_slots < 0 || num_slots > int64_t{0x7fffffff} || num_experts < 1 || num_experts > 65535) {
    return absl::InvalidArgumentError("MoE grouped rows: bad shapes");
  }
  if (num_slots == 0) return absl::OkStatus();
  SlotRowsKernel<<<static_cast<unsigned>((num_slots + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      sorted_slots, offsets + num_experts, num_slots, slot_rows);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status MoeGatherRows<float>(const float*, int64_t, const int32_t*, int64_t, int64_t, int64_t,
                                           float*, cudaStream_t);
template absl::Status MoeGatherRows<bf16_t>(const bf16_t*, int64_t, const int32_t*, int64_t, int64_t, int64_t,
                                            bf16_t*, cudaStream_t);

}  // namespace scored::kernels
