#include "engine/model/tensor_checks.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/raw_read.h"

namespace scored {
namespace {

// Index of the first element of `n` whose bits, masked with `mask`, are all ones (the exponent field: NaN
// or infinity), or -1. One tight loop per width, no per-element dtype switch: an 8B nvfp4 checkpoint has
// 0.5 G scale bytes.
template <typename Bits>
int64_t FirstAllOnes(const uint8_t* data, int64_t n, Bits mask) {
  for (int64_t i = 0; i < n; ++i) {
    if ((raw_read::Load<Bits>(data, i) & mask) == mask) return i;
  }
  return -1;
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsFloatDType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

absl::Status CheckInt8ZeroPoints(const TensorView& zp) {
  const int64_t n = zp.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v =
        zp.dtype == DType::kI8 ? raw_read::Load<int8_t>(zp.data, i) : raw_read::Load<int32_t>(zp.data, i);
    if (v < -128 || v > 127) {
      return absl::InvalidArgumentError(absl::StrCat(zp.file, ": tensor ", zp.name, ": zero point ", v,
                                                     " at index ", i,
                                                     " is outside the int8 range [-128, 127]"));
    }
  }
  return absl::OkStatus();
}

int64_t FirstNonFinite(const TensorView& t) {
  const int64_t n = t.NumElements();
  switch (t.dtype) {
    case DType::kF32:
      return FirstAllOnes<uint32_t>(t.data, n, 0x7f800000u);
    case DType::kF16:
      return FirstAllOnes<uint16_t>(t.data, n, 0x7c00u);
    case DType::kBF16:
      return FirstAllOnes<uint16_t>(t.data, n, 0x7f80u);
    case DType::kF8E4M3:
      return FirstAllOnes<uint8_t>(t.data, n, 0x7fu);
    default:
      return -1;
  }
}

absl::Status CheckFinite(const TensorView& t, absl::string_view role) {
  if (!t.present()) return absl::OkStatus();
  const int64_t i = FirstNonFinite(t);
  if (i < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(t.file, ": tensor '", t.name, "' holds a NaN or an infinity at index ", i, " (",
                   DTypeName(t.dtype), "): ", role, " must be finite; the checkpoint is corrupted"));
}

absl::Status CheckE8M0Scales(const LinearWeight& w) {
  if (w.format != WeightFormat::kMxfp4PackQuantized || !w.weight_scale.present()) return absl::OkStatus();
  const int64_t n = w.weight_scale.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    if (w.weight_scale.data[i] == 0xff) {
      return absl::InvalidArgumentError(absl::StrCat(
          w.weight_scale.file, ": tensor '", w.weight_scale.name, "' holds the E8M0 NaN code 255 at index ",
          i, ": a quantization scale must be finite; the checkpoint is corrupted"));
    }
  }
  return absl::OkStatus();
}

bool IsScalarShape(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n == 1 && s.size() <= 2;
}

absl::Status CheckDType(const TensorView& t, std::initializer_list<DType> dtypes) {
  std::vector<std::string> names;
  for (DType d : dtypes) {
    if (t.dtype == d) return absl::OkStatus();
    names.push_back(DTypeName(d));
  }
  return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has dtype ",
                                                 DTypeName(t.dtype), ", expected ",
                                                 absl::StrJoin(names, " or ")));
}

}  // namespace scored
