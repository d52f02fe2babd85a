// Mixture-of-experts dispatch on the GPU: the token slots grouped by expert, and an expert's input rows
// gathered. A slot is t * top_k + j, token t's j-th chosen expert (kernels/moe_route.h's expert_ids).
//   MoeGroupByExpert: counts[e] = the number of slots routed to expert e, and sorted_slots = every slot,
//     grouped by expert in ascending expert id, each expert's slots in ascending slot (token) order: expert
//     e's slots are sorted_slots[offsets[e], offsets[e] + counts[e]), offsets[e] = counts[0] + ... +
//     counts[e - 1] for e <= num_experts (written where offsets is not null: the grouped expert GEMMs'
//     layout, kernels/grouped_gemm.h, read on the device with no host copy). Fully determined by expert_ids
//     (no atomics), so a token's rows land in the same order whatever the launch. Slots whose id is not in
//     [0, num_experts) are left out (counted nowhere, placed nowhere; offsets[num_experts] counts the rest).
//     workspace: MoeGroupByExpertWorkspaceBytes(num_slots, num_experts) bytes of device memory (per-chunk
//     counts of kMoeGroupChunkSlots slots), else INVALID_ARGUMENT; num_experts <= 1536.
//   MoeGatherRows: dst[r] = src[slots[r] / top_k] for r < rows (dst contiguous, src rows ld apart).
//   MoeGroupedRows: slot_rows[sorted_slots[r]] = r for r < offsets[num_experts] (<= num_slots; the row of
//     every grouped slot in the grouped order), from MoeGroupByExpert's sorted_slots and offsets.
// T in {bf16_t, float}. Errors: INVALID_ARGUMENT (shapes), INTERNAL (launch).
#ifndef SCORED_ENGINE_KERNELS_MOE_DISPATCH_H_
#define SCORED_ENGINE_KERNELS_MOE_DISPATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

inline constexpr int64_t kMoeGroupChunkSlots = 256;
int64_t MoeGroupByExpertWorkspaceBytes(int64_t num_slots, int64_t num_experts);  // host-only

absl::Status MoeGroupByExpert(const int32_t* expert_ids,  // [num_slots]
                              int64_t num_slots, int64_t num_experts,
                              int32_t* counts,        // [num_experts]
                              int32_t* sorted_slots,  // [num_slots]
                              int32_t* offsets,       // [num_experts + 1] or nullptr
                              void* workspace, int64_t workspace_bytes, cudaStream_t stream);

template <typename T>
absl::Status MoeGatherRows(const T* src,  // [tokens, ld]
                           int64_t ld, const int32_t* slots, int64_t rows, int64_t top_k, int64_t width,
                           T* dst,  // [rows, width]
                           cudaStream_t stream);

absl::Status MoeGroupedRows(const int32_t* offsets,  // [num_experts + 1]
                            int64_t num_experts,
                            const int32_t* sorted_slots,  // [num_slots]
                            int64_t num_slots,
                            int32_t* slot_rows,  // [num_slots]
                            cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MOE_DISPATCH_H_
