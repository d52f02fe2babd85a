// Two GPUs of one process summing a row-parallel linear's partial products with copy-engine peer copies
// instead of an NCCL all-reduce (tensor parallelism at tp 2, one process; the forward's RowReducer,
// row_reduce.h, uses it when the engine made one).
//
// Why: an NCCL all-reduce runs as kernels that take SMs (and HBM bandwidth) from the GEMM chunks it is meant
// to overlap; at tp 2 on the 8B model only ~10 of its ~58 ms per forward hid behind compute
// (tests/bench/RESULTS.md). A peer copy runs on the copy engines and the GEMMs keep every SM.
//
// How (rank r, peer p = 1 - r; exchange e of the forward = its e-th o_proj / down_proj, chunk c = a block of
// rows): after r's GEMM has written rows [b, b + n) of its partial product (in r's residual buffer), Push
// copies them into p's receive buffer e % 2 at the same rows on r's copy stream, records event (r, e % 2, c)
// there and publishes the push's sequence number. Before r's next norm reads those rows, AwaitPeer waits on
// the host until p has published the same sequence number (so p's event is recorded: a CUDA stream cannot
// wait for an event not yet recorded), then makes r's stream wait for p's event (p's rows have arrived) and
// for r's own (r's copy has read its rows before the norm updates them). The norm then adds the received rows
// to r's own: residual = mine + peer's, one fp32 add, bitwise the two-rank NCCL all-reduce (a + b == b + a),
// so multi-process runs (NCCL) and one-process runs (this) give the same bits.
//
// Two receive buffers suffice: p's push of exchange e + 2 into buffer e % 2 comes after p's norm of exchange
// e + 1, which waited for r's pushes of e + 1, which r enqueued after its whole-batch op (attention or
// SwiGLU) that follows r's last read of buffer e % 2. Events are reused two exchanges later on the same
// argument (r records (r, e % 2, c) again only after p has published e + 1, i.e. after p enqueued its wait on
// it).
//
// Failure: a rank whose forward fails calls Abort; AwaitPeer then returns at once (and after kAwaitTimeout
// without the peer in any case): no rank waits on a host spin forever. A link once aborted stays aborted.
// Every rank must push and await the same exchanges in the same order (the forward pass does).
// Thread-safety: rank r's methods on rank r's thread with r's device current; Abort from any thread.
#ifndef SCORED_ENGINE_CUDA_PEER_LINK_H_
#define SCORED_ENGINE_CUDA_PEER_LINK_H_

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/cuda/device_buffer.h"

namespace scored::cuda {

class PeerLink {
 public:
  static constexpr int kMaxChunks = 8;  // row chunks per exchange (row_chunks.h kMaxTpRowChunks)
  static constexpr absl::Duration kAwaitTimeout = absl::Seconds(120);

  // Enables peer access between the two devices both ways. UNAVAILABLE when they cannot reach each other
  // (the engine then keeps NCCL), INVALID_ARGUMENT for equal devices.
  static absl::StatusOr<std::unique_ptr<PeerLink>> Create(int device0, int device1);
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // On rank r's thread with its device current: its two receive buffers of `elements` fp32 each and its
  // events. RESOURCE_EXHAUSTED naming the buffer when they do not fit.
  absl::Status InitRank(int rank, int64_t elements);
  // Bytes InitRank allocates per rank.
  static int64_t BytesPerRank(int64_t elements) { return 2 * elements * 4; }

  // On rank r's thread at teardown: frees its buffers and events.
  void ReleaseRank(int rank);

  // Rank r's receive buffer `parity` (0 or 1): the peer's rows land here.
  const float* received(int rank, int parity) const { return ranks_[rank].receive[parity].as<float>(); }

  // Rank r: copies src[0, count) (its partial rows, on its device) to the peer's receive buffer `parity` at
  // element `offset`, on `copy_stream` (r's device; ordered after the GEMM that wrote src by the caller),
  // records event (r, parity, chunk) there and publishes the push. Returns the push's sequence number for
  // AwaitPeer. FAILED_PRECONDITION once aborted.
  absl::StatusOr<int64_t> Push(int rank, int parity, int chunk, const float* src, int64_t offset,
                               int64_t count, cudaStream_t copy_stream);

  // Rank r: waits (host) until the peer has published push `seq`, then makes `stream` wait for the peer's
  // event (parity, chunk) and r's own. The error of Abort, or DEADLINE_EXCEEDED after kAwaitTimeout.
  absl::Status AwaitPeer(int rank, int64_t seq, int parity, int chunk, cudaStream_t stream);

  // Makes every AwaitPeer (now and later) return `why`.
  void Abort(const absl::Status& why);

 private:
  struct RankState {
    int device = 0;
    DeviceBuffer receive[2];
    std::array<std::array<CudaEvent, kMaxChunks>, 2> pushed;  // [parity][chunk]
    int64_t pushes = 0;                                       // this rank's thread only
    std::atomic<int64_t> published{0};                        // the last push whose event is recorded
  };

  PeerLink() = default;
  absl::Status aborted() const;

  std::array<RankState, 2> ranks_;
  std::atomic<bool> aborted_{false};
  mutable absl::Mutex mu_;
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_PEER_LINK_H_
