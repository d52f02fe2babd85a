// Row chunks of a tensor-parallel forward: blocks of whole sequences of the packed batch, so that every op of
// a decoder layer (attention included: it is per sequence) can run chunk by chunk while the previous chunk's
// sum over ranks is in flight (transformer.cc). Host code only.
#ifndef SCORED_ENGINE_CUDA_ROW_CHUNKS_H_
#define SCORED_ENGINE_CUDA_ROW_CHUNKS_H_

#include <cstdint>
#include <vector>

namespace scored::cuda {

// The most chunks; the auto setting's chunk count and the batch size from which it applies (smaller batches
// run unchunked). Two chunks measured best on 2 x H200 (8B W4A16, 8 and 16 windows of 2048: 2 chunks 245 /
// 485 ms per step, 4: 252 / 500, 8: 281 / 510; tests/bench/RESULTS.md): every chunk's GEMMs stay large and
// half of each sum over ranks still overlaps.
constexpr int kMaxTpRowChunks = 8;
constexpr int kTpAutoChunks = 2;
constexpr int64_t kTpAutoMinTokens = 8192;

struct RowChunk {
  int64_t begin = 0;  // packed rows [begin, begin + rows)
  int64_t rows = 0;
  int32_t first_seq = 0;  // sequences [first_seq, first_seq + num_seqs)
  int32_t num_seqs = 0;
  int32_t max_seqlen = 0;  // the longest of them
};

// The chunks of a batch of num_tokens rows whose sequence s holds rows [cu_seqlens[s], cu_seqlens[s + 1]):
// at most `wanted` (0: auto, kTpAutoChunks from kTpAutoMinTokens tokens, else 1; clamped to [1,
// kMaxTpRowChunks]) of whole sequences, each closed once it holds ceil(num_tokens / wanted) rows or more, so
// a batch of fewer sequences gets fewer chunks. One chunk of the whole batch (max_seqlen as given) when
// `chunked` is false, one chunk is wanted, or cu_seqlens does not have num_seqs + 1 entries.
std::vector<RowChunk> RowChunks(const std::vector<int32_t>& cu_seqlens, int64_t num_tokens, int32_t num_seqs,
                                int32_t max_seqlen, int wanted, bool chunked);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_ROW_CHUNKS_H_
