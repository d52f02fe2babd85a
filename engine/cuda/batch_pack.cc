#include "engine/cuda/batch_pack.h"

#include <algorithm>
#include <utility>

namespace scored::cuda {
namespace {

// packed->candidate_ids from the requests' candidate_ids (the layout of batch_pack.h), once the rows are
// laid.
void PackCandidates(absl::Span<const ScoreRequest* const> group, PackedBatch* packed) {
  const int64_t width = packed->fb.options.num_candidates;
  if (width == 0) return;
  packed->candidate_ids.assign(packed->fb.num_tokens * width, -1);
  for (size_t s = 0; s < group.size(); ++s) {
    const ScoreRequest& r = *group[s];
    const int64_t c = r.num_candidates;
    const int64_t rows = c > 0 ? static_cast<int64_t>(r.candidate_ids.size()) / c : 0;
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(r.candidate_ids.begin() + i * c, c,
                  packed->candidate_ids.begin() + (packed->first_row[s] + i) * width);
    }
  }
}

}  // namespace

void HostResults::Resize(const PackedBatch& batch) {
  const int64_t n = batch.fb.num_tokens;
  const int64_t top_k = batch.fb.options.top_k;
  logprob.resize(n);
  greedy.resize(n);
  rank.resize(batch.fb.options.want_rank ? n : 0);
  entropy.resize(batch.fb.options.want_entropy ? n : 0);
  top_ids.resize(n * top_k);
  top_lps.resize(n * top_k);
  candidate_logprobs.resize(n * batch.fb.options.num_candidates);
  min_logprob.resize(batch.fb.options.want_min_logprob ? n : 0);
  const int64_t compared = batch.fb.options.want_reference ? n : 0;
  ref_logprob.resize(compared);
  kld.resize(compared);
  ref_greedy.resize(compared);
  same_top.resize(compared);
}

PackedBatch PackBatch(absl::Span<const ScoreRequest* const> group) {
  PackedBatch packed;
  ForwardBatch& fb = packed.fb;
  fb.cu_seqlens = {0};
  for (const ScoreRequest* request : group) {
    const ScoreRequest& r = *request;
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    const int64_t offset = static_cast<int64_t>(packed.tokens.size());
    const int64_t from = std::max<int64_t>(1, r.score_from);
    for (int64_t j = 0; j < n; ++j) {
      packed.tokens.push_back(r.tokens[j]);
      packed.positions.push_back(static_cast<int32_t>(j));
      packed.targets.push_back(j + 1 < n ? r.tokens[j + 1] : 0);
    }
    fb.cu_seqlens.push_back(static_cast<int32_t>(offset + n));
    fb.max_seqlen = std::max(fb.max_seqlen, static_cast<int32_t>(n));
    packed.first_row.push_back(offset + from - 1);
    const RowSpan span{offset + from - 1, offset + n - 1};
    if (!fb.lm_head_rows.empty() && span.begin - fb.lm_head_rows.back().end <= kMaxSpanGap) {
      fb.lm_head_rows.back().end = span.end;
    } else {
      fb.lm_head_rows.push_back(span);
    }
    fb.options.top_k = std::max(fb.options.top_k, r.top_k);
    fb.options.want_rank = fb.options.want_rank || r.want_rank;
    fb.options.want_entropy = fb.options.want_entropy || r.want_entropy;
    fb.options.want_reference = fb.options.want_reference || r.want_reference;
    fb.options.num_candidates = std::max(fb.options.num_candidates, r.num_candidates);
    fb.options.want_min_logprob = fb.options.want_min_logprob || r.want_min_logprob;
  }
  fb.num_tokens = static_cast<int64_t>(packed.tokens.size());
  fb.num_seqs = static_cast<int32_t>(group.size());
  PackCandidates(group, &packed);
  return packed;
}

std::vector<ScoreResult> UnpackResults(absl::Span<const ScoreRequest* const> group, const PackedBatch& batch,
                                       const HostResults& host) {
  const ForwardBatch& fb = batch.fb;
  const int64_t top_k = fb.options.top_k;
  std::vector<ScoreResult> results;
  results.reserve(group.size());
  for (size_t s = 0; s < group.size(); ++s) {
    const ScoreRequest& r = *group[s];
    const int64_t last_row = fb.cu_seqlens[s + 1] - 1;  // exclusive: the last token predicts nothing
    ScoreResult result;
    for (int64_t row = batch.first_row[s]; row < last_row; ++row) {
      result.logprob.push_back(static_cast<float>(host.logprob[row]));
      result.sum_logprob += host.logprob[row];
      result.greedy.push_back(host.greedy[row]);
      if (r.want_rank) result.rank.push_back(host.rank[row]);
      if (r.want_entropy) result.entropy.push_back(host.entropy[row]);
      if (r.top_k > 0) {
        std::vector<TopKEntry> entries(r.top_k);
        for (int32_t i = 0; i < r.top_k; ++i)
          entries[i] = {host.top_ids[row * top_k + i], host.top_lps[row * top_k + i]};
        result.top_k.push_back(std::move(entries));
      }
      const int64_t width = fb.options.num_candidates;
      result.candidate_logprob.insert(result.candidate_logprob.end(),
                                      host.candidate_logprobs.begin() + row * width,
                                      host.candidate_logprobs.begin() + row * width + r.num_candidates);
      if (r.want_min_logprob) result.min_logprob.push_back(host.min_logprob[row]);
      if (r.want_reference) {
        result.ref_logprob.push_back(static_cast<float>(host.ref_logprob[row]));
        result.kld.push_back(static_cast<float>(host.kld[row]));
        result.ref_greedy.push_back(host.ref_greedy[row]);
        result.same_top.push_back(host.same_top[row]);
        result.sum_ref_logprob += host.ref_logprob[row];
        result.sum_kld += host.kld[row];
      }
    }
    result.num_scored = static_cast<int32_t>(result.logprob.size());
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace scored::cuda
