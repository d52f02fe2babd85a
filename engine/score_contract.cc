#include "engine/score_contract.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace scored {
namespace {

// The candidate ids of `request` (sizes and score_from already checked): their count, their limit, their
// range.
absl::Status ValidateCandidates(const ScoreRequest& request, int64_t vocab_size) {
  if (request.num_candidates < 0 || request.num_candidates > kMaxCandidates) {
    return absl::InvalidArgumentError(absl::StrCat("num_candidates must be in [0, ", kMaxCandidates,
                                                   "] (kMaxCandidates), got ", request.num_candidates));
  }
  const int64_t first = std::max<int64_t>(1, request.score_from);
  const int64_t num_scored = static_cast<int64_t>(request.tokens.size()) - first;
  const int64_t ids = static_cast<int64_t>(request.candidate_ids.size());
  if (ids == 0 && request.num_candidates == 0) return absl::OkStatus();
  if (ids != num_scored * request.num_candidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "candidate_ids has ", ids, " ids; num_candidates ", request.num_candidates, " at each of the ",
        num_scored, " scored positions needs ", num_scored * request.num_candidates));
  }
  if (ids > kMaxCandidateIds) {
    return absl::InvalidArgumentError(absl::StrCat("candidate_ids has ", ids, " ids, more than the ",
                                                   kMaxCandidateIds,
                                                   " a request may name (kMaxCandidateIds); split the "
                                                   "sequence or name fewer per position"));
  }
  for (int64_t i = 0; i < ids; ++i) {
    const int32_t id = request.candidate_ids[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab_size) {
      const int64_t scored = i / request.num_candidates;
      return absl::InvalidArgumentError(absl::StrCat(
          "candidate id ", id, " at scored position ", scored, " (position ", first + scored, "), candidate ",
          i % request.num_candidates, ", is out of range [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateScoreRequest(const ScoreRequest& request, const ScoreLimits& limits) {
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sequence needs at least 2 tokens (the first is context only); got ", n));
  }
  if (n > limits.max_seq_len) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence has ", n, " tokens; max_seq_len is ", limits.max_seq_len));
  }
  if (n > limits.max_batch_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence has ", n, " tokens; max_batch_tokens is ", limits.max_batch_tokens));
  }
  if (request.score_from >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("score_from ", request.score_from, " must be less than the number of tokens ", n));
  }
  if (request.top_k < 0 || request.top_k > kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be in [0, ", kMaxTopK, "], got ", request.top_k));
  }
  if (limits.smallest_vocab_shard > 0 && request.top_k > limits.smallest_vocab_shard) {
    return absl::InvalidArgumentError(absl::StrCat("top_k ", request.top_k, " exceeds the ",
                                                   limits.smallest_vocab_shard,
                                                   " vocabulary rows of the smallest --tp shard"));
  }
  if (request.top_k > limits.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k ", request.top_k, " exceeds the vocabulary size ", limits.vocab_size));
  }
  if (request.want_reference && !limits.has_reference) {
    return absl::InvalidArgumentError(
        "want_reference: this server has no reference model; start scored with --reference_model DIR "
        "(the original model to compare this one with) to score against one");
  }
  for (int64_t j = 0; j < n; ++j) {
    const int32_t id = request.tokens[static_cast<size_t>(j)];
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", j, " is out of range [0, ", limits.vocab_size, ")"));
    }
  }
  return ValidateCandidates(request, limits.vocab_size);
}

int64_t SmallestVocabShard(int64_t vocab_size, int tp) {
  return vocab_size - (tp - 1) * ((vocab_size + tp - 1) / tp);
}

absl::StatusOr<std::vector<ScoreResult>> ScoreAll(Engine& engine, absl::Span<const ScoreRequest> batch) {
  std::vector<absl::StatusOr<ScoreResult>> scored = engine.Score(batch);
  if (scored.size() != batch.size()) {
    return absl::InternalError(
        absl::StrCat("the engine returned ", scored.size(), " results for ", batch.size(), " sequences"));
  }
  std::vector<ScoreResult> results;
  results.reserve(scored.size());
  for (absl::StatusOr<ScoreResult>& one : scored) {
    if (!one.ok()) return one.status();
    results.push_back(*std::move(one));
  }
  return results;
}

}  // namespace scored
