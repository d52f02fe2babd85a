// Max with its index over a warp or a block, ties to the lowest index: the argmax every scoring kernel
// uses (logprob.cu, baseline_compare.cu). Device code only; include from .cu files.
#ifndef SCORED_ENGINE_KERNELS_MAX_ARG_CUH_
#define SCORED_ENGINE_KERNELS_MAX_ARG_CUH_

#include <cmath>
#include <cstdint>

namespace scored::kernels {

struct MaxArg {
  float value;
  int32_t index;
};

// a before b: larger value, ties to the lower index. NaN never wins.
__device__ __forceinline__ bool Better(float av, int32_t ai, float bv, int32_t bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ MaxArg WarpMaxArg(MaxArg m) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, m.value, offset);
    const int32_t i = __shfl_xor_sync(0xffffffffu, m.index, offset);
    if (Better(v, i, m.value, m.index)) m = {v, i};
  }
  return m;
}

// Every thread gets the block's (max, lowest index of the max). blockDim.x a multiple of 32, <= 1024;
// scratch_v / scratch_i hold 32 values; ends with a barrier (the scratch can be reused at once).
__device__ __forceinline__ MaxArg BlockMaxArg(MaxArg m, float* scratch_v, int32_t* scratch_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  m = WarpMaxArg(m);
  if (lane == 0) {
    scratch_v[warp] = m.value;
    scratch_i[warp] = m.index;
  }
  __syncthreads();
  MaxArg total = lane < static_cast<int>(blockDim.x >> 5) ? MaxArg{scratch_v[lane], scratch_i[lane]}
                                                          : MaxArg{-INFINITY, INT32_MAX};
  total = WarpMaxArg(total);
  __syncthreads();
  return total;
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_MAX_ARG_CUH_
