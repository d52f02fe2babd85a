// compressed-tensors' `sparse-24-bitmask` sparsity format (2:4 sparse weights), decompressed at load.
//
// A targeted linear stores, instead of `<module>.weight` [out, in]:
//   <module>.shape       I64 [2, 1]         the dense shape (out, in)
//   <module>.compressed  dtype D [out, in/2] the kept values, row-major in mask order
//   <module>.bitmask     U8 [out, ceil(in/8)] the keep mask, numpy packbits bitorder "little": bit j of
//                                            byte b of row o is column 8b + j
// D is the dense dtype (F32/F16/BF16) or, combined with FP8 / INT8 quantization, the quantized `weight`'s
// (F8_E4M3 / I8; `weight_scale` and the rest stay as the quantized format stores them). The library's
// decompression (sparse24_bitmask_decompress) is: zeros of D in the dense shape, then the flattened
// values written in row-major order at the positions whose mask bit is set. This reproduces it byte for
// byte, so the result is exactly the `weight` the non-sparse format of the same weights holds.
//
// Thread-safety: pure function.
#ifndef SCORED_ENGINE_MODEL_SPARSE24_H_
#define SCORED_ENGINE_MODEL_SPARSE24_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/stored_weight.h"

namespace scored {

// The dense bytes ([out, in] row-major, elements of compressed.dtype) of one sparse-24-bitmask weight.
// INVALID_ARGUMENT naming the tensor for a wrong dtype or shape, a `shape` that is not (out, in), or a mask
// whose set bits do not number out * in / 2 (the count of stored values).
absl::StatusOr<std::vector<uint8_t>> DecompressSparse24(const TensorView& shape, const TensorView& compressed,
                                                        const TensorView& bitmask, int64_t out, int64_t in);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_SPARSE24_H_
