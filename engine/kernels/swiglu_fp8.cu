// Fused FP8 scales + SwiGLU + per-token FP8 quantization. Contract: swiglu_fp8.h.
//
// One block per row (grid-stride over rows). Each thread owns kVecs 8-column vectors of the row: it issues
// all its 16-byte loads of gate and up first, then per vector applies the scales (optional), computes the
// SwiGLU value, rounds it to bf16 and keeps the 8 results packed as bf16 in registers (the values are bf16
// anyway, so this is exact and halves the registers). Block max -> scale; then the codes from the
// registers, 8 per 8-byte store. The row is read from memory once; the per-element arithmetic is
// shared with fp8_scale.cu / swiglu.cu / fp8_quant.cu's exactly (swiglu_math.cuh), so q and scale equal
// the unfused sequence's bitwise.
//
// Launch shapes: kVecs <= 4 keeps the row's registers small (at most 4 x (8 + 4) words) at every width;
// wider rows take more threads (256, 512, 1024) instead of more vectors per thread.
// The FP8 conversion uses the hardware converter (device_util.cuh FloatToFp8E4M3x2, same codes) instead of
// the branchy integer one: with the IEEE division m / scale, __expf, __fdividef and the bf16 roundings, the
// per-element instructions would otherwise outweigh the 5 bytes per element this op moves.
#include <cstdint>

#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/swiglu_fp8.h"
#include "engine/kernels/swiglu_math.cuh"

namespace scored::kernels {
namespace {

constexpr int64_t kMaxBlocks = 65535;

// Scales 4 bf16-valued elements as ApplyFp8Scales<bf16_t> does (ScaleToBf16). w_scale4: 4 consecutive
// fp32 weight scales, 16-byte aligned, read through the read-only cache (every row reads the same
// w_scale, so after the first rows these hit in L1/L2, not HBM). Four at a time keeps the extra registers
// of the scaled variant small.
__device__ __forceinline__ void Scale4(float* v, float x_scale, const float* w_scale4) {
  const float4 w = __ldg(reinterpret_cast<const float4*>(w_scale4));
  v[0] = ScaleToBf16(v[0], x_scale, w.x);
  v[1] = ScaleToBf16(v[1], x_scale, w.y);
  v[2] = ScaleToBf16(v[2], x_scale, w.z);
  v[3] = ScaleToBf16(v[3], x_scale, w.w);
}

// At most 64 registers per thread (1024 / kThreads resident blocks per SM): 4 blocks of 256 or 2 of 512
// threads per SM, so one block's loads overlap another's block max and stores. ptxas -v: no spills
// unscaled; the scaled kVecs = 4 variants spill 12 bytes (3 words, to L1), cheaper than halving occupancy.
template <int kThreads, int kVecs, bool kScaled>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
    SwiGluQuantFp8Kernel(const __nv_bfloat16* gate_up,  // [num_tokens, 2 * inter]
                         int64_t num_tokens, int inter,
                         const float* x_scale,  // [num_tokens]
                         const float* w_scale,  // [2 * inter]
                         uint8_t* q,            // [num_tokens, inter]
                         float* scale) {        // [num_tokens]
  __shared__ float scratch[32];
  const int vecs = inter / 8;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const __nv_bfloat16* g_row = gate_up + t * 2 * inter;
    const __nv_bfloat16* u_row = g_row + inter;
    uint4 g_bits[kVecs], u_bits[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < vecs) {
        g_bits[j] = *reinterpret_cast<const uint4*>(g_row + c * 8);
        u_bits[j] = *reinterpret_cast<const uint4*>(u_row + c * 8);
      }
    }
    const float xs = kScaled ? __ldg(x_scale + t) : 0.0f;
    uint4 m_bits[kVecs];  // the row's SwiGLU values, bf16
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < vecs) {
        float g[8], u[8], m[8];
        Bf16x8ToFloat(g_bits[j], g);
        Bf16x8ToFloat(u_bits[j], u);
        if constexpr (kScaled) {
#pragma unroll
          for (int h = 0; h < 8; h += 4) {
            Scale4(g + h, xs, w_scale + c * 8 + h);
            Scale4(u + h, xs, w_scale + inter + c * 8 + h);
          }
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) m[i] = SwiGluMath<__nv_bfloat16>::Value(g[i], u[i]);
        m_bits[j] = FloatToBf16x8(m);
        Bf16x8ToFloat(m_bits[j], m);
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(m[i]));
      }
    }
    amax = BlockMax(amax, scratch, 0.0f);
    const float s = __fdiv_rn(amax, kFp8E4M3Max);
    if (threadIdx.x == 0) scale[t] = s;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c < vecs) {
        uint32_t words[2] = {0u, 0u};
        if (s != 0.0f) {
          float m[8];
          Bf16x8ToFloat(m_bits[j], m);
#pragma unroll
          for (int i = 0; i < 8; i += 2) {
            words[i / 4] |= FloatToFp8E4M3x2(__fdiv_rn(m[i], s), __fdiv_rn(m[i + 1], s)) << (8 * (i % 4));
          }
        }
        *reinterpret_cast<uint2*>(q + t * inter + c * 8) = make_uint2(words[0], words[1]);
      }
    }
  }
}

