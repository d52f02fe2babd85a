#include "engine/model/sparse24.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/raw_read.h"

namespace scored {
namespace {

absl::Status Bad(const TensorView& t, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' (dtype ",
                                                 DTypeName(t.dtype), ", shape [",
                                                 absl::StrJoin(t.shape, ", "), "]): ", what));
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> DecompressSparse24(const TensorView& shape, const TensorView& compressed,
                                                        const TensorView& bitmask, int64_t out, int64_t in) {
  if ((shape.dtype != DType::kI64 && shape.dtype != DType::kI32) || shape.NumElements() != 2) {
    return Bad(shape, "expected I64 [2, 1], the dense shape");
  }
  const int64_t s0 = shape.dtype == DType::kI64 ? raw_read::Load<int64_t>(shape.data, 0)
                                                : raw_read::Load<int32_t>(shape.data, 0);
  const int64_t s1 = shape.dtype == DType::kI64 ? raw_read::Load<int64_t>(shape.data, 1)
                                                : raw_read::Load<int32_t>(shape.data, 1);
  if (s0 != out || s1 != in) {
    return Bad(shape, absl::StrCat("holds (", s0, ", ", s1, "), expected (", out, ", ", in, ")"));
  }
  if (in % 4 != 0) return Bad(compressed, absl::StrCat("2:4 sparsity needs in_features % 4 == 0, got ", in));
  const DType d = compressed.dtype;
  if (d != DType::kF32 && d != DType::kF16 && d != DType::kBF16 && d != DType::kF8E4M3 && d != DType::kI8) {
    return Bad(compressed, "expected F32, F16, BF16, F8_E4M3 or I8 values");
  }
  if (compressed.shape != std::vector<int64_t>{out, in / 2}) {
    return Bad(compressed, absl::StrCat("expected shape [", out, ", ", in / 2, "]"));
  }
  const int64_t mask_cols = (in + 7) / 8;
  if (bitmask.dtype != DType::kU8 || bitmask.shape != std::vector<int64_t>{out, mask_cols}) {
    return Bad(bitmask, absl::StrCat("expected U8 [", out, ", ", mask_cols, "]"));
  }
  // Count first: the library's boolean-mask assignment needs exactly one stored value per set bit.
  int64_t set = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) set += (bitmask.data[o * mask_cols + k / 8] >> (k % 8)) & 1;
  }
  const int64_t values = out * (in / 2);
  if (set != values) {
    return Bad(bitmask, absl::StrCat(set, " set bits for ", values, " stored values in '", compressed.name,
                                     "' (a 2:4 mask keeps 2 of every 4)"));
  }
  const int64_t elem = DTypeSize(d);
  std::vector<uint8_t> dense(static_cast<size_t>(out * in * elem),
                             0);  // +0 of every dtype D is all zero bits
  int64_t v = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) {
      if (((bitmask.data[o * mask_cols + k / 8] >> (k % 8)) & 1) == 0) continue;
      std::memcpy(dense.data() + (o * in + k) * elem, compressed.data + v * elem, static_cast<size_t>(elem));
      ++v;
    }
  }
  return dense;
}

}  // namespace scored
