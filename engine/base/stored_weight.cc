#include "engine/base/stored_weight.h"

namespace scored {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI8:
      return "I8";
    case DType::kU8:
      return "U8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kF64:
      return "F64";
  }
  return "?";
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kF64:
      return 8;
  }
  return 0;
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace scored