template <int kThreads, int kVecs>
void Launch(const __nv_bfloat16* gate_up, int64_t num_tokens, int inter, const float* x_scale,
            const float* w_scale, uint8_t* q, float* scale, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  if (x_scale != nullptr) {
    SwiGluQuantFp8Kernel<kThreads, kVecs, true>
        <<<blocks, kThreads, 0, stream>>>(gate_up, num_tokens, inter, x_scale, w_scale, q, scale);
  } else {
    SwiGluQuantFp8Kernel<kThreads, kVecs, false>
        <<<blocks, kThreads, 0, stream>>>(gate_up, num_tokens, inter, nullptr, nullptr, q, scale);
  }
}

}  // namespace

absl::Status SwiGluQuantFp8(const bf16_t* gate_up, int64_t num_tokens, int64_t inter, const float* x_scale,
                            const float* w_scale, uint8_t* q, float* scale, cudaStream_t stream) {
  if (num_tokens < 0 || inter <= 0 || inter % 8 != 0 || inter > kSwiGluQuantFp8MaxInter) {
    return absl::InvalidArgumentError(
        "SwiGluQuantFp8: need num_tokens >= 0 and inter a positive multiple of 8 up to 32768");
  }
  if ((x_scale == nullptr) != (w_scale == nullptr)) {
    return absl::InvalidArgumentError(
        "SwiGluQuantFp8: x_scale and w_scale must both be given or both be null");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (gate_up == nullptr || q == nullptr || scale == nullptr) {
    return absl::InvalidArgumentError("SwiGluQuantFp8: null pointer");
  }
  if (!IsAligned(gate_up, 16) || !IsAligned(w_scale, 16) || !IsAligned(q, 8)) {
    return absl::InvalidArgumentError("SwiGluQuantFp8: gate_up and w_scale need 16-byte, q 8-byte alignment");
  }
  const __nv_bfloat16* d_gate_up = ToDevice(gate_up);
  const int width = static_cast<int>(inter);
  const int64_t vecs = inter / 8;
  if (vecs <= 256) {
    Launch<256, 1>(d_gate_up, num_tokens, width, x_scale, w_scale, q, scale, stream);
  } else if (vecs <= 512) {
    Launch<256, 2>(d_gate_up, num_tokens, width, x_scale, w_scale, q, scale, stream);
  } else if (vecs <= 1024) {
    Launch<256, 4>(d_gate_up, num_tokens, width, x_scale, w_scale, q, scale, stream);
  } else if (vecs <= 2048) {
    Launch<512, 4>(d_gate_up, num_tokens, width, x_scale, w_scale, q, scale, stream);
  } else {
    Launch<1024, 4>(d_gate_up, num_tokens, width, x_scale, w_scale, q, scale, stream);
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace scored::kernels
