#include "engine/score_contract.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace scored {

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
  return absl::OkStatus();
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
