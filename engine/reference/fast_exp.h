// exp for the reference attention's softmax weights, written so the compiler vectorizes it.
//
// ExpToFloat(x) = fp32(e^x) for x <= 0, computed in double: e^x = 2^n e^r with n = round(x / ln 2) and
// |r| <= ln2 / 2, e^r by its Taylor series to degree 11 (truncation < 2e-14 relative), then one rounding to
// fp32. That is the correctly rounded fp32 exponential except where e^x lies within ~1e-13 relative of a
// rounding boundary (about one argument in 10^6), where it may be the other neighbour (1 ulp). Arguments
// below -700 give 0 (e^-700 is far below the smallest fp32). Pure double arithmetic with no library
// call, so its values are the same on every machine and instruction set (with -ffp-contract=off).
#ifndef SCORED_ENGINE_REFERENCE_FAST_EXP_H_
#define SCORED_ENGINE_REFERENCE_FAST_EXP_H_

#include <cstdint>
#include <cstring>

namespace scored::ref {

inline float ExpToFloat(float x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2 = 0.6931471805599453;
  // Adding 1.5 * 2^52 rounds a double of magnitude < 2^51 to the nearest integer (ties to even) and leaves
  // that integer in the low mantissa bits.
  constexpr double kRoundMagic = 6755399441055744.0;
  double xd = static_cast<double>(x);
  xd = xd < -700.0 ? -700.0 : xd;
  const double shifted = xd * kLog2e + kRoundMagic;
  const double n = shifted - kRoundMagic;
  const double r = xd - n * kLn2;
  // Horner form of sum_{k <= 11} r^k / k!.
  double p = 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^n from the integer in the low bits of `shifted` (n in [-1010, 0]: a normal double).
  // Only the low 12 bits of `bits` reach the exponent field: (n + 1023) mod 4096 = n + 1023.
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  const uint64_t scale_bits = (bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return static_cast<float>(p * scale);
}

}  // namespace scored::ref

#endif  // SCORED_ENGINE_REFERENCE_FAST_EXP_H_
