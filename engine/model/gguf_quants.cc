// ggml block decoding (contract: gguf_quants.h). Compiled with -ffp-contract=off
// (engine/model/CMakeLists.txt): every fp32 product and sum below rounds on its own, as numpy's float32
// arrays do.
#include "engine/model/gguf_quants.h"

#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/base/dtype.h"

namespace scored {
namespace {

constexpr int64_t kQkK = 256;  // QK_K: the k-quants' super-block

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, true},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 40, false},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, true},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, true},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, true},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, true},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, true},
    {GgmlType::kNVFP4, "NVFP4", 64, 36, false},
};

// IQ4_NL's and IQ4_XS's 16 levels (the format's non-uniform 4-bit codebook).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// MXFP4 as ggml stores it: E2M1 values doubled, so that the scale below is half of 2^(e - 127).
constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFloat(h);
}

// Element i (< 2 * n) of n nibble-packed bytes: the low nibbles of all n bytes first, then the high ones.
int Nibble(const uint8_t* q, int64_t n, int64_t i) { return i < n ? q[i] & 0x0F : q[i - n] >> 4; }

void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(Nibble(b + 2, 16, i) - 8);
}

void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(Nibble(b + 4, 16, i)) + m;
}

// Q5_0 / Q5_1's 5-bit value of element i: its nibble and bit i of the little-endian 32-bit qh.
int Five(const uint8_t* qh, const uint8_t* qs, int64_t i) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return Nibble(qs, 16, i) | static_cast<int>(((h >> i) & 1u) << 4);
}

void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(Five(b + 2, b + 6, i) - 16);
}

void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(Five(b + 4, b + 8, i)) + m;
}

void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int64_t i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}

// Q2_K: scales[16] (low nibble the scale, high the min of each 16 elements), qs[64], d, dmin. Element i's
// 2 bits: byte (i / 128) * 32 + i % 32 of qs, shifted by 2 ((i % 128) / 32).
void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int64_t i = 0; i < kQkK; ++i) {
    const int64_t g = i / 16;
    const float dl = d * static_cast<float>(scales[g] & 0x0F);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    const int q = (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
    y[i] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: hmask[32], qs[64], 12 bytes of sixteen 6-bit scales, d.
void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  float dl[16];
  for (int64_t m = 0; m < 16; ++m) {
    const int low = (m < 8 ? sc[m] : sc[m - 8] >> 4) & 0x0F;  // bytes 0..7: low nibbles, then high ones
    const int high = (sc[8 + m % 4] >> (2 * (m / 4))) & 3;    // bytes 8..11: 2 bits each
    dl[m] = d * static_cast<float>(static_cast<int8_t>(low | (high << 4)) - 32);
  }
  for (int64_t i = 0; i < kQkK; ++i) {
    const int ql = (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
    const int qh = ((hmask[i % 32] >> (i / 32)) & 1) ^ 1;  // a set bit means no offset
    y[i] = dl[i / 16] * static_cast<float>(ql - (qh << 2));
  }
}

// The k-quants' eight 6-bit scales and mins of 12 bytes (Q4_K, Q5_K).
void ScaleMin(const uint8_t* s, int sc[8], int mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
  }
}

// Q4_K / Q5_K: d, dmin, scales[12], [qh[32] for Q5_K], qs[128]. Element i's nibble: byte (i / 64) * 32 +
// i % 32 of qs, the high one for (i % 64) >= 32; Q5_K's fifth bit: bit i / 32 of qh[i % 32].
void QK_K45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  int sc[8], mn[8];
  ScaleMin(b + 4, sc, mn);
  for (int64_t i = 0; i < kQkK; ++i) {
    const int64_t g = i / 32;
    const float dg = d * static_cast<float>(sc[g]);
    const float mg = dmin * static_cast<float>(mn[g]);
    int q = (qs[(i / 64) * 32 + i % 32] >> (4 * ((i % 64) / 32))) & 0x0F;
    if (qh != nullptr) q |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
    y[i] = dg * static_cast<float>(q) - mg;
  }
}

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Element i: low nibble of byte (i / 128) * 64 + i % 64 of ql
// (the high one for (i % 128) >= 64), 2 high bits of byte (i / 128) * 32 + i % 32 of qh shifted by
// 2 ((i % 128) / 32); minus 32.
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int64_t i = 0; i < kQkK; ++i) {
    const int64_t r = i / 128, k = i % 128;
    const int low = (ql[r * 64 + k % 64] >> (4 * (k / 64))) & 0x0F;
    const int high = (qh[r * 32 + k % 32] >> (2 * (k / 32))) & 3;
    const float ds = d * static_cast<float>(scales[i / 16]);
    y[i] = ds * static_cast<float>((low | (high << 4)) - 32);
  }
}

