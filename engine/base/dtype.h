// Exact scalar conversions between fp32 and the narrow float formats checkpoints store.
//
// Every function works on raw bit patterns (uint16_t for bf16/fp16, uint8_t for FP8 and E2M1), so the
// header needs no CUDA type. Header-only; usable from host C++ and, under nvcc, from device code
// (SCORED_HOST_DEVICE expands to `__host__ __device__` there).
//
//   widening (exact, every code maps to one fp32 value):
//     Bf16ToFloat, Fp16ToFloat, Fp8E4M3ToFloat, E2M1ToFloat
//   narrowing (round to nearest, ties to even):
//     FloatToBf16   overflow -> +-inf; NaN -> quiet NaN with the same sign
//     FloatToFp16   overflow (|x| >= 65520) -> +-inf; NaN -> quiet NaN with the same sign
//     FloatToFp8E4M3  E4M3FN (bias 7, no inf, NaN = S.1111.111): |x| >= 448 and +-inf saturate to +-448,
//                     NaN -> 0x7F/0xFF (sign kept); like CUDA's __NV_SATFINITE conversion
//   RoundToBf16 / RoundToFp16: fp32 -> narrow -> fp32 (the value a narrow store would keep).
//
// E2M1 (NVFP4 element, 4 bits): bit 3 = sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
#ifndef SCORED_ENGINE_BASE_DTYPE_H_
#define SCORED_ENGINE_BASE_DTYPE_H_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define SCORED_HOST_DEVICE __host__ __device__
#else
#define SCORED_HOST_DEVICE
#endif

namespace scored {

SCORED_HOST_DEVICE inline uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

SCORED_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

namespace dtype_internal {

// m >> shift, rounded to nearest with ties to even. shift >= 0; shift >= 32 gives 0 for any m < 2^31.
SCORED_HOST_DEVICE inline uint32_t ShiftRightRne(uint32_t m, int shift) {
  if (shift <= 0) return m;
  if (shift >= 32) return 0;
  const uint32_t kept = m >> shift;
  const uint32_t rem = m & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rem > half || (rem == half && (kept & 1u))) return kept + 1;
  return kept;
}

}  // namespace dtype_internal

// ---- bf16 ----

SCORED_HOST_DEVICE inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(uint32_t{h} << 16); }

SCORED_HOST_DEVICE inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload bits, force quiet.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

SCORED_HOST_DEVICE inline float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

// ---- fp16 (IEEE binary16) ----

SCORED_HOST_DEVICE inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {  // zero / subnormal: man * 2^-24, exact in fp32
    const float mag = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -mag : mag;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

SCORED_HOST_DEVICE inline uint16_t FloatToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (tie to even: inf)
  const int e = static_cast<int>(a >> 23) - 127;                       // unbiased exponent of |f|
  if (e >= -14) {  // normal half; a carry out of the mantissa correctly bumps the exponent
    const uint32_t base = (static_cast<uint32_t>(e + 15) << 10) | ((a & 0x7fffffu) >> 13);
    const uint32_t rem = a & 0x1fffu;
    const uint32_t rounded = (rem > 0x1000u || (rem == 0x1000u && (base & 1u))) ? base + 1 : base;
    return static_cast<uint16_t>(sign | rounded);
  }
  if ((a >> 23) == 0) return sign;                 // fp32 subnormal: far below half's smallest subnormal
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // value = m * 2^(e-23); half subnormal unit 2^-24
  return static_cast<uint16_t>(sign | dtype_internal::ShiftRightRne(m, -e - 1));
}

SCORED_HOST_DEVICE inline float RoundToFp16(float f) { return Fp16ToFloat(FloatToFp16(f)); }

// ---- FP8 E4M3FN ----

constexpr float kFp8E4M3Max = 448.0f;

SCORED_HOST_DEVICE inline float Fp8E4M3ToFloat(uint8_t b) {
  const uint32_t sign = (uint32_t{b} & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return BitsToFloat(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {                                                        // zero / subnormal: man * 2^-9
    const float mag = static_cast<float>(man) * 0.001953125f;
    return sign ? -mag : mag;
  }
  return BitsToFloat(sign | ((exp + 120u) << 23) | (man << 20));
}

SCORED_HOST_DEVICE inline uint8_t FloatToFp8E4M3(float f) {
  const uint32_t u = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);   // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 or inf: saturate
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= -6) {  // normal fp8; a < 448 so rounding never reaches the NaN code
    const uint32_t base = (static_cast<uint32_t>(e + 7) << 3) | ((a & 0x7fffffu) >> 20);
    const uint32_t rem = a & 0xfffffu;
    const uint32_t rounded = (rem > 0x80000u || (rem == 0x80000u && (base & 1u))) ? base + 1 : base;
    return static_cast<uint8_t>(sign | rounded);
  }
  if ((a >> 23) == 0) return sign;                 // fp32 subnormal
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // value = m * 2^(e-23); fp8 subnormal unit 2^-9
  return static_cast<uint8_t>(sign | dtype_internal::ShiftRightRne(m, 14 - e));
}

// ---- E2M1 (NVFP4 element) ----

SCORED_HOST_DEVICE inline float E2M1ToFloat(uint8_t nibble) {
  // Magnitudes of codes 0..7 are {0, .5, 1, 1.5, 2, 3, 4, 6}: for code c with exponent field x = c >> 1
  // and mantissa bit m = c & 1: x == 0 -> m * 0.5, else (1 + m/2) * 2^(x-1).
  const uint32_t c = nibble & 0x7u;
  const uint32_t x = c >> 1;
  const uint32_t m = c & 1u;
  const float mag = x == 0 ? 0.5f * static_cast<float>(m)
                           : (1.0f + 0.5f * static_cast<float>(m)) * static_cast<float>(1u << (x - 1));
  return (nibble & 0x8u) ? -mag : mag;
}

}  // namespace scored

#endif  // SCORED_ENGINE_BASE_DTYPE_H_
