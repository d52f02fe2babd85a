#include "engine/cuda/forward/lm_head.h"

#include <algorithm>
#include <cstdint>

#include "engine/base/status_macros.h"
#include "engine/dist/vocab_parallel_logprob.h"
#include "engine/kernels/baseline_compare.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/logprob.h"
#include "engine/kernels/soft_cap.h"

namespace scored::cuda {
namespace {

// The reference model's logits of rows [begin, begin + rows) from its final normed rows, then the fused
// comparison with this model's logits of the same rows (logits, just written).
template <typename T>
absl::Status CompareWithBaseline(ForwardContext<T>& ctx, int64_t begin, int64_t rows) {
  Activations* const acts = ctx.acts;
  const BaselineModel& reference = *ctx.reference;
  const DeviceModel& ref = *reference.model;
  SCORED_ASSIGN_OR_RETURN(const void* head, ref.lm_head.Materialize(ref.dtype, nullptr, ctx.stream));
  const int64_t ref_hidden = reference.config->hidden_size, head_rows = ref.lm_head.out_features();
  float* ref_logits = acts->ref_logits.as<float>();  // [rows, head_rows]
  // ref_logits [rows, head_rows] = R's normed rows . R's W_head^T
  SCORED_RETURN_IF_ERROR(ctx.gemm.Linear(acts->ref_normed.as<T>() + begin * ref_hidden, head, ref_logits,
                                         rows, head_rows, ref_hidden, ctx.to_fp32, ctx.stream));
  if (ctx.ref_final_logit_softcap > 0.0f) {
    SCORED_RETURN_IF_ERROR(
        kernels::SoftCap(ref_logits, rows, head_rows, head_rows, ctx.ref_final_logit_softcap, ctx.stream));
  }
  kernels::BaselineOutputs out;
  out.ref_logprob = acts->ref_logprob.as<double>() + begin;  // [rows]
  out.kld = acts->kld.as<double>() + begin;                  // [rows]
  out.ref_greedy = acts->ref_greedy.as<uint8_t>() + begin;   // [rows]
  out.same_top = acts->same_top.as<uint8_t>() + begin;       // [rows]
  auto* stats = acts->ref_stats.as<kernels::BaselinePartialStats>();
  const int64_t q_rows = ctx.model.lm_head.out_features();
  if (ctx.tp == nullptr) {
    return kernels::CompareWithBaseline(ref_logits, head_rows, ctx.logits, q_rows, ctx.targets + begin, rows,
                                        ctx.vocab, stats, out, ctx.stream);
  }
  return dist::VocabParallelCompare(*ctx.tp->comm, ref_logits, head_rows, ctx.logits, q_rows, q_rows,
                                    ctx.tp->vocab_begin, ctx.targets + begin, rows, stats, out, ctx.stream);
}

// The per-row statistics of rows [begin, begin + rows) from their logits [rows, head_rows] (tp: the
// rank's vocabulary rows, combined across ranks by per-token statistics).
template <typename T>
absl::Status ScoreRows(ForwardContext<T>& ctx, int64_t begin, int64_t rows, int64_t head_rows) {
  Activations* const acts = ctx.acts;
  const int64_t top_k = ctx.batch.options.top_k;
  kernels::LogprobOutputs out;
  out.logprob = acts->logprob.as<double>() + begin;                       // [rows]
  out.greedy = acts->greedy.as<uint8_t>() + begin;                        // [rows]
  out.rank = acts->rank.as<int32_t>() + begin;                            // [rows]
  out.entropy = acts->entropy.as<float>() + begin;                        // [rows]
  out.top_k_ids = acts->top_k_ids.as<int32_t>() + begin * top_k;          // [rows, top_k]
  out.top_k_logprobs = acts->top_k_logprobs.as<float>() + begin * top_k;  // [rows, top_k]
  const int64_t candidates = ctx.batch.options.num_candidates;
  out.candidate_ids = acts->candidate_ids.as<int32_t>() + begin * candidates;          // [rows, candidates]
  out.candidate_logprobs = acts->candidate_logprobs.as<float>() + begin * candidates;  // [rows, candidates]
  out.min_logprob = acts->min_logprob.as<float>() + begin;                             // [rows]
  if (ctx.tp == nullptr) {
    return kernels::ScoreLogits(ctx.logits, ctx.vocab, ctx.targets + begin, rows, ctx.vocab,
                                ctx.batch.options, out, ctx.stream);
  }
  return dist::VocabParallelScore(
      *ctx.tp->comm, ctx.logits, head_rows, head_rows, ctx.tp->vocab_begin, ctx.targets + begin, rows,
      ctx.batch.options, acts->tp_stats.as<kernels::LogitPartialStats>(), acts->tp_target_logit.as<float>(),
      acts->tp_topk_ids.as<int32_t>(), acts->tp_topk_values.as<float>(), out, ctx.stream);
}

}  // namespace

template <typename T>
absl::Status LmHead(ForwardContext<T>& ctx) {
  const DeviceModel& model = ctx.model;
  SCORED_ASSIGN_OR_RETURN(const void* head, model.lm_head.Materialize(model.dtype, nullptr, ctx.stream));
  const int64_t head_rows = model.lm_head.out_features();
  const int64_t chunk = ctx.acts->logits_rows;
  const bool compare = ctx.reference != nullptr && ctx.batch.options.want_reference;
  for (const RowSpan& span : ctx.batch.lm_head_rows) {
    for (int64_t begin = span.begin; begin < span.end; begin += chunk) {
      const int64_t rows = std::min(chunk, span.end - begin);
      // logits [rows, head_rows] = normed rows . W_head^T
      SCORED_RETURN_IF_ERROR(ctx.gemm.Linear(ctx.normed + begin * ctx.hidden, head, ctx.logits, rows,
                                             head_rows, ctx.hidden, ctx.to_fp32, ctx.stream));
      if (ctx.plan.final_logit_softcap > 0.0f) {  // Gemma 2
        SCORED_RETURN_IF_ERROR(kernels::SoftCap(ctx.logits, rows, head_rows, head_rows,
                                                ctx.plan.final_logit_softcap, ctx.stream));
      }
      SCORED_RETURN_IF_ERROR(ScoreRows(ctx, begin, rows, head_rows));
      if (compare) SCORED_RETURN_IF_ERROR(CompareWithBaseline(ctx, begin, rows));
    }
  }
  return absl::OkStatus();
}

template absl::Status LmHead<kernels::bf16_t>(ForwardContext<kernels::bf16_t>&);
template absl::Status LmHead<float>(ForwardContext<float>&);

}  // namespace scored::cuda
