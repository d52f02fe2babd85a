// Grouped expert GEMMs for mixture-of-experts layers: one launch multiplies every expert's rows by its own
// weight, with the row counts read on the device (no host synchronization, so the layer can be captured in
// a CUDA graph).
//
//   for every expert e < num_experts and every row r in [offsets[e], offsets[e + 1]):
//     y[r, o] = OutT(sum_k x[r, k] * W_e[o, k])   for o < n
// with the sum in fp32 (bf16 products are exact in fp32) on tensor cores (mma.sync m16n8k16, bf16 inputs,
// fp32 accumulators) and one rounding to OutT at the end (bf16_t: round to nearest even; float: none).
//
// Batch invariance: every output element is accumulated by one thread of one block over k in one fixed
// order (k tiles ascending, 16-column steps ascending inside a tile, the mma's own fixed order inside a
// step; no split-K), and a row's products never involve another row. So y[r, :] depends only on x[r, :] and
// W_e: bitwise the same whatever the other experts' counts or the row's position within its expert.
//
// Weights:
//   GroupedGemm      W_e = weights[e], a dense bf16 [n, k] row-major matrix (what a resident dense bf16
//                    DeviceLinear holds).
//   GroupedGemmInt4  W_e decoded from compressed-tensors pack-quantized 4-bit tensors (GroupedInt4Expert):
//                    u = bits [4 c, 4 c + 4) of word c / 8 of the row (int32 words, LSB first),
//                    zp = 8 (symmetric) or the row's 4-bit field of the zero-point word column g (asymmetric,
//                    packed along the rows the same way),
//                    W_e[o, c] = bf16(float(u - zp) * scale[o, g])   (one fp32 product, rounded once to bf16)
//                    g = c / group_size (group) or 0 (channel). Bitwise the bf16 values kernels::Dequantize
//                    (dequant.h) gives for the same tensors. A fused gate|up weight is two parts stacked
//                    along n: rows [0, split) read parts[0], rows [split, n) read parts[1] at row o - split.
//
// Layout and limits (INVALID_ARGUMENT otherwise; GroupedGemmSupports): n a multiple of 8; k a multiple of 8
// (dense) or 32 (int4: a 32-column k tile is one 16-byte copy of packed words a row). The MoE shapes in use
// all qualify (Mixtral 14336 / 4096, Qwen2-MoE 1408 or 2560 / 2048..3584, Qwen3-MoE 768 / 2048 and
// 1536 / 4096, their tp slices, the 32-wide test fixtures); 1 <= num_experts <= 65535, rows <= 2^31 - 1;
//   x [rows, k] bf16 with leading dimension ldx >= k, ldx a multiple of 8, x 16-byte aligned;
//   weights[e] 16-byte aligned (bf16; rows of k * 2 bytes) / packed 16-byte aligned (int4: k / 8 words a
//   row); y [rows, n] with leading dimension ldy >= n, ldy even, y 8-byte aligned; offsets [num_experts + 1]
//   int32 on the device, non-decreasing, offsets[0] == 0 and
//     offsets[num_experts] <= rows (the launch covers sum_e ceil(count_e / 128) <= rows / 128 + num_experts
//     row tiles; surplus blocks exit at once). Rows >= offsets[num_experts] are not written.
//   int4: group_size 32, 64 or 128 dividing k, or 0 (channel: one scale per row); scale dtype F32, F16 or
//     BF16.
// Devices: sm_80 and newer (cp.async, ldmatrix, bf16 mma). Not in place (x and y must not overlap). Never
// synchronizes. Errors: INVALID_ARGUMENT (shapes, alignment, null pointers), INTERNAL (launch).
// Thread-safety: stateless; safe from any thread (the first launch per device raises the kernels' dynamic
// shared-memory limit once, under a lock).
#ifndef SCORED_ENGINE_KERNELS_GROUPED_GEMM_H_
#define SCORED_ENGINE_KERNELS_GROUPED_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/base/stored_weight.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

struct GroupedGemmShape {
  int64_t num_experts = 0;
  int64_t rows = 0;  // rows of x and y: an upper bound of offsets[num_experts] (the grid's size)
  int64_t n = 0;     // output columns (W_e rows)
  int64_t k = 0;     // input columns (W_e columns)
  int64_t ldx = 0;   // elements between x rows
  int64_t ldy = 0;   // elements between y rows
};

// One 4-bit pack-quantized weight (one part of a fused group), device pointers into the stored tensors.
struct GroupedInt4Part {
  const int32_t* packed = nullptr;      // weight_packed [part rows, k / 8], 16-byte aligned rows
  const void* scale = nullptr;          // weight_scale [part rows, k / group_size] (group) or [part rows, 1]
  const int32_t* zero_point = nullptr;  // weight_zero_point [ceil(part rows / 8), scale columns]; nullptr
                                        // when symmetric
};

// One expert's weight: rows [0, split) from parts[0], rows [split, n) from parts[1] (split == n: one part).
struct GroupedInt4Expert {
  GroupedInt4Part parts[2];
  int64_t split = 0;
};

// What every part of every expert shares.
struct GroupedInt4Format {
  DType scale_dtype = DType::kBF16;  // kF32, kF16 or kBF16
  int64_t group_size = 128;          // 32, 64, 128, or 0 = channel
  bool symmetric = true;             // false: every part has a zero_point
};

