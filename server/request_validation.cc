#include "server/request_validation.h"

#include <algorithm>
#include <utility>

#include "engine/base/status_macros.h"

namespace scored {

absl::StatusOr<std::vector<int32_t>> TokenizeWithBos(const Tokenizer& tokenizer, const std::string& text,
                                                     bool has_add_bos, bool add_bos, EncodeLimits limits) {
  const bool want_bos = (has_add_bos ? add_bos : tokenizer.add_bos_by_default()) && tokenizer.bos_id() >= 0;
  if (want_bos && limits.max_tokens > 0) --limits.max_tokens;
  SCORED_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text, limits));
  if (want_bos) ids.insert(ids.begin(), tokenizer.bos_id());
  return ids;
}

absl::StatusOr<ScoreRequest> ToEngineRequest(const v1::ScoreRequest& proto, const ScoreLimits& limits,
                                             const Tokenizer* tokenizer) {
  ScoreRequest request;
  switch (proto.input_case()) {
    case v1::ScoreRequest::kTokens:
      request.tokens.assign(proto.tokens().ids().begin(), proto.tokens().ids().end());
      break;
    case v1::ScoreRequest::kText: {
      if (tokenizer == nullptr) {
        return absl::FailedPreconditionError(
            "`text` input needs a tokenizer, and the model folder has none; send `tokens`");
      }
      SCORED_ASSIGN_OR_RETURN(request.tokens,
                              TokenizeWithBos(*tokenizer, proto.text().text(), proto.text().has_add_bos(),
                                              proto.text().add_bos()));
      break;
    }
    default:
      return absl::InvalidArgumentError("exactly one of `tokens` or `text` must be set; got neither");
  }
  request.score_from = std::max<int32_t>(1, proto.score_from());
  request.top_k = proto.top_k();
  request.want_rank = proto.want_rank();
  request.want_entropy = proto.want_entropy();
  request.want_reference = proto.want_reference();
  request.num_candidates = proto.num_candidates();
  request.candidate_ids.assign(proto.candidate_ids().begin(), proto.candidate_ids().end());
  request.want_min_logprob = proto.want_min_logprob();
  // Report the score_from the client sent (not the clamped one) if it is too large.
  ScoreRequest check = request;
  check.score_from = proto.score_from();
  SCORED_RETURN_IF_ERROR(ValidateScoreRequest(check, limits));
  return request;
}

void FillScoreResponse(const ScoreRequest& request, const ScoreResult& result, bool echo_tokens,
                       uint64_t request_id, v1::ScoreResponse* response) {
  response->set_request_id(request_id);
  if (echo_tokens) response->mutable_tokens()->Assign(request.tokens.begin(), request.tokens.end());
  response->set_first_scored(std::max<int32_t>(1, request.score_from));
  response->mutable_logprob()->Assign(result.logprob.begin(), result.logprob.end());
  auto* greedy = response->mutable_greedy();
  greedy->Reserve(static_cast<int>(result.greedy.size()));
  for (uint8_t g : result.greedy) greedy->Add(g != 0);
  if (request.want_rank) response->mutable_rank()->Assign(result.rank.begin(), result.rank.end());
  if (request.want_entropy) response->mutable_entropy()->Assign(result.entropy.begin(), result.entropy.end());
  if (request.top_k > 0) {
    auto* lists = response->mutable_top_k();
    lists->Reserve(static_cast<int>(result.top_k.size()));
    for (const std::vector<TopKEntry>& entries : result.top_k) {
      v1::TopTokens* list = lists->Add();
      for (const TopKEntry& e : entries) {
        v1::TopToken* t = list->add_tokens();
        t->set_id(e.id);
        t->set_logprob(e.logprob);
      }
    }
  }
  response->set_sum_logprob(result.sum_logprob);
  response->set_num_scored(result.num_scored);
  if (request.want_reference) {
    response->mutable_ref_logprob()->Assign(result.ref_logprob.begin(), result.ref_logprob.end());
    response->mutable_kld()->Assign(result.kld.begin(), result.kld.end());
    auto* ref_greedy = response->mutable_ref_greedy();
    ref_greedy->Reserve(static_cast<int>(result.ref_greedy.size()));
    for (uint8_t g : result.ref_greedy) ref_greedy->Add(g != 0);
    auto* same_top = response->mutable_same_top();
    same_top->Reserve(static_cast<int>(result.same_top.size()));
    for (uint8_t s : result.same_top) same_top->Add(s != 0);
    response->set_sum_ref_logprob(result.sum_ref_logprob);
    response->set_sum_kld(result.sum_kld);
  }
  response->mutable_candidate_logprob()->Assign(result.candidate_logprob.begin(),
                                                result.candidate_logprob.end());
  if (request.want_min_logprob) {
    response->mutable_min_logprob()->Assign(result.min_logprob.begin(), result.min_logprob.end());
  }
}

}  // namespace scored
