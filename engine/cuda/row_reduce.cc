#include "engine/cuda/row_reduce.h"

#include "engine/base/status_macros.h"
#include "engine/cuda/peer_link.h"
#include "engine/cuda/tp_context.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/fp8_scale.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rms_norm_fp8.h"

namespace scored::cuda {

static_assert(kMaxTpRowChunks <= PeerLink::kMaxChunks, "a peer push per row chunk");

RowReducer::RowReducer(const TensorParallelContext* tp, Activations* acts, int num_chunks,
                       int64_t hidden_size, cudaStream_t stream)
    : tp_(tp),
      acts_(acts),
      peer_(tp != nullptr ? tp->peer : nullptr),
      rank_(tp != nullptr ? tp->comm->rank() : 0),
      pipelined_(tp != nullptr && num_chunks > 1),
      comm_(pipelined_ ? acts->comm_stream.get() : stream),
      stream_(stream),
      residual_(acts->residual.as<float>()),
      hidden_(hidden_size) {}

absl::Status RowReducer::AllReduceResidual(int64_t num_tokens) {
  if (tp_ == nullptr) return absl::OkStatus();
  return tp_->comm->AllReduceSum(residual_, residual_, num_tokens * hidden_, dist::ReduceDType::kF32,
                                 stream_);
}

absl::Status RowReducer::Reduce(RowSum sum, int c, const RowChunk& ch) {
  if (tp_ == nullptr) return absl::OkStatus();
  float* x = residual_ + ch.begin * hidden_;  // [rows, hidden]
  if (peer_ != nullptr) {
    const cudaStream_t copy = acts_->comm_stream.get();
    SCORED_CUDA_CHECK(cudaEventRecord(acts_->chunk_ready[c].get(), stream_));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(copy, acts_->chunk_ready[c].get(), 0));
    SCORED_ASSIGN_OR_RETURN(pushed_[c], peer_->Push(rank_, static_cast<int>(sum), c, x, ch.begin * hidden_,
                                                    ch.rows * hidden_, copy));
    return absl::OkStatus();
  }
  if (!pipelined_) return tp_->comm->AllReduceSum(x, x, ch.rows * hidden_, dist::ReduceDType::kF32, stream_);
  SCORED_CUDA_CHECK(cudaEventRecord(acts_->chunk_ready[c].get(), stream_));
  SCORED_CUDA_CHECK(cudaStreamWaitEvent(comm_, acts_->chunk_ready[c].get(), 0));
  SCORED_RETURN_IF_ERROR(tp_->comm->AllReduceSum(x, x, ch.rows * hidden_, dist::ReduceDType::kF32, comm_));
  SCORED_CUDA_CHECK(cudaEventRecord(acts_->chunk_reduced[c].get(), comm_));
  return absl::OkStatus();
}

template <typename T>
absl::Status RowReducer::Norm(const float* weight, float eps, RowSum sum, int c, const RowChunk& ch,
                              const NormOutput<T>& out) {
  const int64_t hidden = hidden_, m = ch.rows;
  float* rows = residual_ + ch.begin * hidden;  // [m, hidden]
  if (sum != RowSum::kNone && peer_ != nullptr) {
    const int parity = static_cast<int>(sum);
    SCORED_RETURN_IF_ERROR(peer_->AwaitPeer(rank_, pushed_[c], parity, c, stream_));
    const float* theirs = peer_->received(rank_, parity) + ch.begin * hidden;  // [m, hidden]
    if (!out.to_fp8) {
      return kernels::AddRmsNorm<float, T>(theirs, hidden, rows, weight, m, hidden, eps,
                                           out.normed + ch.begin * hidden, hidden, stream_);
    }
    SCORED_RETURN_IF_ERROR(kernels::AddFp8Scaled(theirs, m, hidden, nullptr, nullptr, rows, stream_));
  } else if (sum != RowSum::kNone && pipelined_) {
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream_, acts_->chunk_reduced[c].get(), 0));
  }
  if (out.to_fp8) {
    return kernels::RmsNormQuantFp8(rows, hidden, weight, m, hidden, eps, nullptr, hidden,
                                    out.fp8 + ch.begin * hidden, out.fp8_scale + ch.begin, stream_);
  }
  return kernels::RmsNorm<float, T>(rows, hidden, weight, m, hidden, eps, out.normed + ch.begin * hidden,
                                    hidden, stream_);
}

template absl::Status RowReducer::Norm<kernels::bf16_t>(const float*, float, RowSum, int, const RowChunk&,
                                                        const NormOutput<kernels::bf16_t>&);
template absl::Status RowReducer::Norm<float>(const float*, float, RowSum, int, const RowChunk&,
                                              const NormOutput<float>&);

}  // namespace scored::cuda
