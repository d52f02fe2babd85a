// Dequantization of stored weights into a dense bf16/fp32 matrix. Contract: dequant.h.
//
// Each thread decodes kChunk consecutive elements of one row with the same scalar decode as
// LinearWeight::DequantizeRows (engine/model/dequantize.cc), through the exact converters of
// engine/base/dtype.h, and stores them with one 16-byte store (bf16) when the row length and the output
// pointer allow, element by element otherwise.
#include "engine/base/dtype.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/dequant.h"
#include "engine/kernels/dequant_decode.cuh"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8;
constexpr int64_t kMaxBlocksX = 65535;
constexpr int64_t kMaxBlocksY = 65535;

// `bits`-wide unsigned field at bit position `bit` of a little-endian uint32 word array (may straddle).
__device__ __forceinline__ uint32_t PackedField(const uint32_t* words, int64_t bit, int bits) {
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  uint64_t v = words[word];
  if (shift + bits > 32) v |= static_cast<uint64_t>(words[word + 1]) << 32;
  return static_cast<uint32_t>((v >> shift) & ((uint64_t{1} << bits) - 1));
}

__device__ __forceinline__ int64_t GroupOf(const DequantParams& p, int64_t k) {
  if (p.strategy != QuantStrategy::kGroup) return 0;
  if (p.g_idx != nullptr) return p.g_idx[k];
  return k / p.group_size;
}

__device__ __forceinline__ int64_t ScaleIndex(const DequantParams& p, int64_t o, int64_t g) {
  switch (p.strategy) {
    case QuantStrategy::kTensor:
      return 0;
    case QuantStrategy::kChannel:
      return o;
    default:
      return o * p.scale_cols + g;
  }
}

// E8M0 exponent byte e -> 2^(e - 127) (compressed-tensors' decompress_mx_scale): 0 is the subnormal
// 2^-127, 255 is infinity (the loader rejects it). Bit-built, so no flush-to-zero setting changes it.
__device__ __forceinline__ float E8M0ToFloat(uint8_t e) {
  return __uint_as_float(e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23);
}

