// Host side of a CUDA engine batch: packing score requests into one varlen forward (ForwardBatch plus its
// input arrays) and turning the per-row results copied back from the device into ScoreResults. Plain C++, no
// CUDA: built with or without SCORED_ENABLE_CUDA and tested on the CPU
// (tests/engine/cuda/batch_pack_test.cc).
//
// Layout: the sequences of a group are concatenated in order; rows of sequence s are
// [fb.cu_seqlens[s], fb.cu_seqlens[s + 1]). Row r of sequence s (position j = r - cu_seqlens[s]) predicts
// targets[r] = tokens[j + 1] (0 at the sequence's last row, which predicts nothing); a sequence's rows from
// first_row[s] = cu_seqlens[s] + max(1, score_from) - 1 to its second-to-last are scored. The lm_head runs
// only on the scored rows: one RowSpan per sequence, merged with the previous one when the gap between
// them is at most kMaxSpanGap rows. The group's RowStatsOptions are the union of its requests' (largest
// top_k and num_candidates, any want_rank / want_entropy / want_min_logprob); each result keeps only what its
// own request asked for. Candidate ids: row r's num_candidates ids are its scored position's (a request's
// candidate_ids in order), -1 padding the rows and columns no request named (their logprobs are NaN and
// never returned).
// Thread-safety: stateless functions.
#ifndef SCORED_ENGINE_CUDA_BATCH_PACK_H_
#define SCORED_ENGINE_CUDA_BATCH_PACK_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/cuda/forward_batch.h"
#include "engine/engine.h"

namespace scored::cuda {

// Rows between two sequences' lm_head spans up to which the spans are merged into one GEMM: computing a
// few unneeded rows costs less than another launch of the 128k-column lm_head.
constexpr int64_t kMaxSpanGap = 64;

// One batch packed on the host once and handed to every rank (and, serialized, to follower processes).
struct PackedBatch {
  ForwardBatch fb;
  std::vector<int32_t> tokens, positions, targets;  // [fb.num_tokens] each
  std::vector<int64_t> first_row;                   // [fb.num_seqs]: the first row whose logits are scored
  std::vector<int32_t> candidate_ids;  // [fb.num_tokens, fb.options.num_candidates] (above); empty without
};

// Per-row results copied back from the device (rank 0 at tp > 1: every rank holds the same).
struct HostResults {
  std::vector<double> logprob;            // [n]
  std::vector<uint8_t> greedy;            // [n]
  std::vector<int32_t> rank;              // [n] if fb.options.want_rank, else empty
  std::vector<float> entropy;             // [n] if fb.options.want_entropy, else empty
  std::vector<int32_t> top_ids;           // [n, fb.options.top_k]
  std::vector<float> top_lps;             // [n, fb.options.top_k]
  std::vector<float> candidate_logprobs;  // [n, fb.options.num_candidates]
  std::vector<float> min_logprob;         // [n] if fb.options.want_min_logprob, else empty
  // If fb.options.want_reference, else empty: the comparison with the reference model per row.
  std::vector<double> ref_logprob;  // [n]
  std::vector<double> kld;          // [n]
  std::vector<uint8_t> ref_greedy;  // [n]
  std::vector<uint8_t> same_top;    // [n]

  // Sizes every array for the n = batch.fb.num_tokens rows and the options of `batch`.
  void Resize(const PackedBatch& batch);
};

// Packs `group` (each request valid under the Score contract, engine/score_contract.h; their summed tokens
// at most the engine's max_batch_tokens) into one forward. `group` is not empty.
PackedBatch PackBatch(absl::Span<const ScoreRequest* const> group);

// The ScoreResult of every request of `group` (the one PackBatch packed into `batch`) from the rows of
// `host` (sized by HostResults::Resize), in order.
std::vector<ScoreResult> UnpackResults(absl::Span<const ScoreRequest* const> group, const PackedBatch& batch,
                                       const HostResults& host);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_BATCH_PACK_H_