void IQ4_NL(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(kIq4Levels[Nibble(b + 2, 16, i)]);
}

// IQ4_XS: d, scales_h (16 bits: 2 per sub-block), scales_l[4] (a nibble per sub-block), qs[128] (8
// sub-blocks of 32 elements, each 16 bytes, low nibbles first).
void IQ4_XS(const uint8_t* b, float* y) {
  const float d = Half(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int64_t r = 0; r < 8; ++r) {
    const int low = (scales_l[r / 2] >> (4 * (r % 2))) & 0x0F;
    const int high = (scales_h >> (2 * r)) & 3;
    const float dl = d * static_cast<float>(static_cast<int8_t>(low | (high << 4)) - 32);
    for (int64_t j = 0; j < 32; ++j) {
      y[r * 32 + j] = dl * static_cast<float>(kIq4Levels[Nibble(qs + r * 16, 16, j)]);
    }
  }
}

// MXFP4 (ggml): e (E8M0), qs[16]; the scale is half of 2^(e - 127) (ggml_e8m0_to_fp32_half), the values
// doubled E2M1.
void MXFP4(const uint8_t* b, float* y) {
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
  float d;
  std::memcpy(&d, &bits, 4);
  for (int64_t i = 0; i < 32; ++i) y[i] = d * static_cast<float>(kE2m1Doubled[Nibble(b + 1, 16, i)]);
}

}  // namespace

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

absl::Status DequantizeGgmlBlocks(uint32_t type, const uint8_t* src, int64_t num_blocks, float* out) {
  const GgmlTypeInfo* info = FindGgmlType(type);
  if (info == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown ggml tensor type ", type));
  if (!info->decoded) {
    return absl::UnimplementedError(absl::StrCat("ggml tensor type ", info->name, " is not decoded yet"));
  }
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (info->type) {
    case GgmlType::kF32:
      std::memcpy(out, src, static_cast<size_t>(num_blocks) * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
      for (int64_t i = 0; i < num_blocks; ++i) out[i] = Half(src + 2 * i);
      return absl::OkStatus();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_blocks; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(out + i, &bits, 4);
      }
      return absl::OkStatus();
    case GgmlType::kQ4_0:
      block = Q4_0;
      break;
    case GgmlType::kQ4_1:
      block = Q4_1;
      break;
    case GgmlType::kQ5_0:
      block = Q5_0;
      break;
    case GgmlType::kQ5_1:
      block = Q5_1;
      break;
    case GgmlType::kQ8_0:
      block = Q8_0;
      break;
    case GgmlType::kQ2_K:
      block = Q2_K;
      break;
    case GgmlType::kQ3_K:
      block = Q3_K;
      break;
    case GgmlType::kQ4_K:
      block = [](const uint8_t* b, float* y) { QK_K45(b, nullptr, b + 16, y); };
      break;
    case GgmlType::kQ5_K:
      block = [](const uint8_t* b, float* y) { QK_K45(b, b + 16, b + 48, y); };
      break;
    case GgmlType::kQ6_K:
      block = Q6_K;
      break;
    case GgmlType::kIQ4_NL:
      block = IQ4_NL;
      break;
    case GgmlType::kIQ4_XS:
      block = IQ4_XS;
      break;
    case GgmlType::kMXFP4:
      block = MXFP4;
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("ggml tensor type ", info->name, " is not decoded yet"));
  }
  for (int64_t b = 0; b < num_blocks; ++b) block(src + b * info->type_size, out + b * info->block_size);
  return absl::OkStatus();
}

}  // namespace scored