__device__ float DecodeElement(const DequantParams& p, int64_t o, int64_t k) {
  switch (p.format) {
    case WeightFormat::kDense:
      return FloatAt(p.values, p.values_dtype, o * p.in_features + k);
    case WeightFormat::kPackQuantized: {
      const int b = p.num_bits;
      const int32_t offset = 1 << (b - 1);
      const uint32_t* row = static_cast<const uint32_t*>(p.values) + o * p.values_cols;
      const int32_t q = static_cast<int32_t>(PackedField(row, k * b, b));  // the fields as stored
      const int64_t g = GroupOf(p, k);
      int32_t zp = offset;
      if (!p.symmetric) {
        // Column g of the [ceil(out*b/32), groups] zero-point tensor is a packed word sequence along out.
        const int64_t bit = o * b;
        const int64_t word = bit >> 5;
        const int shift = static_cast<int>(bit & 31);
        const uint32_t* zps = static_cast<const uint32_t*>(p.zero_point);
        uint64_t v = zps[word * p.zero_point_cols + g];
        if (shift + b > 32) v |= static_cast<uint64_t>(zps[(word + 1) * p.zero_point_cols + g]) << 32;
        zp = static_cast<int32_t>((v >> shift) & ((uint64_t{1} << b) - 1));
      }
      const float scale = FloatAt(p.scale, p.scale_dtype, ScaleIndex(p, o, g));
      return PackedIntValue(q, zp, scale);
    }
    case WeightFormat::kNaiveQuantized: {
      const int32_t q = static_cast<const int8_t*>(p.values)[o * p.in_features + k];
      const int64_t si = ScaleIndex(p, o, GroupOf(p, k));
      int32_t zp = 0;
      if (p.zero_point != nullptr) {
        zp = p.zero_point_dtype == DType::kI8
                 ? static_cast<int32_t>(static_cast<const int8_t*>(p.zero_point)[si])
                 : static_cast<const int32_t*>(p.zero_point)[si];
      }
      return __fmul_rn(static_cast<float>(q - zp), FloatAt(p.scale, p.scale_dtype, si));
    }
    case WeightFormat::kNvfp4PackQuantized: {
      const uint8_t byte = static_cast<const uint8_t*>(p.values)[o * p.values_cols + k / 2];
      const uint8_t nibble = (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
      const uint8_t s8 = static_cast<const uint8_t*>(p.scale)[o * p.scale_cols + k / 16];
      const float s = __fdiv_rn(Fp8E4M3ToFloat(s8), p.global_scale);
      return RoundToBf16(__fmul_rn(E2M1ToFloat(nibble), s));
    }
    case WeightFormat::kMxfp4PackQuantized: {
      const uint8_t byte = static_cast<const uint8_t*>(p.values)[o * p.values_cols + k / 2];
      const uint8_t nibble = (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
      const uint8_t e = static_cast<const uint8_t*>(p.scale)[o * p.scale_cols + k / 32];
      return __fmul_rn(E2M1ToFloat(nibble), E8M0ToFloat(e));
    }
    case WeightFormat::kFloatQuantized: {
      const float v = Fp8E4M3ToFloat(static_cast<const uint8_t*>(p.values)[o * p.in_features + k]);
      int64_t si = 0;
      if (p.strategy == QuantStrategy::kChannel) si = o;
      if (p.strategy == QuantStrategy::kBlock) si = (o / p.block_rows) * p.scale_cols + k / p.block_cols;
      return __fmul_rn(v, FloatAt(p.scale, p.scale_dtype, si));
    }
    case WeightFormat::kGgmlBlocks:  // refused by MakeDequantParams: no GGUF block kernels yet
      break;
  }
  return __int_as_float(0x7fc00000);
}

// Stores 8 consecutive values: one 16-byte store for bf16, two for fp32 (dst 16-byte aligned).
__device__ __forceinline__ void StoreChunk(__nv_bfloat16* dst, const float (&v)[kChunk]) {
  uint4 packed;
  uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
  for (int j = 0; j < kChunk / 2; ++j) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    words[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  *reinterpret_cast<uint4*>(dst) = packed;
}
__device__ __forceinline__ void StoreChunk(float* dst, const float (&v)[kChunk]) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Any format: blockIdx.y strides over rows, x-blocks and threads over chunks of kChunk columns.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    DequantKernel(const DequantParams p, int64_t row_begin, int64_t num_rows, bool vector_store,
                  OutT* __restrict__ out) {  // [num_rows, in_features]
  const int64_t chunks_per_row = (p.in_features + kChunk - 1) / kChunk;
  for (int64_t r = blockIdx.y; r < num_rows; r += gridDim.y) {
    const int64_t o = row_begin + r;
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < chunks_per_row;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t k0 = c * kChunk;
      OutT* dst = out + r * p.in_features + k0;
      if (vector_store) {
        float v[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) v[j] = DecodeElement(p, o, k0 + j);
        StoreChunk(dst, v);
      } else {
        const int64_t n = p.in_features - k0 < kChunk ? p.in_features - k0 : kChunk;
        for (int64_t j = 0; j < n; ++j) StoreFromFloat(dst + j, DecodeElement(p, o, k0 + j));
      }
    }
  }
}

// Pack-quantized fast path (b = 4 or 8, in_features % 8 == 0, no g_idx, group_size % 8 == 0): a chunk of
// 8 columns is 8 / (32 / b) whole words and lies in one scale group, so it costs 1-2 word loads, one
// scale load and one 16-byte store. Same arithmetic as DecodeElement.
template <int kBits, typename OutT>
__global__ void __launch_bounds__(kThreads)
    DequantPackedKernel(const DequantParams p, int64_t row_begin, int64_t num_rows,
                        OutT* __restrict__ out) {  // [num_rows, in]
  constexpr int kPerWord = 32 / kBits;
  constexpr int kWords = kChunk / kPerWord;
  constexpr int32_t kOffset = 1 << (kBits - 1);
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int32_t chunks_per_row = static_cast<int32_t>(p.in_features / kChunk);
  for (int64_t r = blockIdx.y; r < num_rows; r += gridDim.y) {
    const int64_t o = row_begin + r;
    const uint32_t* row = static_cast<const uint32_t*>(p.values) + o * p.values_cols;
    for (int32_t c = blockIdx.x * kThreads + threadIdx.x; c < chunks_per_row; c += gridDim.x * kThreads) {
      const int32_t k0 = c * kChunk;
      uint32_t words[kWords];
#pragma unroll
      for (int i = 0; i < kWords; ++i) words[i] = row[c * kWords + i];
      int64_t g = 0;
      if (p.strategy == QuantStrategy::kGroup) g = k0 / static_cast<int32_t>(p.group_size);
      int32_t zp = kOffset;
      if (!p.symmetric) {
        const int64_t bit = o * kBits;
        const uint32_t zword = static_cast<const uint32_t*>(p.zero_point)[(bit >> 5) * p.zero_point_cols + g];
        zp = static_cast<int32_t>((zword >> (bit & 31)) & kMask);
      }
      const float scale = FloatAt(p.scale, p.scale_dtype, ScaleIndex(p, o, g));
      float v[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int32_t u = static_cast<int32_t>((words[j / kPerWord] >> ((j % kPerWord) * kBits)) & kMask);
        v[j] = PackedIntValue(u, zp, scale);
      }
      StoreChunk(out + r * p.in_features + k0, v);
    }
  }
}

// NVFP4 fast path (in_features % 16 == 0, packed bytes 4-aligned): 8 columns are one 32-bit word of
// nibbles sharing one FP8 scale. Same arithmetic as DecodeElement.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    DequantNvfp4Kernel(const DequantParams p, int64_t row_begin, int64_t num_rows,
                       OutT* __restrict__ out) {  // [num_rows, in]
  const int32_t chunks_per_row = static_cast<int32_t>(p.in_features / kChunk);
  for (int64_t r = blockIdx.y; r < num_rows; r += gridDim.y) {
    const int64_t o = row_begin + r;
    const uint32_t* row =
        reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(p.values) + o * p.values_cols);
    const uint8_t* scales = static_cast<const uint8_t*>(p.scale) + o * p.scale_cols;
    for (int32_t c = blockIdx.x * kThreads + threadIdx.x; c < chunks_per_row; c += gridDim.x * kThreads) {
      const uint32_t word = row[c];
      const float s = __fdiv_rn(Fp8E4M3ToFloat(scales[c / 2]), p.global_scale);
      float v[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        v[j] = RoundToBf16(__fmul_rn(E2M1ToFloat((word >> (4 * j)) & 0xfu), s));
      StoreChunk(out + r * p.in_features + c * kChunk, v);
    }
  }
}

// FP8 float-quantized fast path (in_features % 8 == 0, values 8-aligned, block_cols % 8 == 0): 8 columns
// are one 8-byte load sharing one scale.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    DequantFp8Kernel(const DequantParams p, int64_t row_begin, int64_t num_rows,
                     OutT* __restrict__ out) {  // [num_rows, in]
  const int32_t chunks_per_row = static_cast<int32_t>(p.in_features / kChunk);
  for (int64_t r = blockIdx.y; r < num_rows; r += gridDim.y) {
    const int64_t o = row_begin + r;
    const uint2* row =
        reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.values) + o * p.in_features);
    const int64_t scale_row = p.strategy == QuantStrategy::kBlock ? (o / p.block_rows) * p.scale_cols : 0;
    const int32_t block_cols = static_cast<int32_t>(p.block_cols);
    for (int32_t c = blockIdx.x * kThreads + threadIdx.x; c < chunks_per_row; c += gridDim.x * kThreads) {
      const uint2 bytes = row[c];
      int64_t si = 0;
      if (p.strategy == QuantStrategy::kChannel) si = o;
      if (p.strategy == QuantStrategy::kBlock) si = scale_row + (c * kChunk) / block_cols;
      const float scale = FloatAt(p.scale, p.scale_dtype, si);
      float v[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const uint32_t word = j < 4 ? bytes.x : bytes.y;
        v[j] = __fmul_rn(Fp8E4M3ToFloat(static_cast<uint8_t>(word >> (8 * (j % 4)))), scale);
      }
      StoreChunk(out + r * p.in_features + c * kChunk, v);
    }
  }
}

}  // namespace

