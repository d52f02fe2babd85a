// Causal GQA attention over a varlen batch: shape checks and the choice of kernel. Contract: attention.h.
//
// The kernels, one file per family; every kernel keeps an online softmax per query row (running max m,
// running sum l, unnormalized output) and walks the key tiles [first tile of the window of its first
// query (0 without a window), last query of its query tile] in order, so the result of a token depends only
// on its own sequence; every kernel takes the scale, the soft cap and the window (attention.h):
// - attention_simt.cu: fp32 SIMT kernel, any dtype and head_dim (the fp32 mode's path, and the fallback).
// - attention_mma.cu: bf16 tensor-core kernels (mma.sync m16n8k16) with 16 or 32 query rows per warp
//   (head_dim 32 to 128, and 256 with Q staged in shared memory).
// - attention_wgmma_sm90.cu: the Hopper kernels (wgmma.mma_async, sm_90a only), head_dim 128 and 256.
// attention_common.cuh holds what the tensor-core kernels share (PTX wrappers, the K/V tile loader, the
// online-softmax step and the final store); attention_kernels.h declares the families' launchers.
#include <cmath>
#include <type_traits>

#include "engine/base/status_macros.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

using attention_internal::LaunchMma16Rows;
using attention_internal::LaunchMma32Rows;
using attention_internal::LaunchSimt;
using attention_internal::LaunchWgmma;
using attention_internal::Mma32RowsFits;
using attention_internal::WgmmaAvailable;

// The sizes and options of attention.h's limits (not the pointers).
absl::Status CheckSizes(const AttentionShape& s) {
  if (s.num_tokens < 0 || s.num_seqs < 0 || s.max_seqlen < 0 || s.num_heads < 1 || s.num_kv_heads < 1 ||
      s.num_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        "CausalAttention: bad sizes (num_heads must be a multiple of num_kv_heads)");
  }
  const int d = s.head_dim;
  if (d < 8 || d > 256 || d % 8 != 0) {
    return absl::InvalidArgumentError("CausalAttention: head_dim must be a multiple of 8 in [8, 256]");
  }
  // Written as !(x >= 0) so NaN fails too.
  if (!(s.scale >= 0.0f) || !std::isfinite(s.scale) || !(s.softcap >= 0.0f) || !std::isfinite(s.softcap) ||
      s.window < 0) {
    return absl::InvalidArgumentError("CausalAttention: scale, softcap and window must be finite and >= 0");
  }
  if (s.q_stride < static_cast<int64_t>(s.num_heads) * d ||
      s.kv_stride < static_cast<int64_t>(s.num_kv_heads) * d) {
    return absl::InvalidArgumentError("CausalAttention: strides smaller than a token's heads");
  }
  if (s.num_seqs > 65535) return absl::InvalidArgumentError("CausalAttention: more than 65535 sequences");
  return absl::OkStatus();
}

absl::Status CheckShape(const void* q, const void* k, const void* v, const int32_t* cu_seqlens,
                        const AttentionShape& s, const void* out) {
  SCORED_RETURN_IF_ERROR(CheckSizes(s));
  if (s.num_tokens > 0 &&
      (q == nullptr || k == nullptr || v == nullptr || cu_seqlens == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError("CausalAttention: null pointer");
  }
  return absl::OkStatus();
}

bool MmaAligned(const void* q, const void* k, const void* v, const void* out, const AttentionShape& s) {
  return IsAligned(q, 4) && IsAligned(k, 16) && IsAligned(v, 16) && IsAligned(out, 4) &&
         s.q_stride % 2 == 0 && s.kv_stride % 8 == 0;
}

// The 32-row kernel also copies the Q tile with 16-byte cp.async: q 16-byte aligned, q_stride % 8 == 0.
bool Mma32RowsAligned(const void* q, const void* k, const void* v, const void* out, const AttentionShape& s) {
  return MmaAligned(q, k, v, out, s) && IsAligned(q, 16) && s.q_stride % 8 == 0;
}

// Whether `kernel` takes this (checked, non-empty) bf16 input: its head_dim and alignment limits.
bool Supports(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* out,
              const AttentionShape& s) {
  const int d = s.head_dim;
  switch (kernel) {
    case AttentionKernel::kSimt:
      return true;
    case AttentionKernel::kMma16Rows:
      return MmaAligned(q, k, v, out, s) && (d == 128 || d == 96 || d == 64 || d == 32);
    // The 64-key tiles at head_dim 128 need more shared memory than sm_86 / sm_89 / sm_120 have: there kAuto
    // takes the 16-row kernel. At 256 (16 rows per warp, 8 warps) 64-key tiles need 198 KiB (sm_90,
    // sm_100), 32-key tiles 135 KiB (also sm_80).
    case AttentionKernel::kMma32RowsK32:
      return Mma32RowsAligned(q, k, v, out, s) && (d == 256 || d == 128 || d == 96 || d == 64) &&
             Mma32RowsFits(d, 32);
    case AttentionKernel::kMma32RowsK64:
      return Mma32RowsAligned(q, k, v, out, s) && (d == 256 || d == 128 || d == 96 || d == 64) &&
             Mma32RowsFits(d, 64);
    case AttentionKernel::kWgmma:
      return Mma32RowsAligned(q, k, v, out, s) && (d == 128 || d == 256) && WgmmaAvailable();
    default:
      return false;
  }
}

// kAuto's choice for bf16: the first kernel that takes the input, fastest first. The wgmma kernel where the
// device and the library have it; then the 32-row kernel with 64-key tiles (measured on an H200, 8 x 2048
// tokens, 32 heads, 8 kv heads: 277 against 205 TFLOP/s for the 16-row kernel at head_dim 128, 237
// against 191 at 64; it also needs q 16-byte aligned; head_dim 96 is assumed to rank as 64 and 128 do);
// then, at head_dim 256 only, its 32-key tiles (the device may lack the 198 KiB of the 64-key ones; the
// 16-row kernel has no 256); then the 16-row kernel; then SIMT. The scale, cap and window do not change the
// ranking: they add the same per-score work to every kernel.
AttentionKernel AutoKernel(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* out,
                           const AttentionShape& s) {
  for (AttentionKernel kernel : {AttentionKernel::kWgmma, AttentionKernel::kMma32RowsK64,
                                 AttentionKernel::kMma32RowsK32, AttentionKernel::kMma16Rows}) {
    if (kernel == AttentionKernel::kMma32RowsK32 && s.head_dim != 256) continue;
    if (Supports(kernel, q, k, v, out, s)) return kernel;
  }
  return AttentionKernel::kSimt;
}

// Launches `kernel`, which Supports() the input, instantiated for its head_dim.
absl::Status Launch(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                    const int32_t* cu_seqlens, const AttentionShape& s, bf16_t* out, cudaStream_t stream) {
  switch (kernel) {
    case AttentionKernel::kMma16Rows:
      if (s.head_dim == 32) return LaunchMma16Rows<32>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 64) return LaunchMma16Rows<64>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 96) return LaunchMma16Rows<96>(q, k, v, cu_seqlens, s, out, stream);
      return LaunchMma16Rows<128>(q, k, v, cu_seqlens, s, out, stream);
    case AttentionKernel::kMma32RowsK32:
      if (s.head_dim == 64) return LaunchMma32Rows<64, 32>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 96) return LaunchMma32Rows<96, 32>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 256) return LaunchMma32Rows<256, 32>(q, k, v, cu_seqlens, s, out, stream);
      return LaunchMma32Rows<128, 32>(q, k, v, cu_seqlens, s, out, stream);
    case AttentionKernel::kMma32RowsK64:
      if (s.head_dim == 64) return LaunchMma32Rows<64, 64>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 96) return LaunchMma32Rows<96, 64>(q, k, v, cu_seqlens, s, out, stream);
      if (s.head_dim == 256) return LaunchMma32Rows<256, 64>(q, k, v, cu_seqlens, s, out, stream);
      return LaunchMma32Rows<128, 64>(q, k, v, cu_seqlens, s, out, stream);
    case AttentionKernel::kWgmma:
      return LaunchWgmma(q, k, v, cu_seqlens, s, out, stream);
    default:
      return LaunchSimt(q, k, v, cu_seqlens, s, out, stream);
  }
}

