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
//
// EmbeddingShard (vocab-parallel, engine/model/shard_plan.h): `table` holds rows [vocab_offset,
// vocab_offset + shard_rows) of the full table; out[t, :] = OutT(table[tokens[t] - vocab_offset, :]) when the
// id is in the shard, else 0 (exactly), so the sum of every rank's output (an all-reduce) is the lookup.
// An id outside [0, vocab_size) gives NaN on every rank, as Embedding does.
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
                       OutT* out,  // [num_tokens, hidden_size]
                       cudaStream_t stream);

template <typename TableT, typename OutT>
absl::Status EmbeddingShard(const TableT* table,    // [shard_rows, hidden_size]
                            const int32_t* tokens,  // [num_tokens], global ids
                            int64_t num_tokens, int64_t vocab_size, int64_t vocab_offset, int64_t shard_rows,
                            int64_t hidden_size,
                            OutT* out,  // [num_tokens, hidden_size]
                            cudaStream_t stream);

// Gemma's embedding normalizer, in place on the lookup's fp32 rows: x[i] = fp32(x[i] * scale) for i < n; with
// round_to_bf16 the product is then rounded to bf16 (RNE) and widened back: the bf16 mode's
// embeddings(bf16) * normalizer(bf16) as transformers computes it (the caller passes the normalizer rounded
// to bf16). Element-wise. Errors: INVALID_ARGUMENT (n < 0, null pointer), INTERNAL (launch).
absl::Status ScaleEmbedding(float* x,  // [n]
                            int64_t n, float scale, bool round_to_bf16, cudaStream_t stream);

}  // namespace scored::kernels

#endif  // SCORED_ENGINE_KERNELS_EMBEDDING_H_
