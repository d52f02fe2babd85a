// Checks of stored tensors that the loader and the format parsers share (engine/model only): dtype and
// shape, finiteness of scales / norms / biases, E8M0 NaN codes, int8 zero-point range. Each returns
// INVALID_ARGUMENT naming the file, the tensor and (for element checks) the first bad index.
//
// Thread-safety: pure functions over immutable views.
#ifndef SCORED_ENGINE_MODEL_TENSOR_CHECKS_H_
#define SCORED_ENGINE_MODEL_TENSOR_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace scored {

// "[a, b, c]".
std::string ShapeString(const std::vector<int64_t>& shape);

bool IsFloatDType(DType d);  // F32, F16 or BF16

// `t` has one of `dtypes`; else INVALID_ARGUMENT "<file>: tensor '<name>' has dtype X, expected A or B".
absl::Status CheckDType(const TensorView& t, std::initializer_list<DType> dtypes);

// int-quantized (int8) zero points must lie in the int8 range: decoding computes q - zp in int32, and a
// zero point outside [-128, 127] is no checkpoint compressed-tensors writes.
absl::Status CheckInt8ZeroPoints(const TensorView& zp);

// Index of the first NaN or infinity of a floating-point tensor (F32, F16, BF16, F8_E4M3: E4M3 "fn" has
// no infinity, its NaN is S.1111.111), or -1 when every element is finite or the dtype is an integer one.
// Reads the bit patterns: no conversion, so no signalling NaN is ever raised.
int64_t FirstNonFinite(const TensorView& t);

// INVALID_ARGUMENT naming the file, the tensor and the first bad index when `t` (if present) holds a NaN or
// an infinity: a corrupted checkpoint that would otherwise load and serve NaN log-probabilities. `role`
// names what the tensor is ("a quantization scale").
absl::Status CheckFinite(const TensorView& t, absl::string_view role);

// mxfp4 E8M0 scales: compressed-tensors decodes exponent byte e as 2^(e - 127) in bf16, so 255 (the
// format's NaN code) becomes infinity and every weight of its block infinity or NaN. Such a checkpoint
// is corrupted, like a NaN float scale: INVALID_ARGUMENT naming the tensor and index. OK for other formats.
absl::Status CheckE8M0Scales(const LinearWeight& w);

// Scale tensors of one element may be stored as [], [1] or [1, 1].
bool IsScalarShape(const std::vector<int64_t>& s);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_TENSOR_CHECKS_H_
