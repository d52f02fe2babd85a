// Fuzzes request validation (server/request_validation.h) with serialized scored.v1.ScoreRequest
// messages, as they arrive off the wire: proto parse, ToEngineRequest (token ids, or text tokenized with
// the stories260K SentencePiece model and the BOS policy), then FillScoreResponse with a result of the
// shape the engine promises.
//
// Contract checked: an accepted request has 2 <= n <= min(max_seq_len, max_batch_tokens), every id in
// [0, vocab_size), 1 <= score_from < n and top_k in [0, 64]; a rejected one is INVALID_ARGUMENT,
// OUT_OF_RANGE (n over a limit) or FAILED_PRECONDITION (text without a tokenizer), with a message. The
// response has n - score_from entries in every requested array. No crash or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "server/request_validation.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const scored::Tokenizer* GetTokenizer() {
  static const scored::Tokenizer* tok = [] {
    absl::StatusOr<std::unique_ptr<scored::Tokenizer>> t =
        scored::Tokenizer::Load(scored::fuzz::DataPath("stories260K-hf"));
    FUZZ_CHECK(t.ok(), t.status().ToString());
    return t->release();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::fuzz::CodeIsOneOf;
  scored::v1::ScoreRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  scored::ScoreLimits limits;
  limits.max_seq_len = 48;
  limits.max_batch_tokens = 40;
  limits.vocab_size = 512;  // stories260K
  // Odd request ids stand for a model folder without a tokenizer.
  const scored::Tokenizer* tok = (proto.request_id() & 1) != 0 ? nullptr : GetTokenizer();
  FUZZ_CHECK(tok == nullptr || tok->vocab_size() == limits.vocab_size, "stories260K vocabulary size");

  absl::StatusOr<scored::ScoreRequest> r = scored::ToEngineRequest(proto, limits, tok);
  if (!r.ok()) {
    FUZZ_CHECK(CodeIsOneOf(r.status(), absl::StatusCode::kInvalidArgument, absl::StatusCode::kOutOfRange,
                           absl::StatusCode::kFailedPrecondition),
               r.status().ToString());
    if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
      FUZZ_CHECK(tok == nullptr && proto.has_text(), r.status().ToString());
    }
    return 0;
  }
  const int64_t n = static_cast<int64_t>(r->tokens.size());
  FUZZ_CHECK(n >= 2 && n <= limits.max_seq_len && n <= limits.max_batch_tokens, "length");
  for (int32_t id : r->tokens) FUZZ_CHECK(id >= 0 && id < limits.vocab_size, std::to_string(id));
  FUZZ_CHECK(r->score_from >= 1 && r->score_from < n, "score_from");
  FUZZ_CHECK(r->top_k >= 0 && r->top_k <= scored::kMaxTopK, "top_k");
  FUZZ_CHECK(scored::ValidateScoreRequest(*r, limits).ok(), "accepted request fails validation");

  const int32_t num_scored = static_cast<int32_t>(n) - r->score_from;
  scored::ScoreResult result;
  result.num_scored = num_scored;
  result.logprob.assign(static_cast<size_t>(num_scored), -1.0f);
  result.greedy.assign(static_cast<size_t>(num_scored), 1);
  if (r->want_rank) result.rank.assign(static_cast<size_t>(num_scored), 1);
  if (r->want_entropy) result.entropy.assign(static_cast<size_t>(num_scored), 0.5f);
  if (r->top_k > 0) {
    result.top_k.assign(static_cast<size_t>(num_scored),
                        std::vector<scored::TopKEntry>(static_cast<size_t>(r->top_k), {0, -1.0f}));
  }
  result.sum_logprob = -num_scored;
  scored::v1::ScoreResponse response;
  scored::FillScoreResponse(*r, result, proto.has_text(), proto.request_id(), &response);
  FUZZ_CHECK(response.logprob_size() == num_scored && response.greedy_size() == num_scored, "arrays");
  FUZZ_CHECK(response.rank_size() == (r->want_rank ? num_scored : 0), "rank");
  FUZZ_CHECK(response.entropy_size() == (r->want_entropy ? num_scored : 0), "entropy");
  FUZZ_CHECK(response.top_k_size() == (r->top_k > 0 ? num_scored : 0), "top_k");
  FUZZ_CHECK(response.first_scored() == r->score_from, "first_scored");
  FUZZ_CHECK(response.tokens_size() == (proto.has_text() ? n : 0), "echoed tokens");
  return 0;
}
