// Device helpers shared by the kernel .cu files (private: included only by .cu files, never by a public
// header). Loads/stores that convert between the storage type and fp32, and the bf16_t <-> __nv_bfloat16
// mapping used by the launchers.
#ifndef SCORED_ENGINE_KERNELS_DEVICE_UTIL_CUH_
#define SCORED_ENGINE_KERNELS_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

// The device type a public element type stands for.
template <typename T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<bf16_t> {
  using type = __nv_bfloat16;
};
static_assert(sizeof(__nv_bfloat16) == sizeof(bf16_t), "bf16 layouts differ");

template <typename T>
inline typename DeviceType<T>::type* ToDevice(T* p) {
  return reinterpret_cast<typename DeviceType<T>::type*>(p);
}
template <typename T>
inline const typename DeviceType<T>::type* ToDevice(const T* p) {
  return reinterpret_cast<const typename DeviceType<T>::type*>(p);
}

__device__ __forceinline__ float LoadAsFloat(const float* p) { return *p; }
__device__ __forceinline__ float LoadAsFloat(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Round-to-nearest-even narrowing (cvt.rn), the same value engine/base/dtype.h FloatToBf16 gives.
__device__ __forceinline__ void StoreFromFloat(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreFromFloat(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Sum over a warp by a butterfly of shuffles: a fixed order, every lane gets the total.
template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T WarpMax(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024): warp trees, then warp 0 sums the warp
// totals in warp order. Fixed order for a given blockDim. Every thread gets the total. `scratch` holds
// 32 values; the call ends with a barrier so scratch can be reused right away.
template <typename T>
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < num_warps ? scratch[lane] : T(0);
  total = WarpSum(total);
  __syncthreads();
  return total;
}

template <typename T>
__device__ __forceinline__ T BlockMax(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpMax(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < num_warps ? scratch[lane] : lowest;
  total = WarpMax(total);
  __syncthreads();
  return total;
}

// 16-byte vectors of a storage type: Vec16<T>::kSize elements (8 bf16 or 4 fp32) moved by one 16-byte
// load or store, converted to / from fp32 with the same rounding as LoadAsFloat / StoreFromFloat. The
// pointer must be 16-byte aligned.
template <typename T>
struct Vec16 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
};

__device__ __forceinline__ void Load16(const float* p, float (&v)[4]) {
  const float4 w = *reinterpret_cast<const float4*>(p);
  v[0] = w.x;
  v[1] = w.y;
  v[2] = w.z;
  v[3] = w.w;
}
__device__ __forceinline__ void Load16(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // bf16 -> fp32 is exact: the bits move to the top half of the word.
    v[2 * j] = __uint_as_float(words[j] << 16);
    v[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void Store16(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void Store16(__nv_bfloat16* p, const float (&v)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    words[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
}

// Streaming multiprocessors of the current device.
inline cudaError_t MultiprocessorCount(int* count) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device);
}

// Grid of a grid-stride kernel: as many blocks as can be resident at once on the current device (SM count
// times the occupancy of `kernel` at `threads` threads and no dynamic shared memory), at most
// `work_items`, at least 1. One wave, so no partial last wave.
template <typename Kernel>
inline cudaError_t ResidentGrid(Kernel kernel, int threads, int64_t work_items, unsigned* blocks) {
  int sms = 0, per_sm = 0;
  cudaError_t err = MultiprocessorCount(&sms);
  if (err != cudaSuccess) return err;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (err != cudaSuccess) return err;
  int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  if (resident > work_items) resident = work_items;
  *blocks = static_cast<unsigned>(resident > 0 ? resident : 1);
  return cudaSuccess;
}

inline bool IsAligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 16 bytes as 8 bf16 values (element 0 in the low half of w.x), widened exactly to fp32.
__device__ __forceinline__ void Bf16x8ToFloat(const uint4& w, float (&v)[8]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = __uint_as_float(words[j] << 16);
    v[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
  }
}

// 8 fp32 values rounded to bf16 (round-to-nearest-even, as __float2bfloat16_rn) into 16 bytes.
__device__ __forceinline__ uint4 FloatToBf16x8(const float (&v)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    words[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// FP8 E4M3FN codes of x[0] (low byte) and x[1], bitwise what engine/base/dtype.h FloatToFp8E4M3 gives
// (round-to-nearest-even with subnormals, |x| >= 448 and +-inf saturate to +-448, NaN -> sign | 0x7F).
// The hardware conversion (cvt.rn.satfinite.e4m3x2.f32, sm_89+) rounds and saturates the same way
// (cuda_fp8.hpp's host emulation of it equals FloatToFp8E4M3 on every non-NaN fp32 value: checked
// exhaustively, and on a sample in swiglu_fp8_test.cc); it writes every NaN as 0x7F, so the sign of a NaN
// is put back here.
__device__ __forceinline__ uint32_t FloatToFp8E4M3x2(float x0, float x1) {
  uint32_t codes = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  if (x0 != x0) codes = (codes & 0xFF00u) | 0x7Fu | ((__float_as_uint(x0) >> 24) & 0x80u);
  if (x1 != x1) codes = (codes & 0x00FFu) | 0x7F00u | ((__float_as_uint(x1) >> 16) & 0x8000u);
  return codes;
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_DEVICE_UTIL_CUH_
