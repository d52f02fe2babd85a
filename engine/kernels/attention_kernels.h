// The attention kernel families' launchers (private to the attention files: attention.cu picks one, the
// attention_*.cu files define them). Plain C++, no device code.
//
// Each launcher takes CausalAttention's arguments (attention.h) after attention.cu has checked the shape
// (CheckShape) and skipped empty work, and after it has checked the family's own limits (head_dim, the
// alignment predicates there): it launches the kernel on `stream` with the family's fixed configuration,
// never synchronizes, and returns INTERNAL on a CUDA error (a failed launch, or setting the kernel's
// dynamic shared-memory limit).
#ifndef SCORED_ENGINE_KERNELS_ATTENTION_KERNELS_H_
#define SCORED_ENGINE_KERNELS_ATTENTION_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels::attention_internal {

// Every launcher takes the scale, soft cap and window of `shape` (attention.h).
//
// SIMT fp32 kernel (attention_simt.cu): any head_dim of attention.h; T in {float, bf16_t}.
template <typename T>
absl::Status LaunchSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                        const AttentionShape& shape, T* out, cudaStream_t stream);

// mma.sync kernel with 16 query rows per warp (attention_mma.cu): kHeadDim in {32, 64, 96, 128}; q and out
// 4-byte aligned with q_stride even, k and v 16-byte aligned with kv_stride % 8 == 0.
template <int kHeadDim>
absl::Status LaunchMma16Rows(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                             const AttentionShape& shape, bf16_t* out, cudaStream_t stream);

// mma.sync kernel with Q staged in shared memory and kBlockK-key tiles (attention_mma.cu): 32 query rows per
// warp at kHeadDim in {64, 96, 128}, 16 (8 warps) at 256; kBlockK in {32, 64}; the 16-row kernel's
// alignment, and q 16-byte aligned with q_stride % 8 == 0; Mma32RowsFits(kHeadDim, kBlockK).
template <int kHeadDim, int kBlockK>
absl::Status LaunchMma32Rows(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                             const AttentionShape& shape, bf16_t* out, cudaStream_t stream);

// Whether the current device gives one block the shared memory of the 32-row kernel (attention_mma.cu) at
// head_dim {64, 96, 128, 256} and block_k {32, 64}: 102 KiB at 128 with 64-key tiles, more than sm_86 /
// sm_89 / sm_120 offer (99 KiB; sm_80, sm_90 and sm_100 have 163 KiB or more); at 256, 135 KiB with 32-key
// tiles and 198 KiB with 64 (sm_90 and sm_100: 227 KiB). False on a CUDA error.
bool Mma32RowsFits(int head_dim, int block_k);

// Whether the Hopper wgmma kernel can run here (attention_wgmma_sm90.cu): the library carries its sm_90a
// code and the current device has compute capability 9.0.
bool WgmmaAvailable();

// Hopper wgmma kernels: head_dim 128 or 256, the 32-row kernel's alignment, WgmmaAvailable().
absl::Status LaunchWgmma(const bf16_t* q, const bf16_t* k, const bf16_t* v, const int32_t* cu_seqlens,
                         const AttentionShape& shape, bf16_t* out, cudaStream_t stream);

}  // namespace scored::kernels::attention_internal

#endif  // SCORED_ENGINE_KERNELS_ATTENTION_KERNELS_H_
