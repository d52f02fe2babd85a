// Token embedding lookup: out[t, :] = OutT(table[tokens[t], :]).
//
// Shapes: table [vocab_size, hidden_size], tokens [num_tokens] int32, out [num_tokens, hidden_size], all
// row-major, contiguous, device memory. Not in place (out must not overlap table).
// dtypes: TableT, OutT in {bf16_t, float} (all four pairs instantiated); fp32 -> bf16 rounds to nearest
// even, the other pairs are exact.
// An id outside [0, vocab_size) cannot be reported from the device: its row is filled with NaN (callers
// validate ids on the host first; engine.h says the server does).
// Errors: INVALID_ARGUMENT for negative sizes or null pointers; INTERNAL for a CUDA launch failure.
// num_tokens == 0 is a no-op.
#ifndef SCORED_ENGINE_KERNELS_EMBEDDING_H_
#define SCORED_ENGINE_KERNELS_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels {

template <typename TableT, typename OutT>
absl::Status Embedding(const TableT* table,    // [vocab_size, hidden_size]
                       const int32_t* tokens,  // [num_tokens]
                       int64_t num_tokens, int64_t vocab_size, int64_t hidden_size,
                       OutT* out,              // [num_tokens, hidden_size]
                       cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_EMBEDDING_H_