template <typename OutT>
absl::Status Dequantize(const DequantParams& params, int64_t row_begin, int64_t row_end, OutT* out,
                        cudaStream_t stream) {
  if (row_begin < 0 || row_begin > row_end || row_end > params.out_features) {
    return absl::InvalidArgumentError("Dequantize: row range outside [0, out_features)");
  }
  if (params.values == nullptr) return absl::InvalidArgumentError("Dequantize: DequantParams has no values");
  if (params.format != WeightFormat::kDense && params.scale == nullptr) {
    return absl::InvalidArgumentError("Dequantize: DequantParams has no scale");
  }
  const int64_t num_rows = row_end - row_begin;
  if (num_rows == 0 || params.in_features == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("Dequantize: null output");
  const bool vector_store = params.in_features % kChunk == 0 && IsAligned(out, 16);
  const int64_t bx = CeilDiv(CeilDiv(params.in_features, kChunk), kThreads);
  const dim3 grid(static_cast<unsigned>(bx < kMaxBlocksX ? bx : kMaxBlocksX),
                  static_cast<unsigned>(num_rows < kMaxBlocksY ? num_rows : kMaxBlocksY));
  const bool packed_fast = params.format == WeightFormat::kPackQuantized && vector_store &&
                           params.g_idx == nullptr && (params.num_bits == 4 || params.num_bits == 8) &&
                           params.in_features / kChunk < INT32_MAX &&
                           (params.strategy != QuantStrategy::kGroup || params.group_size % kChunk == 0) &&
                           (params.symmetric || params.zero_point != nullptr);
  const bool fast_rows = vector_store && params.in_features / kChunk < INT32_MAX;
  const bool nvfp4_fast = params.format == WeightFormat::kNvfp4PackQuantized && fast_rows &&
                          params.in_features % 16 == 0 && IsAligned(params.values, 4) &&
                          params.values_cols * 2 == params.in_features;
  const bool fp8_fast = params.format == WeightFormat::kFloatQuantized && fast_rows &&
                        IsAligned(params.values, 8) &&
                        (params.strategy != QuantStrategy::kBlock || params.block_cols % kChunk == 0);
  if (nvfp4_fast) {
    DequantNvfp4Kernel<<<grid, kThreads, 0, stream>>>(params, row_begin, num_rows, ToDevice(out));
  } else if (fp8_fast) {
    DequantFp8Kernel<<<grid, kThreads, 0, stream>>>(params, row_begin, num_rows, ToDevice(out));
  } else if (packed_fast && params.num_bits == 4) {
    DequantPackedKernel<4><<<grid, kThreads, 0, stream>>>(params, row_begin, num_rows, ToDevice(out));
  } else if (packed_fast) {
    DequantPackedKernel<8><<<grid, kThreads, 0, stream>>>(params, row_begin, num_rows, ToDevice(out));
  } else {
    DequantKernel<<<grid, kThreads, 0, stream>>>(params, row_begin, num_rows, vector_store, ToDevice(out));
  }
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status Dequantize<float>(const DequantParams&, int64_t, int64_t, float*, cudaStream_t);
template absl::Status Dequantize<bf16_t>(const DequantParams&, int64_t, int64_t, bf16_t*, cudaStream_t);

}  // namespace scored::kernels
