// The wire form of a packed batch (engine/cuda/batch_pack.h) that the leader process sends to its follower
// processes before its own ranks run it (engine/dist/leader_follower.h). A few KB per batch. Hosts of one
// tensor-parallel group have the same architecture, so integers go as their host bytes:
//   [i64 num_tokens][i32 num_seqs][i32 max_seqlen][i32 top_k][u8 want_rank][u8 want_entropy]
//   [u8 want_reference][i32 num_candidates][u8 want_min_logprob]
//   [i64 num_spans][num_spans x (i64 begin, i64 end)]
//   [num_tokens x i32 tokens][num_tokens x i32 positions][num_tokens x i32 targets]
//   [num_seqs + 1 x i32 cu_seqlens][num_tokens x num_candidates x i32 candidate_ids]
// PackedBatch::first_row is the leader's own (it unpacks the results); it does not travel.
// Thread-safety: stateless functions.
#ifndef SCORED_ENGINE_DIST_BATCH_WIRE_H_
#define SCORED_ENGINE_DIST_BATCH_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/cuda/batch_pack.h"

namespace scored::dist {

std::string SerializeBatch(const cuda::PackedBatch& batch);

// The batch `bytes` holds. INTERNAL naming the field for bytes that are truncated, have bytes left over or
// break a limit (num_tokens outside [1, max_tokens], num_seqs outside [1, num_tokens], top_k outside
// [0, kMaxTopK], num_candidates outside [0, kMaxCandidates], a span outside [0, num_tokens] or reversed, more
// spans than sequences, cu_seqlens not rising from 0 to num_tokens, max_seqlen not the longest sequence's
// length): the leader and this process disagree, and such a batch must never run. Never reads past `bytes`.
absl::StatusOr<cuda::PackedBatch> ParseBatch(absl::string_view bytes, int64_t max_tokens);

}  // namespace scored::dist

#endif  // SCORED_ENGINE_DIST_BATCH_WIRE_H_
