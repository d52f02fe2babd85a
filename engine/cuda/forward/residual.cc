#include "engine/cuda/forward/residual.h"

#include <cstdint>
#include <cstring>

#include "engine/base/status_macros.h"
#include "engine/cuda/forward/context.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/bias_add.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/rms_norm.h"

namespace scored::cuda {
namespace {

// x rounded to bf16 (nearest even) and widened back: a bf16 constant's value (finite x).
float RoundedToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &bits, sizeof(y));
  return y;
}

}  // namespace

template <typename T>
absl::Status ResidualStream<T>::Embed() {
  ForwardContext<T>& c = ctx_;
  constexpr bool kFp32 = ForwardContext<T>::kFp32;
  if (c.tp == nullptr) {
    SCORED_RETURN_IF_ERROR((kernels::Embedding<T, float>(c.model.embed.template as<T>(), c.tokens, c.n,
                                                         c.vocab, c.hidden, c.residual, c.stream)));
  } else {
    SCORED_RETURN_IF_ERROR((kernels::EmbeddingShard<T, float>(
        c.model.embed.template as<T>(), c.tokens, c.n, c.tp->vocab_size, c.tp->vocab_begin, c.tp->vocab_rows,
        c.hidden, c.residual, c.stream)));
    SCORED_RETURN_IF_ERROR(c.sums.AllReduceResidual(c.n));
  }
  const float embedding_scale = c.plan.embedding_scale;
  if (embedding_scale <= 0.0f) return absl::OkStatus();
  const float scale = kFp32 ? embedding_scale : RoundedToBf16(embedding_scale);
  return kernels::ScaleEmbedding(c.residual, c.n * c.hidden, scale, !kFp32, c.stream);
}

template <typename T>
absl::Status ResidualStream<T>::OpenNorm(const DeviceBuffer& weight, RowSum sum, int c,
                                         const NormOutput<T>& out) {
  const RowChunk& ch = ctx_.chunks[c];
  if (!pending_) return ctx_.sums.template Norm<T>(weight.as<float>(), ctx_.eps, sum, c, ch, out);
  if (out.to_fp8 || ctx_.num_chunks() != 1) {
    return absl::InternalError("the Gemma block's norms run in one row chunk without an FP8-fed input");
  }
  pending_ = false;
  const int64_t hidden = ctx_.hidden, b = ch.begin * hidden;
  return kernels::AddRmsNorm<float, T>(ctx_.proj + b, hidden, ctx_.residual + b, weight.as<float>(), ch.rows,
                                       hidden, ctx_.eps, out.normed + b, hidden, ctx_.stream);
}

template <typename T>
absl::Status ResidualStream<T>::CloseBlock(const WeightStream::Lease& w, const LinearPlan& plan, T* x,
                                           LinearInOut io, const DeviceBuffer& bias,
                                           const DeviceBuffer& post_norm, RowSum sum, int c) {
  if (form_ == ResidualForm::kSandwich) return CloseSandwich(w, plan, x, io, bias, post_norm, c);
  const RowChunk& ch = ctx_.chunks[c];
  io.add_to_output = ctx_.add_to_residual;
  SCORED_RETURN_IF_ERROR(ctx_.linears.Run(w, plan, x, ctx_.residual, io, ch));
  if (bias.data() != nullptr) {  // rank 0 (tp 1: the only rank) adds it to residual + its partial product
    const int64_t hidden = ctx_.hidden;
    SCORED_RETURN_IF_ERROR(kernels::BiasAdd<float>(ctx_.residual + ch.begin * hidden, hidden,
                                                   bias.as<float>(), ch.rows, hidden, ctx_.stream));
  }
  return ctx_.sums.Reduce(sum, c, ch);
}

template <typename T>
absl::Status ResidualStream<T>::CloseSandwich(const WeightStream::Lease& w, const LinearPlan& plan, T* x,
                                              LinearInOut io, const DeviceBuffer& bias,
                                              const DeviceBuffer& post_norm, int c) {
  const RowChunk& ch = ctx_.chunks[c];
  const int64_t hidden = ctx_.hidden;
  float* rows = ctx_.proj + ch.begin * hidden;  // [m, hidden]
  io.add_to_output = plan.in_halves;
  if (io.add_to_output) {
    SCORED_CUDA_CHECK(cudaMemsetAsync(rows, 0, ch.rows * hidden * sizeof(float), ctx_.stream));
  }
  SCORED_RETURN_IF_ERROR(ctx_.linears.Run(w, plan, x, ctx_.proj, io, ch));
  if (bias.data() != nullptr) {  // rank 0's partial product (tp 1: the product), before the sum over ranks
    SCORED_RETURN_IF_ERROR(
        kernels::BiasAdd<float>(rows, hidden, bias.as<float>(), ch.rows, hidden, ctx_.stream));
  }
  if (ctx_.tp != nullptr) {
    SCORED_RETURN_IF_ERROR(
        ctx_.tp->comm->AllReduceSum(rows, rows, ch.rows * hidden, dist::ReduceDType::kF32, ctx_.stream));
  }
  pending_ = true;
  return kernels::RmsNorm<float, float>(rows, hidden, post_norm.as<float>(), ch.rows, hidden, ctx_.eps, rows,
                                        hidden, ctx_.stream);
}

template class ResidualStream<kernels::bf16_t>;
template class ResidualStream<float>;

}  // namespace scored::cuda
