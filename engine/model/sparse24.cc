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
  // Count first: the library's boolean-mask assignment needs exactly one stored value per set bit. Bits past
  // `in` in a row's last byte are padding (numpy unpackbits with count=in ignores them).
  const int tail_bits = static_cast<int>(in - (mask_cols - 1) * 8);
  const uint8_t tail_mask = static_cast<uint8_t>((1u << tail_bits) - 1u);
  auto row_byte = [&](int64_t o, int64_t b) -> uint8_t {
    const uint8_t v = bitmask.data[o * mask_cols + b];
    return b == mask_cols - 1 ? static_cast<uint8_t>(v & tail_mask) : v;
  };
  int64_t set = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t b = 0; b < mask_cols; ++b) set += __builtin_popcount(row_byte(o, b));
  }
  const int64_t values = out * (in / 2);
  if (set != values) {
    return Bad(bitmask, absl::StrCat(set, " set bits for ", values, " stored values in '", compressed.name,
                                     "' (a 2:4 mask keeps 2 of every 4)"));
  }
  const int64_t elem = DTypeSize(d);
  std::vector<uint8_t> dense(static_cast<size_t>(out * in * elem),
                             0);  // +0 of every dtype D is all zero bits
  const uint8_t* src = compressed.data;
  for (int64_t o = 0; o < out; ++o) {
    uint8_t* row = dense.data() + o * in * elem;
    for (int64_t b = 0; b < mask_cols; ++b) {
      for (unsigned bits = row_byte(o, b); bits != 0; bits &= bits - 1) {
        std::memcpy(row + (b * 8 + __builtin_ctz(bits)) * elem, src, static_cast<size_t>(elem));
        src += elem;
      }
    }
  }
  return dense;
}

}  // namespace scored
