// The sum over tensor-parallel ranks of the residual rows that a row-parallel linear (o_proj, down_proj)
// left partial, and the RmsNorm that reads the summed rows: one call each per row chunk (forward/).
//
// Each rank's o_proj / down_proj adds its partial product into its own fp32 residual rows (rank 0) or writes
// it over them (other ranks); the rows must be summed over ranks before the next norm reads them. Reduce()
// starts chunk c's sum right after the chunk's GEMM; Norm() waits for it and normalizes the chunk. How:
//  - NCCL, not pipelined (one row chunk): an in-place all-reduce on the forward's stream; Norm waits for
//    nothing more (stream order).
//  - NCCL, pipelined (several chunks): the all-reduce runs on comm_stream after chunk_ready[c] (recorded on
//    the forward's stream) and records chunk_reduced[c]; Norm makes the forward's stream wait for it, so the
//    sum of chunk c overlaps the compute of the next chunks.
//  - Peer copies (tp 2 in one process, TensorParallelContext::peer): Reduce pushes the rank's rows to the
//    peer on comm_stream (PeerLink::Push, after chunk_ready[c]); Norm awaits the peer's push (AwaitPeer) and
//    adds the received rows to the rank's own in the norm (AddRmsNorm), or first in place (AddFp8Scaled
//    without scales) where the norm quantizes to FP8: bitwise the all-reduce's one fp32 add (a + b == b + a).
// At tp 1 (tp == nullptr) Reduce does nothing and Norm is the plain RmsNorm.
//
// Contract: the ranks call Reduce and Norm for the same (sum, chunk) pairs in the same order; chunk c's Norm
// after its Reduce. Errors: the communicator's or PeerLink's statuses, CUDA errors. Ownership: borrows `tp`
// and `acts` (the residual, comm_stream, the chunk events), which outlive it; one RowReducer per forward.
// Thread-safety: none (the rank's forward thread).
#ifndef SCORED_ENGINE_CUDA_ROW_REDUCE_H_
#define SCORED_ENGINE_CUDA_ROW_REDUCE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/activations.h"
#include "engine/cuda/row_chunks.h"
#include "engine/cuda/tp_context.h"

namespace scored::cuda {

// Which row-parallel sum a norm follows. Also the PeerLink receive buffer (parity) of the sum.
enum class RowSum {
  kNone = -1,      // nothing to await: the first layer's input norm
  kAfterO = 0,     // o_proj's, read by the post-attention norm
  kAfterDown = 1,  // down_proj's, read by the next layer's input norm and the final norm
};

// Where a norm writes a chunk's rows: `normed` in the compute dtype T, or, with to_fp8 (a real FP8 GEMM's
// input), FP8 E4M3 rows and their per-token scales.
template <typename T>
struct NormOutput {
  bool to_fp8 = false;
  T* normed = nullptr;         // [num_tokens, hidden_size]
  uint8_t* fp8 = nullptr;      // [num_tokens, hidden_size] E4M3, with to_fp8
  float* fp8_scale = nullptr;  // [num_tokens], with to_fp8
};

class RowReducer {
 public:
  // tp: null at tp 1. num_chunks: the forward's row chunks (more than one with tp: pipelined). `stream`: the
  // forward's.
  RowReducer(const TensorParallelContext* tp, Activations* acts, int num_chunks, int64_t hidden_size,
             cudaStream_t stream);

  // tp only: the in-place all-reduce of rows [0, num_tokens) of the residual on the forward's stream (the
  // embedding lookup of every rank's vocabulary rows).
  absl::Status AllReduceResidual(int64_t num_tokens);

  // After chunk c's row-parallel GEMM (sum kAfterO or kAfterDown): enqueues the sum over ranks of its
  // residual rows [ch.begin, ch.begin + ch.rows).
  absl::Status Reduce(RowSum sum, int c, const RowChunk& ch);

  // RmsNorm of chunk c's residual rows (weight [hidden_size] fp32, eps) into `out`, after `sum` of those rows
  // (Reduce) is complete (kNone: no wait).
  template <typename T>
  absl::Status Norm(const float* weight, float eps, RowSum sum, int c, const RowChunk& ch,
                    const NormOutput<T>& out);

 private:
  const TensorParallelContext* tp_;
  Activations* acts_;
  PeerLink* peer_;     // tp->peer, or null
  int rank_;           // tp->comm->rank(), 0 at tp 1
  bool pipelined_;     // tp and more than one row chunk: NCCL sums on comm_stream
  cudaStream_t comm_;  // comm_stream when pipelined, else the forward's stream
  cudaStream_t stream_;
  float* residual_;  // [max_tokens, hidden_size]
  int64_t hidden_;
  int64_t pushed_[kMaxTpRowChunks] = {};  // peer copies: chunk c's latest push
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_ROW_REDUCE_H_