// Whether GroupedGemm (int4 false) / GroupedGemmInt4 (int4 true) accept an [n, k] weight. Host-only, for
// choosing a path.
bool GroupedGemmSupports(int64_t n, int64_t k, bool int4);

template <typename OutT>                                // bf16_t or float
absl::Status GroupedGemm(const bf16_t* x,               // [rows, ldx]
                         const int32_t* offsets,        // [num_experts + 1] device
                         const bf16_t* const* weights,  // [num_experts] device array of [n, k] pointers
                         const GroupedGemmShape& shape,
                         OutT* y,  // [rows, ldy]
                         cudaStream_t stream);

template <typename OutT>                                        // bf16_t or float
absl::Status GroupedGemmInt4(const bf16_t* x,                   // [rows, ldx]
                             const int32_t* offsets,            // [num_experts + 1] device
                             const GroupedInt4Expert* experts,  // [num_experts] device array
                             const GroupedInt4Format& format, const GroupedGemmShape& shape,
                             OutT* y,  // [rows, ldy]
                             cudaStream_t stream);

// ---------------------------------------------------------------- Hopper (sm_90a): grouped_gemm_sm90.cu
// The dense GroupedGemm's contract (same y, same fp32 accumulation and one rounding, bitwise batch-invariant:
// each output tile is one CTA's with k ascending, no split-K / stream-K) on CUTLASS 3's SM90 ptr-array
// grouped GEMM (TMA, wgmma, a persistent grid; schedule: cooperative 128 x 256 x 64 tiles, the same in
// 2-CTA clusters along m, or ping-pong 128 x 128 x 64 ones: each batch-invariant, the two cooperative ones
// bitwise equal, ping-pong not bitwise theirs). The problem shapes stay on the
// device: a small kernel writes each expert's {m_e, n, k}, pointers and strides into `workspace`, then the
// GEMM launches (two launches, no host synchronization; the workspace must stay untouched until both ran, so
// calls sharing one workspace go on one stream).
//
// Results equal GroupedGemm's up to the fp32 sum order inside a k step (different tensor-core instructions);
// not bitwise GroupedGemm's.
//
// Limits (INVALID_ARGUMENT otherwise; GroupedGemmSm90Supports): n, k, ldx multiples of 8; ldy a multiple of
// 8 (bf16 y) or 4 (fp32 y); x and y 16-byte aligned; weights 16-byte aligned; workspace 256-byte aligned and
// at least GroupedGemmSm90WorkspaceBytes(num_experts) bytes. FAILED_PRECONDITION where
// !GroupedGemmSm90Supported(device) (not an sm_90 device, or a build without 90a).

enum class GroupedGemmSm90Schedule { kCooperative, kCooperative2x1, kPingpong };

// Whether `device` runs the sm_90a kernels (an sm_90 device and this build's 90a cubin loaded).
bool GroupedGemmSm90Supported(int device);
// Whether GroupedGemmSm90 takes the shape (fp32_out: y is float). Host-only.
bool GroupedGemmSm90Supports(const GroupedGemmShape& shape, bool fp32_out);
// Workspace bytes for num_experts experts on the current device (either OutT; enough for up to the device's
// SM count, at least 132 SMs). Host-only; asks the device's SM count once.
int64_t GroupedGemmSm90WorkspaceBytes(int64_t num_experts);

template <typename OutT>                                    // bf16_t or float
absl::Status GroupedGemmSm90(const bf16_t* x,               // [rows, ldx]
                             const int32_t* offsets,        // [num_experts + 1] device
                             const bf16_t* const* weights,  // [num_experts] device array of [n, k] pointers
                             const GroupedGemmShape& shape,
                             OutT* y,  // [rows, ldy]
                             void* workspace, int64_t workspace_bytes, cudaStream_t stream,
                             GroupedGemmSm90Schedule schedule = GroupedGemmSm90Schedule::kCooperative);

// The same with every expert's weight in one stacked buffer: W_e = stacked + e * n * k ([num_experts, n, k]
// bf16, row-major), e.g. 4-bit experts dequantized once per layer (DequantizeGroupedInt4).
template <typename OutT>                              // bf16_t or float
absl::Status GroupedGemmSm90Stacked(const bf16_t* x,  // [rows, ldx]
                                    const int32_t* offsets, const bf16_t* stacked,
                                    const GroupedGemmShape& shape, OutT* y, void* workspace,
                                    int64_t workspace_bytes, cudaStream_t stream,
                                    GroupedGemmSm90Schedule schedule = GroupedGemmSm90Schedule::kCooperative);

// Every expert's 4-bit weight decoded into stacked [num_experts, n, k] bf16 (row-major, 16-byte aligned):
// bitwise the values GroupedGemmInt4 multiplies (and kernels::Dequantize writes). With offsets (GroupedGemm's
// [num_experts + 1] device row offsets), experts without rows are skipped (their slices left as they were:
// the grouped GEMM reads none of them); nullptr decodes all. One launch; any device GroupedGemmInt4 runs on.
// Same limits on n, k, group_size and the tables as GroupedGemmInt4.
absl::Status DequantizeGroupedInt4(const GroupedInt4Expert* experts,  // [num_experts] device array
                                   const int32_t* offsets,            // [num_experts + 1] device, or nullptr
                                   const GroupedInt4Format& format, int64_t num_experts, int64_t n, int64_t k,
                                   bf16_t* stacked, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_GROUPED_GEMM_H_
