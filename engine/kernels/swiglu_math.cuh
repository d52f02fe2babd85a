// Device arithmetic of the gated MLP activations (SwiGLU, GeGLU), shared by swiglu.cu and swiglu_fp8.cu so
// that the fused W8A8 op computes bitwise what the unfused sequence computes (private: included only by .cu
// files).
//
// SwiGluMath<D>::Value(g, u) = silu(g) * u with silu(g) = g / (1 + exp(-g)), per storage type D:
//   D = float (fp32 fidelity mode): IEEE operations in the reference's order, accurate expf,
//     correctly rounded division, no FMA contraction.
//   D = __nv_bfloat16: fast intrinsics, __fdividef(g, 1 + __expf(-g)) * u. The result is rounded to
//     bf16 (a rounding error of up to 2^-8 relative), so the fast-math error only shows where it moves a
//     value across a rounding tie. Error before that rounding, from the CUDA Programming Guide's bounds
//     (__expf within 2 + floor(1.173 |x|) ulp; __fdividef within 2 ulp for divisors in [2^-126, 2^126]):
//     - |g| <= 87: within 107 ulp, a relative error below 2^-16 (exp's error is damped by
//       exp(-g) / (1 + exp(-g)) <= 1; the add and the product add half an ulp each);
//     - g < -87.3: the divisor exceeds 2^126 and __fdividef gives (signed) 0 where the exact value is
//       below 1.1e-36 |u| in magnitude (an absolute error of at most 1.1e-36 |u|).
//     Special values as in the fp32 mode: g = +inf gives inf * u; g = -inf or a NaN input gives NaN.
#ifndef SCORED_ENGINE_KERNELS_SWIGLU_MATH_CUH_
#define SCORED_ENGINE_KERNELS_SWIGLU_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace scored::kernels {

template <typename D>
struct SwiGluMath;

template <>
struct SwiGluMath<float> {
  static __device__ __forceinline__ float Value(float g, float u) {
    const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    return __fmul_rn(silu, u);
  }
};

template <>
struct SwiGluMath<__nv_bfloat16> {
  static __device__ __forceinline__ float Value(float g, float u) {
    const float silu = __fdividef(g, __fadd_rn(1.0f, __expf(-g)));
    return __fmul_rn(silu, u);
  }
};

// GeluTanhGluMath<D>::Value(g, u) = gelu_tanh(g) * u (Gemma's GeGLU, torch's gelu(approximate="tanh")):
//   D = float: gelu_tanh evaluated in double and rounded once, the product in fp32: ref::GeluTanhGlu's
//     arithmetic (the CUDA and host double tanh may differ in the last double bit, far below fp32's ulp).
//   D = __nv_bfloat16: in fp32 with fast intrinsics, through 0.5 (1 + tanh(x)) = 1 / (1 + exp(-2x)):
//     __fdividef(g, 1 + __expf(-2 inner)) * u with inner = sqrt(2 / pi) (g + 0.044715 g^3). The same
//     function as torch's 0.5 g (1 + tanh(inner)), without its cancellation for g < 0 (1 + tanh(inner) near
//     0 loses all relative precision there: absolute errors of ~|g u| 2^-24). Error before the rounding to
//     bf16 as SwiGLU's (exp's error damped by exp(-2 inner) / (1 + exp(-2 inner)) <= 1): below 2^-16
//     relative while 2 |inner| <= 87; beyond (g below about -10.5) the result is 0 where the exact value is
//     below 1.1e-36 |g u|.
template <typename D>
struct GeluTanhGluMath;

template <>
struct GeluTanhGluMath<float> {
  static __device__ __forceinline__ float Value(float g, float u) {
    const double v = g;
    const double k = 0.79788456080286535588;  // sqrt(2 / pi)
    const float gelu = static_cast<float>(0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v))));
    return __fmul_rn(gelu, u);
  }
};

template <>
struct GeluTanhGluMath<__nv_bfloat16> {
  static __device__ __forceinline__ float Value(float g, float u) {
    const float inner = 0.79788456f * (g + 0.044715f * g * g * g);
    return __fmul_rn(__fdividef(g, __fadd_rn(1.0f, __expf(-2.0f * inner))), u);
  }
};

// ApplyFp8Scales<bf16_t>'s value of one element (fp8_scale.cu): bf16(y * (x_scale * w_scale)), both
// products IEEE fp32 with round-to-nearest-even, then one RNE rounding to bf16; returned widened to fp32.
__device__ __forceinline__ float ScaleToBf16(float y, float x_scale, float w_scale) {
  return __bfloat162float(__float2bfloat16_rn(__fmul_rn(y, __fmul_rn(x_scale, w_scale))));
}

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_SWIGLU_MATH_CUH_