// Nothing to compute: OK without a launch.
bool IsEmpty(const AttentionShape& s) { return s.num_tokens == 0 || s.num_seqs == 0 || s.max_seqlen == 0; }

}  // namespace

bool CausalAttentionSupports(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                             const bf16_t* out, const AttentionShape& shape) {
  if (!CheckSizes(shape).ok()) return false;
  return kernel == AttentionKernel::kAuto || Supports(kernel, q, k, v, out, shape);
}

AttentionKernel CausalAttentionAutoKernel(const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                          const bf16_t* out, const AttentionShape& shape) {
  return AutoKernel(q, k, v, out, shape);
}

absl::Status CausalAttentionWith(AttentionKernel kernel, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                                 const int32_t* cu_seqlens, const AttentionShape& shape, bf16_t* out,
                                 cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShape(q, k, v, cu_seqlens, shape, out));
  if (IsEmpty(shape)) return absl::OkStatus();
  if (kernel == AttentionKernel::kAuto) return CausalAttention(q, k, v, cu_seqlens, shape, out, stream);
  if (!Supports(kernel, q, k, v, out, shape)) {
    return absl::InvalidArgumentError(
        "CausalAttentionWith: this kernel does not support the shape or alignment");
  }
  return Launch(kernel, q, k, v, cu_seqlens, shape, out, stream);
}

template <typename T>
absl::Status CausalAttentionSimt(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                                 const AttentionShape& shape, T* out, cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShape(q, k, v, cu_seqlens, shape, out));
  if (IsEmpty(shape)) return absl::OkStatus();
  return LaunchSimt(q, k, v, cu_seqlens, shape, out, stream);
}

template <typename T>
absl::Status CausalAttention(const T* q, const T* k, const T* v, const int32_t* cu_seqlens,
                             const AttentionShape& shape, T* out, cudaStream_t stream) {
  SCORED_RETURN_IF_ERROR(CheckShape(q, k, v, cu_seqlens, shape, out));
  if (IsEmpty(shape)) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bf16_t>) {
    return Launch(AutoKernel(q, k, v, out, shape), q, k, v, cu_seqlens, shape, out, stream);
  } else {
    return LaunchSimt(q, k, v, cu_seqlens, shape, out, stream);  // fp32: the SIMT kernel only
  }
}

template absl::Status CausalAttention<float>(const float*, const float*, const float*, const int32_t*,
                                             const AttentionShape&, float*, cudaStream_t);
template absl::Status CausalAttention<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                              const AttentionShape&, bf16_t*, cudaStream_t);
template absl::Status CausalAttentionSimt<float>(const float*, const float*, const float*, const int32_t*,
                                                 const AttentionShape&, float*, cudaStream_t);
template absl::Status CausalAttentionSimt<bf16_t>(const bf16_t*, const bf16_t*, const bf16_t*, const int32_t*,
                                                  const AttentionShape&, bf16_t*, cudaStream_t);

}  // namespace scored::kernels
