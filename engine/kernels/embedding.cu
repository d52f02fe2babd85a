// Token embedding lookup. Contract: embedding.h.
//
// One block per token (grid-stride over tokens past the grid limit); threads stride over hidden_size.
// Memory-bound copy: each element is read once and written once.
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/device_util.cuh"
#include "engine/kernels/embedding.h"

namespace scored::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// The whole table is the shard [0, vocab_size) (vocab_offset 0, shard_rows vocab_size).
template <typename TableT, typename OutT>
__global__ void EmbeddingKernel(const TableT* __restrict__ table,    // [shard_rows, hidden_size]
                                const int32_t* __restrict__ tokens,  // [num_tokens]
                                int64_t num_tokens, int64_t vocab_size, int64_t vocab_offset,
                                int64_t shard_rows, int64_t hidden_size,
                                OutT* __restrict__ out) {  // [num_tokens, hidden_size]
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const int32_t id = tokens[t];
    OutT* dst = out + t * hidden_size;
    if (id < 0 || id >= vocab_size) {
      for (int64_t i = threadIdx.x; i < hidden_size; i += blockDim.x)
        StoreFromFloat(dst + i, __int_as_float(0x7fc00000));
      continue;
    }
    const int64_t local = static_cast<int64_t>(id) - vocab_offset;
    if (local < 0 || local >= shard_rows) {
      for (int64_t i = threadIdx.x; i < hidden_size; i += blockDim.x) StoreFromFloat(dst + i, 0.0f);
      continue;
    }
    const TableT* src = table + local * hidden_size;
    for (int64_t i = threadIdx.x; i < hidden_size; i += blockDim.x)
      StoreFromFloat(dst + i, LoadAsFloat(src + i));
  }
}

}  // namespace

template <typename TableT, typename OutT>
absl::Status Embedding(const TableT* table, const int32_t* tokens, int64_t num_tokens, int64_t vocab_size,
                       int64_t hidden_size, OutT* out, cudaStream_t stream) {
  if (num_tokens < 0 || vocab_size < 0 || hidden_size < 0) {
    return absl::InvalidArgumentError("Embedding: negative size");
  }
  if (num_tokens == 0 || hidden_size == 0) return absl::OkStatus();
  if (table == nullptr || tokens == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Embedding: null pointer");
  }
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  EmbeddingKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(table), tokens, num_tokens, vocab_size, int64_t{0}, vocab_size, hidden_size, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename TableT, typename OutT>
absl::Status EmbeddingShard(const TableT* table, const int32_t* tokens, int64_t num_tokens,
                            int64_t vocab_size, int64_t vocab_offset, int64_t shard_rows, int64_t hidden_size,
                            OutT* out, cudaStream_t stream) {
  if (num_tokens < 0 || vocab_size < 0 || hidden_size < 0 || vocab_offset < 0 || shard_rows < 0 ||
      vocab_offset + shard_rows > vocab_size) {
    return absl::InvalidArgumentError("EmbeddingShard: negative size or a shard outside the vocabulary");
  }
  if (num_tokens == 0 || hidden_size == 0) return absl::OkStatus();
  if ((table == nullptr && shard_rows > 0) || tokens == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("EmbeddingShard: null pointer");
  }
  const int64_t blocks = num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks;
  EmbeddingKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ToDevice(table), tokens, num_tokens, vocab_size, vocab_offset, shard_rows, hidden_size, ToDevice(out));
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

namespace {

__global__ void __launch_bounds__(kThreads)
    ScaleEmbeddingKernel(float* x, int64_t n, float scale, bool round) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float v = __fmul_rn(x[i], scale);
    x[i] = round ? __bfloat162float(__float2bfloat16_rn(v)) : v;
  }
}

}  // namespace

absl::Status ScaleEmbedding(float* x, int64_t n, float scale, bool round_to_bf16, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("ScaleEmbedding: n < 0");
  if (n == 0) return absl::OkStatus();
  if (x == nullptr) return absl::InvalidArgumentError("ScaleEmbedding: null pointer");
  unsigned blocks = 1;
  SCORED_CUDA_CHECK(ResidentGrid(ScaleEmbeddingKernel, kThreads, CeilDiv(n, kThreads), &blocks));
  ScaleEmbeddingKernel<<<blocks, kThreads, 0, stream>>>(x, n, scale, round_to_bf16);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

#define SCORED_INSTANTIATE_EMBEDDING(TableT, OutT)                                                        \
  template absl::Status Embedding<TableT, OutT>(const TableT*, const int32_t*, int64_t, int64_t, int64_t, \
                                                OutT*, cudaStream_t);                                     \
  template absl::Status EmbeddingShard<TableT, OutT>(const TableT*, const int32_t*, int64_t, int64_t,     \
                                                     int64_t, int64_t, int64_t, OutT*, cudaStream_t);
SCORED_INSTANTIATE_EMBEDDING(float, float)
SCORED_INSTANTIATE_EMBEDDING(float, bf16_t)
SCORED_INSTANTIATE_EMBEDDING(bf16_t, float)
SCORED_INSTANTIATE_EMBEDDING(bf16_t, bf16_t)
#undef SCORED_INSTANTIATE_EMBEDDING

}  // namespace scored::kernels
