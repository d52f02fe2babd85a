#include "engine/cuda/row_chunks.h"

#include <algorithm>

namespace scored::cuda {

std::vector<RowChunk> RowChunks(const std::vector<int32_t>& cu_seqlens, int64_t num_tokens, int32_t num_seqs,
                                int32_t max_seqlen, int wanted, bool chunked) {
  const std::vector<int32_t>& cu = cu_seqlens;
  if (wanted == 0) wanted = num_tokens >= kTpAutoMinTokens ? kTpAutoChunks : 1;
  wanted = std::max(1, std::min(wanted, kMaxTpRowChunks));
  if (!chunked || wanted == 1 || num_seqs < 1 || cu.size() != static_cast<size_t>(num_seqs) + 1) {
    return {RowChunk{0, num_tokens, 0, num_seqs, max_seqlen}};
  }
  const int64_t target = (num_tokens + wanted - 1) / wanted;
  std::vector<RowChunk> chunks;
  RowChunk c;
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (c.num_seqs == 0) {
      c.begin = cu[s];
      c.first_seq = s;
    }
    ++c.num_seqs;
    c.max_seqlen = std::max(c.max_seqlen, cu[s + 1] - cu[s]);
    c.rows = cu[s + 1] - c.begin;
    if (c.rows >= target && static_cast<int>(chunks.size()) + 1 < wanted) {
      chunks.push_back(c);
      c = RowChunk();
    }
  }
  if (c.num_seqs > 0) chunks.push_back(c);
  return chunks;
}

}  // namespace scored::cuda
